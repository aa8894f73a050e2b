"""OLMo 2 and OLMo 3 (dense): GGUF architecture ``olmo2`` (llama.cpp src/models/olmo2.cpp).

No norm before either block half; each half's output is normed before its add,
and q and k are RMS-normed over the whole projection (``attn_q_norm`` has
n_heads * head_dim weights, ``attn_k_norm`` n_kv_heads * head_dim), not per head:

    x = embed(token)
    for each layer:
        q, k, v = x Wq, x Wk, x Wv ; q, k = rmsnorm(q), rmsnorm(k)   (all heads at once)
        x += rmsnorm(attention(rope(q), rope(k), v) Wo, post_attention_norm)
        x += rmsnorm(SwiGLU(x), post_ffw_norm)
    logits = rmsnorm(x) Wout

NEOX RoPE, untied head.  OLMo 3 files add ``attention.sliding_window``: then the
layers the pattern marks (``attention.sliding_window_pattern``, else all but every
4th) slide that window and turn RoPE unscaled (llama.cpp passes freq_scale 1 and
no YaRN to them), the others keep the file's scaling.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from ..runtime import UnsupportedModelError, register_variant
from .gemma3 import sliding_layers
from .hparams import HParams
from .llama import LlamaShaped, llama_shaped
from .spec import Rope

SWA_PATTERN = 4   # llama.cpp load_swa_pattern(ml, 4): layers l with l % 4 == 3 attend globally


def olmo2_spec(gguf_file: Any) -> LlamaShaped:
    base = llama_shaped(gguf_file, layout="neox", default_ctx=4096).replace(
        pre_norms=False, qk_norm=True, qk_norm_scope="all", post_attn_norm=True, post_ffn_norm=True,
        tied_head=False)
    hp, spec = base.hparams, base.spec
    window = hp.integer("attention.sliding_window", 0, lo=0)
    if not window:
        return base
    is_global = sliding_layers(hp, spec.n_layers, SWA_PATTERN)
    rope = base.rope.rope
    refuse_swa_base(hp, rope)
    plain = Rope(layout=rope.layout, base=rope.base, rot_dim=rope.rot_dim)
    return base.with_layers(lambda i, layer: layer if is_global[i] else replace(layer, window=window, rope=plain))


def refuse_swa_base(hp: HParams, rope: Rope) -> None:
    """llama.cpp's olmo2 and exaone4 graphs turn every layer with the global
    freq_base and ignore ``rope.freq_base_swa``; a file whose value differs is
    refused rather than run one way or the other."""
    swa_base = hp.number("rope.freq_base_swa", rope.base, positive=True)
    if swa_base != rope.base:
        raise UnsupportedModelError(
            f"{hp.arch} file: {hp.key('rope.freq_base_swa')}={swa_base} differs from "
            f"{hp.key('rope.freq_base')}={rope.base}; llama.cpp's {hp.arch} graph ignores it, so which "
            f"one the sliding layers use is undefined", [hp.key("rope.freq_base_swa")])


@register_variant("olmo2")
def _olmo2(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return olmo2_spec(gguf_file).engine(gguf_file, n_threads)
