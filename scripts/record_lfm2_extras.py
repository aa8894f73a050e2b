"""Record what llama.cpp does with the tiny ``lfm2`` file of tests/tiny_models.py besides its
logits, into tests/data/llama_cpp_lfm2.npz: how it tokenizes a few texts
(``tokenizer.ggml.pre`` = "lfm2") and which type llama-quantize gives each tensor.

    LLAMA_CPP_LIB_PATH=<llama.cpp build/bin> python scripts/record_lfm2_extras.py tests/data/llama_cpp_lfm2.npz

Keys: ``tokenize/texts`` (the texts) and ``tokenize/ids<k>`` (llama.cpp's ids of text k,
``llama_tokenize`` with add_special and parse_special off); ``quantize/names`` (the
tensors) and ``quantize/<recipe>`` (the type name of each, from ``llama_model_quantize``
with the recipe's llama.cpp file type, no imatrix).  Other keys of the file are kept.
"""
from __future__ import annotations

import ctypes
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import tiny_models as tm  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from record_family_logits import llama_tokenize  # noqa: E402
from record_llama_quantize import QuantizeParams  # noqa: E402

from infer import gguf  # noqa: E402
from infer.quant_mixtures import RECIPES  # noqa: E402

#: the recipes recorded (llama.cpp file types)
QUANTIZE = ["q8_0", "q4_0", "q4_k_m", "q4_k_s", "q5_k_m", "q6_k", "q3_k_m", "q2_k", "iq4_xs"]

TEXTS = [
    "Hello world!! 12345 don't\n\n  why?",
    "The quick brown fox's 6789 jumps;\r\n\tover   the lazy dog...",
    "Numbers like 1234567 and 3.14159, WE'LL SEE, they're here:\n\n\n  a",
    "  leading spaces and trailing   ",
]


def llama_quantize_types(src: str, tmp: str) -> dict[str, list[str]]:
    lib = ctypes.CDLL(os.path.join(os.environ["LLAMA_CPP_LIB_PATH"], "libllama.so"))
    lib.llama_model_quantize_default_params.restype = QuantizeParams
    lib.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(QuantizeParams)]
    lib.llama_model_quantize.restype = ctypes.c_uint32
    lib.llama_backend_init()
    out = {}
    with gguf.GGUFFile(src) as f:
        names = list(f.tensors)
    out["names"] = names
    for recipe in QUANTIZE:
        dst = os.path.join(tmp, f"{recipe}.gguf")
        p = lib.llama_model_quantize_default_params()
        p.ftype, p.allow_requantize = RECIPES[recipe].file_type, True
        if lib.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p)):
            raise RuntimeError(f"llama_model_quantize failed for {recipe}")
        with gguf.GGUFFile(dst) as g:
            out[recipe] = [g.tensors[n].dtype.name for n in names]
    return out


def main() -> None:
    out = sys.argv[1]
    arrays = dict(np.load(out)) if os.path.exists(out) else {}
    with tempfile.TemporaryDirectory() as tmp:
        path = tm.write("lfm2", os.path.join(tmp, "lfm2.gguf"))
        arrays["tokenize/texts"] = np.array(TEXTS)
        for k, text in enumerate(TEXTS):
            arrays[f"tokenize/ids{k}"] = np.array(llama_tokenize(path, [text])[0], dtype=np.int32)
            print(k, arrays[f"tokenize/ids{k}"].tolist())
        for key, values in llama_quantize_types(path, tmp).items():
            arrays[f"quantize/{key}"] = np.array(values)
    np.savez_compressed(out, **arrays)


if __name__ == "__main__":
    main()
