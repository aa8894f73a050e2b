"""Record llama.cpp's tokenization of a few texts with the tiny ``lfm2`` file of
tests/tiny_models.py (``tokenizer.ggml.pre`` = "lfm2"), into tests/data/llama_cpp_lfm2.npz.

    LLAMA_CPP_LIB_PATH=<llama.cpp build/bin> python scripts/record_lfm2_tokens.py tests/data/llama_cpp_lfm2.npz

Keys: ``tokenize/texts`` (the texts) and ``tokenize/ids<k>`` (llama.cpp's ids of text k,
``llama_tokenize`` with add_special and parse_special off).  Other keys of the file are kept.
"""
from __future__ import annotations

import ctypes
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import tiny_models as tm  # noqa: E402

TEXTS = [
    "Hello world!! 12345 don't\n\n  why?",
    "The quick brown fox's 6789 jumps;\r\n\tover   the lazy dog...",
    "Numbers like 1234567 and 3.14159, WE'LL SEE, they're here:\n\n\n  a",
    "  leading spaces and trailing   ",
]


_QUIET: list[object] = []   # the log callback must outlive every call into llama.cpp


def llama_tokens(path: str, text: str) -> list[int]:
    from llama_cpp import llama_cpp as L

    if not _QUIET:
        _QUIET.append(L.llama_log_callback(lambda level, msg, user: None))
    L.llama_log_set(_QUIET[0], None)
    L.llama_backend_init()
    params = L.llama_model_default_params()
    params.vocab_only = True
    model = L.llama_model_load_from_file(path.encode(), params)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}")
    try:
        vocab = L.llama_model_get_vocab(model)
        raw = text.encode()
        out = (ctypes.c_int32 * (len(raw) + 8))()
        n = L.llama_tokenize(vocab, raw, len(raw), out, len(out), False, False)
        if n < 0:
            raise RuntimeError("llama_tokenize failed")
        return list(out[:n])
    finally:
        L.llama_model_free(model)


def main() -> None:
    out = sys.argv[1]
    arrays = dict(np.load(out)) if os.path.exists(out) else {}
    with tempfile.TemporaryDirectory() as tmp:
        path = tm.write("lfm2", os.path.join(tmp, "lfm2.gguf"))
        arrays["tokenize/texts"] = np.array(TEXTS)
        for k, text in enumerate(TEXTS):
            arrays[f"tokenize/ids{k}"] = np.array(llama_tokens(path, text), dtype=np.int32)
            print(k, arrays[f"tokenize/ids{k}"].tolist())
    np.savez_compressed(out, **arrays)


if __name__ == "__main__":
    main()
