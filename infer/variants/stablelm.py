"""StableLM 2 (1.6B) and StableLM-3B-4E1T / Zephyr: GGUF architecture ``stablelm``
(llama.cpp src/models/stablelm.cpp; converter conversion/stablelm.py).

Llama's block with LayerNorms (weight and bias) and partial NEOX RoPE:

    x = embed(token)
    for each layer:
        h = layernorm(x, attn_norm) ; q, k, v = h Wq [+ bq], h Wk [+ bk], h Wv [+ bv]
        x += attention(rope(q), rope(k), v) Wo        (RoPE over rope.dimension_count
                                                       elements of a head: 1/4 of it)
        x += SwiGLU(layernorm(x, ffn_norm))
    logits = layernorm(x, output_norm) Wout

The q/k/v biases are there when the checkpoint has them (StableLM 2).
``use_parallel_residual``, which the converter writes, is read and left off as
llama.cpp does (its graph goes by whether ffn_norm exists); StableLM 2 12B's
parallel blocks (no ffn_norm) with per-head q/k LayerNorms are refused.
"""
from __future__ import annotations

from typing import Any, Optional

from ..runtime import UnsupportedModelError, register_variant
from .llama import LlamaShaped, llama_shaped


def stablelm_spec(gguf_file: Any) -> LlamaShaped:
    tensors = gguf_file.tensors
    base = llama_shaped(gguf_file, layout="neox", default_ctx=4096)
    hp = base.hparams
    hp.raw("use_parallel_residual", None)   # read and left off, as llama.cpp does
    if "blk.0.ffn_norm.weight" not in tensors or "blk.0.attn_q_norm.weight" in tensors:
        raise UnsupportedModelError(
            "stablelm file: parallel blocks with per-head q/k LayerNorms (StableLM 2 12B) are not implemented",
            [n for n in ("blk.0.attn_q_norm.weight", "blk.0.attn_k_norm.weight") if n in tensors])
    return base.replace(
        norm_kind="layer", norm_bias=True, tied_head=False,
        rms_eps=hp.number("attention.layer_norm_epsilon", positive=True),
        fused_qkv="blk.0.attn_qkv.weight" in tensors, qkv_bias="blk.0.attn_q.bias" in tensors)


@register_variant("stablelm")
def _stablelm(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return stablelm_spec(gguf_file).engine(gguf_file, n_threads)
