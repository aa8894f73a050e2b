"""Record ggml's own quantizer output as test data (tests/data/ggml_quantized.npz).

Calls ``ggml_quantize_chunk`` of a llama.cpp build's libggml-base.so through ctypes
with no importance matrix (what llama-quantize does without --imatrix), on the inputs
of tests/reference/ggml_inputs.py.

    python scripts/record_ggml_quants.py /path/to/llama.cpp/build/bin/libggml-base.so
"""
from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "ggml_quantized.npz"
GGML_TYPES = {"q5_1": 7, "q2_k": 10, "q3_k": 11, "q5_k": 13, "iq4_nl": 20, "iq4_xs": 23}
BLOCK = {"q5_1": (32, 24), "q2_k": (256, 84), "q3_k": (256, 110), "q5_k": (256, 176),
         "iq4_nl": (32, 18), "iq4_xs": (256, 136)}
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from reference.ggml_inputs import ggml_test_inputs  # noqa: E402


def main(lib_path: str) -> None:
    lib = ctypes.CDLL(lib_path)
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lib.ggml_quantize_init.argtypes = [ctypes.c_int]
    arrays = {}
    for name, x in ggml_test_inputs().items():
        rows, n = x.shape
        for t, tid in GGML_TYPES.items():
            bs, bb = BLOCK[t]
            out = np.zeros(rows * n // bs * bb, np.uint8)
            lib.ggml_quantize_init(tid)
            lib.ggml_quantize_chunk(tid, x.ctypes.data, out.ctypes.data, 0, rows, n, None)
            arrays[f"{name}/{t}"] = out
    np.savez_compressed(OUT, **arrays)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main(sys.argv[1])
