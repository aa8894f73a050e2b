"""Hunyuan dense (0.5B-7B): GGUF architecture ``hunyuan-dense`` (llama.cpp
src/models/hunyuan-vl.cpp, whose graph hunyuan-dense reuses).

Qwen 3's block with the per-head q/k RMSNorm moved after RoPE:

    x = embed(token)
    for each layer:
        h = rmsnorm(x) ; q, k, v = h Wq, h Wk, h Wv
        q, k = rmsnorm(rope(q), q_norm), rmsnorm(rope(k), k_norm)   (per head, after RoPE)
        x += attention(q, K, V) Wo
        x += SwiGLU(rmsnorm(x))
    logits = rmsnorm(x) Wout                     (Wout = Wembed if tied)

NEOX RoPE; llama.cpp loads no ``rope_freqs.weight`` for this architecture (a
file with one does not load there), so the weight loader refuses it too.  The
converter writes the NTK-alpha base already scaled; a file that still
carries ``rope.scaling.alpha`` gets llama.cpp's ``base * alpha^(d / (d - 2))``
(d the head size) on top, as llama.cpp does.  ``rope.dimension_sections``
(Hunyuan-VL's multi-axis RoPE) is refused as an unread key.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from ..runtime import UnsupportedModelError, register_variant
from .llama import LlamaShaped, llama_shaped


def hunyuan_dense_spec(gguf_file: Any) -> LlamaShaped:
    base = llama_shaped(gguf_file, layout="neox", default_ctx=32768).replace(
        qk_norm=True, qk_norm_after_rope=True)
    hp, hd = base.hparams, base.spec.head_dim
    alpha = hp.number("rope.scaling.alpha", 0.0, non_negative=True)
    if not alpha:
        return base
    if hp.string("rope.scaling.type", "none") not in ("none", "linear"):
        raise UnsupportedModelError(f"{hp.arch} file: {hp.key('rope.scaling.alpha')} together with "
                                    f"{hp.key('rope.scaling.type')}", [hp.key("rope.scaling.alpha")])
    scaled = base.rope.rope.base * alpha ** (hd / (hd - 2))
    return base.with_layers(lambda i, layer: replace(layer, rope=replace(layer.rope, base=scaled))
                            if layer.rope is not None else layer)


@register_variant("hunyuan-dense")
def _hunyuan_dense(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return hunyuan_dense_spec(gguf_file).engine(gguf_file, n_threads)
