"""Gemma 4 (dense: E2B, E4B, 31B): GGUF architecture ``gemma4``
(llama.cpp src/models/gemma4.cpp).

    x = embed(token) * sqrt(dim)
    ple = per-layer inputs (PLE, E2B/E4B only; spec.py gives the formula)
    for each layer l:
        h = rmsnorm(x) ; q = rmsnorm(h Wq, q_norm)             (per head)
        k = rmsnorm(h Wk, k_norm) ; v = rmsnorm(h Wv)          (v: no weight; no Wv: v from h Wk)
        rope(q, k)          NEOX; sliding layers: rope.freq_base_swa, their own head size;
                            full layers: rope.freq_base with rope_freqs.weight as factors
        a = attention(q, K, V) * 1.0        (sliding layers: the last `window` positions)
        x += rmsnorm(a Wo, post_attention_norm)
        x += rmsnorm(GeGLU(rmsnorm(x, ffn_norm)), post_ffw_norm)   (per-layer FFN widths)
        x += rmsnorm(proj(gelu(x Wgate) * ple[l]), post_norm)      (PLE)
        x *= layer_output_scale                                    (if the file has one)
    logits = c * tanh(rmsnorm(x) Wembed / c), c = final_logit_softcapping

`attention.sliding_window_pattern` says per layer whether it slides (an array,
required); the sliding layers have head size `attention.key_length_swa`, the
full ones `attention.key_length`, and `attention.head_count_kv` and
`feed_forward_length` may be per-layer arrays.  The last
`attention.shared_kv_layers` layers have no K/V of their own: each attends to
the cache of the last earlier layer of its kind (llama.cpp's layer-reuse rule:
layer n_kv - 2 for a sliding one, n_kv - 1 for a full one, n_kv the first
shared layer).  The converter writes norm weights as they are (Gemma 4's RMSNorm
has no ``1 + w``) and the full layers' "proportional" RoPE as ``rope_freqs``
factors of 1e30 on the pairs that do not turn.

The mixture-of-experts layers of 26B-A4B are not implemented: such a file is
refused with `UnsupportedModelError`.  Everything else is data in a
`TransformerSpec`, which both forward passes compute: prefill in Python,
decoding in the fused C step (csrc/transformer_block.c).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..gguf import GGUFError
from ..runtime import UnsupportedModelError, register_variant
from .hparams import HParams, as_integer, vocab_size
from .rope_scaling import _factors
from .spec import LayerSpec, Rope, TransformerSpec
from .transformer import TransformerEngine

#: llama.cpp's default RoPE bases (rope_freq_base_train and _swa)
DEFAULT_ROPE_BASE = 10000.0
#: the tensors of the MoE layers of 26B-A4B (llama.cpp's ffn_gate_inp, *_exps, the
#: second FFN's norms)
_MOE_PARTS = (".ffn_gate_inp.", "_exps.", ".ffn_pre_norm_2.", ".ffn_post_norm_1.", ".ffn_post_norm_2.",
              ".ffn_gate_up_exps.")


def refuse_moe(hp: HParams, tensors: Dict[str, Any]) -> None:
    """UnsupportedModelError for a Gemma 4 file with mixture-of-experts layers."""
    moe_tensors = sorted(n for n in tensors if any(part in n for part in _MOE_PARTS))
    # a dense file may still say expert_count = 0
    moe_keys = [hp.key(k) for k in ("expert_count", "expert_used_count", "expert_feed_forward_length")
                if hp.has(k) and hp.integer(k, lo=0)]
    if moe_tensors or moe_keys:
        shown = ", ".join((moe_keys + moe_tensors)[:4])
        raise UnsupportedModelError(
            f"gemma4 file: mixture-of-experts layers ({shown}, ...) are not implemented by infer's "
            f"gemma4 variant, which runs the dense Gemma 4 models (E2B, E4B, 31B), not 26B-A4B",
            moe_keys + moe_tensors)


def _per_layer_counts(hp: HParams, suffix: str, n_layers: int, default: Any = None) -> List[int]:
    values = hp.per_layer(suffix, n_layers) if default is None else hp.per_layer(suffix, n_layers, default)
    return [as_integer(v, hp.key(suffix)) for v in values]


def _sliding_pattern(hp: HParams, n_layers: int) -> List[bool]:
    """Per layer, True when it slides a window (the required per-layer array)."""
    key = hp.key("attention.sliding_window_pattern")
    pattern = hp.raw("attention.sliding_window_pattern")
    if not isinstance(pattern, (list, tuple, np.ndarray)):
        raise GGUFError(f"GGUF metadata: {key} must be an array of one bool per layer, got {pattern!r}")
    if len(pattern) != n_layers:
        raise GGUFError(f"GGUF metadata: {key} has {len(pattern)} entries for {n_layers} layers")
    out = []
    for p in pattern:
        if isinstance(p, (bool, np.bool_)) or (isinstance(p, (int, np.integer)) and int(p) in (0, 1)):
            out.append(bool(p))
        else:
            raise GGUFError(f"GGUF metadata: {key} holds {p!r}, not a bool")
    return out


def _head_size(hp: HParams, suffix: str, default: int) -> int:
    """A K head size whose V head size (``value_length...``) must be the same."""
    k = hp.integer(f"attention.key_length{suffix}", default)
    if hp.integer(f"attention.value_length{suffix}", k) != k:
        raise GGUFError(f"GGUF metadata: {hp.key(f'attention.value_length{suffix}')} differs from "
                        f"{hp.key(f'attention.key_length{suffix}')}={k}")
    if k % 2:
        raise GGUFError(f"GGUF metadata: {hp.key(f'attention.key_length{suffix}')}={k} is odd "
                        f"(RoPE rotates pairs)")
    return k


def _rot_dim(hp: HParams, suffix: str, default: int, head_dim: int) -> int:
    rot = hp.integer(f"rope.dimension_count{suffix}", default)
    if rot % 2 or rot > head_dim:
        raise GGUFError(f"GGUF metadata: {hp.key(f'rope.dimension_count{suffix}')}={rot} must be even and "
                        f"at most the head size {head_dim}")
    return rot


def shared_kv_sources(hp: HParams, sliding: Sequence[bool]) -> List[Optional[int]]:
    """Per layer, the earlier layer whose KV cache it reads (None: its own)."""
    n_layers = len(sliding)
    key = hp.key("attention.shared_kv_layers")
    n_shared = hp.integer("attention.shared_kv_layers", 0, lo=0)
    n_own = n_layers - n_shared
    if n_shared and n_own < 2:
        raise GGUFError(f"GGUF metadata: {key}={n_shared} leaves {n_own} of {n_layers} layers with a KV "
                        f"cache; the shared layers read the last sliding and the last full one of them")
    if n_shared and not (sliding[n_own - 2] and not sliding[n_own - 1]):
        raise GGUFError(f"GGUF metadata: {key}={n_shared}: the shared layers read layers {n_own - 2} "
                        f"(must slide) and {n_own - 1} (must attend fully), which "
                        f"attention.sliding_window_pattern does not say")
    return [None if li < n_own else n_own - (2 if sliding[li] else 1) for li in range(n_layers)]


def gemma4_spec(metadata: Dict[str, Any], tensors: Dict[str, Any]) -> Tuple[TransformerSpec, Tuple[str, ...]]:
    """(spec, tensors read into it or ignored as llama.cpp ignores them) of a
    Gemma 4 file, every key checked (GGUFError names a bad one)."""
    hp = HParams(metadata)
    refuse_moe(hp, tensors)
    n_layers = hp.block_count(tensors)
    dim = hp.integer("embedding_length")
    heads = _per_layer_counts(hp, "attention.head_count", n_layers)
    if len(set(heads)) != 1:
        raise UnsupportedModelError(f"gemma4 file: {hp.key('attention.head_count')} differs between "
                                    f"layers ({sorted(set(heads))}), which infer does not implement",
                                    [hp.key("attention.head_count")])
    n_heads = heads[0]
    kv_heads = _per_layer_counts(hp, "attention.head_count_kv", n_layers, n_heads)
    if any(n_heads % n for n in kv_heads):
        raise GGUFError(f"GGUF metadata: {hp.key('attention.head_count_kv')}={kv_heads} does not divide "
                        f"{hp.key('attention.head_count')}={n_heads} in every layer")
    ffn_dims = _per_layer_counts(hp, "feed_forward_length", n_layers)
    sliding = _sliding_pattern(hp, n_layers)
    window = hp.integer("attention.sliding_window")
    hd_full = _head_size(hp, "", max(dim // n_heads, 2))
    hd_swa = _head_size(hp, "_swa", hd_full)
    rot_full = _rot_dim(hp, "", hd_full, hd_full)
    rot_swa = _rot_dim(hp, "_swa", rot_full, hd_swa)
    sources = shared_kv_sources(hp, sliding)

    # "Proportional" RoPE of the full layers: rope_freqs.weight divides their
    # frequencies (1e30: a pair that does not turn).  Linear scaling, if a file
    # ever has it, applies to the full layers only (llama.cpp's rope_freq_scale).
    scaling = hp.string("rope.scaling.type", "none")
    if scaling == "linear":
        full_scale = 1.0 / hp.number("rope.scaling.factor", positive=True)
    elif scaling == "none":
        full_scale = 1.0
    else:
        raise UnsupportedModelError(f"gemma4 file: {hp.key('rope.scaling.type')}={scaling!r} is not implemented",
                                    [hp.key("rope.scaling.type")])
    used: List[str] = []
    factors = None
    if "rope_freqs.weight" in tensors:
        factors = _factors(tensors["rope_freqs.weight"], rot_full // 2, "rope_freqs.weight")
        used.append("rope_freqs.weight")
    elif not all(sliding):
        raise GGUFError("GGUF file: tensor rope_freqs.weight (the full-attention layers' RoPE factors) "
                        "is missing")
    full_rope = Rope(layout="neox", base=hp.number("rope.freq_base", DEFAULT_ROPE_BASE, positive=True),
                     scale=full_scale, freq_factors=factors, rot_dim=rot_full)
    swa_rope = Rope(layout="neox", base=hp.number("rope.freq_base_swa", DEFAULT_ROPE_BASE, positive=True),
                    rot_dim=rot_swa)

    spec_kv, spec_ffn = max(kv_heads), max(ffn_dims)
    layers = []
    for li in range(n_layers):
        hd = hd_swa if sliding[li] else hd_full
        p = f"blk.{li}."
        if sources[li] is not None:
            # llama.cpp loads a shared layer's K/V tensors, if the file has them, and
            # never uses them
            used += [p + n for n in ("attn_k.weight", "attn_v.weight", "attn_k_norm.weight") if p + n in tensors]
        layers.append(LayerSpec(
            rope=swa_rope if sliding[li] else full_rope, window=window if sliding[li] else 0,
            head_dim=None if hd == hd_full else hd,
            n_kv_heads=None if kv_heads[li] == spec_kv else kv_heads[li],
            ffn_dim=None if ffn_dims[li] == spec_ffn else ffn_dims[li],
            kv_source=sources[li],
            v_from_k=sources[li] is None and p + "attn_v.weight" not in tensors,
            out_scale=p + "layer_output_scale.weight" in tensors))
    spec = TransformerSpec(
        dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=spec_kv, head_dim=hd_full,
        ffn_dim=spec_ffn, vocab_size=vocab_size(tensors), max_seq_len=hp.integer("context_length", 131072),
        rms_eps=hp.number("attention.layer_norm_rms_epsilon", positive=True), layers=tuple(layers),
        qk_norm=True, post_attn_norm=True, post_ffn_norm=True, activation="gelu_tanh", query_scale=1.0,
        final_softcap=hp.number("final_logit_softcapping", 0.0, non_negative=True),
        embd_scale=math.sqrt(dim), v_norm=True,
        per_layer_dim=hp.integer("embedding_length_per_layer_input", 0, lo=0))
    hp.refuse_unread()
    return spec, tuple(used)


class Gemma4Engine(TransformerEngine):
    def __init__(self, gguf_file: Any, n_threads: Optional[int] = None) -> None:
        spec, used = gemma4_spec(gguf_file.metadata, gguf_file.tensors)
        super().__init__(spec, gguf_file, n_threads, also_used=used)


@register_variant("gemma4")
def _gemma4(gguf_file: Any, n_threads: Optional[int] = None) -> Gemma4Engine:
    return Gemma4Engine(gguf_file, n_threads)
