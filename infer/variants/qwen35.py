"""Qwen3.5 (0.8B, 2B, 4B, 9B, 27B: GGUF ``qwen35``; 35B-A3B: ``qwen35moe``), llama.cpp
src/models/qwen35.cpp and qwen35moe.cpp.

A hybrid: three of every four layers (``full_attention_interval``, or the
``attention.recurrent_layers`` flags) are gated DeltaNet linear attention with a
recurrent state, the others full attention; every block is

    x += mixer(rmsnorm(x, attn_norm))
    x += ffn(rmsnorm(x, post_attention_norm))         (SwiGLU; qwen35moe: experts)

* DeltaNet layers (spec.py, LayerSpec kind "deltanet"; sizes from the ssm.* keys):
  attn_qkv -> a causal depthwise conv of ssm.conv_kernel taps -> SiLU -> q, k
  (ssm.group_count heads), v (ssm.time_step_rank heads) of ssm.state_size values;
  q, k L2-normalised; decay softplus(ssm_alpha h + ssm_dt.bias) * ssm_a (the
  converter stores -exp(A_log)), write strength sigmoid(ssm_beta h); then
  rmsnorm(out, ssm_norm) * silu(attn_gate h) through ssm_out.  Value head h reads
  q/k head h % group_count (the converter reorders the V heads so).
* Attention layers: attn_q projects q and a sigmoid gate of the output, interleaved
  per head; per-head q/k RMSNorm; NEOX RoPE on the first rope.dimension_count values
  of a head.  The file's RoPE is "interleaved multi-section" (IMROPE, sections
  rope.dimension_sections); with text positions all of its sections turn by the same
  position, which is plain NEOX RoPE as long as no pair falls in the fourth section
  (checked: such a file is refused).
* The MTP (next-token prediction) blocks after the first block_count -
  nextn_predict_layers are not run (llama.cpp does not run them in its main pass).

The contexts keep each DeltaNet layer's state S (n_v_heads x d x d float32) and its
last conv_kernel - 1 conv inputs, with checkpoints of them (transformer.py:
CHECKPOINT_INTERVAL, MAX_CHECKPOINTS) so truncate_to goes back exactly.  With 24
DeltaNet layers of 32 value heads of 128 (Qwen3.5-9B's shape) that is 48 MiB per copy,
up to 9 copies (~440 MiB) per context; ``infer info`` prints the file's figures.  The
KV cache has rows for the attention layers only.  Decoding runs through the fused
C step (csrc/transformer_block.c), which takes each sequence's ssm_state and
ssm_conv; the checkpoints are kept in Python around it.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np

from ..gguf import GGUFError
from ..runtime import UnsupportedModelError, register_variant
from .hparams import HParams, as_integer, vocab_size
from .llama import Experts, read_experts
from .qwen_vl import mrope_text_turns
from .rope_scaling import read_rope
from .spec import MAX_CONV_WIDTH, MAX_DELTANET_STATE, DeltaNet, LayerSpec, TransformerSpec
from .transformer import TransformerEngine

DEFAULT_CTX = 262144   # Qwen3.5's trained context (config.json max_position_embeddings)


def imrope_is_neox(sections: Sequence[int], rot_dim: int) -> bool:
    """Whether ggml's interleaved multi-section RoPE (ggml_mrope_cache_init with
    is_imrope) turns every one of the rot_dim / 2 pairs by the text position: pair i
    is in sector i % sum(sections), which takes the time, height or width position
    (all = the text position) or else the extra one (0 for text)."""
    return all(mrope_text_turns(sections, rot_dim // 2, interleaved=True))


def qwen35_spec(gguf_file: Any, moe: bool) -> Tuple[TransformerSpec, HParams, Tuple[str, ...]]:
    """(spec, hparams read, tensors read or skipped) of a ``qwen35``/``qwen35moe`` file."""
    tensors = gguf_file.tensors
    hp = HParams(gguf_file.metadata)
    n_all = hp.block_count(tensors)
    n_nextn = hp.integer("nextn_predict_layers", 0, lo=0, hi=n_all - 1)
    n_layers = n_all - n_nextn
    dim, n_heads, n_kv_heads, head_dim = hp.attention_shape()
    n_k_heads, n_v_heads = hp.integer("ssm.group_count", hi=2**20), hp.integer("ssm.time_step_rank", hi=2**20)
    if n_v_heads % n_k_heads:
        raise GGUFError(f"GGUF metadata: {hp.key('ssm.time_step_rank')}={n_v_heads} is not a multiple of "
                        f"{hp.key('ssm.group_count')}={n_k_heads}")
    dn = DeltaNet(conv_kernel=hp.integer("ssm.conv_kernel", lo=2, hi=MAX_CONV_WIDTH),
                  d_state=hp.integer("ssm.state_size", hi=MAX_DELTANET_STATE),
                  n_k_heads=n_k_heads, n_v_heads=n_v_heads)
    inner = hp.integer("ssm.inner_size")
    if inner != dn.value_dim:   # llama.cpp's head_v_dim = inner / n_v_heads must be state_size
        raise UnsupportedModelError(f"{hp.arch} file: {hp.key('ssm.inner_size')}={inner} is not "
                                    f"{hp.key('ssm.state_size')} x {hp.key('ssm.time_step_rank')} = {dn.value_dim}",
                                    [hp.key("ssm.inner_size")])
    if hp.has("attention.recurrent_layers"):
        flags = hp.per_layer("attention.recurrent_layers", n_all)
        if not all(isinstance(f, (bool, np.bool_)) for f in flags):
            raise GGUFError(f"GGUF metadata: {hp.key('attention.recurrent_layers')} must be booleans")
        recurrent = [bool(f) for f in flags[:n_layers]]
        hp.has("full_attention_interval")   # the converter writes both; the flags win (as in llama.cpp)
        if any(bool(f) for f in flags[n_layers:]):
            raise UnsupportedModelError(f"{hp.arch} file: a recurrent MTP layer is not implemented",
                                        [hp.key("attention.recurrent_layers")])
    else:
        interval = hp.integer("full_attention_interval", 4)
        recurrent = [(i + 1) % interval != 0 for i in range(n_layers)]
    max_seq_len = hp.integer("context_length", DEFAULT_CTX)
    rope, used = read_rope(hp, tensors, head_dim, "neox", max_seq_len, ())
    if rope.long is not None:
        raise UnsupportedModelError(f"{hp.arch} file: LongRoPE is not implemented", [hp.key("rope.scaling.type")])
    sections_key = hp.key("rope.dimension_sections")
    raw_sections = hp.per_layer("rope.dimension_sections", 4)
    sections = [as_integer(s, sections_key, lo=0) for s in raw_sections]
    rot_dim = rope.rope.rotated(head_dim)
    if not sum(sections[:3]) or not imrope_is_neox(sections, rot_dim):
        raise UnsupportedModelError(f"{hp.arch} file: {sections_key}={sections} leave some of the {rot_dim // 2} "
                                    f"rotated pairs to the extra (non-text) section; not implemented",
                                    [sections_key])
    experts = None
    # qwen35moe files need not say a dense width: the experts' keys give theirs
    ffn_dim = hp.integer("feed_forward_length", 0, lo=0) if moe else hp.integer("feed_forward_length")
    if moe:
        experts = read_experts(hp, ffn_dim, Experts(norm_weights=True, shared=True))
        ffn_dim = experts.ffn_dim
    elif hp.integer("expert_count", 0, lo=0):
        raise UnsupportedModelError(f"{hp.arch} file: a mixture of experts is not implemented for this "
                                    f"architecture (qwen35moe has one)", [hp.key("expert_count")])
    attention = LayerSpec(rope=rope.rope)
    deltanet = LayerSpec(rope=None, kind="deltanet")
    spec = TransformerSpec(
        dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim,
        ffn_dim=ffn_dim, vocab_size=vocab_size(tensors), max_seq_len=max_seq_len,
        rms_eps=hp.number("attention.layer_norm_rms_epsilon", positive=True),
        layers=tuple(deltanet if r else attention for r in recurrent), moe=experts,
        qk_norm=True, deltanet=dn, attn_output_gate=True, ffn_norm_tensor="post_attention_norm")
    # the MTP blocks' tensors are in the file but not run
    mtp = tuple(name for name in tensors if any(name.startswith(f"blk.{i}.") for i in range(n_layers, n_all)))
    return spec, hp, tuple(used) + mtp


class Qwen35Engine(TransformerEngine):
    """A ``qwen35`` / ``qwen35moe`` file's engine."""

    def __init__(self, gguf_file: Any, n_threads: Optional[int] = None, moe: bool = False) -> None:
        spec, hp, used = qwen35_spec(gguf_file, moe)
        hp.refuse_unread()
        super().__init__(spec, gguf_file, n_threads, also_used=used)


@register_variant("qwen35")
def _qwen35(gguf_file: Any, n_threads: Optional[int] = None) -> Qwen35Engine:
    return Qwen35Engine(gguf_file, n_threads)


@register_variant("qwen35moe")
def _qwen35moe(gguf_file: Any, n_threads: Optional[int] = None) -> Qwen35Engine:
    return Qwen35Engine(gguf_file, n_threads, moe=True)
