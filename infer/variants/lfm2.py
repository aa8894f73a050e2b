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

``attention.head_count_kv`` is one value per layer, 0 marking a shortconv layer.
The spec's layers say which kind each is (`LayerSpec.kind`); the Python prefill and
the fused C decode step both compute them.  The contexts keep the gated inputs
b * u of every position beside the KV cache (``conv_cache``: dim float32 values per
position per shortconv layer; LFM2-1.2B: 80 KiB a position, pages touched as
positions are used), so truncation, copies and saved states are exact.  The KV
cache still has a (never touched) slot for the shortconv layers.
LFM2-MoE files (``lfm2moe``) are refused.
"""
from __future__ import annotations

from typing import Any, Optional

from ..gguf import GGUFError
from ..runtime import UnsupportedModelError, register_variant
from .hparams import HParams, as_integer, vocab_size
from .rope_scaling import read_rope
from .spec import MAX_CONV_WIDTH, LayerSpec, TransformerSpec
from .transformer import TransformerEngine

DEFAULT_CTX = 128000   # LFM2's trained context (config.json max_position_embeddings)


def lfm2_spec(gguf_file: Any) -> tuple[TransformerSpec, HParams, tuple[str, ...]]:
    """(spec, the hparams read, tensors read into the spec) of an ``lfm2`` file."""
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
    if hp.integer("expert_count", 0, lo=0):
        raise UnsupportedModelError("lfm2 file: a mixture of experts is not implemented",
                                    [hp.key("expert_count")])
    if not hp.boolean("attention.causal", True):
        raise UnsupportedModelError("lfm2 file: a non-causal (bidirectional embedding) model is not implemented",
                                    [hp.key("attention.causal")])
    conv_width = hp.integer("shortconv.l_cache", lo=2, hi=MAX_CONV_WIDTH)
    window = hp.integer("attention.sliding_window", 0, lo=0)
    max_seq_len = hp.integer("context_length", DEFAULT_CTX)
    rope, used = read_rope(hp, tensors, head_dim, "neox", max_seq_len, ())
    if rope.long is not None:
        raise UnsupportedModelError("lfm2 file: LongRoPE is not implemented", [hp.key("rope.scaling.type")])
    attention = LayerSpec(rope=rope.rope, window=window)
    conv = LayerSpec(rope=None, kind="shortconv", conv_width=conv_width)
    spec = TransformerSpec(
        dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim,
        ffn_dim=hp.integer("feed_forward_length"), vocab_size=vocab_size(tensors), max_seq_len=max_seq_len,
        rms_eps=hp.number("attention.layer_norm_rms_epsilon", positive=True),
        layers=tuple(attention if kv else conv for kv in kv_per_layer),
        qk_norm=True, output_norm_tensor="token_embd_norm")
    return spec, hp, used


class Lfm2Engine(TransformerEngine):
    """An ``lfm2`` file's engine."""

    def __init__(self, gguf_file: Any, n_threads: Optional[int] = None) -> None:
        spec, hp, used = lfm2_spec(gguf_file)
        hp.refuse_unread()
        super().__init__(spec, gguf_file, n_threads, also_used=used)


@register_variant("lfm2")
def _lfm2(gguf_file: Any, n_threads: Optional[int] = None) -> Lfm2Engine:
    return Lfm2Engine(gguf_file, n_threads)


@register_variant("lfm2moe")
def _lfm2moe(gguf_file: Any, n_threads: Optional[int] = None) -> Lfm2Engine:
    raise UnsupportedModelError("lfm2moe file (LFM2-8B-A1B and other LFM2 mixtures of experts): the "
                                "mixture-of-experts FFN is not implemented; dense lfm2 files run", ["lfm2moe"])
