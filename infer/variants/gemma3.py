"""Gemma 3 (text): GGUF architecture ``gemma3``.

    x = embed(token) * sqrt(dim)
    for each layer l:
        h = rmsnorm(x) ; q, k, v = h Wq, h Wk, h Wv
        q, k = rmsnorm(q, q_norm), rmsnorm(k, k_norm)     (per head)
        rope(q, k)                 (NEOX pairs; base 10000 on local layers, freq_base on global)
        store k, v
        a = attention(q, K, V) * scale   (grouped-query; local layers see the last `window` positions)
        x += rmsnorm(a Wo, post_attention_norm)
        h = rmsnorm(x, ffn_norm)
        x += rmsnorm((gelu(h Wg) * h Wu) Wd, post_ffw_norm)   (GeGLU, tanh GELU)
    logits = rmsnorm(x) Wembed                               (tied head, no soft-capping)

Every 6th layer (l % 6 == 5) is global, the others slide a window of
``gemma3.attention.sliding_window`` positions (as llama.cpp's
``set_swa_pattern(6)``).  The GGUF converter stores every norm weight with
Gemma's ``1 + w`` already added, so the norms are plain RMSNorm here.  The
query scale is ``query_pre_attn_scalar ** -0.5`` with llama.cpp's choice of
scalar: head_dim, except n_embd / n_head for the 62-layer (27B) model.

All of it is data in a `TransformerSpec` (spec.py); the forward passes are
`transformer.py`'s (prefill in Python, one decoded token as one C call).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import numpy as np

from ..gguf import GGUFError
from ..runtime import register_variant
from .hparams import HParams, vocab_size
from .spec import LayerSpec, Rope, TransformerSpec
from .transformer import TransformerEngine

#: llama.cpp's Gemma 3 defaults for what the GGUF file does not say
SWA_PATTERN = 6            # layers l with l % 6 == 5 attend globally
LOCAL_ROPE_BASE = 10000.0  # RoPE base of the sliding-window layers


def sliding_layers(hp: HParams, n_layers: int, period: int) -> List[bool]:
    """Per layer, True when it attends globally: an explicit per-layer list or period
    (``attention.sliding_window_pattern``) if the file has one, else ``period``
    (layer l global when l % period == period - 1, none with period 0: llama.cpp's
    set_swa_pattern)."""
    pattern = hp.raw("attention.sliding_window_pattern", period)
    if isinstance(pattern, (list, tuple, np.ndarray)):
        if len(pattern) != n_layers:
            raise GGUFError(f"GGUF metadata: {hp.key('attention.sliding_window_pattern')} has "
                            f"{len(pattern)} entries for {n_layers} layers")
        return [not bool(p) for p in pattern]
    period = hp.integer("attention.sliding_window_pattern", period, lo=0)
    # a period of 0 makes every layer slide (llama.cpp: is_swa = n_pattern == 0 || ...)
    return [period != 0 and i % period == period - 1 for i in range(n_layers)]


def gemma3_spec(metadata: Dict[str, Any], tensors: Dict[str, Any]) -> TransformerSpec:
    """The spec of a Gemma 3 file, every key checked (GGUFError names a bad one)."""
    hp = HParams(metadata)
    n_layers = hp.block_count(tensors)
    dim, n_heads, n_kv_heads, head_dim = hp.attention_shape()
    max_seq_len = hp.integer("context_length", 8192)

    is_global = sliding_layers(hp, n_layers, SWA_PATTERN)
    window = hp.integer("attention.sliding_window")

    # Linear RoPE scaling (the 4B-27B models) applies to the global layers only.
    scaling = hp.string("rope.scaling.type", "none")
    if scaling == "linear":
        rope_scale = 1.0 / hp.number("rope.scaling.factor", positive=True)
    elif scaling == "none":
        rope_scale = 1.0
    else:
        raise GGUFError(f"GGUF metadata: {hp.key('rope.scaling.type')}={scaling!r} is not supported")
    global_rope = Rope(layout="neox", base=hp.number("rope.freq_base", 1000000.0, positive=True),
                       scale=rope_scale)
    local_rope = Rope(layout="neox", base=hp.number("rope.freq_base_swa", LOCAL_ROPE_BASE, positive=True))

    # GGUF files do not carry query_pre_attn_scalar; llama.cpp derives it from the
    # model size (head_dim, or dim / n_heads for the 62-layer 27B).  The key is
    # read in case a converter ever writes it.
    query_scalar = hp.number("attention.query_pre_attn_scalar",
                             dim / n_heads if n_layers == 62 else head_dim, positive=True)
    spec = TransformerSpec(
        dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim,
        ffn_dim=hp.integer("feed_forward_length"), vocab_size=vocab_size(tensors),
        max_seq_len=max_seq_len,
        rms_eps=hp.number("attention.layer_norm_rms_epsilon", 1e-6, positive=True),
        layers=tuple(LayerSpec(rope=global_rope) if g else LayerSpec(rope=local_rope, window=window)
                     for g in is_global),
        qk_norm=True, post_attn_norm=True, post_ffn_norm=True, activation="gelu_tanh",
        query_scale=1.0 / math.sqrt(query_scalar), embd_scale=math.sqrt(dim))
    hp.refuse_unread()
    return spec


class Gemma3Engine(TransformerEngine):
    def __init__(self, gguf_file: Any, n_threads: Optional[int] = None) -> None:
        super().__init__(gemma3_spec(gguf_file.metadata, gguf_file.tensors), gguf_file, n_threads)


@register_variant("gemma3")
def _gemma3(gguf_file: Any, n_threads: Optional[int] = None) -> Gemma3Engine:
    return Gemma3Engine(gguf_file, n_threads)
