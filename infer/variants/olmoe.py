"""OLMoE (OLMoE-1B-7B): GGUF architecture ``olmoe``.

Llama-shaped attention with NEOX RoPE and an RMSNorm over all of q and over all
of k (``attn_q_norm`` / ``attn_k_norm`` of n_heads * head_dim and
n_kv_heads * head_dim values, not per head), then a mixture of experts in every
layer (llama.cpp src/models/olmoe.cpp): ``expert_count`` experts of width
``feed_forward_length``, softmax routing, the top ``expert_used_count``
weights used as they are (not renormalised).
"""
from __future__ import annotations

from typing import Any, Optional

from ..runtime import register_variant
from .llama import Experts, LlamaShaped, llama_shaped


def olmoe_spec(gguf_file: Any) -> LlamaShaped:
    return llama_shaped(gguf_file, layout="neox", default_ctx=4096,
                        experts=Experts(norm_weights=False, width_key=None)).replace(qk_norm=True, qk_norm_scope="all")


@register_variant("olmoe")
def _olmoe(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return olmoe_spec(gguf_file).engine(gguf_file, n_threads)
