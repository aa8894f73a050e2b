"""Qwen 2 / 2.5 and DeepSeek-R1-Distill-Qwen: GGUF architecture ``qwen2``.

Llama with biases on the q, k and v projections (``blk.N.attn_{q,k,v}.bias``)
and NEOX RoPE (pairs i, i + head_dim/2: the converter does not permute Q/K
for this family); tied or untied head.  Qwen 2.5's long-context files carry
YaRN scaling (``rope.scaling.type = yarn``), read by rope_scaling.py.
"""
from __future__ import annotations

from typing import Any, Optional

from ..runtime import register_variant
from .llama import LlamaShaped, llama_shaped


def qwen2_spec(gguf_file: Any) -> LlamaShaped:
    base = llama_shaped(gguf_file, layout="neox", default_eps=1e-6, default_ctx=32768)
    # llama.cpp creates the biases as optional tensors; the converter writes all three.
    return base.replace(qkv_bias="blk.0.attn_q.bias" in gguf_file.tensors)


@register_variant("qwen2")
def _qwen2(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return qwen2_spec(gguf_file).engine(gguf_file, n_threads)
