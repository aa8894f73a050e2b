"""Which type each tensor gets under an ``infer quantize --type``: llama-quantize's rules.

A *recipe* is llama.cpp's ``llama_ftype`` (``Q4_K_M``, ``Q3_K_S``, ...): a default
type plus per-tensor exceptions, taken from ``llama_tensor_get_type_impl`` and
``tensor_type_fallback`` in llama.cpp's ``src/llama-quant.cpp`` for a model with no
importance matrix, no experts and no manual overrides (docs/gguf.md states them).
Three plain targets, ``q3_k``, ``q4_k`` and ``q5_k``, apply only the output-head and
fallback rules; ``q3_k`` and ``q5_k`` then equal ``q3_k_s`` and ``q5_k_s``, ``q4_k``
does not equal ``q4_k_s`` (which bumps early ``attn_v``/``ffn_down`` to Q5_K).

`TypeChooser` walks the tensors in llama-quantize's order (`processing_order`: by
layer number, then by name; a file may list ``blk.10`` before ``blk.2``): the
``attn_v`` and ``ffn_down`` rules count those tensors as they go.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from .tensor import DType

D = DType


@dataclass(frozen=True)
class Recipe:
    """A ``--type`` choice: the default type, ``general.file_type`` and llama.cpp's mixture."""

    name: str
    default: DType
    file_type: int                 # llama.cpp's llama_ftype value
    mixture: Optional[str] = None  # llama_ftype name whose exceptions apply, None for none


RECIPES = {r.name: r for r in [
    Recipe("f32", D.F32, 0), Recipe("f16", D.F16, 1), Recipe("bf16", D.BF16, 32),
    Recipe("q4_0", D.Q4_0, 2, "Q4_0"), Recipe("q4_1", D.Q4_1, 3, "Q4_1"),
    Recipe("q5_0", D.Q5_0, 8, "Q5_0"), Recipe("q5_1", D.Q5_1, 9, "Q5_1"),
    Recipe("q8_0", D.Q8_0, 7, "Q8_0"),
    Recipe("q2_k", D.Q2_K, 10, "Q2_K"),
    Recipe("q3_k", D.Q3_K, 11), Recipe("q3_k_s", D.Q3_K, 11, "Q3_K_S"),
    Recipe("q3_k_m", D.Q3_K, 12, "Q3_K_M"), Recipe("q3_k_l", D.Q3_K, 13, "Q3_K_L"),
    Recipe("q4_k", D.Q4_K, 14), Recipe("q4_k_s", D.Q4_K, 14, "Q4_K_S"),
    Recipe("q4_k_m", D.Q4_K, 15, "Q4_K_M"),
    Recipe("q5_k", D.Q5_K, 16), Recipe("q5_k_s", D.Q5_K, 16, "Q5_K_S"),
    Recipe("q5_k_m", D.Q5_K, 17, "Q5_K_M"),
    Recipe("q6_k", D.Q6_K, 18, "Q6_K"),
    Recipe("iq4_nl", D.IQ4_NL, 25, "IQ4_NL"), Recipe("iq4_xs", D.IQ4_XS, 30, "IQ4_XS"),
    Recipe("mxfp4_moe", D.MXFP4, 38, "MXFP4_MOE"),
]}

#: llama.cpp's names of its file types (general.file_type, llama_ftype), as its loader
#: and llama-bench print them (llama_model_ftype_name in src/llama-model-loader.cpp).
FILE_TYPE_NAMES = {
    0: "all F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
    10: "Q2_K - Medium", 11: "Q3_K - Small", 12: "Q3_K - Medium", 13: "Q3_K - Large",
    14: "Q4_K - Small", 15: "Q4_K - Medium", 16: "Q5_K - Small", 17: "Q5_K - Medium", 18: "Q6_K",
    19: "IQ2_XXS - 2.0625 bpw", 20: "IQ2_XS - 2.3125 bpw", 21: "Q2_K - Small", 22: "IQ3_XS - 3.3 bpw",
    23: "IQ3_XXS - 3.0625 bpw", 24: "IQ1_S - 1.5625 bpw", 25: "IQ4_NL - 4.5 bpw", 26: "IQ3_S - 3.4375 bpw",
    27: "IQ3_S mix - 3.66 bpw", 28: "IQ2_S - 2.5 bpw", 29: "IQ2_M - 2.7 bpw", 30: "IQ4_XS - 4.25 bpw",
    31: "IQ1_M - 1.75 bpw", 32: "BF16", 36: "TQ1_0 - 1.69 bpw ternary", 37: "TQ2_0 - 2.06 bpw ternary",
    38: "MXFP4 MoE",
}


def file_type_name(value: Any) -> Optional[str]:
    """llama.cpp's name of a general.file_type value; None when the file has none
    (llama.cpp then guesses from the tensors), "ftype N" for one it does not name."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        return f"ftype {value!r}"
    return FILE_TYPE_NAMES.get(value, f"ftype {value}")


#: tensor_type_fallback: a type whose block does not divide the row length -> the next one.
FALLBACK = {D.Q2_K: D.Q4_0, D.Q3_K: D.Q4_0, D.Q4_K: D.Q5_0, D.Q5_K: D.Q5_1, D.Q6_K: D.Q8_0,
            D.IQ4_XS: D.IQ4_NL}


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama.cpp's choice of layers that get more bits: the first and last eighth, and
    every third layer in between."""
    return (i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8
            or (i_layer - n_layers // 8) % 3 == 2)


def category(name: str) -> str:
    """tensor_get_category: the role a tensor name says it has."""
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    for key, cat in (("attn_qkv.weight", "attn_v"), ("attn_kv_b.weight", "attn_v"),
                     ("attn_v.weight", "attn_v"), ("attn_k.weight", "attn_k"),
                     ("attn_q.weight", "attn_q"), ("attn_output.weight", "attn_output"),
                     ("ffn_up", "ffn_up"), ("ffn_gate", "ffn_gate"), ("ffn_down", "ffn_down")):
        if key in name:
            return cat   # attn_qkv and attn_kv_b are "attn_v-like" (category_is_attn_v)
    return "other"


def processing_order(names: list[str]) -> list[int]:
    """Indices of names in the order llama-quantize visits them (llama_model_loader's
    weight_name_comparer: the number after "blk." (-1 for none), then the name)."""
    def key(k: int) -> tuple[int, str]:
        m = re.match(r"blk\.(-?\d+)\.", names[k])
        return (int(m.group(1)) if m else -1, names[k])
    return sorted(range(len(names)), key=key)


def fall_back(new: DType, n_cols: int) -> DType:
    """tensor_type_fallback: the type actually written for rows of n_cols elements."""
    if n_cols % new.block_size == 0:
        return new
    new = FALLBACK.get(new, new)
    return new if n_cols % new.block_size == 0 else D.F16


class TypeChooser:
    """The per-tensor type choices of one recipe over one model; `choose` must be
    called in `processing_order`."""

    def __init__(self, recipe: Recipe, names: list[str], metadata: dict[str, Any]) -> None:
        self.recipe = recipe
        self.tied = "output.weight" not in names
        arch = metadata.get("general.architecture", "")
        self.falcon = arch == "falcon"
        heads = metadata.get(f"{arch}.attention.head_count", 1)
        kv_heads = metadata.get(f"{arch}.attention.head_count_kv", heads)
        # per-layer arrays (a list or numpy array): layer 0's, as llama.cpp's n_gqa(); 0 KV
        # heads (an LFM2 shortconv layer) make it 0 there too
        heads = heads[0] if isinstance(heads, (list, tuple, np.ndarray)) else heads
        kv_heads = kv_heads[0] if isinstance(kv_heads, (list, tuple, np.ndarray)) else kv_heads
        self.n_gqa = int(heads) // int(kv_heads) if kv_heads else 0
        # llama.cpp keeps attention in more bits for 8-expert models (Mixtral-like)
        n_experts = metadata.get(f"{arch}.expert_count", 0)
        self.eight_experts = isinstance(n_experts, int) and n_experts == 8
        self.n_attention_wv = sum(category(n) == "attn_v" for n in names)
        self.n_ffn_down = int(metadata.get(f"{arch}.block_count", 0) or 0)
        self.i_attention_wv = self.i_ffn_down = 0

    def choose(self, name: str, n_cols: int, n_matrices: int = 1) -> DType:
        """The type llama-quantize would give a quantizable weight (before fallback);
        n_matrices > 1: a stacked tensor of experts (GGUF ne[2])."""
        new, ftype = self.recipe.default, self.recipe.mixture
        if not new.is_quantized:
            return new
        cat = category(name)
        if cat == "output" or (self.tied and cat == "token_embd"):
            if self.falcon or n_cols % new.block_size or ftype == "MXFP4_MOE":
                return D.Q8_0
            return new if new == D.Q8_0 else D.Q6_K
        if ftype == "MXFP4_MOE":   # the experts in MXFP4, every other matrix in Q8_0
            return new if n_matrices > 1 else D.Q8_0
        if cat == "attn_v":
            new = D.Q8_0 if self.eight_experts else self._attn_v(new, ftype)
            self.i_attention_wv += 1
        elif cat == "attn_k" and self.eight_experts:
            new = D.Q8_0
        elif cat == "ffn_down":
            new = self._ffn_down(new, ftype)
            self.i_ffn_down += 1
        elif cat == "attn_output":
            if self.eight_experts and not self.falcon:
                if ftype in ("Q2_K", "IQ3_XS", "IQ3_XXS", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S", "Q4_K_M",
                             "IQ3_S", "IQ3_M", "IQ4_XS"):
                    new = D.Q5_K
            elif not self.falcon:
                new = {"Q2_K": D.Q3_K, "Q3_K_M": D.Q4_K, "Q3_K_L": D.Q5_K}.get(ftype or "", new)
            elif ftype == "Q3_K_L":
                new = D.Q4_K
        return new

    def _attn_v(self, new: DType, ftype: Optional[str]) -> DType:
        i, n = self.i_attention_wv, self.n_attention_wv
        if ftype == "Q2_K":
            return D.Q4_K if self.n_gqa >= 4 else D.Q3_K
        if ftype == "Q3_K_M":
            return D.Q5_K if i < 2 else D.Q4_K
        if ftype == "Q3_K_L":
            return D.Q5_K
        if ftype in ("IQ4_NL", "IQ4_XS") and self.n_gqa >= 4:
            return D.Q5_K
        if ftype in ("Q4_K_M", "Q5_K_M") and use_more_bits(i, n):
            return D.Q6_K
        if ftype == "Q4_K_S" and i < 4:
            return D.Q5_K
        return new

    def _ffn_down(self, new: DType, ftype: Optional[str]) -> DType:
        i, n = self.i_ffn_down, self.n_ffn_down
        if ftype == "Q2_K":
            return D.Q3_K
        if ftype == "Q3_K_M":
            if i < n // 16:
                return D.Q5_K
            return D.Q4_K if not self.falcon or use_more_bits(i, n) else D.Q3_K
        if ftype == "Q3_K_L":
            return D.Q4_K if self.falcon else D.Q5_K
        if ftype == "Q4_K_M":
            if self.falcon:
                return D.Q6_K if i < n // 16 else D.Q5_K if use_more_bits(i, n) else D.Q4_K
            return D.Q6_K if use_more_bits(i, n) else new
        if i < n // 8 and ftype in ("IQ4_NL", "IQ4_XS"):
            return D.Q5_K
        if ftype == "Q5_K_M" and use_more_bits(i, n):
            return D.Q6_K
        if ftype == "Q4_K_S" and not self.falcon and i < n // 8:
            return D.Q5_K
        return new
