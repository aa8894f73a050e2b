"""Record llama.cpp's embeddings and rerank scores on the tiny encoder files of
tests/tiny_bert.py into tests/data/llama_cpp_bert.npz.

    LLAMA_CPP_LIB_PATH=<llama.cpp build/bin> python scripts/record_bert_embeddings.py \
        [--out tests/data/llama_cpp_bert.npz]

For each file (``tiny_bert.BERT`` in F16 matrices, ``bert`` / ``nomic-bert`` again in
Q8_0 and F32, and the F16 ``bert`` / ``nomic-bert`` quantized by llama.cpp's own
``llama_model_quantize`` to Q4_K_M / Q5_K_M, whose tensor types are kept as
``NAME/tensor_types``): load it into llama.cpp (libllama through llama-cpp-python's ctypes
bindings), tokenize each of ``tiny_bert.TEXTS`` with llama.cpp's own tokenizer ([CLS] ...
[SEP]), and decode each text alone in a context with ``embeddings`` on, the file's
pooling (``LLAMA_POOLING_TYPE_UNSPECIFIED``), n_ctx = n_batch = n_ubatch = the trained
context, one thread, flash attention off; ``llama_get_embeddings_seq`` gives the pooled
vector (not normalised).  A context with pooling NONE gives every token's final state
of the first text (``llama_get_embeddings_ith``).  For the rank file, each
(RANK_QUERY, document) pair is formatted as llama-server's format_prompt_rerank does
([BOS] query [EOS if add_eos] [SEP if add_sep] document [EOS if add_eos]) and its
score is the first value of the pooled output.

Keys per file NAME: ``NAME/sha256``, ``NAME/pooled`` (float32, [texts, n]),
``NAME/tokens_<i>`` (llama.cpp's ids of text i), ``NAME/hidden`` (float32, [tokens of
text 0, n_embd]); the rank file also ``NAME/rank_tokens_<i>`` and ``NAME/rank_scores``.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)
import tiny_bert as tb  # noqa: E402
from record_family_logits import _llama, llama_tokenize, sequence_batch  # noqa: E402

#: the files recorded: name -> (tiny_bert entry, matrix type)
FILES = {name: (name, "f16") for name in tb.BERT}
FILES.update({"bert@q8_0": ("bert", "q8_0"), "bert@f32": ("bert", "f32"),
              "nomic-bert@q8_0": ("nomic-bert", "q8_0")})
#: files llama-quantize makes from the F16 ones (what users download): name -> (entry, llama.cpp file type)
QUANTIZED = {"bert@llama-q4_k_m": ("bert", "q4_k_m"), "nomic-bert@llama-q5_k_m": ("nomic-bert", "q5_k_m")}


def write(name: str, path: str) -> str:
    if name in QUANTIZED:
        entry, ftype = QUANTIZED[name]
        src = tb.write(entry, path + ".f16.gguf")
        L = _llama()
        params = L.llama_model_quantize_default_params()
        params.ftype = getattr(L, f"LLAMA_FTYPE_MOSTLY_{ftype.upper()}")
        if L.llama_model_quantize(src.encode(), path.encode(), ctypes.byref(params)) != 0:
            raise RuntimeError(f"llama_model_quantize failed on {src}")
        return path
    entry, kind = FILES[name]
    return tb.write(entry, path, matrix_type=kind)


def _embeddings(path: str, sequences, pooling: int, n_ctx: int, per_token: bool = False):
    L = _llama()
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}")
    cparams = L.llama_context_default_params()
    cparams.n_ctx = cparams.n_batch = cparams.n_ubatch = n_ctx
    cparams.n_seq_max = 1
    cparams.n_threads = cparams.n_threads_batch = 1
    cparams.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
    cparams.embeddings = True
    cparams.pooling_type = pooling
    ctx = L.llama_init_from_model(model, cparams)
    if not ctx:
        raise RuntimeError("llama.cpp could not create a context")
    n_embd = L.llama_model_n_embd(model)
    n_out = L.llama_model_n_cls_out(model) if L.llama_pooling_type(ctx) == L.LLAMA_POOLING_TYPE_RANK else n_embd
    out = []
    try:
        for tokens in sequences:
            n = len(tokens)
            batch = sequence_batch(L, tokens)
            try:
                L.llama_memory_clear(L.llama_get_memory(ctx), True)
                if L.llama_decode(ctx, batch) != 0:
                    raise RuntimeError("llama_decode failed")
                if per_token:
                    rows = [np.ctypeslib.as_array(ctypes.cast(L.llama_get_embeddings_ith(ctx, i),
                                                              ctypes.POINTER(ctypes.c_float)), shape=(n_embd,))
                            for i in range(n)]
                    out.append(np.array(rows, np.float32))
                else:
                    vec = L.llama_get_embeddings_seq(ctx, 0)
                    out.append(np.ctypeslib.as_array(ctypes.cast(vec, ctypes.POINTER(ctypes.c_float)),
                                                     shape=(n_out,)).copy())
            finally:
                L.llama_batch_free(batch)
    finally:
        L.llama_free(ctx)
        L.llama_model_free(model)
    return out


def rank_tokens(path: str, query: str, documents) -> list[list[int]]:
    """llama-server's format_prompt_rerank, with llama.cpp's tokenizer and vocab flags."""
    L = _llama()
    params = L.llama_model_default_params()
    params.vocab_only = True
    model = L.llama_model_load_from_file(path.encode(), params)
    vocab = L.llama_model_get_vocab(model)
    add_bos, add_eos, add_sep = (bool(f(vocab)) for f in (L.llama_vocab_get_add_bos, L.llama_vocab_get_add_eos,
                                                           L.llama_vocab_get_add_sep))
    bos, eos, sep = L.llama_vocab_bos(vocab), L.llama_vocab_eos(vocab), L.llama_vocab_sep(vocab)
    L.llama_model_free(model)
    if eos < 0:
        eos = sep
    q = llama_tokenize(path, [query])[0]
    out = []
    for doc in llama_tokenize(path, list(documents)):
        ids = ([bos] if add_bos else []) + q + ([eos] if add_eos else []) + ([sep] if add_sep else []) + doc
        out.append(ids + ([eos] if add_eos else []))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "data", "llama_cpp_bert.npz"))
    args = ap.parse_args()
    L = _llama()
    arrays = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (entry, _) in {**FILES, **QUANTIZED}.items():
            path = write(name, os.path.join(tmp, f"{name}.gguf"))
            t = tb.BERT[entry]
            arrays[f"{name}/sha256"] = np.array(tb.sha256(path))
            if name in QUANTIZED:  # the type llama-quantize gave each tensor
                from gguf import GGUFReader

                arrays[f"{name}/tensor_types"] = np.array([f"{x.name}={x.tensor_type.name}"
                                                           for x in GGUFReader(path).tensors])
            tokens = llama_tokenize(path, list(tb.TEXTS), add_special=True)
            for i, ids in enumerate(tokens):
                arrays[f"{name}/tokens_{i}"] = np.array(ids, np.int32)
            if t.pooling != 4:
                arrays[f"{name}/pooled"] = np.array(_embeddings(path, tokens, L.LLAMA_POOLING_TYPE_UNSPECIFIED,
                                                                t.n_ctx_train))
            else:
                pairs = rank_tokens(path, tb.RANK_QUERY, tb.RANK_DOCUMENTS)
                for i, ids in enumerate(pairs):
                    arrays[f"{name}/rank_tokens_{i}"] = np.array(ids, np.int32)
                scores = _embeddings(path, pairs, L.LLAMA_POOLING_TYPE_UNSPECIFIED, t.n_ctx_train)
                arrays[f"{name}/rank_scores"] = np.array([s[0] for s in scores], np.float32)
            arrays[f"{name}/hidden"] = _embeddings(path, tokens[:1], L.LLAMA_POOLING_TYPE_NONE, t.n_ctx_train,
                                                   per_token=True)[0]
            print(name, arrays[f"{name}/sha256"], flush=True)
    np.savez_compressed(args.out, **arrays)
    print("wrote", args.out)
    record_tokens(os.path.join(os.path.dirname(args.out), "llama_cpp_bert_tokens.json"))


def detokenize(path: str, sequences, remove_special: bool) -> list[str]:
    """llama.cpp's llama_detokenize of each id list (special tokens' texts shown unless removed)."""
    L = _llama()
    params = L.llama_model_default_params()
    params.vocab_only = True
    model = L.llama_model_load_from_file(path.encode(), params)
    vocab = L.llama_model_get_vocab(model)
    out = []
    for ids in sequences:
        arr = (L.llama_token * max(len(ids), 1))(*ids)
        buf = ctypes.create_string_buffer(4096)
        n = L.llama_detokenize(vocab, arr, len(ids), buf, len(buf), remove_special, not remove_special)
        out.append(buf.raw[:n].decode("utf-8", errors="replace"))
    L.llama_model_free(model)
    return out


def record_tokens(out: str) -> None:
    """llama.cpp's ids of tiny_bert.TOKENIZE_TEXTS and fuzz_texts() ([CLS] ... [SEP]; also with special
    texts parsed) and its detokenized text of those ids, kept and with specials removed."""
    import json

    with tempfile.TemporaryDirectory() as tmp:
        path = tb.write("bert", os.path.join(tmp, "bert.gguf"))
        texts = list(tb.TOKENIZE_TEXTS) + tb.fuzz_texts()
        plain = llama_tokenize(path, texts, add_special=True)
        parsed = llama_tokenize(path, texts, add_special=True, parse_special=True)
        kept = detokenize(path, plain, False)
        removed = detokenize(path, plain, True)
        cases = [{"text": t, "ids": a, "ids_parse_special": b, "detokenized": k, "detokenized_no_special": r}
                 for t, a, b, k, r in zip(texts, plain, parsed, kept, removed)]
        with open(out, "w", encoding="utf-8") as f:
            f.write(f'{{"sha256": {json.dumps(tb.sha256(path))}, "cases": [\n')
            f.write(",\n".join(json.dumps(case, ensure_ascii=False) for case in cases))
            f.write("\n]}\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
