"""Record llama.cpp's token ids for Gemma 4's tokenizer (tokenizer.ggml.model "gemma4").

    LLAMA_CPP_LIB_PATH=<llama.cpp build/bin> python scripts/record_gemma4_tokens.py \
        tests/data/llama_cpp_gemma4_tokens.json

Writes the tiny E2B-shaped file of tests/tiny_models.py with its Gemma 4 vocabulary
(`tiny_models.gemma4_vocabulary`), loads its vocabulary into llama.cpp (libllama
through llama-cpp-python's ctypes bindings) and tokenizes `TEXTS` with
``add_special`` on (BOS) and ``parse_special`` off.  The JSON holds the file's
sha256 and [text, ids] per text; tests/test_gemma4.py compares infer's tokenizer.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import tiny_models as tm  # noqa: E402

TEXTS = [
    "Hello world", "The quick brown fox jumps over the lazy dog.", "  two  spaces ", " leading",
    "new\n\nlines\n\n\nand\nmore\n", "\n", "émoji 🦊 ü", "Numbers like 12, 345 and 6789!",
    "tabs\tand\r\ncarriage", "why? how?", "ÿ\u2581", "",
]


def main() -> None:
    from llama_cpp import llama_cpp as L

    out = sys.argv[1]
    L.llama_backend_init()
    with tempfile.TemporaryDirectory() as tmp:
        path = tm.gemma4_vocab_file(os.path.join(tmp, "gemma4-vocab.gguf"))
        params = L.llama_model_default_params()
        params.vocab_only = True
        model = L.llama_model_load_from_file(path.encode(), params)
        if not model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        vocab = L.llama_model_get_vocab(model)
        cases = []
        for text in TEXTS:
            raw = text.encode()
            buf = (L.llama_token * (len(raw) + 8))()
            n = L.llama_tokenize(vocab, raw, len(raw), buf, len(buf), True, False)
            if n < 0:
                raise RuntimeError(f"llama_tokenize failed on {text!r}")
            cases.append([text, [int(buf[i]) for i in range(n)]])
        L.llama_model_free(model)
        record = {"sha256": tm.sha256(path), "cases": cases}
    with open(out, "w", encoding="utf-8") as f:   # one text per line
        f.write(f'{{"sha256": {json.dumps(record["sha256"])}, "cases": [\n')
        f.write(",\n".join(json.dumps(case, ensure_ascii=False) for case in cases))
        f.write("\n]}\n")
    print(f"{len(cases)} texts -> {out}")


if __name__ == "__main__":
    main()
