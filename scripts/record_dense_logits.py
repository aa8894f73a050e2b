"""Record llama.cpp's logits on the dense family files of tests/tiny_models.py (``DENSE``).

    LLAMA_CPP_LIB_PATH=<llama.cpp build/bin> python scripts/record_dense_logits.py \
        --out tests/data/llama_cpp_dense.npz NAME [NAME ...]

record_family_logits.py with ``tiny_models.DENSE`` as its table: the same context
and keys (tests/data/README.md).  The dense files have a table of their own so
that tests/test_families.py, which reads llama_cpp_families.npz for every entry
of ``TINY``, is left as it is.  Besides the logits, each file's vocabulary
(with its ``tokenizer.ggml.pre``) tokenizes ``tiny_models.TOKENIZE_TEXTS`` in
llama.cpp (``llama_tokenize``, no specials added or parsed): ``<name>/tokens/<i>``.
"""
from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "tests"))
import tiny_models as tm  # noqa: E402

tm.TINY = dict(tm.DENSE)   # the recorder looks names up in TINY
import record_family_logits  # noqa: E402


def llama_tokenize(path: str, texts: tuple[str, ...]) -> list[np.ndarray]:
    """llama.cpp's token ids of each text with the file's vocabulary."""
    import ctypes

    from llama_cpp import llama_cpp as L

    L.llama_backend_init()
    params = L.llama_model_default_params()
    params.vocab_only = True
    model = L.llama_model_load_from_file(path.encode(), params)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}")
    try:
        vocab = L.llama_model_get_vocab(model)
        out = []
        for text in texts:
            raw = text.encode()
            ids = (L.llama_token * (len(raw) + 8))()
            n = L.llama_tokenize(vocab, raw, len(raw), ids, len(ids), False, False)
            if n < 0:
                raise RuntimeError(f"llama_tokenize failed on {text!r}")
            out.append(np.ctypeslib.as_array(ctypes.cast(ids, ctypes.POINTER(ctypes.c_int32)), shape=(n,)).copy())
        return out
    finally:
        L.llama_model_free(model)


def main() -> None:
    record_family_logits.main()
    out = sys.argv[sys.argv.index("--out") + 1]
    names = [a for a in sys.argv[1:] if a in tm.DENSE]
    arrays = dict(np.load(out))
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            path = tm.write(name, os.path.join(tmp, f"{name}.gguf"))
            for i, ids in enumerate(llama_tokenize(path, tm.TOKENIZE_TEXTS)):
                arrays[f"{name}/tokens/{i}"] = ids.astype(np.int32)
    np.savez_compressed(out, **arrays)


if __name__ == "__main__":
    main()
