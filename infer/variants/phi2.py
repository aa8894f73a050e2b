"""Phi-2 (microsoft/phi-2 and its fine-tunes): GGUF architecture ``phi2``
(llama.cpp src/models/phi2.cpp; converter conversion/phi.py).

Parallel blocks with one LayerNorm (weight and bias) and biases on every projection:

    x = embed(token)
    for each layer:
        h = layernorm(x, attn_norm)
        q, k, v = h Wq + bq, h Wk + bk, h Wv + bv      (or one attn_qkv and its bias)
        a = attention(rope(q), rope(k), v) Wo + bo     (NEOX RoPE over rope.dimension_count
                                                        elements of a head: 32 of 80)
        f = gelu(h Wup + b_up) Wdown + b_down          (GELU's tanh approximation, no gate)
        x += a + f
    logits = layernorm(x, output_norm) Wout + b_out

llama.cpp multiplies q by 1/sqrt(head_dim) before q.k rather than the scores after it
(against F16 overflow on GPUs); in exact arithmetic that is the same product, and the
spec's attention scale computes it (tests/test_families3.py measures the difference).
Older conversions fuse q, k and v into attn_qkv with one bias; both layouts load.
"""
from __future__ import annotations

from typing import Any, Optional

from ..runtime import register_variant
from .llama import LlamaShaped, llama_shaped


def phi2_spec(gguf_file: Any) -> LlamaShaped:
    tensors = gguf_file.tensors
    base = llama_shaped(gguf_file, layout="neox", default_ctx=2048)
    fused = "blk.0.attn_qkv.weight" in tensors
    biased = "blk.0.attn_qkv.bias" in tensors if fused else "blk.0.attn_q.bias" in tensors
    return base.replace(
        norm_kind="layer", norm_bias=True, parallel_blocks=True, tied_head=False,
        rms_eps=base.hparams.number("attention.layer_norm_epsilon", positive=True),
        fused_qkv=fused, qkv_bias=biased, out_bias=True, activation="gelu", ffn_bias=True, output_bias=True)


@register_variant("phi2")
def _phi2(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return phi2_spec(gguf_file).engine(gguf_file, n_threads)
