"""Models and their metadata for the tokenizer tests and benchmarks.

``metadata(path)`` is ``infer.gguf.GGUFFile(path).metadata`` (str, int, bool,
list[str] for string arrays, numpy arrays for numeric arrays), read once per
process.  The paths are None when a model's packages are not installed, so the
tests that need them skip.
"""
from __future__ import annotations

import functools
from typing import Optional

from infer.gguf import GGUFFile, default_model_path, gemma3_model_path


def smollm2_path() -> Optional[str]:
    try:
        return str(default_model_path())
    except FileNotFoundError:
        return None


def gemma3_path() -> Optional[str]:
    """Gemma 3 270M, assembled once from its PyPI chunk packages into the user's
    cache directory (outside the repository)."""
    try:
        return str(gemma3_model_path())
    except FileNotFoundError:
        return None


@functools.lru_cache(maxsize=4)
def metadata(path: str) -> dict:
    with GGUFFile(path) as f:
        return dict(f.metadata)
