"""GLM-4-0414 and GLM-Z1 (dense): GGUF architecture ``glm4`` (llama.cpp
src/models/glm4.cpp; converter conversion/glm.py, Glm4Model).

Llama with sandwich norms, a fused gate|up FFN and half-rotary RoPE:

    x = embed(token)
    for each layer:
        h = rmsnorm(x, attn_norm) ; q, k, v = h Wq + bq, h Wk + bk, h Wv + bv
        x += rmsnorm(attention(rope(q), rope(k), v) Wo, post_attention_norm)
        h = rmsnorm(x, ffn_norm)
        x += rmsnorm((silu(h Wg) * h Wu) Wd, post_ffw_norm)   (ffn_up: gate rows, then up rows)
    logits = rmsnorm(x) Wout                                    (Wout = Wembed if no output)

RoPE on adjacent pairs (llama.cpp's NORM; the converter does not permute Q/K for
it) over the first ``rope.dimension_count`` elements of a head (the converter
writes half of it).  The biases are there when the checkpoint has them
(``attention_bias``); Q/K/V may also come as one ``attn_qkv`` matrix, as
llama.cpp's loader accepts.  Multi-axis RoPE (``rope.dimension_sections``, the
vision models) and MTP layers (``nextn_predict_layers``, GLM-OCR) are refused as
unread keys.
"""
from __future__ import annotations

from typing import Any, Optional

from ..runtime import register_variant
from .llama import LlamaShaped, llama_shaped


def glm4_spec(gguf_file: Any) -> LlamaShaped:
    tensors = gguf_file.tensors
    return llama_shaped(gguf_file, layout="norm", default_ctx=32768).replace(
        post_attn_norm=True, post_ffn_norm=True, fused_gate_up=True,
        fused_qkv="blk.0.attn_qkv.weight" in tensors,
        qkv_bias="blk.0.attn_q.bias" in tensors)


@register_variant("glm4")
def _glm4(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return glm4_spec(gguf_file).engine(gguf_file, n_threads)
