"""Reading a variant's hyper-parameters from GGUF metadata, validated at load.

Every value is checked where it is read, and a bad one raises `GGUFError` naming
the key: a count that is not a positive integer (``block_count=1.9``, NaN, a
negative or zero ``head_count``), a negative epsilon or RoPE base, a window too
large for the kernels.  Nothing fails later at first use.

`HParams` also records every key it was asked for: a file can carry keys that
change the maths (a ``rope.scaling.type``, soft-capping, multipliers), and a
variant that skipped one would load and give subtly wrong logits.  So once a
variant has read what it implements, `HParams.refuse_unread` raises
`UnsupportedModelError` naming every other ``<arch>.`` key but the `INERT_KEYS`.
"""
from __future__ import annotations

import math
import re
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple

import numpy as np

from ..gguf import GGUFError
from ..runtime import UnsupportedModelError

#: counts and sizes go to C ints
MAX_COUNT = 2**31 - 1
_MISSING = object()
#: ``<arch>.`` keys that never change the logits: sizes the tensors already give,
#: facts about training or conversion
INERT_KEYS = frozenset({
    "context_length",           # the default context size, not part of the maths
    "vocab_size",               # token_embd's rows say it
    "rope.scaling.finetuned",   # a training fact (granite reads it as a switch)
    "tensor_data_layout",       # the converter's note of the Q/K permutation
})
_BLOCK = re.compile(r"blk\.(\d+)\.")


class HParams:
    """``<architecture>.<key>`` values of one file, read with their checks."""

    def __init__(self, metadata: Dict[str, Any], architecture: Optional[str] = None) -> None:
        self.metadata = metadata
        self.arch = architecture or str(metadata.get("general.architecture", ""))
        #: suffixes asked for (present or not)
        self.read: set[str] = set()

    def key(self, suffix: str) -> str:
        return f"{self.arch}.{suffix}"

    def raw(self, suffix: str, default: Any = _MISSING) -> Any:
        self.read.add(suffix)
        full = self.key(suffix)
        if full in self.metadata:
            return self.metadata[full]
        if default is _MISSING:
            raise GGUFError(f"GGUF metadata: {full} is missing")
        return default

    def has(self, suffix: str) -> bool:
        self.read.add(suffix)
        return self.key(suffix) in self.metadata

    def boolean(self, suffix: str, default: Any = _MISSING) -> bool:
        value = self.raw(suffix, default)
        if not isinstance(value, (bool, np.bool_)):
            raise GGUFError(f"GGUF metadata: {self.key(suffix)} must be a bool, got {value!r}")
        return bool(value)

    def refuse_unread(self) -> None:
        """UnsupportedModelError naming every ``<arch>.`` key nobody read (but the
        inert ones): the variant does not implement it, and it may change the maths."""
        prefix = f"{self.arch}."
        unread = sorted(k for k in self.metadata if k.startswith(prefix)
                        and k[len(prefix):] not in self.read and k[len(prefix):] not in INERT_KEYS)
        if unread:
            raise UnsupportedModelError(
                f"{self.arch} file: metadata {', '.join(unread)} not understood by infer's "
                f"{self.arch} variant; it may change the maths, so the file is refused", unread)

    def integer(self, suffix: str, default: Any = _MISSING, *, lo: int = 1, hi: int = MAX_COUNT) -> int:
        """An integer in [lo, hi]; a float that is a whole number is accepted
        (some converters write them), anything else names the key."""
        value = self.raw(suffix, default)
        return as_integer(value, self.key(suffix), lo, hi)

    def number(self, suffix: str, default: Any = _MISSING, *, positive: bool = False,
               non_negative: bool = False) -> float:
        """A finite float (optionally > 0 or >= 0)."""
        full = self.key(suffix)
        value = self.raw(suffix, default)
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise GGUFError(f"GGUF metadata: {full} must be a number, got {value!r}")
        x = float(value)
        if not math.isfinite(x):
            raise GGUFError(f"GGUF metadata: {full} must be finite, got {x}")
        if positive and not x > 0:
            raise GGUFError(f"GGUF metadata: {full} must be > 0, got {x}")
        if non_negative and x < 0:
            raise GGUFError(f"GGUF metadata: {full} must be >= 0, got {x}")
        return x

    def string(self, suffix: str, default: Any = _MISSING) -> str:
        value = self.raw(suffix, default)
        if not isinstance(value, str):
            raise GGUFError(f"GGUF metadata: {self.key(suffix)} must be a string, got {value!r}")
        return value

    def per_layer(self, suffix: str, n_layers: int, default: Any = _MISSING) -> Sequence[Any]:
        """A value that may be one scalar or one per layer (llama.cpp's per-layer arrays)."""
        value = self.raw(suffix, default)
        if isinstance(value, (list, tuple, np.ndarray)):
            if len(value) != n_layers:
                raise GGUFError(f"GGUF metadata: {self.key(suffix)} has {len(value)} entries "
                                f"for {n_layers} layers")
            return list(value)
        return [value] * n_layers

    def attention_shape(self) -> Tuple[int, int, int, int]:
        """(dim, n_heads, n_kv_heads, head_dim), checked as the kernels need them:
        heads a multiple of KV heads, one even head size for keys and values."""
        dim = self.integer("embedding_length")
        n_heads = self.integer("attention.head_count")
        n_kv_heads = self.integer("attention.head_count_kv", n_heads)
        head_dim = self.integer("attention.key_length", max(dim // n_heads, 1))
        if self.integer("attention.value_length", head_dim) != head_dim:
            raise GGUFError(f"GGUF metadata: {self.key('attention.value_length')} differs from "
                            f"{self.key('attention.key_length')}={head_dim}")
        if n_heads % n_kv_heads:
            raise GGUFError(f"GGUF metadata: {self.key('attention.head_count')}={n_heads} is not a "
                            f"multiple of {self.key('attention.head_count_kv')}={n_kv_heads}")
        if head_dim % 2:
            raise GGUFError(f"GGUF metadata: head dimension {head_dim} is odd (RoPE rotates pairs)")
        return dim, n_heads, n_kv_heads, head_dim

    def block_count(self, tensor_names: Iterable[str]) -> int:
        """``block_count``, checked against the ``blk.N.`` tensors before anything is
        built per layer (a huge count must not allocate per-layer tables)."""
        n = self.integer("block_count")
        present = {int(m.group(1)) for m in map(_BLOCK.match, tensor_names) if m}
        in_file = max(present) + 1 if present else 0
        if n != in_file or len(present) != in_file:
            raise GGUFError(f"GGUF metadata: {self.key('block_count')} is {n} but the file has "
                            f"tensors for {len(present)} blocks (blk.0 .. blk.{in_file - 1})")
        return n


def as_integer(value: Any, key: str, lo: int = 1, hi: int = MAX_COUNT) -> int:
    """value as an int in [lo, hi], or GGUFError naming key."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise GGUFError(f"GGUF metadata: {key} must be an integer, got {value!r}")
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value) or value != math.floor(value):
            raise GGUFError(f"GGUF metadata: {key} must be a whole number, got {value}")
    n = int(value)
    if not lo <= n <= hi:
        raise GGUFError(f"GGUF metadata: {key} must be in [{lo}, {hi}], got {n}")
    return n


def vocab_size(tensors: Dict[str, Any]) -> int:
    """Rows of token_embd.weight (the vocabulary the model was trained with)."""
    if "token_embd.weight" not in tensors:
        raise GGUFError("GGUF file: tensor token_embd.weight is missing")
    shape = tuple(int(s) for s in tensors["token_embd.weight"].shape)
    if len(shape) != 2 or not 1 <= shape[0] <= MAX_COUNT:
        raise GGUFError(f"GGUF file: token_embd.weight has shape {shape}, expected (vocab, dim)")
    return shape[0]
