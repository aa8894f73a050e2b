"""ERNIE 4.5 (dense, 0.3B): GGUF architecture ``ernie4_5`` (llama.cpp src/models/ernie4-5.cpp).

Plain Llama: pre-norm blocks, SwiGLU, NORM RoPE (adjacent pairs), no RoPE
factors, head tied or not.  llama.cpp loads an optional ``attn_output.bias``
but its graph never adds it, so a file with one is refused by the weight loader
(unread tensor) rather than run one way or the other; ``rope.dimension_sections``
(PaddleOCR's M-RoPE) is refused as an unread key.
"""
from __future__ import annotations

from typing import Any, Optional

from ..runtime import register_variant
from .llama import LlamaShaped, llama_shaped


def ernie4_5_spec(gguf_file: Any) -> LlamaShaped:
    return llama_shaped(gguf_file, default_ctx=131072)


@register_variant("ernie4_5")
def _ernie4_5(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return ernie4_5_spec(gguf_file).engine(gguf_file, n_threads)
