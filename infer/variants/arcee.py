"""Arcee (AFM-4.5B): GGUF architecture ``arcee``.

Llama (NORM RoPE with the file's scaling, ``rope_freqs.weight`` if present, GQA,
untied or tied head) whose FFN has no gate: ``relu(h Wup)^2 Wdown`` (llama.cpp
src/models/arcee.cpp: build_ffn with LLM_FFN_RELU_SQR, LLM_FFN_SEQ; HF ArceeMLP's
ReLU²).  The spec's ``activation = "relu_sqr"``; a file with an ``ffn_gate``
tensor is refused, as llama.cpp does not read one.
"""
from __future__ import annotations

from typing import Any, Optional

from ..runtime import register_variant
from .llama import LlamaShaped, llama_shaped
from .rope_scaling import LLAMA3_FACTORS


def arcee_spec(gguf_file: Any) -> LlamaShaped:
    return llama_shaped(gguf_file, default_ctx=4096, rope_factors=LLAMA3_FACTORS).replace(activation="relu_sqr")


@register_variant("arcee")
def _arcee(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return arcee_spec(gguf_file).engine(gguf_file, n_threads)
