"""Gemma 1 and CodeGemma: GGUF architecture ``gemma`` (llama.cpp src/models/gemma.cpp).

Llama's pre-norm block with Gemma's choices and nothing more:

    x = embed(token) * sqrt(dim)
    for each layer:
        x += attention(rope(h Wq), rope(h Wk), h Wv) Wo        h = rmsnorm(x); NEOX RoPE
        x += (gelu(h Wg) * h Wu) Wd                          h = rmsnorm(x); tanh GELU
    logits = rmsnorm(x) Wembed                                (always tied)

The converter stores every norm weight with Gemma's ``1 + w`` already added, so
the norms are plain RMSNorm; the head size comes from ``attention.key_length``
(7B: 16 heads of 256 for a width of 3072).
"""
from __future__ import annotations

import math
from typing import Any, Optional

from ..runtime import register_variant
from .llama import LlamaShaped, llama_shaped


def gemma_spec(gguf_file: Any) -> LlamaShaped:
    base = llama_shaped(gguf_file, layout="neox", default_eps=1e-6, default_ctx=8192)
    return base.replace(activation="gelu_tanh", tied_head=True, embd_scale=math.sqrt(base.spec.dim))


@register_variant("gemma")
def _gemma(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return gemma_spec(gguf_file).engine(gguf_file, n_threads)
