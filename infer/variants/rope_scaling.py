"""A GGUF file's rotary embedding: base, rotated dimensions and the scalings
llama.cpp implements for the Llama-shaped families, as a `spec.Rope`.

Facts from llama.cpp (src/llama-model.cpp load_hparams, src/llama-context.cpp,
ggml's rope_yarn), each turned into per-pair frequency divisors and a cos/sin
magnitude, which is all the kernels take:

* ``rope.scaling.type`` none / linear (the default when absent, with factor 1):
  freq_scale = 1 / ``rope.scaling.factor`` (old name ``rope.scale_linear``).
* ``rope_freqs.weight`` (Llama 3.1+ "llama3" scaling, computed by the converter):
  per-pair divisors, as stored.
* ``rope_factors_long`` / ``rope_factors_short`` (Phi-3 LongRoPE): the long
  factors when the context exceeds ``rope.scaling.original_context_length``,
  else the short ones, so the choice is per context size (`RopeChoice`).
* ``yarn``: pair i keeps its frequency (extrapolates) when it turns more than
  beta_fast = 32 times over the original context, is divided by the factor
  (interpolates) under beta_slow = 1 turn, with a linear ramp between; the
  magnitude is 0.1 ln(factor) + 1.  Written as divisors
  1 / (freq_scale (1 - mix_i) + mix_i).
* ``rope.scaling.attn_factor`` multiplies the magnitude in every case.

Anything else (another scaling type, YaRN parameters llama.cpp does not read for
these families) is left unread, so the file is refused (reading.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ..runtime import UnsupportedModelError
from .hparams import HParams
from .spec import Rope

#: llama.cpp's YaRN defaults (hparams.yarn_beta_fast / yarn_beta_slow)
YARN_BETA_FAST = 32.0
YARN_BETA_SLOW = 1.0


@dataclass(frozen=True)
class RopeChoice:
    """The RoPE of a file: one `Rope`, or LongRoPE's two picked by context size."""

    rope: Rope
    #: LongRoPE: the Rope of contexts longer than ``original_context``
    long: Optional[Rope] = None
    original_context: int = 0

    def for_context(self, n_ctx: int) -> Rope:
        if self.long is not None and n_ctx > self.original_context:
            return self.long
        return self.rope


def _factors(tensor: Any, n: int, name: str) -> Tuple[float, ...]:
    from ..gguf import GGUFError

    shape = tuple(int(s) for s in tensor.shape)
    if int(tensor.dtype) != 0 or shape not in ((n,), (1, n)):
        raise GGUFError(f"GGUF file: {name} must be F32 of {n} values (rot_dim / 2), got "
                        f"type {int(tensor.dtype)} shape {shape}")
    values = np.asarray(tensor.data.view(np.float32), dtype=np.float64).reshape(n)
    if not np.all(np.isfinite(values) & (values > 0)):
        raise GGUFError(f"GGUF file: {name} holds a factor that is not a finite number > 0")
    return tuple(float(v) for v in values)


def yarn_divisors(rot_dim: int, base: float, freq_scale: float, original_context: int,
                  beta_fast: float = YARN_BETA_FAST, beta_slow: float = YARN_BETA_SLOW) -> Tuple[float, ...]:
    """YaRN's frequencies as divisors of the unscaled ones (ggml_rope_yarn_corr_dims
    and rope_yarn with ext_factor 1)."""
    def corr_dim(n_turns: float) -> float:
        return rot_dim * math.log(original_context / (n_turns * 2 * math.pi)) / (2 * math.log(base))

    low = max(0.0, math.floor(corr_dim(beta_fast)))
    high = min(rot_dim - 1.0, math.ceil(corr_dim(beta_slow)))
    out = []
    for i in range(rot_dim // 2):
        mix = 1.0 - min(1.0, max(0.0, (i - low) / max(0.001, high - low)))
        out.append(1.0 / (freq_scale * (1.0 - mix) + mix))
    return tuple(out)


#: the per-dimension factor tensors; a family reads those its llama.cpp graph passes
#: to ggml_rope_ext (llama and granite all three, phi3 LongRoPE's two, the rest none)
LLAMA3_FACTORS = ("rope_freqs.weight",)
LONGROPE_FACTORS = ("rope_factors_long.weight", "rope_factors_short.weight")
FACTOR_TENSORS = LLAMA3_FACTORS + LONGROPE_FACTORS


def read_rope(hp: HParams, tensors: Dict[str, Any], head_dim: int, layout: str,
              max_seq_len: int, factors: Tuple[str, ...] = FACTOR_TENSORS
              ) -> Tuple[RopeChoice, Tuple[str, ...]]:
    """The file's RoPE and the names of the tensors it read (for the weight loader).
    Factor tensors not in ``factors`` are left unread, so the loader refuses a file
    that has them (llama.cpp's graph for the family would not apply them)."""
    tensors = {k: v for k, v in tensors.items() if k not in FACTOR_TENSORS or k in factors}
    rot_dim = hp.integer("rope.dimension_count", head_dim)
    if rot_dim % 2 or rot_dim > head_dim:
        raise UnsupportedModelError(
            f"GGUF metadata: {hp.key('rope.dimension_count')}={rot_dim} must be even and at most "
            f"the head dimension {head_dim}", [hp.key("rope.dimension_count")])
    base = hp.number("rope.freq_base", 10000.0, positive=True)
    kind = hp.string("rope.scaling.type", "linear")
    if hp.has("rope.scaling.factor"):
        factor = hp.number("rope.scaling.factor", non_negative=True)
    else:
        factor = hp.number("rope.scale_linear", 0.0, non_negative=True)
    freq_scale = 1.0 if kind == "none" or factor == 0.0 else 1.0 / factor
    magnitude = hp.number("rope.scaling.attn_factor", 1.0, positive=True)
    original = hp.integer("rope.scaling.original_context_length", max_seq_len)
    used = []

    def take(name: str) -> Optional[Tuple[float, ...]]:
        if name not in tensors:
            return None
        used.append(name)
        return _factors(tensors[name], rot_dim // 2, name)

    def rope(factors: Optional[Tuple[float, ...]], scale: float = freq_scale, mag: float = magnitude) -> Rope:
        return Rope(layout=layout, base=base, scale=scale, freq_factors=factors, attn_factor=mag,
                    rot_dim=None if rot_dim == head_dim else rot_dim)

    if kind == "longrope" or "rope_factors_long.weight" in tensors:
        long, short = take("rope_factors_long.weight"), take("rope_factors_short.weight")
        if long is None or short is None:
            names = ["rope_factors_long.weight", "rope_factors_short.weight"]
            raise UnsupportedModelError("GGUF file: LongRoPE needs both " + " and ".join(names), names)
        return RopeChoice(rope(short), rope(long), original), tuple(used)
    if kind in ("none", "linear"):
        return RopeChoice(rope(take("rope_freqs.weight"))), tuple(used)
    if kind == "yarn":
        if "rope_freqs.weight" in tensors:
            raise UnsupportedModelError("GGUF file: rope_freqs.weight together with YaRN scaling",
                                        ["rope_freqs.weight", hp.key("rope.scaling.type")])
        factor = 1.0 / freq_scale
        mag = magnitude * (1.0 + 0.1 * math.log(factor) if factor > 1.0 else 1.0)
        return RopeChoice(rope(yarn_divisors(rot_dim, base, freq_scale, original), 1.0, mag)), ()
    raise UnsupportedModelError(f"GGUF metadata: {hp.key('rope.scaling.type')}={kind!r} is a RoPE "
                                f"scaling infer does not implement", [hp.key("rope.scaling.type")])
