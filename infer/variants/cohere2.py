"""Cohere Command R7B: GGUF architecture ``cohere2`` (llama.cpp src/models/cohere2.cpp).

Parallel blocks with LayerNorm (a weight, no bias), sliding windows with RoPE
on three layers of four and global layers without RoPE, scaled logits:

    x = embed(token)
    for each layer l:
        h = layernorm(x, attn_norm)
        x += (silu(h Wg) * h Wu) Wd + attention(q, k, v) Wo      (one normed input for both)
             with q, k, v = h Wq, h Wk, h Wv, RoPE (adjacent pairs) on the sliding
             layers only, which see the last attention.sliding_window positions
    logits = layernorm(x, output_norm) Wembed * logit_scale       (the head is tied)

The pattern is ``attention.sliding_window_pattern`` if the file has one, else
llama.cpp's default: layer l is global when l % 4 == 3.  llama.cpp reads
``rope.freq_base_swa`` but turns every layer with the global base; a file where
they differ is refused.  A logit_scale of 0 means none, as llama.cpp reads it.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from ..runtime import register_variant
from .gemma3 import sliding_layers
from .llama import LlamaShaped, llama_shaped
from .olmo2 import refuse_swa_base

SWA_PATTERN = 4   # llama.cpp load_swa_pattern(ml, 4): layers l with l % 4 == 3 attend globally


def cohere2_spec(gguf_file: Any) -> LlamaShaped:
    tensors = gguf_file.tensors
    base = llama_shaped(gguf_file, layout="norm", default_ctx=8192)
    hp, spec = base.hparams, base.spec
    logit_scale = hp.number("logit_scale")
    base = base.replace(
        norm_kind="layer", parallel_blocks=True, tied_head=True,
        rms_eps=hp.number("attention.layer_norm_epsilon", positive=True),
        logit_scale=logit_scale if logit_scale else 1.0,
        fused_qkv="blk.0.attn_qkv.weight" in tensors, qkv_bias="blk.0.attn_q.bias" in tensors)
    window = hp.integer("attention.sliding_window")
    is_global = sliding_layers(hp, spec.n_layers, SWA_PATTERN)
    refuse_swa_base(hp, base.rope.rope)
    return base.with_layers(lambda i, layer: replace(layer, rope=None) if is_global[i]
                            else replace(layer, window=window))


@register_variant("cohere2")
def _cohere2(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return cohere2_spec(gguf_file).engine(gguf_file, n_threads)
