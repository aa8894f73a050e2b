"""Qwen 3 (dense): GGUF architecture ``qwen3``.

Llama with a per-head RMSNorm of q and k before RoPE (``attn_q_norm``,
``attn_k_norm``, head_dim values each), no biases, NEOX RoPE, and a head size
``attention.key_length`` that may make n_heads * head_dim differ from the
embedding width (Qwen3-0.6B: 16 x 128 = 2048 for a width of 1024).
"""
from __future__ import annotations

from typing import Any, Optional

from ..runtime import register_variant
from .llama import LlamaShaped, llama_shaped


def qwen3_spec(gguf_file: Any) -> LlamaShaped:
    return llama_shaped(gguf_file, layout="neox", default_eps=1e-6, default_ctx=40960).replace(qk_norm=True)


@register_variant("qwen3")
def _qwen3(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return qwen3_spec(gguf_file).engine(gguf_file, n_threads)
