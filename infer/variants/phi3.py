"""Phi-3 / Phi-3.5 / Phi-4-mini: GGUF architecture ``phi3``.

Llama with fused tensors: ``attn_qkv`` (rows q, then k, then v) and ``ffn_up``
holding gate and up (2 * feed_forward_length rows, gate first); NEOX RoPE over
``rope.dimension_count`` of each head (Phi-4-mini rotates 3/4 of it); LongRoPE
factors (``rope_factors_long`` / ``_short``, picked by the context size against
``rope.scaling.original_context_length``) and their magnitude
``rope.scaling.attn_factor``, read by rope_scaling.py.

``attention.sliding_window`` is read and not applied: llama.cpp disables Phi-3's
sliding window ("Phi SWA is currently disabled", the converter's values being
unreliable), and infer computes what llama.cpp computes.
"""
from __future__ import annotations

from typing import Any, Optional

from ..runtime import register_variant
from .llama import LlamaShaped, llama_shaped
from .rope_scaling import LONGROPE_FACTORS


def phi3_spec(gguf_file: Any) -> LlamaShaped:
    base = llama_shaped(gguf_file, layout="neox", default_ctx=4096, rope_factors=LONGROPE_FACTORS)
    base.hparams.integer("attention.sliding_window", 0, lo=0)  # read, not applied (see above)
    t = gguf_file.tensors
    return base.replace(fused_qkv="blk.0.attn_qkv.weight" in t, fused_gate_up="blk.0.ffn_gate.weight" not in t)


@register_variant("phi3")
def _phi3(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return phi3_spec(gguf_file).engine(gguf_file, n_threads)
