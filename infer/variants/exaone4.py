"""EXAONE 4.0: GGUF architecture ``exaone4`` (llama.cpp src/models/exaone4.cpp).

OLMo 2's norm placement (no pre-norms; post-attention and post-FFN RMSNorms
before each residual add) with Qwen 3's per-head q/k RMSNorm before RoPE:

    x = embed(token)
    for each layer l:
        q, k, v = x Wq, x Wk, x Wv ; q, k = rmsnorm(q), rmsnorm(k)   (per head)
        x += rmsnorm(attention(rope(q), rope(k), v) Wo, post_attention_norm)
        x += rmsnorm(SwiGLU(x), post_ffw_norm)
    logits = rmsnorm(x) Wout                      (Wout = Wembed if tied)

NEOX RoPE, llama3 ``rope_freqs.weight`` factors if the file has them.  Only the
64-layer model (32B) slides windows, as llama.cpp decides it: ``attention.
sliding_window`` positions (default 4096) on the layers of the pattern (all but
every 4th), and the global layers use no RoPE at all.  Any other layer count
attends globally with RoPE everywhere, whatever window the file names (llama.cpp
reads the key and leaves the window off).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from ..runtime import register_variant
from .gemma3 import sliding_layers
from .llama import LlamaShaped, llama_shaped
from .olmo2 import refuse_swa_base
from .rope_scaling import LLAMA3_FACTORS

SWA_LAYERS = 64     # llama.cpp: only n_layer == 64 sets a sliding-window type
SWA_PATTERN = 4     # layers l with l % 4 == 3 attend globally
DEFAULT_WINDOW = 4096


def exaone4_spec(gguf_file: Any) -> LlamaShaped:
    base = llama_shaped(gguf_file, layout="neox", default_ctx=65536, rope_factors=LLAMA3_FACTORS).replace(
        pre_norms=False, qk_norm=True, post_attn_norm=True, post_ffn_norm=True)
    hp, spec = base.hparams, base.spec
    window = hp.integer("attention.sliding_window", DEFAULT_WINDOW, lo=0)
    if spec.n_layers != SWA_LAYERS:
        hp.raw("attention.sliding_window_pattern", None)   # read and left off, as llama.cpp does
        return base
    is_global = sliding_layers(hp, spec.n_layers, SWA_PATTERN)
    refuse_swa_base(hp, base.rope.rope)
    return base.with_layers(lambda i, layer: replace(layer, rope=None) if is_global[i]
                            else replace(layer, window=window))


@register_variant("exaone4")
def _exaone4(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return exaone4_spec(gguf_file).engine(gguf_file, n_threads)
