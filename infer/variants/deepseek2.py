"""DeepSeek-V2 / V2-Lite / V2.5 / V3 / R1, Moonlight, Kimi-K2 and the other files
converted as GGUF ``deepseek2`` (llama.cpp src/models/deepseek2.cpp, converter
conversion/deepseek.py).

Every layer is multi-head latent attention (spec.py's kind "mla"): q through
``attn_q`` or the low-rank ``attn_q_a`` / ``attn_q_a_norm`` / ``attn_q_b``; one row
per position cached, the RMS-normed latent of ``attn_kv_a_mqa`` and its rotated
shared rope key; each head's nope query absorbed by ``attn_k_b`` and its output
decompressed by ``attn_v_b`` (the converter splits HF's kv_b_proj into those two,
k_b transposed, and writes ``attention.key_length`` = kv_lora_rank + rope dims,
``value_length`` = kv_lora_rank and one KV head: llama.cpp's MLA, an MQA over the
latent).  RoPE ("norm" pairs) turns only the last ``rope.dimension_count`` values
of each q head and the shared key.  The FFN is dense in the
``leading_dense_block_count`` first layers, else a mixture of experts (softmax or,
V3, sigmoid routing with ``exp_probs_b`` selection biases and expert groups,
weights normalised and scaled as the file says) plus ``expert_shared_count``
shared experts without a gate of their own.

YaRN: llama.cpp reads ``rope.scaling.yarn_log_multiplier`` (the converter writes
0.1 mscale_all_dim, which llama.cpp divides back by 0.1) and, for deepseek2,
takes mscale = mscale_all_dim, so cos and sin keep magnitude 1 and q.k is scaled by
mscale^2 / sqrt(key_length_mla), mscale = 1 + 0.1 mscale_all_dim ln(factor).

Files of the older layout (no ``key_length_mla``: the unsplit ``attn_kv_b``,
``key_length`` / ``value_length`` a decompressed head's, a KV head per head) run as
llama.cpp runs them: the latent decompressed into per-head keys and values, which the
context caches (`MLA.decompressed`).  Refused by name: MTP layers
(``nextn_predict_layers``), the attention temperature (``attention.temperature_scale``).  ``deepseek2-ocr`` and
V3.2's ``deepseek32`` (its indexer) are other architectures and stay unknown.
The fused C decode step has no MLA layers: decoding runs through the Python blocks.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Tuple

from ..gguf import GGUFError
from ..runtime import UnsupportedModelError, register_variant
from .hparams import HParams, as_integer, vocab_size
from .rope_scaling import read_yarn
from .spec import MAX_EXPERTS, MLA, LayerSpec, MoE, Rope, TransformerSpec
from .transformer import TransformerEngine

#: llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_* values (0: not set, softmax for V2 / V2.5)
GATING_FUNCS = {1: "softmax", 2: "sigmoid"}


def deepseek2_spec(gguf_file: Any) -> Tuple[TransformerSpec, HParams]:
    """(spec, hparams read) of a ``deepseek2`` file."""
    tensors = gguf_file.tensors
    hp = HParams(gguf_file.metadata)
    if hp.integer("nextn_predict_layers", 0, lo=0):
        raise UnsupportedModelError("deepseek2 file: multi-token prediction layers are not implemented",
                                    [hp.key("nextn_predict_layers")])
    for name in ("attention.temperature_scale", "attention.temperature_length"):
        if hp.has(name):
            raise UnsupportedModelError(f"deepseek2 file: the attention temperature ({hp.key(name)}) is not "
                                        "implemented", [hp.key(name)])
    n_layers = hp.block_count(tensors)
    vocab = vocab_size(tensors)
    dim = hp.integer("embedding_length")
    n_heads = hp.integer("attention.head_count")
    rank = hp.integer("attention.kv_lora_rank")
    rope_dim = hp.integer("rope.dimension_count")
    # the older conversions (no _mla lengths) keep attn_kv_b, and llama.cpp decompresses it
    decompressed = not hp.has("attention.key_length_mla")
    if decompressed:
        q_head, v_dim = _decompressed_shape(hp, n_heads, rope_dim)
    else:
        q_head = hp.integer("attention.key_length_mla")
        v_dim = hp.integer("attention.value_length_mla")
    # llama.cpp's "lite" files (V2-Lite's 27 layers and a few others) have no low-rank q, whatever the key says
    lite = n_layers in (26, 27) or (n_layers == 48 and vocab == 128256)
    q_lora = hp.integer("attention.q_lora_rank", 0, lo=0)
    if lite:
        q_lora = 0
    cache_dim = rank + rope_dim
    shape_keys = [hp.key(k) for k in ("attention.head_count_kv", "attention.key_length", "attention.value_length",
                                      "attention.key_length_mla", "rope.dimension_count")]
    if not decompressed and (
            hp.integer("attention.head_count_kv", 1) != 1 or hp.integer("attention.key_length", cache_dim) != cache_dim
            or hp.integer("attention.value_length", rank) != rank or q_head <= rope_dim or rope_dim % 2):
        raise GGUFError(f"GGUF metadata: deepseek2's MLA has one KV head of key_length kv_lora_rank + "
                        f"rope.dimension_count ({cache_dim}) and value_length kv_lora_rank ({rank}), and "
                        f"key_length_mla ({q_head}) above the even rope.dimension_count ({rope_dim}): {shape_keys}")
    rope, kq_scale = _rope(hp, rope_dim, q_head, hp.integer("context_length"))
    n_dense = hp.integer("leading_dense_block_count", 0, lo=0, hi=n_layers)
    moe = _experts(hp, tensors, n_layers, n_dense, vocab) if n_dense < n_layers else None
    if moe is None:   # every layer dense (the converter still writes the experts' width and shared count)
        for key in ("expert_feed_forward_length", "expert_shared_count"):
            hp.raw(key, None)
    ffn = hp.integer("feed_forward_length") if n_dense else (moe.ffn_dim if moe is not None else 1)
    ffn_dim = moe.ffn_dim if moe is not None else ffn
    layers = tuple(LayerSpec(rope=rope, kind="mla", dense_ffn=moe is not None and i < n_dense,
                             ffn_dim=ffn if i < n_dense and ffn != ffn_dim else None) for i in range(n_layers))
    try:
        mla = MLA(kv_lora_rank=rank, nope_dim=q_head - rope_dim, rope_dim=rope_dim, v_dim=v_dim,
                  kq_scale=kq_scale, q_lora_rank=q_lora, decompressed=decompressed)
        spec = TransformerSpec(
            dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=mla.cache_heads(n_heads),
            head_dim=mla.cache_dim, ffn_dim=ffn_dim,
            vocab_size=vocab, max_seq_len=hp.integer("context_length"),
            rms_eps=hp.number("attention.layer_norm_rms_epsilon", positive=True), layers=layers, moe=moe, mla=mla)
    except ValueError as e:
        raise GGUFError(f"GGUF metadata: deepseek2: {e}") from None
    return spec, hp


def _decompressed_shape(hp: HParams, n_heads: int, rope_dim: int) -> Tuple[int, int]:
    """(one head's key length, its value length) of a file of the older layout, whose
    ``attention.key_length`` / ``value_length`` are the decompressed heads' and which has
    a KV head per head (llama.cpp builds them so)."""
    keys = [hp.key(k) for k in ("attention.head_count_kv", "attention.key_length", "attention.value_length_mla")]
    q_head = hp.integer("attention.key_length")
    v_dim = hp.integer("attention.value_length", q_head)
    if hp.integer("attention.head_count_kv", n_heads) != n_heads or q_head <= rope_dim or rope_dim % 2 \
            or hp.has("attention.value_length_mla"):
        raise GGUFError(f"GGUF metadata: a deepseek2 file without key_length_mla (attn_kv_b) has a KV head per "
                        f"head, key_length above the even rope.dimension_count ({rope_dim}), and no "
                        f"value_length_mla: {keys}")
    return q_head, v_dim


def _rope(hp: HParams, rope_dim: int, q_head: int, max_seq_len: int) -> Tuple[Rope, float]:
    """(the RoPE of the rope parts, q.k's scale), as llama.cpp's context and deepseek2
    graph compute them: cparams.yarn_attn_factor (the magnitude ggml's rope is given,
    which with YaRN multiplies it again by 1 + 0.1 ln(factor)), attn_factor_org, mscale."""
    base = hp.number("rope.freq_base", 10000.0, positive=True)
    kind = hp.string("rope.scaling.type", "linear")
    factor = hp.number("rope.scaling.factor", 0.0, non_negative=True)
    if kind not in ("none", "linear", "yarn"):
        raise UnsupportedModelError(f"GGUF metadata: {hp.key('rope.scaling.type')}={kind!r} is a RoPE scaling "
                                    "infer does not implement", [hp.key("rope.scaling.type")])
    freq_scale = 1.0 if kind == "none" or factor == 0.0 else 1.0 / factor
    rope_attn_factor = hp.number("rope.scaling.attn_factor", 1.0, positive=True)
    original = hp.integer("rope.scaling.original_context_length", max_seq_len)
    yarn = read_yarn(hp, kind, 1.0 / freq_scale, original, ("yarn_log_multiplier",))
    log_mul = yarn.log_mul / 0.1   # [TAG_DEEPSEEK2_YARN_LOG_MUL_FIX]: the converter wrote 0.1 mscale_all_dim
    ln_factor = math.log(1.0 / freq_scale)

    def get_mscale(mscale: float) -> float:
        return 1.0 if 1.0 / freq_scale <= 1.0 else 0.1 * mscale * ln_factor + 1.0

    if yarn.ext_factor != 0.0:
        # deepseek2 takes mscale = mscale_all_dim: their ratio is 1 whenever the multiplier is set
        ratio = 1.0 if log_mul != 0.0 else get_mscale(1.0)
        rope_factor = ratio / (1.0 + 0.1 * ln_factor) * rope_attn_factor
        divisors = yarn.divisors(rope_dim, base)
        rope = Rope(layout="norm", base=base, scale=1.0, freq_factors=divisors,
                    attn_factor=rope_factor * (1.0 + 0.1 * ln_factor))
    else:
        rope_factor = yarn.attn_factor * rope_attn_factor
        rope = Rope(layout="norm", base=base, scale=freq_scale, attn_factor=rope_factor)
    attn_factor_org = rope_factor * (1.0 + 0.1 * ln_factor)
    mscale = attn_factor_org * (1.0 + 0.1 * log_mul * ln_factor)
    if not (math.isfinite(mscale) and mscale > 0):
        raise GGUFError(f"GGUF metadata: deepseek2's YaRN gives the attention scale {mscale}; it must be > 0")
    return rope, mscale * mscale / math.sqrt(q_head)


def _experts(hp: HParams, tensors: Any, n_layers: int, n_dense: int, vocab: int) -> MoE:
    """The experts of the layers after the leading dense ones (llama.cpp's build_moe_ffn
    as deepseek2 calls it, and its shared experts through build_ffn)."""
    n_experts = hp.integer("expert_count", lo=1, hi=MAX_EXPERTS)
    used_key, width_key = hp.key("expert_used_count"), hp.key("expert_feed_forward_length")
    used = {as_integer(v, used_key) for v in hp.per_layer("expert_used_count", n_layers)[n_dense:]}
    widths = {as_integer(v, width_key) for v in hp.per_layer("expert_feed_forward_length", n_layers)[n_dense:]}
    if len(used) != 1 or len(widths) != 1:
        raise UnsupportedModelError("deepseek2 file: experts of different counts or widths per layer are not "
                                    "implemented", [used_key, width_key])
    width = widths.pop()
    gating = hp.integer("expert_gating_func", 0, lo=0)
    if gating == 0:   # V2 / V2.5 files without the key; GLM 4.7 Lite's shape is sigmoid
        gating = 2 if n_layers in (47, 48) and vocab == 154880 else 1
    if gating not in GATING_FUNCS:
        raise UnsupportedModelError(f"deepseek2 file: {hp.key('expert_gating_func')}={gating} is not implemented "
                                    "(1: softmax, 2: sigmoid)", [hp.key("expert_gating_func")])
    n_groups = hp.integer("expert_group_count", 0, lo=0)
    groups_used = hp.integer("expert_group_used_count", 0, lo=0)
    scale = hp.number("expert_weights_scale", 0.0, non_negative=True)
    try:
        return MoE(n_experts=n_experts, n_used=used.pop(), ffn_dim=width, gating=GATING_FUNCS[gating],
                   norm_weights=hp.boolean("expert_weights_norm", False), weight_scale=scale or 1.0,
                   shared_ffn_dim=width * hp.integer("expert_shared_count", lo=0),
                   selection_bias=f"blk.{n_dense}.exp_probs_b.bias" in tensors, shared_gated=False,
                   n_groups=max(n_groups, 1), n_groups_used=groups_used if n_groups > 1 else 0)
    except ValueError as e:
        raise GGUFError(f"GGUF metadata: deepseek2's experts: {e}") from None


class Deepseek2Engine(TransformerEngine):
    """A ``deepseek2`` file's engine."""

    def __init__(self, gguf_file: Any, n_threads: Optional[int] = None) -> None:
        spec, hp = deepseek2_spec(gguf_file)
        hp.refuse_unread()
        super().__init__(spec, gguf_file, n_threads)


@register_variant("deepseek2")
def _deepseek2(gguf_file: Any, n_threads: Optional[int] = None) -> Deepseek2Engine:
    return Deepseek2Engine(gguf_file, n_threads)
