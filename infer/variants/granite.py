"""IBM Granite 3.x: GGUF architectures ``granite`` (dense) and ``granitemoe``
(Granite 3.x MoE 1B-A400M / 3B-A800M).

Llama with four multipliers (llama.cpp src/models/granite.cpp):
``embedding_scale`` on the embedding, ``residual_scale`` on each block half's
output before the residual add, ``attention.scale`` on q.k (instead of
head_dim^-0.5) and the logits divided by ``logit_scale`` (a required key).
``rope.scaling.finetuned`` doubles as a switch: false means no RoPE at all.
``granitemoe`` is the same with a mixture of experts for every FFN
(llama.cpp's granite.cpp graph, tensors from granite-moe.cpp): ``expert_count``
experts of width ``feed_forward_length``, softmax routing, the top
``expert_used_count`` weights renormalised; a shared expert
(``expert_shared_feed_forward_length``, Granite 4) is refused as an unread key.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from ..runtime import register_variant
from .llama import Experts, LlamaShaped, llama_shaped
from .rope_scaling import FACTOR_TENSORS


def granite_spec(gguf_file: Any, experts: Optional[Experts] = None) -> LlamaShaped:
    base = llama_shaped(gguf_file, default_ctx=4096, rope_factors=FACTOR_TENSORS, experts=experts)
    hp = base.hparams
    spec = base.replace(
        embd_scale=hp.number("embedding_scale", 1.0), residual_scale=hp.number("residual_scale", 1.0),
        query_scale=hp.number("attention.scale", positive=True) if hp.has("attention.scale") else None,
        logit_scale=1.0 / hp.number("logit_scale", positive=True))
    if not hp.boolean("rope.scaling.finetuned", True):
        spec = spec.with_layers(lambda i, layer: replace(layer, rope=None))
    return spec


@register_variant("granite")
def _granite(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return granite_spec(gguf_file).engine(gguf_file, n_threads)


@register_variant("granitemoe")
def _granitemoe(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return granite_spec(gguf_file, Experts(norm_weights=True, width_key=None)).engine(gguf_file, n_threads)
