"""EXAONE 3.0 / 3.5: GGUF architecture ``exaone`` (llama.cpp src/models/exaone.cpp).

Llama under other names: pre-norm blocks, SwiGLU, grouped-query attention, and
NEOX RoPE (the converter does not permute Q/K for it) with llama3
``rope_freqs.weight`` factors where the file has them; head tied or not.
"""
from __future__ import annotations

from typing import Any, Optional

from ..runtime import register_variant
from .llama import LlamaShaped, llama_shaped
from .rope_scaling import LLAMA3_FACTORS


def exaone_spec(gguf_file: Any) -> LlamaShaped:
    return llama_shaped(gguf_file, layout="neox", default_ctx=4096, rope_factors=LLAMA3_FACTORS)


@register_variant("exaone")
def _exaone(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return exaone_spec(gguf_file).engine(gguf_file, n_threads)
