"""Apertus (swiss-ai Apertus-8B / 70B): GGUF architecture ``apertus``.

Llama-shaped (llama.cpp src/models/apertus.cpp) with per-head q/k RMSNorm before
NEOX RoPE (the converter does not permute Q/K), an untied head, and an FFN without a
gate whose activation is xIELU with each layer's own parameters:

    u = h Wup ;  xielu(u) = alpha_p u^2 + beta u              (u > 0)
                            (expm1(min(u, eps)) - u) alpha_n + beta u   (else)
    f = xielu(u) Wdown

The file holds the trained parameters as the global arrays ``xielu.alpha_n``,
``xielu.alpha_p``, ``xielu.beta``, ``xielu.eps`` (one value per layer, or one for all);
as ggml_xielu does, alpha_p = softplus(alpha_p) and alpha_n = beta + softplus(alpha_n),
in float32.  The optional q/k norm biases and attention output bias llama.cpp accepts
are refused (the loader names them) rather than run without.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional, Sequence

import numpy as np

from ..gguf import GGUFError
from ..runtime import register_variant
from .llama import LlamaShaped, llama_shaped
from .rope_scaling import FACTOR_TENSORS

XIELU_KEYS = ("xielu.alpha_n", "xielu.alpha_p", "xielu.beta", "xielu.eps")


def _per_layer(metadata: Any, key: str, n_layers: int) -> Sequence[float]:
    value = metadata.get(key)
    if value is None:
        raise GGUFError(f"GGUF metadata: {key} is missing (the xIELU activation's parameters)")
    values = list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value] * n_layers
    if len(values) != n_layers:
        raise GGUFError(f"GGUF metadata: {key} has {len(values)} entries for {n_layers} layers")
    if not all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
               and math.isfinite(float(v)) for v in values):
        raise GGUFError(f"GGUF metadata: {key} must hold finite numbers")
    return [float(v) for v in values]


def _softplus(x: np.float32) -> np.float32:
    """ggml_compute_softplus_f32."""
    return x if x > 20 else np.float32(np.log(np.float32(1) + np.exp(x)))


def xielu_parameters(metadata: Any, n_layers: int) -> list[tuple[float, float, float, float]]:
    """Each layer's (alpha_n, alpha_p, beta, eps) as ggml_xielu's op parameters."""
    alpha_n, alpha_p, beta, eps = (_per_layer(metadata, k, n_layers) for k in XIELU_KEYS)
    out = []
    for an, ap, b, e in zip(alpha_n, alpha_p, beta, eps):
        b32 = np.float32(b)
        out.append((float(b32 + _softplus(np.float32(an))), float(_softplus(np.float32(ap))), float(b32),
                    float(np.float32(e))))
    return out


def apertus_spec(gguf_file: Any) -> LlamaShaped:
    base = llama_shaped(gguf_file, layout="neox", default_ctx=65536, rope_factors=FACTOR_TENSORS)
    params = xielu_parameters(gguf_file.metadata, base.spec.n_layers)
    return base.replace(activation="xielu", qk_norm=True, tied_head=False, layers=tuple(
        dataclasses.replace(layer, xielu=p) for layer, p in zip(base.spec.layers, params)))


@register_variant("apertus")
def _apertus(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return apertus_spec(gguf_file).engine(gguf_file, n_threads)
