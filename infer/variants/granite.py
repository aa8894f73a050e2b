"""IBM Granite 3.x (dense): GGUF architecture ``granite``.

Llama with four multipliers (llama.cpp src/models/granite.cpp):
``embedding_scale`` on the embedding, ``residual_scale`` on each block half's
output before the residual add, ``attention.scale`` on q.k (instead of
head_dim^-0.5) and the logits divided by ``logit_scale`` (a required key).
``rope.scaling.finetuned`` doubles as a switch: false means no RoPE at all.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from ..runtime import register_variant
from .llama import LlamaShaped, llama_shaped
from .rope_scaling import FACTOR_TENSORS


def granite_spec(gguf_file: Any) -> LlamaShaped:
    base = llama_shaped(gguf_file, default_ctx=4096, rope_factors=FACTOR_TENSORS)
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
