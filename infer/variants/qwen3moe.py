"""Qwen 3 mixture of experts (Qwen3-30B-A3B, Qwen3-Coder-30B-A3B, Qwen3-235B-A22B):
GGUF architecture ``qwen3moe``.

Qwen 3's attention (qwen3.py: per-head q/k RMSNorm, NEOX RoPE) with a mixture of
experts in place of every FFN (llama.cpp src/models/qwen3moe.cpp):
``expert_count`` experts of width ``expert_feed_forward_length``, softmax
routing over ``ffn_gate_inp``, the top ``expert_used_count`` weights
renormalised to sum 1, no shared expert.
"""
from __future__ import annotations

from typing import Any, Optional

from ..runtime import register_variant
from .llama import Experts, LlamaShaped, llama_shaped


def qwen3moe_spec(gguf_file: Any) -> LlamaShaped:
    return llama_shaped(gguf_file, layout="neox", default_eps=1e-6, default_ctx=40960,
                        experts=Experts(norm_weights=True)).replace(qk_norm=True)


@register_variant("qwen3moe")
def _qwen3moe(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return qwen3moe_spec(gguf_file).engine(gguf_file, n_threads)
