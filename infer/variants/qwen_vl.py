"""The text models of Qwen2-VL / Qwen2.5-VL (GGUF ``qwen2vl``), Qwen3-VL (``qwen3vl``)
and Qwen3-VL-MoE (``qwen3vlmoe``): llama.cpp src/models/qwen2vl.cpp, qwen3vl.cpp and
qwen3vlmoe.cpp.  The vision encoder is a separate ``mmproj`` file that infer does
not run; these variants take text only.

Each is its text family (qwen2.py: q/k/v biases; qwen3.py: per-head q/k RMSNorm;
qwen3moe.py: softmax-routed experts, top-k weights renormalised) with multi-section
RoPE (M-RoPE).  ggml (ggml_mrope_cache_init) turns pair i of a head by one of four
positions, chosen by its sector s = i % sum(sections) and
``rope.dimension_sections`` = [t, h, w, e]:

* qwen2vl, MROPE: the time position for s < t, height for s < t + h, width for
  s < t + h + w, else the extra one;
* qwen3vl / qwen3vlmoe, interleaved IMROPE: height where s % 3 == 1 and s < 3h,
  width where s % 3 == 2 and s < 3w, time where s % 3 == 0 and s < 3t, else extra.

For text tokens llama.cpp sets time = height = width = the token's position and
extra = 0 (llm_graph_input_pos::set_input), so each pair turns by the position, as
NEOX RoPE, except the pairs that fall to the extra section, which do not turn.
Qwen3-VL's files ([24, 20, 20, 0] over 64 pairs) have two such pairs, 61 and 62
(s % 3 is 1 and 2 past 3 * 20); Qwen2-VL's ([16, 24, 24, 0]) none.  A pair that
does not turn is a frequency factor of +inf (Rope.freq_factors).

Qwen3-VL's ``n_deepstack_layers`` widen llama.cpp's input embeddings to
(1 + n) * embedding_length for image rows: a token's row is its embedding padded
with zeros, and layer il < n adds the slice (il + 1) of that row, zero for text.
So for text the key changes nothing, and ``token_embd`` is embedding_length wide.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, List, Optional, Sequence

import numpy as np

from ..gguf import GGUFError
from ..runtime import UnsupportedModelError, register_variant
from .hparams import HParams, as_integer
from .llama import LlamaShaped
from .qwen2 import qwen2_spec
from .qwen3 import qwen3_spec
from .qwen3moe import qwen3moe_spec
from .spec import LayerSpec

#: ggml's GGML_MROPE_SECTIONS: time, height, width, extra
N_SECTIONS = 4


def mrope_text_turns(sections: Sequence[int], n_pairs: int, interleaved: bool) -> List[bool]:
    """For each of a head's n_pairs rotated pairs, whether ggml's M-RoPE turns it by a
    text token's position (the time, height or width one), not the extra one (0)."""
    t, h, w = sections[0], sections[1], sections[2]
    total = sum(sections)
    turns = []
    for pair in range(n_pairs):
        sector = pair % total
        if interleaved:
            turns.append((sector % 3 == 1 and sector < 3 * h) or (sector % 3 == 2 and sector < 3 * w)
                         or (sector % 3 == 0 and sector < 3 * t))
        else:
            turns.append(sector < t + h + w)
    return turns


def read_sections(hp: HParams, head_dim: int) -> List[int]:
    """``rope.dimension_sections``: 4 counts >= 0, not all 0 (ggml divides by their
    sum), summing to at most the head size (ggml asserts sum <= ne0)."""
    key = hp.key("rope.dimension_sections")
    raw = hp.raw("rope.dimension_sections")
    if not isinstance(raw, (list, tuple, np.ndarray)) or not 1 <= len(raw) <= N_SECTIONS:
        raise GGUFError(f"GGUF metadata: {key} must be an array of at most {N_SECTIONS} integers, got {raw!r}")
    # llama.cpp's get_key_or_arr reads up to 4 and leaves the rest 0
    sections = [as_integer(s, key, lo=0) for s in raw] + [0] * (N_SECTIONS - len(raw))
    if not 0 < sum(sections) <= head_dim:
        raise GGUFError(f"GGUF metadata: {key}={sections} must sum to between 1 and the head size {head_dim}")
    return sections


def with_mrope(shaped: LlamaShaped, interleaved: bool) -> LlamaShaped:
    """The family's spec with its NEOX RoPE made M-RoPE for text positions: the pairs
    of the extra section do not turn."""
    hp, spec = shaped.hparams, shaped.spec
    rope = shaped.rope.rope
    if shaped.rope.long is not None:
        raise UnsupportedModelError(f"{hp.arch} file: LongRoPE is not implemented", [hp.key("rope.scaling.type")])
    rot_dim = rope.rotated(spec.head_dim)
    if rot_dim != spec.head_dim:   # llama.cpp asserts n_rot == n_embd_head
        raise UnsupportedModelError(f"{hp.arch} file: {hp.key('rope.dimension_count')}={rot_dim} differs from the "
                                    f"head size {spec.head_dim}", [hp.key("rope.dimension_count")])
    turns = mrope_text_turns(read_sections(hp, spec.head_dim), rot_dim // 2, interleaved)
    if all(turns):
        return shaped
    base = rope.freq_factors or (1.0,) * (rot_dim // 2)
    factors = tuple(f if turn else math.inf for f, turn in zip(base, turns))
    mrope = dataclasses.replace(rope, freq_factors=factors)

    def change(_: int, layer: LayerSpec) -> LayerSpec:
        return dataclasses.replace(layer, rope=mrope)

    return shaped.with_layers(change)


def read_deepstack(hp: HParams) -> int:
    """``n_deepstack_layers``: image-only (module docstring), read so that it is not refused."""
    return hp.integer("n_deepstack_layers", 0, lo=0)


def qwen2vl_spec(gguf_file: Any) -> LlamaShaped:
    return with_mrope(qwen2_spec(gguf_file), interleaved=False)


def qwen3vl_spec(gguf_file: Any) -> LlamaShaped:
    shaped = qwen3_spec(gguf_file)
    read_deepstack(shaped.hparams)
    return with_mrope(shaped, interleaved=True)


def qwen3vlmoe_spec(gguf_file: Any) -> LlamaShaped:
    shaped = qwen3moe_spec(gguf_file)
    read_deepstack(shaped.hparams)
    return with_mrope(shaped, interleaved=True)


@register_variant("qwen2vl")
def _qwen2vl(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return qwen2vl_spec(gguf_file).engine(gguf_file, n_threads)


@register_variant("qwen3vl")
def _qwen3vl(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return qwen3vl_spec(gguf_file).engine(gguf_file, n_threads)


@register_variant("qwen3vlmoe")
def _qwen3vlmoe(gguf_file: Any, n_threads: Optional[int] = None) -> Any:
    return qwen3vlmoe_spec(gguf_file).engine(gguf_file, n_threads)
