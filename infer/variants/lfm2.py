"""LFM2 (Liquid AI's LFM2 / LFM2.5 dense models): GGUF architecture ``lfm2``
(llama.cpp src/models/lfm2.cpp).

A hybrid of attention layers and gated short-convolution layers, each followed by
the same SwiGLU FFN:

    x = embed(token)
    for each layer l:
        h = rmsnorm(x, attn_norm)
        attention layer:  per-head q/k RMSNorm, NEOX RoPE, GQA (a sliding window of
                          ``attention.sliding_window`` if the file has one > 0)
        shortconv layer:  b, c, u = split(h Win, 3); x += (c * conv_L(b * u)) Wout
                          (a causal depthwise convolution of width L = shortconv.l_cache)
        x += SwiGLU(rmsnorm(x, ffn_norm))
    logits = rmsnorm(x, token_embd_norm) Wout           (Wout = Wembed if tied)

``lfm2moe`` (LFM2-8B-A1B, LFM2.5-8B-A1B; llama.cpp src/models/lfm2moe.cpp, whose
graph is lfm2.cpp's) is the same with a mixture of experts in place of the FFN of
every layer after the first ``leading_dense_block_count`` (those keep the dense FFN
of ``feed_forward_length``): ``expert_count`` experts of width
``expert_feed_forward_length``, ``expert_used_count`` used, gated by
``expert_gating_func`` (the converter writes 2, sigmoid) and chosen by probability
+ the layer's ``exp_probs_b.bias``, weighted by their probabilities renormalised
to sum 1 (llama.cpp passes norm_w = true and reads no weight scale).

``attention.head_count_kv`` is one value per layer, 0 marking a shortconv layer.
The spec's layers say which kind each is (`LayerSpec.kind`); the Python prefill and
the fused C decode step both compute them.  The contexts keep the gated inputs
b * u of every position beside the KV cache (``conv_cache``: dim float32 values per
position per shortconv layer; LFM2-1.2B: 80 KiB a position, pages touched as
positions are used), so truncation, copies and saved states are exact.  The KV
cache still has a (never touched) slot for the shortconv layers.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

from ..gguf import GGUFError
from ..runtime import UnsupportedModelError, register_variant
from .hparams import HParams, as_integer, vocab_size
from .rope_scaling import read_rope
from .spec import MAX_CONV_WIDTH, MAX_EXPERTS, LayerSpec, MoE, TransformerSpec
from .transformer import TransformerEngine

DEFAULT_CTX = 128000   # LFM2's trained context (config.json max_position_embeddings)
#: llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_* values and spec.MoE's names for them
GATING_FUNCS = {1: "softmax", 2: "sigmoid"}


def lfm2_spec(gguf_file: Any, experts: bool = False) -> tuple[TransformerSpec, HParams, tuple[str, ...]]:
    """(spec, the hparams read, tensors read into the spec) of an ``lfm2`` file, or
    with ``experts`` of an ``lfm2moe`` one."""
    tensors = gguf_file.tensors
    hp = HParams(gguf_file.metadata)
    n_layers = hp.block_count(tensors)
    dim = hp.integer("embedding_length")
    n_heads = hp.integer("attention.head_count")
    kv_key = hp.key("attention.head_count_kv")
    kv_per_layer = [as_integer(v, kv_key, lo=0, hi=n_heads)
                    for v in hp.per_layer("attention.head_count_kv", n_layers)]
    attn_kv = sorted({n for n in kv_per_layer if n})
    if len(attn_kv) > 1:
        raise UnsupportedModelError(f"lfm2 file: attention layers with different KV head counts {attn_kv} "
                                    f"({kv_key}) are not implemented", [kv_key])
    n_kv_heads = attn_kv[0] if attn_kv else n_heads
    if n_heads % n_kv_heads:
        raise GGUFError(f"GGUF metadata: {hp.key('attention.head_count')}={n_heads} is not a multiple of "
                        f"{kv_key}={n_kv_heads}")
    head_dim = hp.integer("attention.key_length", max(dim // n_heads, 1))
    if hp.integer("attention.value_length", head_dim) != head_dim or head_dim * n_heads != dim:
        raise UnsupportedModelError(f"lfm2 file: heads of {head_dim} values x {n_heads} must fill the "
                                    f"embedding width {dim} (llama.cpp's attn_output is dim x dim)",
                                    [hp.key("attention.key_length")])
    if head_dim % 2:
        raise GGUFError(f"GGUF metadata: head dimension {head_dim} is odd (RoPE rotates pairs)")
    if not experts and hp.integer("expert_count", 0, lo=0):
        raise UnsupportedModelError("lfm2 file: a mixture of experts is not implemented",
                                    [hp.key("expert_count")])
    if not hp.boolean("attention.causal", True):
        raise UnsupportedModelError("lfm2 file: a non-causal (bidirectional embedding) model is not implemented",
                                    [hp.key("attention.causal")])
    conv_width = hp.integer("shortconv.l_cache", lo=2, hi=MAX_CONV_WIDTH)
    # llama.cpp's lfm2moe reads no sliding window (the key is then refused as unread)
    window = 0 if experts else hp.integer("attention.sliding_window", 0, lo=0)
    max_seq_len = hp.integer("context_length", DEFAULT_CTX)
    rope, used = read_rope(hp, tensors, head_dim, "neox", max_seq_len, ())
    if rope.long is not None:
        raise UnsupportedModelError("lfm2 file: LongRoPE is not implemented", [hp.key("rope.scaling.type")])
    attention = LayerSpec(rope=rope.rope, window=window)
    conv = LayerSpec(rope=None, kind="shortconv", conv_width=conv_width)
    layers = tuple(attention if kv else conv for kv in kv_per_layer)
    ffn_dim = hp.integer("feed_forward_length")
    moe = None
    if experts:
        moe, n_dense = _lfm2moe_experts(hp, n_layers)
        # the leading layers keep the dense FFN; spec.ffn_dim is the experts' width
        layers = tuple(dataclasses.replace(layer, dense_ffn=True, ffn_dim=ffn_dim) if i < n_dense else layer
                       for i, layer in enumerate(layers))
        ffn_dim = moe.ffn_dim
    spec = TransformerSpec(
        dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim,
        ffn_dim=ffn_dim, vocab_size=vocab_size(tensors), max_seq_len=max_seq_len,
        rms_eps=hp.number("attention.layer_norm_rms_epsilon", positive=True),
        layers=layers, qk_norm=True, output_norm_tensor="token_embd_norm", moe=moe)
    return spec, hp, used


def _lfm2moe_experts(hp: HParams, n_layers: int) -> tuple[MoE, int]:
    """(the experts, the number of leading dense layers) of an ``lfm2moe`` file, read
    as llama.cpp's lfm2moe.cpp does (the expert width may be one value per layer:
    the mixture's layers must then agree)."""
    n_dense = hp.integer("leading_dense_block_count", 0, lo=0, hi=n_layers)
    n_experts = hp.integer("expert_count", lo=1, hi=MAX_EXPERTS)
    n_used = hp.integer("expert_used_count", lo=1, hi=n_experts)
    width_key = hp.key("expert_feed_forward_length")
    widths = {as_integer(v, width_key) for v in hp.per_layer("expert_feed_forward_length", n_layers)[n_dense:]}
    if len(widths) > 1:
        raise UnsupportedModelError(f"lfm2moe file: experts of different widths {sorted(widths)} per layer "
                                    f"({width_key}) are not implemented", [width_key])
    gating_key = hp.key("expert_gating_func")
    gating = hp.integer("expert_gating_func", lo=0)
    if gating not in GATING_FUNCS:
        raise UnsupportedModelError(f"lfm2moe file: {gating_key}={gating} is not implemented (1: softmax, "
                                    "2: sigmoid)", [gating_key])
    # a file of dense layers only has no expert layer to take the width from
    width = widths.pop() if widths else hp.integer("expert_feed_forward_length")
    return MoE(n_experts=n_experts, n_used=n_used, ffn_dim=width, gating=GATING_FUNCS[gating],
               norm_weights=True, selection_bias=True), n_dense


class Lfm2Engine(TransformerEngine):
    """An ``lfm2`` (or, with ``experts``, ``lfm2moe``) file's engine."""

    def __init__(self, gguf_file: Any, n_threads: Optional[int] = None, experts: bool = False) -> None:
        spec, hp, used = lfm2_spec(gguf_file, experts)
        hp.refuse_unread()
        super().__init__(spec, gguf_file, n_threads, also_used=used)


@register_variant("lfm2")
def _lfm2(gguf_file: Any, n_threads: Optional[int] = None) -> Lfm2Engine:
    return Lfm2Engine(gguf_file, n_threads)


@register_variant("lfm2moe")
def _lfm2moe(gguf_file: Any, n_threads: Optional[int] = None) -> Lfm2Engine:
    return Lfm2Engine(gguf_file, n_threads, experts=True)
