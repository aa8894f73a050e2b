"""StarCoder2 (bigcode/starcoder2-3b, 7b, 15b; also Granite Code 20B/34B conversions):
GGUF architecture ``starcoder2`` (llama.cpp src/models/starcoder2.cpp).

    x = embed(token)
    for each layer:
        h = layernorm(x, attn_norm)                   (weight and bias)
        x += attention(rope(h Wq + bq), rope(h Wk + bk), h Wv + bv) Wo + bo
                                                      (GQA; NEOX RoPE over the whole head)
        h = layernorm(x, ffn_norm)
        x += gelu(h Wup + b_up) Wdown + b_down        (GELU's tanh approximation, no gate)
    logits = layernorm(x, output_norm) Wout           (Wout = Wembed if tied)

The q/k/v biases are read when the file has them (llama.cpp does not require them);
llama.cpp asserts that RoPE turns the whole head, so a partial rope.dimension_count
is refused.
"""
from __future__ import annotations

from typing import Any, Optional

from ..runtime import UnsupportedModelError, register_variant
from .llama import LlamaShaped, llama_shaped


def starcoder2_spec(gguf_file: Any) -> LlamaShaped:
    tensors = gguf_file.tensors
    base = llama_shaped(gguf_file, layout="neox", default_ctx=16384)
    spec = base.spec
    if spec.layers[0].rope is not None and spec.layers[0].rope.rotated(spec.head_dim) != spec.head_dim:
        raise UnsupportedModelError("starcoder2 file: RoPE over part of a head (rope.dimension_count) is not "
                                    "what llama.cpp's starcoder2 runs", [base.hparams.key("rope.dimension_count")])
    return base.replace(
        norm_kind="layer", norm_bias=True,
        rms_eps=base.hparams.number("attention.layer_norm_epsilon", positive=True),
        fused_qkv="blk.0.attn_qkv.weight" in tensors,
        qkv_bias="blk.0.attn_q.bias" in tensors or "blk.0.attn_qkv.bias" in tensors,
        out_bias=True, activation="gelu", ffn_bias=True)


@register_variant("starcoder2")
def _starcoder2(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return starcoder2_spec(gguf_file).engine(gguf_file, n_threads)
