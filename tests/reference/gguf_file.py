"""A GGUF file as the float64 references read it, through the `gguf` package only:
its metadata (the fields `contents()` decodes) and every tensor dequantized to
float64 in numpy's axis order."""
from __future__ import annotations

from typing import Any, Dict, Tuple

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def read(path: str) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    """(metadata, weights) of the file at path."""
    reader = GGUFReader(path)
    meta = {}
    for key, f in reader.fields.items():
        try:
            meta[key] = f.contents()
        except Exception:  # noqa: BLE001  (a field type contents() does not decode)
            pass
    weights = {}
    for t in reader.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float64)
        weights[t.name] = a.reshape([int(s) for s in reversed(t.shape)])
    return meta, weights
