"""IBM Granite 4.0-H (granite-4.0-h-350m, h-1b, h-micro, h-tiny, h-small; GGUF ``granitehybrid``),
llama.cpp src/models/granite-hybrid.cpp.

A hybrid: most layers are Mamba2 state space mixers (spec.py, LayerSpec kind
"mamba2"; sizes from the ssm.* keys), the others attention; a layer is recurrent
iff its entry of the per-layer ``attention.head_count_kv`` is 0 (llama.cpp's rule).
Every block is

    x += residual_scale * mixer(rmsnorm(x, attn_norm))
    x += residual_scale * ffn(rmsnorm(x, ffn_norm))          (SwiGLU)

with Granite's scalings: ``embedding_scale`` on the embedding, ``attention.scale``
on q.k, the logits divided by ``logit_scale`` (each optional, as in llama.cpp).
``rope.scaling.finetuned`` false (the 4.0-H converter's choice) means attention
without RoPE; true, llama's RoPE.

* Mamba2 layers: ssm_in projects z (d_inner), xBC (d_inner + 2 n_groups d_state)
  and dt (n_heads); a causal depthwise conv of ssm.conv_kernel taps (plus its bias)
  and SiLU on xBC; dt = softplus(dt + ssm_dt.bias); the scan of ggml's ssm_scan
  (kernels.mamba2_scan: S = S exp(dt A) + (x dt) B^T, y = S C + D x with
  A = ssm_a = -exp(A_log) as the converter stores it); y * silu(z), RMS-normalised
  per group of d_inner / n_groups with ssm_norm; ssm_out.

The contexts keep each Mamba2 layer's state (n_heads x head_dim x d_state float32)
and its last conv_kernel - 1 conv inputs, with the checkpoints Qwen3.5's DeltaNet
layers use (transformer.py) so truncate_to goes back exactly.  The KV cache has
rows for the attention layers only.  Decoding runs through the fused C step
(csrc/transformer_block.c's mamba2_half), which computes the Python blocks' logits
bit for bit.  The mixtures of experts (h-tiny, h-small: ``expert_count`` > 0) add a
shared expert without a gate.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

from ..gguf import GGUFError
from ..runtime import UnsupportedModelError, register_variant
from .hparams import HParams, as_integer, vocab_size
from .llama import Experts, read_experts
from .rope_scaling import read_rope
from .spec import MAX_CONV_WIDTH, MAX_DELTANET_STATE, LayerSpec, Mamba2, TransformerSpec
from .transformer import TransformerEngine

DEFAULT_CTX = 2**20   # what the converter writes for the RoPE-less 4.0-H models


def granite_hybrid_spec(gguf_file: Any) -> Tuple[TransformerSpec, HParams, Tuple[str, ...]]:
    """(spec, hparams read, tensors read) of a ``granitehybrid`` file."""
    tensors = gguf_file.tensors
    hp = HParams(gguf_file.metadata)
    n_layers = hp.block_count(tensors)
    dim = hp.integer("embedding_length")
    n_heads = hp.integer("attention.head_count")
    kv_key = hp.key("attention.head_count_kv")
    kv_per_layer = [as_integer(v, kv_key, lo=0) for v in hp.per_layer("attention.head_count_kv", n_layers)]
    n_kv_heads, head_dim = attention_shape(hp, dim, n_heads, [n for n in kv_per_layer if n])
    m2 = mamba2_sizes(hp) if 0 in kv_per_layer else None
    max_seq_len = hp.integer("context_length", DEFAULT_CTX)
    rope, used = read_rope(hp, tensors, head_dim, "norm", max_seq_len, ())
    use_rope = hp.boolean("rope.scaling.finetuned", True)   # granite's switch: false, no RoPE at all
    if use_rope and rope.long is not None:
        raise UnsupportedModelError(f"{hp.arch} file: LongRoPE is not implemented", [hp.key("rope.scaling.type")])
    ffn_dim = hp.integer("feed_forward_length")
    moe = None
    shared = hp.integer("expert_shared_feed_forward_length", 0, lo=0)
    if hp.integer("expert_count", 0, lo=0):   # h-tiny, h-small: softmax top-k renormalised, a plain shared MLP
        moe = dataclasses.replace(read_experts(hp, ffn_dim, Experts(norm_weights=True, width_key=None)),
                                  shared_ffn_dim=shared, shared_gated=False)
    else:   # the dense files say 0 experts used, and the FFN's width again as the shared one
        hp.integer("expert_used_count", 0, lo=0)
    attention = LayerSpec(rope=rope.rope if use_rope else None)
    mamba2 = LayerSpec(rope=None, kind="mamba2")
    query_scale = hp.number("attention.scale", 0.0, non_negative=True)
    spec = TransformerSpec(
        dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim,
        ffn_dim=ffn_dim, vocab_size=vocab_size(tensors), max_seq_len=max_seq_len,
        rms_eps=hp.number("attention.layer_norm_rms_epsilon", positive=True),
        layers=tuple(attention if n else mamba2 for n in kv_per_layer), mamba2=m2, moe=moe,
        embd_scale=_scale(hp, "embedding_scale"), residual_scale=_scale(hp, "residual_scale"),
        query_scale=query_scale if query_scale else None, logit_scale=1.0 / _scale(hp, "logit_scale"))
    return spec, hp, tuple(used)


def attention_shape(hp: HParams, dim: int, n_heads: int, kv_heads: List[int]) -> Tuple[int, int]:
    """(n_kv_heads, head_dim) of a hybrid's attention layers, whose KV head counts are
    ``kv_heads`` (one count for all is implemented): checked as the kernels need them."""
    kv_key = hp.key("attention.head_count_kv")
    if len(set(kv_heads)) > 1:
        raise UnsupportedModelError(f"{hp.arch} file: attention layers with different KV head counts "
                                    f"{sorted(set(kv_heads))} are not implemented", [kv_key])
    n_kv_heads = kv_heads[0] if kv_heads else n_heads
    if n_heads % n_kv_heads:
        raise GGUFError(f"GGUF metadata: {hp.key('attention.head_count')}={n_heads} is not a multiple of "
                        f"{kv_key}={n_kv_heads}")
    head_dim = hp.integer("attention.key_length", max(dim // n_heads, 1))
    if hp.integer("attention.value_length", head_dim) != head_dim:
        raise GGUFError(f"GGUF metadata: {hp.key('attention.value_length')} differs from "
                        f"{hp.key('attention.key_length')}={head_dim}")
    if head_dim % 2:
        raise GGUFError(f"GGUF metadata: head dimension {head_dim} is odd")
    return n_kv_heads, head_dim


def mamba2_sizes(hp: HParams, gated_norm: bool = True) -> Mamba2:
    """The ssm.* keys, required once a layer is recurrent (head_count_kv 0);
    ``gated_norm``: whether the mixers have ssm_norm (Mamba2.gated_norm)."""
    sizes: Dict[str, Any] = dict(conv_kernel=hp.integer("ssm.conv_kernel", lo=2, hi=MAX_CONV_WIDTH),
                                 d_state=hp.integer("ssm.state_size", hi=MAX_DELTANET_STATE),
                                 d_inner=hp.integer("ssm.inner_size", hi=2**20),
                                 n_heads=hp.integer("ssm.time_step_rank", hi=2**20),
                                 n_groups=hp.integer("ssm.group_count", hi=2**20))
    try:
        return Mamba2(**sizes, gated_norm=gated_norm)
    except ValueError as e:
        raise GGUFError(f"GGUF metadata: {hp.key('ssm.inner_size')}, {hp.key('ssm.time_step_rank')} and "
                        f"{hp.key('ssm.group_count')}: {e}") from None


def _scale(hp: HParams, key: str) -> float:
    """A Granite multiplier; missing or 0 means none (llama.cpp tests them for 0)."""
    return hp.number(key, 0.0, non_negative=True) or 1.0


class GraniteHybridEngine(TransformerEngine):
    """A ``granitehybrid`` file's engine."""

    def __init__(self, gguf_file: Any, n_threads: Optional[int] = None) -> None:
        spec, hp, used = granite_hybrid_spec(gguf_file)
        hp.refuse_unread()
        super().__init__(spec, gguf_file, n_threads, also_used=used)


@register_variant("granitehybrid")
def _granitehybrid(gguf_file: Any, n_threads: Optional[int] = None) -> GraniteHybridEngine:
    return GraniteHybridEngine(gguf_file, n_threads)
