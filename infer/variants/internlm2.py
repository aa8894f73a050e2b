"""InternLM2 and InternLM2.5: GGUF architecture ``internlm2`` (llama.cpp
src/models/internlm2.cpp; converter conversion/internlm.py).

Llama itself, with an output matrix always (llama.cpp requires ``output.weight``):
the converter splits the checkpoint's grouped ``wqkv`` into attn_q, attn_k and
attn_v and permutes Q/K for RoPE on adjacent pairs, so the file is Llama-shaped.
llama.cpp asserts that RoPE turns the whole head; a ``rope.dimension_count``
that differs is refused.  No RoPE factor tensors (llama.cpp creates none for
this architecture) and no biases.
"""
from __future__ import annotations

from typing import Any, Optional

from ..runtime import UnsupportedModelError, register_variant
from .llama import LlamaShaped, llama_shaped


def internlm2_spec(gguf_file: Any) -> LlamaShaped:
    base = llama_shaped(gguf_file, default_ctx=32768).replace(tied_head=False)
    hp, spec = base.hparams, base.spec
    rope = spec.layers[0].rope
    if rope is not None and rope.rotated(spec.head_dim) != spec.head_dim:
        raise UnsupportedModelError(
            f"internlm2 file: {hp.key('rope.dimension_count')}={rope.rot_dim} differs from the head size "
            f"{spec.head_dim} (llama.cpp's internlm2 graph turns whole heads)", [hp.key("rope.dimension_count")])
    return base


@register_variant("internlm2")
def _internlm2(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return internlm2_spec(gguf_file).engine(gguf_file, n_threads)
