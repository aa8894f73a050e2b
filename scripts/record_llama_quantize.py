"""Record llama-quantize's per-tensor type choices as test data.

Runs llama.cpp's ``llama_model_quantize`` (libllama.so through ctypes, no importance
matrix, allow_requantize on) for every recipe of ``infer.quant_mixtures.RECIPES`` that
is a llama.cpp file type, on SmolLM2-135M (Q4_1 source) and Gemma 3 270M (Q4_K_M
source), and writes the type of every tensor, in file order, to
tests/data/llama_quantize_types.json, with a digest of each tensor's bytes (sha256 of
the data, 16 hex digits) that tests/test_requantized_models.py checks infer's output
against.  With --compare it also requantizes with
``infer quantize`` and prints how many blocks of the tensors both gave the same type
come out byte-identical.

    python scripts/record_llama_quantize.py /path/to/llama.cpp/build/bin/libllama.so [--compare]
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "tests" / "data" / "llama_quantize_types.json"

from infer import gguf  # noqa: E402
from infer.quant_mixtures import RECIPES  # noqa: E402
from infer.quantize import quantize_file  # noqa: E402

PLAIN = {"q3_k", "q4_k", "q5_k"}   # infer's own plain targets: no llama.cpp file type


class QuantizeParams(ctypes.Structure):
    """llama.h: struct llama_model_quantize_params."""

    _fields_ = [("nthread", ctypes.c_int32), ("ftype", ctypes.c_int), ("output_tensor_type", ctypes.c_int),
                ("token_embedding_type", ctypes.c_int), ("allow_requantize", ctypes.c_bool),
                ("quantize_output_tensor", ctypes.c_bool), ("only_copy", ctypes.c_bool),
                ("pure", ctypes.c_bool), ("keep_split", ctypes.c_bool), ("dry_run", ctypes.c_bool),
                ("imatrix", ctypes.c_void_p), ("kv_overrides", ctypes.c_void_p),
                ("tt_overrides", ctypes.c_void_p), ("prune_layers", ctypes.c_void_p),
                ("max_buf_size", ctypes.c_size_t)]


def tensor_digest(t: gguf.Tensor) -> str:
    return hashlib.sha256(memoryview(np.ascontiguousarray(t.data)).cast("B")).hexdigest()[:16]


def main(lib_path: str, compare: bool) -> None:
    lib = ctypes.CDLL(lib_path)
    lib.llama_model_quantize_default_params.restype = QuantizeParams
    lib.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(QuantizeParams)]
    lib.llama_model_quantize.restype = ctypes.c_uint32
    lib.llama_backend_init()
    record = {}
    for model, path in [("smollm2", gguf.default_model_path()), ("gemma3", gguf.gemma3_model_path())]:
        with gguf.GGUFFile(path) as f:
            names = list(f.tensors)
        entry = {"source": path.name, "tensors": names, "types": {}, "digests": {}}
        for name, recipe in RECIPES.items():
            if name in PLAIN:
                continue
            with tempfile.TemporaryDirectory() as tmp:
                dst = Path(tmp) / "llama.gguf"
                p = lib.llama_model_quantize_default_params()
                p.ftype, p.allow_requantize = recipe.file_type, True
                if lib.llama_model_quantize(str(path).encode(), str(dst).encode(), ctypes.byref(p)):
                    raise RuntimeError(f"llama_model_quantize failed for {name}")
                with gguf.GGUFFile(dst) as g:
                    entry["types"][name] = " ".join(g.tensors[n].dtype.name for n in names)
                    entry["digests"][name] = " ".join(tensor_digest(g.tensors[n]) for n in names)
                    if compare:
                        ours_path = Path(tmp) / "ours.gguf"
                        quantize_file(path, ours_path, name)
                        same = total = 0
                        with gguf.GGUFFile(ours_path) as o:
                            for n in names:
                                a, b = g.tensors[n], o.tensors[n]
                                if a.dtype != b.dtype or not a.dtype.is_quantized:
                                    continue
                                bb = a.dtype.block_bytes
                                eq = np.all(a.data.reshape(-1, bb) == b.data.reshape(-1, bb), axis=1)
                                same, total = same + int(eq.sum()), total + eq.size
                        print(f"{model} {name}: {same}/{total} blocks identical "
                              f"({100 * same / max(1, total):.4f}%)", flush=True)
        record[model] = entry
    OUT.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main(sys.argv[1], "--compare" in sys.argv[2:])
