"""Record llama.cpp's token ids for gpt-oss's tokenizer metadata (pre-tokenizer "gpt-4o",
the harmony control tokens) on a tiny gpt-oss file.

    LLAMA_CPP_LIB_PATH=<llama.cpp build/bin> python scripts/record_gptoss_tokens.py \
        tests/data/llama_cpp_gptoss_tokens.json

Writes `tiny_models.gptoss_harmony_file`, loads its vocabulary into llama.cpp (libllama
through llama-cpp-python's ctypes bindings) and tokenizes `tiny_models.HARMONY_TEXTS`
with ``parse_special`` on (control-token texts become their ids, as a rendered chat
prompt is tokenized) and ``add_special`` off.  The JSON holds the file's sha256 and
[text, ids] per text; tests/test_gptoss.py compares infer's tokenizer.
"""
from __future__ import annotations

import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import tiny_models as tm  # noqa: E402
from record_family_logits import llama_tokenize, write_token_record  # noqa: E402


def main() -> None:
    out = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        path = tm.gptoss_harmony_file(os.path.join(tmp, "gpt-oss-harmony.gguf"))
        texts = list(tm.HARMONY_TEXTS)
        cases = [[text, ids] for text, ids in zip(texts, llama_tokenize(path, texts, parse_special=True))]
        write_token_record(out, tm.sha256(path), cases)
    print(f"{len(cases)} texts -> {out}")


if __name__ == "__main__":
    main()
