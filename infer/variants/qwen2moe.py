"""Qwen 1.5 / 2 mixture of experts (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): GGUF
architecture ``qwen2moe``.

Qwen 2's attention (q/k/v biases, NEOX RoPE) with a mixture of experts in every
layer (llama.cpp src/models/qwen2moe.cpp): ``expert_count`` experts of width
``expert_feed_forward_length``, softmax routing, the top ``expert_used_count``
weights used as they are (not renormalised), plus a shared expert every token
runs (``ffn_{gate,up,down}_shexp``, width ``expert_shared_feed_forward_length``)
whose output is multiplied by sigmoid(h . ``ffn_gate_inp_shexp``).
"""
from __future__ import annotations

from typing import Any, Optional

from ..runtime import register_variant
from .llama import Experts, LlamaShaped, llama_shaped


def qwen2moe_spec(gguf_file: Any) -> LlamaShaped:
    base = llama_shaped(gguf_file, layout="neox", default_eps=1e-6, default_ctx=32768,
                        experts=Experts(norm_weights=False, shared=True))
    return base.replace(qkv_bias="blk.0.attn_q.bias" in gguf_file.tensors)


@register_variant("qwen2moe")
def _qwen2moe(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return qwen2moe_spec(gguf_file).engine(gguf_file, n_threads)
