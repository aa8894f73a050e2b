"""NVIDIA Nemotron-H and Nemotron Nano 2 (4B, 8B, 9B-v2, 12B-v2): GGUF architecture
``nemotron_h``; Nemotron 3 Nano (30B-A3B): ``nemotron_h_moe`` (llama.cpp
src/models/nemotron-h.cpp; converter conversion/nemotron.py).

A hybrid whose every layer is one thing, by the per-layer ``attention.head_count_kv``
and ``feed_forward_length`` (llama.cpp's rule): both 0, a Mamba2 mixer (Granite
4.0-H's, spec.py: sizes from the ssm.* keys, the gated norm per group of
d_inner / n_groups); head_count_kv > 0, attention without RoPE; feed_forward_length
> 0, an MLP without a gate, relu(h Wup)^2 Wdown:

    x = embed(token)
    for each layer:
        x += mixer(rmsnorm(x, attn_norm))             (Mamba2, attention or MLP)
    logits = rmsnorm(x, output_norm) Wout             (Wout = Wembed if tied)

q.k is scaled by 1/sqrt(head_dim) (llama.cpp's nemotron_h reads no attention.scale);
the optional q/k/v, output and MLP biases llama.cpp loads are read where the file
has them.  The contexts keep the Mamba2 states with Granite 4.0-H's checkpoints;
decoding runs through the Python blocks (the fused C step has neither Mamba2 nor
single-half layers).

``nemotron_h_moe`` (Nemotron 3 Nano 30B-A3B) has the same layers with a mixture of
experts in each MLP layer (`_experts`: sigmoid routing with selection biases, relu²
experts without a gate, a shared expert of the same kind, the routed scaling factor).
Nemotron 3 Super's latent projections, Puzzle's per-layer expert shapes, expert groups
and MTP blocks (``nextn_predict_layers``) are refused.
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

from ..gguf import GGUFError
from ..runtime import UnsupportedModelError, register_variant
from .granite_hybrid import attention_shape, mamba2_sizes
from .hparams import HParams, as_integer, vocab_size
from .spec import MAX_EXPERTS, LayerSpec, MoE, TransformerSpec
from .transformer import TransformerEngine

DEFAULT_CTX = 2**20   # what the converter writes for the RoPE-less hybrids


def nemotron_h_spec(gguf_file: Any) -> Tuple[TransformerSpec, HParams]:
    """(spec, hparams read) of a ``nemotron_h`` file."""
    tensors = gguf_file.tensors
    hp = HParams(gguf_file.metadata)
    n_layers = hp.block_count(tensors)
    dim = hp.integer("embedding_length")
    n_heads = hp.integer("attention.head_count")
    kv_key, ff_key = hp.key("attention.head_count_kv"), hp.key("feed_forward_length")
    kv = [as_integer(v, kv_key, lo=0) for v in hp.per_layer("attention.head_count_kv", n_layers)]
    ff = [as_integer(v, ff_key, lo=0) for v in hp.per_layer("feed_forward_length", n_layers)]
    attention = [i for i in range(n_layers) if kv[i] and not ff[i]]
    mlp = [i for i in range(n_layers) if ff[i]]
    if any(kv[i] and ff[i] for i in range(n_layers)):
        raise UnsupportedModelError(f"{hp.arch} file: a layer with both KV heads and an FFN width is not "
                                    "a Nemotron-H layer", [kv_key, ff_key])
    n_kv_heads, head_dim = attention_shape(hp, dim, n_heads, [kv[i] for i in attention])
    recurrent = len(attention) + len(mlp) < n_layers
    m2 = mamba2_sizes(hp) if recurrent else None
    # the MTP head's LayerNorm epsilon; the RMSNorms' (defaulting to it, as llama.cpp does)
    eps = hp.number("attention.layer_norm_epsilon", positive=True)
    eps = hp.number("attention.layer_norm_rms_epsilon", eps, positive=True)
    for key in ("rope.freq_base", "rope.dimension_count"):   # llama.cpp's nemotron_h turns nothing
        hp.raw(key, None)
    moe = _experts(hp, n_layers, [ff[i] for i in mlp]) if hp.arch == "nemotron_h_moe" else None
    if moe is None and hp.integer("expert_count", 0, lo=0):
        raise UnsupportedModelError(f"{hp.arch} file: a mixture of experts is nemotron_h_moe's, not "
                                    f"nemotron_h's", [hp.key("expert_count")])
    ffn_dim = moe.ffn_dim if moe is not None else max([ff[i] for i in mlp], default=1)
    layers = []
    for i in range(n_layers):
        if i in mlp:
            layers.append(LayerSpec(rope=None, kind="mlp", ffn_dim=ff[i] if ff[i] != ffn_dim else None))
        elif i in attention:
            layers.append(LayerSpec(rope=None, ffn=False))
        else:
            layers.append(LayerSpec(rope=None, kind="mamba2", ffn=False))
    first_attn = f"blk.{attention[0]}." if attention else None
    first_mlp = f"blk.{mlp[0]}." if mlp else None
    spec = TransformerSpec(
        dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim,
        ffn_dim=ffn_dim, vocab_size=vocab_size(tensors), max_seq_len=hp.integer("context_length", DEFAULT_CTX),
        rms_eps=eps, layers=tuple(layers), mamba2=m2, activation="relu_sqr", moe=moe,
        qkv_bias=first_attn is not None and first_attn + "attn_q.bias" in tensors,
        out_bias=first_attn is not None and first_attn + "attn_output.bias" in tensors,
        ffn_bias=moe is None and first_mlp is not None and first_mlp + "ffn_up.bias" in tensors)
    return spec, hp


def _experts(hp: HParams, n_layers: int, widths: List[int]) -> MoE:
    """nemotron_h_moe's experts (llama.cpp's build_ffn_layer with build_moe_ffn): each
    MLP layer's router logits through a sigmoid, the ``expert_used_count`` largest
    probability + ``exp_probs_b`` chosen, weighted by their probabilities (divided by
    their sum with ``expert_weights_norm``, times ``expert_weights_scale``), each expert
    relu(h Wup_e)^2 Wdown_e, plus a shared expert of the same kind on every token."""
    names = [hp.key(k) for k in ("expert_count", "expert_used_count", "expert_feed_forward_length")]
    n_experts = hp.integer("expert_count", hi=MAX_EXPERTS)
    # (Puzzle's per-layer arrays hold 0 on the layers without experts)
    used = {as_integer(v, names[1], lo=0) for v in hp.per_layer("expert_used_count", n_layers)}
    width = {as_integer(v, names[2], lo=0) for v in hp.per_layer("expert_feed_forward_length", n_layers)}
    if len(used) != 1 or len(width) != 1 or set(widths) - width or 0 in used | width:
        raise UnsupportedModelError(f"{hp.arch} file: experts of different counts or widths per layer (Nemotron 3 "
                                    "Puzzle) are not implemented", names)
    if hp.integer("moe_latent_size", 0, lo=0):   # Nemotron 3 Super's latent projections
        raise UnsupportedModelError(f"{hp.arch} file: the experts' latent projections (moe_latent_size) are not "
                                    "implemented", [hp.key("moe_latent_size")])
    if hp.integer("expert_group_count", 0, lo=0) > 1:   # llama.cpp would choose groups of experts first
        raise UnsupportedModelError(f"{hp.arch} file: expert groups are not implemented",
                                    [hp.key("expert_group_count")])
    hp.raw("expert_group_used_count", None)   # only with groups
    shared = hp.integer("expert_shared_feed_forward_length", lo=0)
    if hp.integer("expert_shared_count", 1, lo=0) != (1 if shared else 0):
        raise UnsupportedModelError(f"{hp.arch} file: {hp.key('expert_shared_count')} other than one shared "
                                    "expert is not what llama.cpp's nemotron_h_moe runs",
                                    [hp.key("expert_shared_count")])
    scale = hp.number("expert_weights_scale", 0.0, non_negative=True)
    try:
        return MoE(n_experts=n_experts, n_used=used.pop(), ffn_dim=width.pop(), gating="sigmoid",
                   norm_weights=hp.boolean("expert_weights_norm", False), weight_scale=scale or 1.0,
                   shared_ffn_dim=shared, selection_bias=True, shared_gated=False)
    except ValueError as e:
        raise GGUFError(f"GGUF metadata: {hp.arch}'s experts: {e}") from None


class NemotronHEngine(TransformerEngine):
    """A ``nemotron_h`` file's engine."""

    def __init__(self, gguf_file: Any, n_threads: Optional[int] = None) -> None:
        spec, hp = nemotron_h_spec(gguf_file)
        hp.refuse_unread()
        super().__init__(spec, gguf_file, n_threads)


@register_variant("nemotron_h", "nemotron_h_moe")
def _nemotron_h(gguf_file: Any, n_threads: Optional[int] = None) -> NemotronHEngine:
    return NemotronHEngine(gguf_file, n_threads)

