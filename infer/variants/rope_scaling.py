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
* ``yarn`` (ggml's rope_yarn and ggml_rope_yarn_corr_dims, llama_context's
  cparams): pair i keeps its frequency (extrapolates) when it turns more than
  beta_fast times over the original context, is divided by the factor
  (interpolates) under beta_slow turns, with a linear ramp between, the ramp
  times ext_factor; written as divisors 1 / (freq_scale (1 - mix_i) + mix_i).
  The magnitude is get_mscale(factor, 1) = 0.1 ln(factor) + 1, or with
  ``yarn_log_multiplier`` m != 0 get_mscale(factor, 1) / get_mscale(factor, m)
  (llama.cpp cancels rope_yarn's own 0.1 ln(factor) + 1, so this is what cos and
  sin are multiplied by); with ext_factor 0 it is plain linear scaling, times
  ``yarn_attn_factor``.  The defaults: ext_factor 1, beta_fast 32, beta_slow 1,
  log multiplier 0, yarn_attn_factor 1.
* ``rope.scaling.attn_factor`` multiplies the magnitude in every case.

The five ``rope.scaling.yarn_*`` keys are read by llama.cpp only in some
families' load_hparams (mistral3: beta_fast, beta_slow, log multiplier; grok all
but the multiplier); elsewhere llama.cpp runs its defaults whatever the file
says.  So a family names the keys its llama.cpp graph reads (``yarn_keys``) and
they are used; another YaRN key in the file is accepted only when its value is
the one llama.cpp uses in its place (it changes nothing: OLMo 3's files carry
beta_fast 32, beta_slow 1 and an attention factor equal to 0.1 ln(factor) + 1),
and refused otherwise, since the file's model would then run differently from
how it was trained.  A ``yarn_attn_factor`` llama.cpp overrides (ext_factor != 0)
must likewise equal the magnitude it computes.

Another scaling type is refused by name.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ..runtime import UnsupportedModelError
from .hparams import HParams
from .spec import Rope

#: llama.cpp's YaRN defaults (hparams.yarn_beta_fast / yarn_beta_slow)
YARN_BETA_FAST = 32.0
YARN_BETA_SLOW = 1.0
#: the YaRN keys (after ``<arch>.rope.scaling.``) of llama.cpp's LLM_KV_ROPE_SCALING_YARN_*
YARN_KEYS = ("yarn_ext_factor", "yarn_attn_factor", "yarn_beta_fast", "yarn_beta_slow", "yarn_log_multiplier")
#: those llama.cpp's mistral3 load_hparams reads (src/models/mistral3.cpp)
MISTRAL3_YARN_KEYS = ("yarn_beta_fast", "yarn_beta_slow", "yarn_log_multiplier")
#: the `Yarn` field each key sets
_YARN_FIELDS = {"yarn_ext_factor": "ext_factor", "yarn_attn_factor": "attn_factor", "yarn_beta_fast": "beta_fast",
                "yarn_beta_slow": "beta_slow", "yarn_log_multiplier": "log_mul"}
_POSITIVE_YARN_KEYS = ("yarn_attn_factor", "yarn_beta_fast", "yarn_beta_slow")


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


@dataclass(frozen=True)
class Yarn:
    """YaRN's parameters as llama.cpp's context uses them (cparams.yarn_*)."""

    #: 1 / freq_scale
    factor: float
    #: n_ctx_orig_yarn: ``rope.scaling.original_context_length``, else the trained context
    original_context: int
    ext_factor: float = 1.0
    beta_fast: float = YARN_BETA_FAST
    beta_slow: float = YARN_BETA_SLOW
    #: rope_yarn_log_mul (HF's mscale_all_dim); 0: not set
    log_mul: float = 0.0
    #: hparams.yarn_attn_factor: the magnitude when ext_factor is 0 (else llama.cpp computes it)
    attn_factor: float = 1.0

    def magnitude(self) -> float:
        """What cos and sin are multiplied by (before ``rope.scaling.attn_factor``)."""
        if self.ext_factor == 0.0:
            return self.attn_factor
        return self.computed_magnitude()

    def computed_magnitude(self) -> float:
        """llama_context's yarn_attn_factor times rope_yarn's 1 + 0.1 ln(factor),
        which cancel, leaving get_mscale(factor, 1) [/ get_mscale(factor, log_mul)]."""
        def get_mscale(mscale: float) -> float:
            return 1.0 if self.factor <= 1.0 else 0.1 * mscale * math.log(self.factor) + 1.0

        if self.log_mul == 0.0:
            return get_mscale(1.0)
        divisor = get_mscale(self.log_mul)
        return get_mscale(1.0) / divisor if divisor > 0 else math.nan

    def divisors(self, rot_dim: int, base: float) -> Tuple[float, ...]:
        """The frequencies as divisors of the unscaled ones (ggml_rope_yarn_corr_dims,
        rope_yarn_ramp and rope_yarn)."""
        def corr_dim(n_turns: float) -> float:
            return rot_dim * math.log(self.original_context / (n_turns * 2 * math.pi)) / (2 * math.log(base))

        low = max(0.0, math.floor(corr_dim(self.beta_fast)))
        high = min(rot_dim - 1.0, math.ceil(corr_dim(self.beta_slow)))
        freq_scale = 1.0 / self.factor
        out = []
        for i in range(rot_dim // 2):
            mix = (1.0 - min(1.0, max(0.0, (i - low) / max(0.001, high - low)))) * self.ext_factor
            out.append(1.0 / (freq_scale * (1.0 - mix) + mix))
        return tuple(out)


def read_yarn(hp: HParams, kind: str, factor: float, original_context: int,
              yarn_keys: Tuple[str, ...]) -> Yarn:
    """The YaRN parameters of a file: the family's ``yarn_keys`` read and checked;
    any other YaRN key present must hold the value llama.cpp uses in its place."""
    from ..gguf import GGUFError

    def key(name: str) -> str:
        return hp.key("rope.scaling." + name)

    defaults = Yarn(factor, original_context, ext_factor=1.0 if kind == "yarn" else 0.0)
    present = {name: hp.number("rope.scaling." + name, positive=name in _POSITIVE_YARN_KEYS,
                               non_negative=name == "yarn_ext_factor")
               for name in YARN_KEYS if hp.has("rope.scaling." + name)}
    read: Dict[str, Any] = {_YARN_FIELDS[name]: v for name, v in present.items() if name in yarn_keys}
    yarn = replace(defaults, **read)
    if yarn.beta_fast < yarn.beta_slow:
        raise GGUFError(f"GGUF metadata: {key('yarn_beta_fast')}={yarn.beta_fast} is below "
                        f"{key('yarn_beta_slow')}={yarn.beta_slow} (YaRN interpolates the pairs turning "
                        "fewer than beta_slow times and keeps those turning more than beta_fast)")
    if yarn.ext_factor != 0.0 and not (math.isfinite(yarn.magnitude()) and yarn.magnitude() > 0):
        raise GGUFError(f"GGUF metadata: {key('yarn_log_multiplier')}={yarn.log_mul} gives the YaRN magnitude "
                        f"{yarn.magnitude()} for the factor {factor}; it must be a finite number > 0")
    for name, value in present.items():
        # llama.cpp overrides yarn_attn_factor whenever ext_factor != 0, with the
        # magnitude it computes: the value the file's factor stands for
        overridden = name == "yarn_attn_factor" and yarn.ext_factor != 0.0
        if name in yarn_keys and not overridden:
            continue
        runs = yarn.computed_magnitude() if overridden else getattr(defaults, _YARN_FIELDS[name])
        if math.isclose(value, runs, rel_tol=1e-6, abs_tol=1e-9):
            continue
        why = (f"llama.cpp replaces it by the magnitude it computes, {runs:g}" if name in yarn_keys
               else f"llama.cpp's {hp.arch} graph does not read it and runs {runs:g}")
        raise UnsupportedModelError(f"GGUF metadata: {key(name)}={value:g}, but {why}; the file's model would "
                                    "run differently from how it was trained, so it is refused", [key(name)])
    return yarn


#: the per-dimension factor tensors; a family reads those its llama.cpp graph passes
#: to ggml_rope_ext (llama and granite all three, phi3 LongRoPE's two, the rest none)
LLAMA3_FACTORS = ("rope_freqs.weight",)
LONGROPE_FACTORS = ("rope_factors_long.weight", "rope_factors_short.weight")
FACTOR_TENSORS = LLAMA3_FACTORS + LONGROPE_FACTORS


def read_rope(hp: HParams, tensors: Dict[str, Any], head_dim: int, layout: str,
              max_seq_len: int, factors: Tuple[str, ...] = FACTOR_TENSORS,
              yarn_keys: Tuple[str, ...] = ()) -> Tuple[RopeChoice, Tuple[str, ...]]:
    """The file's RoPE and the names of the tensors it read (for the weight loader).
    Factor tensors not in ``factors`` are left unread, so the loader refuses a file
    that has them (llama.cpp's graph for the family would not apply them).
    ``yarn_keys``: the ``rope.scaling.yarn_*`` keys the family's llama.cpp reads."""
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

    if kind == "yarn" and hp.has("rope.scaling.factor") and factor == 0.0:
        raise UnsupportedModelError(f"GGUF metadata: {hp.key('rope.scaling.factor')}=0 with YaRN scaling "
                                    "(YaRN needs a factor > 0)", [hp.key("rope.scaling.factor")])
    yarn = read_yarn(hp, kind, 1.0 / freq_scale, original, yarn_keys)
    if yarn.ext_factor != 0.0 and base <= 1.0:
        from ..gguf import GGUFError

        raise GGUFError(f"GGUF metadata: {hp.key('rope.freq_base')}={base} must be > 1 with YaRN "
                        "(its ramp is placed by log(freq_base))")
    if kind == "longrope" or "rope_factors_long.weight" in tensors:
        long, short = take("rope_factors_long.weight"), take("rope_factors_short.weight")
        if long is None or short is None:
            names = ["rope_factors_long.weight", "rope_factors_short.weight"]
            raise UnsupportedModelError("GGUF file: LongRoPE needs both " + " and ".join(names), names)
        return RopeChoice(rope(short), rope(long), original), tuple(used)
    if kind in ("none", "linear") and yarn.ext_factor == 0.0:
        return RopeChoice(rope(take("rope_freqs.weight"), mag=magnitude * yarn.magnitude())), tuple(used)
    if kind in ("none", "linear", "yarn"):
        if "rope_freqs.weight" in tensors:
            raise UnsupportedModelError("GGUF file: rope_freqs.weight together with YaRN scaling",
                                        ["rope_freqs.weight", hp.key("rope.scaling.type")])
        mag = magnitude * yarn.magnitude()
        if yarn.ext_factor == 0.0:   # YaRN without its ramp: linear scaling
            return RopeChoice(rope(None, freq_scale, mag)), ()
        divisors = yarn.divisors(rot_dim, base)
        if not all(math.isfinite(x) and x > 0 for x in divisors):
            raise UnsupportedModelError(
                f"GGUF metadata: YaRN with ext_factor {yarn.ext_factor} and factor {yarn.factor} turns some "
                "frequencies negative", [hp.key("rope.scaling.yarn_ext_factor")])
        return RopeChoice(rope(divisors, 1.0, mag)), ()
    raise UnsupportedModelError(f"GGUF metadata: {hp.key('rope.scaling.type')}={kind!r} is a RoPE "
                                f"scaling infer does not implement", [hp.key("rope.scaling.type")])
