"""SmolLM3: GGUF architecture ``smollm3``.

Llama (NORM RoPE, SwiGLU, tied head) whose every 4th layer uses no position
embedding at all (NoPE): layer l has no RoPE when (l + 1) % 4 == 0.  llama.cpp
hard-codes the period (``n_no_rope_layer_step = 4``; the GGUF file carries no
key for it), and so does this module.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from ..runtime import register_variant
from .llama import LlamaShaped, llama_shaped

NO_ROPE_LAYER_STEP = 4


def smollm3_spec(gguf_file: Any) -> LlamaShaped:
    return llama_shaped(gguf_file, default_eps=1e-6, default_ctx=65536).with_layers(
        lambda i, layer: layer if (i + 1) % NO_ROPE_LAYER_STEP else replace(layer, rope=None))


@register_variant("smollm3")
def _smollm3(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return smollm3_spec(gguf_file).engine(gguf_file, n_threads)
