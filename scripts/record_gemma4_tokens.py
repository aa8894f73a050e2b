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

import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import tiny_models as tm  # noqa: E402
from record_family_logits import llama_tokenize, write_token_record  # noqa: E402

TEXTS = [
    "Hello world", "The quick brown fox jumps over the lazy dog.", "  two  spaces ", " leading",
    "new\n\nlines\n\n\nand\nmore\n", "\n", "émoji 🦊 ü", "Numbers like 12, 345 and 6789!",
    "tabs\tand\r\ncarriage", "why? how?", "ÿ\u2581", "",
]


def main() -> None:
    out = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        path = tm.gemma4_vocab_file(os.path.join(tmp, "gemma4-vocab.gguf"))
        cases = [[text, ids] for text, ids in zip(TEXTS, llama_tokenize(path, TEXTS, add_special=True))]
        write_token_record(out, tm.sha256(path), cases)
    print(f"{len(cases)} texts -> {out}")


if __name__ == "__main__":
    main()
