"""The Llama family (Llama 2/3.x, TinyLlama, SmolLM2, Mistral-style GGUF files),
and the reading every Llama-shaped family starts from.

    x = embed(token)
    for each layer:
        h = rmsnorm(x) ; q, k, v = h Wq, h Wk, h Wv ; rope(q, k) ; store k, v
        x += attention(q, K, V) Wo                       (grouped-query)
        h = rmsnorm(x) ; x += (silu(h Wg) * h Wu) Wd      (SwiGLU)
    logits = rmsnorm(x) Wout                              (Wout = Wembed if tied)

This is the plainest `TransformerSpec` (spec.py): every optional piece off,
RoPE on adjacent pairs (the GGUF converter permuted the Q/K rows for it), with
the scalings of rope_scaling.py: Llama 3.1+'s ``rope_freqs.weight``, linear,
YaRN, LongRoPE.  `llama_shaped` reads that much from any Llama-shaped file;
each other family (qwen2.py, qwen3.py, phi3.py, gemma2.py, smollm3.py,
granite.py) is a few `LlamaShaped.replace` / `with_layers` calls on it: a new
architecture is data.  Metadata keys nobody read are refused when the engine is
built (`HParams.refuse_unread`), tensors nobody read by the weight loader.

The forward passes are `transformer.py`'s: prefill through the matrix-matrix
kernels; one decoded token (of one or several contexts) as a single C call
(csrc/transformer_block.c), which computes every spec.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

from ..runtime import UnsupportedModelError, register_variant
from .hparams import HParams, vocab_size
from .rope_scaling import FACTOR_TENSORS, RopeChoice, read_rope
from .spec import MAX_EXPERTS, LayerSpec, MoE, TransformerSpec
from .transformer import TransformerEngine


@dataclass(frozen=True)
class LlamaShaped:
    """A Llama-shaped file read into a spec.  A family says how it differs with
    `replace` (spec fields) and `with_layers` (per-layer changes); `engine` then
    refuses the keys nobody read and loads the weights.  With LongRoPE the RoPE
    factors depend on the context size (`spec_for`)."""

    hparams: HParams
    spec: TransformerSpec
    rope: RopeChoice
    #: tensors read into the spec (RoPE factors), besides the weights
    tensors_read: Tuple[str, ...] = ()

    def replace(self, **fields: Any) -> "LlamaShaped":
        return dataclasses.replace(self, spec=dataclasses.replace(self.spec, **fields))

    def with_layers(self, change: Callable[[int, LayerSpec], LayerSpec]) -> "LlamaShaped":
        return self.replace(layers=tuple(change(i, layer) for i, layer in enumerate(self.spec.layers)))

    def spec_for(self, n_ctx: int) -> TransformerSpec:
        """The spec of a context of n_ctx positions: LongRoPE's long factors past the
        original context (llama.cpp chooses them by its n_ctx too)."""
        rope = self.rope.for_context(n_ctx)
        if rope is self.rope.rope:
            return self.spec
        return dataclasses.replace(self.spec, layers=tuple(
            dataclasses.replace(layer, rope=dataclasses.replace(layer.rope, freq_factors=rope.freq_factors))
            if layer.rope is not None else layer for layer in self.spec.layers))

    def engine(self, gguf_file: Any, n_threads: Optional[int] = None) -> "LlamaShapedEngine":
        return LlamaShapedEngine(self, gguf_file, n_threads)


@dataclass(frozen=True)
class Experts:
    """How a family reads its mixture of experts (llama.cpp: src/models/<arch>.cpp)."""

    #: the top-k weights divided by their sum (build_moe_ffn's norm_w)
    norm_weights: bool
    #: the key of one expert's FFN width; None: feed_forward_length (granitemoe)
    width_key: Optional[str] = "expert_feed_forward_length"
    #: a sigmoid-gated shared expert of width expert_shared_feed_forward_length
    #: (default: feed_forward_length, as llama.cpp's qwen2moe)
    shared: bool = False


def read_experts(hp: HParams, ffn_dim: int, experts: Experts) -> MoE:
    """The MoE of a file: expert_count >= 1, expert_used_count in [1, expert_count]
    (as llama.cpp asserts), the width (default: feed_forward_length /
    expert_used_count, as llama.cpp's qwen3moe takes it)."""
    n_experts = hp.integer("expert_count", 0, lo=0, hi=MAX_EXPERTS)
    n_used = hp.integer("expert_used_count", 0, lo=0)
    if n_experts < 1 or not 1 <= n_used <= n_experts:
        raise UnsupportedModelError(
            f"{hp.arch} file: a mixture of experts needs {hp.key('expert_count')} >= 1 and "
            f"{hp.key('expert_used_count')} in [1, {hp.key('expert_count')}], got {n_experts} and {n_used}",
            [hp.key("expert_count"), hp.key("expert_used_count")])
    width = ffn_dim if experts.width_key is None else hp.integer(experts.width_key, max(ffn_dim // n_used, 1))
    shared = hp.integer("expert_shared_feed_forward_length", ffn_dim) if experts.shared else 0
    return MoE(n_experts=n_experts, n_used=n_used, ffn_dim=width, norm_weights=experts.norm_weights,
               shared_ffn_dim=shared)


def llama_shaped(gguf_file: Any, layout: str = "norm", default_eps: float = 1e-5,
                 default_ctx: int = 2048, rope_factors: Tuple[str, ...] = (),
                 experts: Optional[Experts] = None, yarn_keys: Tuple[str, ...] = ()) -> LlamaShaped:
    """The Llama reading of a file: sizes, epsilon, RoPE and its scaling, every
    optional piece off.  Keys are checked where they are read (GGUFError names a
    bad one; UnsupportedModelError one whose maths infer does not implement).
    ``rope_factors``: the RoPE factor tensors the family reads (rope_scaling.py);
    ``experts``: how the family reads its mixture of experts (None: it has none,
    and a file with experts is refused); ``yarn_keys``: the ``rope.scaling.yarn_*``
    keys the family's llama.cpp reads (rope_scaling.py)."""
    tensors = gguf_file.tensors
    hp = HParams(gguf_file.metadata)
    n_layers = hp.block_count(tensors)
    dim, n_heads, n_kv_heads, head_dim = hp.attention_shape()
    ffn_dim = hp.integer("feed_forward_length")
    moe = None
    if experts is not None:
        moe = read_experts(hp, ffn_dim, experts)
        ffn_dim = moe.ffn_dim
    elif hp.integer("expert_count", 0, lo=0):
        raise UnsupportedModelError(f"{hp.arch} file: a mixture of experts ({hp.key('expert_count')}) "
                                    f"is not implemented for this architecture", [hp.key("expert_count")])
    max_seq_len = hp.integer("context_length", default_ctx)
    rope, used = read_rope(hp, tensors, head_dim, layout, max_seq_len, rope_factors, yarn_keys)
    spec = TransformerSpec(
        dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim,
        ffn_dim=ffn_dim, vocab_size=vocab_size(tensors), max_seq_len=max_seq_len,
        rms_eps=hp.number("attention.layer_norm_rms_epsilon", default_eps, positive=True),
        layers=tuple(LayerSpec(rope=rope.rope) for _ in range(n_layers)), moe=moe)
    return LlamaShaped(hp, spec, rope, used)


class LlamaShapedEngine(TransformerEngine):
    """The engine of every Llama-shaped family: a `LlamaShaped` and its weights."""

    def __init__(self, shaped: LlamaShaped, gguf_file: Any, n_threads: Optional[int] = None) -> None:
        shaped.hparams.refuse_unread()
        super().__init__(shaped.spec, gguf_file, n_threads, also_used=shaped.tensors_read)
        self.shaped = shaped

    def spec_for(self, n_ctx: int) -> TransformerSpec:
        return self.shaped.spec_for(n_ctx)


class LlamaEngine(LlamaShapedEngine):
    """A `llama` file's engine."""

    def __init__(self, gguf_file: Any, n_threads: Optional[int] = None) -> None:
        super().__init__(llama_shaped(gguf_file, rope_factors=FACTOR_TENSORS), gguf_file, n_threads)


@register_variant("llama", "mistral")
def _llama(gguf_file: Any, n_threads: Optional[int] = None) -> LlamaEngine:
    return LlamaEngine(gguf_file, n_threads)
