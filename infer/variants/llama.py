"""The Llama family: Llama 2/3, TinyLlama, SmolLM2, Mistral-style GGUF files.

    x = embed(token)
    for each layer:
        h = rmsnorm(x) ; q, k, v = h Wq, h Wk, h Wv ; rope(q, k) ; store k, v
        x += attention(q, K, V) Wo                       (grouped-query)
        h = rmsnorm(x) ; x += (silu(h Wg) * h Wu) Wd      (SwiGLU)
    logits = rmsnorm(x) Wout                              (Wout = Wembed if tied)

This is the plainest `TransformerSpec` (spec.py): every optional piece off,
RoPE on adjacent pairs (the GGUF converter permuted the Q/K rows for it).  The
forward passes are `transformer.py`'s: prefill through the matrix-matrix
kernels, one decoded token as a single C call (csrc/transformer_block.c).
"""
from __future__ import annotations

from typing import Any, Dict, Optional

from ..gguf import GGUFError
from ..runtime import register_variant
from .hparams import HParams, vocab_size
from .spec import LayerSpec, Rope, TransformerSpec
from .transformer import TransformerEngine


def llama_spec(metadata: Dict[str, Any], tensors: Dict[str, Any]) -> TransformerSpec:
    """The spec of a Llama-family file, every key checked (GGUFError names a bad one)."""
    hp = HParams(metadata)
    n_layers = hp.block_count(tensors)
    dim, n_heads, n_kv_heads, head_dim = hp.attention_shape()
    if hp.integer("rope.dimension_count", head_dim) != head_dim:
        raise GGUFError(f"GGUF metadata: {hp.key('rope.dimension_count')} != head dimension {head_dim} "
                        "(partial rotary embeddings are not supported)")
    scaling = hp.string("rope.scaling.type", "none")
    if scaling == "linear":
        freq_scale = 1.0 / hp.number("rope.scaling.factor", positive=True)
    elif scaling == "none":
        freq_scale = 1.0
    else:
        raise GGUFError(f"GGUF metadata: {hp.key('rope.scaling.type')}={scaling!r} is not supported")
    rope = Rope(layout="norm", base=hp.number("rope.freq_base", 10000.0, positive=True), scale=freq_scale)
    return TransformerSpec(
        dim=dim, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim,
        ffn_dim=hp.integer("feed_forward_length"), vocab_size=vocab_size(tensors),
        max_seq_len=hp.integer("context_length", 2048),
        rms_eps=hp.number("attention.layer_norm_rms_epsilon", 1e-5, positive=True),
        layers=tuple(LayerSpec(rope=rope) for _ in range(n_layers)))


class LlamaEngine(TransformerEngine):
    def __init__(self, gguf_file: Any, n_threads: Optional[int] = None) -> None:
        super().__init__(llama_spec(gguf_file.metadata, gguf_file.tensors), gguf_file, n_threads)


@register_variant("llama", "mistral")
def _llama(gguf_file: Any, n_threads: Optional[int] = None) -> LlamaEngine:
    return LlamaEngine(gguf_file, n_threads)
