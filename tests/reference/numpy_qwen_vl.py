"""Float64 numpy forward passes of the text models of Qwen2-VL (``qwen2vl``), Qwen3-VL
(``qwen3vl``) and Qwen3-VL-MoE (``qwen3vlmoe``): numpy_families' Qwen2 / Qwen3 /
Qwen3MoE with multi-section RoPE, written from ggml's definition
(ggml_mrope_cache_init in ggml-cpu/ops.cpp), sharing no code with infer.

Each token has four positions (time, height, width, extra); llama.cpp gives a text
token (p, p, p, 0) (llm_graph_input_pos::set_input).  Pair i of a head (NEOX
layout: elements i and i + n_rot/2) turns by ``position[k] * base^(-2i/n_rot)``, k
chosen by its sector s = i % sum(sections) of ``rope.dimension_sections`` [t, h, w, e]:

* MROPE (qwen2vl): time if s < t, height if s < t + h, width if s < t + h + w, else extra;
* IMROPE (qwen3vl*): height if s % 3 == 1 and s < 3h, width if s % 3 == 2 and s < 3w,
  time if s % 3 == 0 and s < 3t, else extra.

``positions`` (a function of the 1-D positions giving the (T, 4) array) may be
replaced, to turn every pair by p (plain NEOX) for a comparison.
"""
from __future__ import annotations

import numpy as np
from gguf import GGUFReader

from .numpy_families import Qwen2, Qwen3, Qwen3MoE, _fields


def text_positions(pos):
    """llama.cpp's four positions of text tokens: (p, p, p, 0)."""
    pos = np.asarray(pos, np.float64)
    return np.stack([pos, pos, pos, np.zeros_like(pos)], axis=1)


def sector_component(sector, sections, interleaved):
    """Which of the four positions (0 time, 1 height, 2 width, 3 extra) turns a pair of this sector."""
    t, h, w = sections[0], sections[1], sections[2]
    if interleaved:
        if sector % 3 == 1 and sector < 3 * h:
            return 1
        if sector % 3 == 2 and sector < 3 * w:
            return 2
        if sector % 3 == 0 and sector < 3 * t:
            return 0
        return 3
    if sector < t:
        return 0
    if sector < t + h:
        return 1
    if sector < t + h + w:
        return 2
    return 3


class MRope:
    """Multi-section RoPE in place of the family's NEOX RoPE (mixed in first)."""
    interleaved = False
    positions = staticmethod(text_positions)

    def rope_setup(self):
        super().rope_setup()
        sections = [int(s) for s in self.get("rope.dimension_sections")]
        sections += [0] * (4 - len(sections))
        self.sections = sections
        total = sum(sections)
        self.component = np.array([sector_component(i % total, sections, self.interleaved)
                                   for i in range(self.n_rot // 2)])

    def rope(self, x, pos):
        four = self.positions(pos)                       # (T, 4)
        ang = four[:, self.component] * self.inv_freq[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        out = x.copy()
        r = self.n_rot
        a, b = x[..., : r // 2], x[..., r // 2: r]
        out[..., : r // 2] = a * cos - b * sin
        out[..., r // 2: r] = a * sin + b * cos
        return out


class Qwen2VL(MRope, Qwen2):
    """Qwen 2's biases, MROPE."""


class Qwen3VL(MRope, Qwen3):
    """Qwen 3's q/k norms, IMROPE; deepstack adds nothing to text rows."""
    interleaved = True


class Qwen3VLMoE(MRope, Qwen3MoE):
    """Qwen 3 MoE's experts, IMROPE."""
    interleaved = True


VL_FAMILIES = {"qwen2vl": Qwen2VL, "qwen3vl": Qwen3VL, "qwen3vlmoe": Qwen3VLMoE}


def reference(path: str, n_ctx: int = 0):
    """The reference model of a qwen2vl / qwen3vl / qwen3vlmoe file."""
    arch = str(_fields(GGUFReader(path))["general.architecture"])
    return VL_FAMILIES[arch](path, n_ctx)
