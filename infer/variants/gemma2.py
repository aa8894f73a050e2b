"""Gemma 2: GGUF architecture ``gemma2`` (llama.cpp src/models/gemma2.cpp).

Gemma 3's block without q/k norms, plus soft-capping:

    x = embed(token) * sqrt(dim)
    for each layer l:
        a = attention(rope(q), rope(k), v)   NEOX RoPE; scores * query_scale, then
                                             c * tanh(s / c), c = attn_logit_softcapping
        x += rmsnorm(a Wo, post_attention_norm)
        x += rmsnorm(GeGLU(rmsnorm(x)), post_ffw_norm)
    logits = c' * tanh(rmsnorm(x) Wembed / c'), c' = final_logit_softcapping

Even layers slide a window of ``attention.sliding_window`` positions (default
4096), odd layers attend to everything (llama.cpp ``set_swa_pattern(2)``;
``attention.sliding_window_pattern`` overrides it as for Gemma 3).  The query
scale is head_dim^-0.5, except dim / n_heads for the 46-layer 27B.  The head is
always the embedding; norm weights already hold Gemma's 1 + w.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Optional

from ..runtime import register_variant
from .gemma3 import sliding_layers
from .llama import LlamaShaped, llama_shaped

SWA_PATTERN = 2        # layers l with l % 2 == 1 attend globally
DEFAULT_WINDOW = 4096  # llama.cpp's n_swa for Gemma 2


def gemma2_spec(gguf_file: Any) -> LlamaShaped:
    base = llama_shaped(gguf_file, layout="neox", default_eps=1e-6, default_ctx=8192)
    hp, spec = base.hparams, base.spec
    is_global = sliding_layers(hp, spec.n_layers, SWA_PATTERN)
    window = hp.integer("attention.sliding_window", DEFAULT_WINDOW)
    local_base = hp.number("rope.freq_base_swa", base.rope.rope.base, positive=True)
    scalar = spec.dim / spec.n_heads if spec.n_layers == 46 else spec.head_dim
    return base.replace(
        post_attn_norm=True, post_ffn_norm=True, activation="gelu_tanh", tied_head=True,
        embd_scale=math.sqrt(spec.dim), query_scale=1.0 / math.sqrt(scalar),
        attn_softcap=hp.number("attn_logit_softcapping", 50.0, positive=True),
        final_softcap=hp.number("final_logit_softcapping", 30.0, positive=True),
    ).with_layers(lambda i, layer: layer if is_global[i] else replace(
        layer, window=window, rope=replace(layer.rope, base=local_base) if layer.rope else None))


@register_variant("gemma2")
def _gemma2(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return gemma2_spec(gguf_file).engine(gguf_file, n_threads)
