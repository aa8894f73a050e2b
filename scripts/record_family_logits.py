"""Record llama.cpp's teacher-forced logits on the tiny family files of tests/tiny_models.py.

    LLAMA_CPP_LIB_PATH=<llama.cpp build/bin> python scripts/record_family_logits.py \
        --out tests/data/<file>.npz NAME [NAME ...]

For each NAME of ``tiny_models.ALL``: write the file with ``tiny_models.write``, load it
into llama.cpp (libllama through llama-cpp-python's ctypes bindings), decode the prompt
``tiny_models.prompt(NAME)`` in one batch with the logits of every position requested,
and keep ``tiny_models.recorded_positions`` of them as float16.  The context is the one
tests/data/README.md describes: ``n_ctx`` = ``ALL[NAME].n_ctx``, one thread, flash
attention off, F16 K/V cache, ``swa_full``.  Keys per name: ``<name>/logits``,
``<name>/positions`` and ``<name>/sha256`` (of the file llama.cpp read).  An existing
``--out`` file keeps the names not recorded again.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import tiny_models as tm  # noqa: E402


_QUIET = None


def _quiet_callback():  # llama.cpp's load log would bury the few lines this script prints
    from llama_cpp import llama_cpp as L

    return L.llama_log_callback(lambda level, text, user_data: None)


def _llama():
    """llama-cpp-python's bindings, with llama.cpp's log silenced and its backend up."""
    from llama_cpp import llama_cpp as L

    global _QUIET
    if _QUIET is None:
        _QUIET = _quiet_callback()
    L.llama_log_set(_QUIET, None)
    L.llama_backend_init()
    return L


def sequence_batch(L, tokens):
    """A llama_batch of ``tokens`` at positions 0... of sequence 0, every output requested
    (free it with llama_batch_free)."""
    n = len(tokens)
    batch = L.llama_batch_init(n, 0, 1)
    for i, t in enumerate(tokens):
        batch.token[i] = int(t)
        batch.pos[i] = i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = 1
    batch.n_tokens = n
    return batch


def teacher_logits(path: str, tokens: np.ndarray, n_ctx: int) -> np.ndarray:
    """llama.cpp's float32 logits at every position of ``tokens`` (one decode call)."""
    L = _llama()
    mparams = L.llama_model_default_params()
    model = L.llama_model_load_from_file(path.encode(), mparams)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}")
    n = len(tokens)
    cparams = L.llama_context_default_params()
    cparams.n_ctx = n_ctx
    cparams.n_batch = n
    cparams.n_ubatch = 512
    cparams.n_seq_max = 1
    cparams.n_threads = 1
    cparams.n_threads_batch = 1
    cparams.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
    cparams.swa_full = True
    ctx = L.llama_init_from_model(model, cparams)
    if not ctx:
        raise RuntimeError("llama.cpp could not create a context")
    batch = sequence_batch(L, tokens)
    try:
        if L.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
        out = np.empty((n, n_vocab), dtype=np.float32)
        for i in range(n):
            row = L.llama_get_logits_ith(ctx, i)
            out[i] = np.ctypeslib.as_array(ctypes.cast(row, ctypes.POINTER(ctypes.c_float)), shape=(n_vocab,))
        return out
    finally:
        L.llama_batch_free(batch)
        L.llama_free(ctx)
        L.llama_model_free(model)


def llama_tokenize(path: str, texts, add_special: bool = False, parse_special: bool = False) -> list[list[int]]:
    """llama.cpp's token ids of each text with the file's vocabulary (``llama_tokenize``,
    special tokens parsed only with ``parse_special``; BOS/EOS added as the vocabulary
    says if ``add_special``)."""
    L = _llama()
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
            n = L.llama_tokenize(vocab, raw, len(raw), ids, len(ids), add_special, parse_special)
            if n < 0:
                raise RuntimeError(f"llama_tokenize failed on {text!r}")
            out.append([int(ids[i]) for i in range(n)])
        return out
    finally:
        L.llama_model_free(model)


def write_token_record(out: str, sha256: str, cases) -> None:
    """A token-id recording as JSON: the file's sha256 and its [text, ids] cases, one a line."""
    import json

    with open(out, "w", encoding="utf-8") as f:
        f.write(f'{{"sha256": {json.dumps(sha256)}, "cases": [\n')
        f.write(",\n".join(json.dumps(case, ensure_ascii=False) for case in cases))
        f.write("\n]}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the .npz file to write (names already in it are kept)")
    parser.add_argument("names", nargs="+", help=f"entries of tiny_models.ALL: {', '.join(tm.ALL)}")
    args = parser.parse_args()
    unknown = [n for n in args.names if n not in tm.ALL]
    if unknown:
        parser.error(f"not in tiny_models.ALL: {', '.join(unknown)}")
    arrays = dict(np.load(args.out)) if os.path.exists(args.out) else {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.names:
            path = tm.write(name, os.path.join(tmp, f"{name}.gguf"))
            tokens = tm.prompt(name)
            logits = teacher_logits(path, tokens, tm.ALL[name].n_ctx)
            positions = tm.recorded_positions(len(tokens))
            arrays[f"{name}/logits"] = logits[positions].astype(np.float16)
            arrays[f"{name}/positions"] = positions
            arrays[f"{name}/sha256"] = np.array(tm.sha256(path))
            print(f"{name}: {len(tokens)} positions, {len(positions)} kept", flush=True)
    np.savez_compressed(args.out, **arrays)


if __name__ == "__main__":
    main()
