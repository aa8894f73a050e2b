"""Record llama.cpp's token ids for every pre-tokenizer name infer implements.

    LLAMA_CPP_LIB_PATH=<llama.cpp build/bin> python scripts/record_pretok_ids.py \
        --out tests/data/llama_cpp_pretok_ids.json

For each name of ``infer.tokenizer.PRE_TOKENIZERS`` that llama.cpp knows: write the
test vocabulary of tests/pretok_cases.py with ``tokenizer.ggml.pre`` set to it, load it
into llama.cpp (vocab_only) and keep ``llama_tokenize``'s ids of every text of
``pretok_cases.CORPUS`` (nothing added, special tokens not parsed) and of
``SPECIAL_TEXT`` with BOS/EOS added as the name's defaults say.  Names llama.cpp
refuses are reported and left out.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)
import pretok_cases as pc  # noqa: E402
from record_family_logits import llama_tokenize  # noqa: E402

from infer.tokenizer import PRE_TOKENIZERS  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the .json file to write")
    parser.add_argument("names", nargs="*", help="pre-tokenizer names (default: all of PRE_TOKENIZERS)")
    args = parser.parse_args()
    names = args.names or sorted(PRE_TOKENIZERS)
    recorded: dict[str, object] = {"corpus": pc.CORPUS, "special_text": pc.SPECIAL_TEXT, "ids": {},
                                   "ids_with_special": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            md = pc.vocabulary_metadata(name)
            recorded["vocabulary_sha256"] = pc.vocabulary_sha256(md)
            path = pc.write(md, os.path.join(tmp, "vocab.gguf"))
            try:
                ids = llama_tokenize(path, pc.CORPUS)
            except RuntimeError as exc:
                print(f"{name}: llama.cpp refuses it ({exc})", flush=True)
                continue
            recorded["ids"][name] = ids  # type: ignore[index]
            recorded["ids_with_special"][name] = llama_tokenize(  # type: ignore[index]
                path, [pc.SPECIAL_TEXT], add_special=True)[0]
            print(f"{name}: {sum(map(len, ids))} ids", flush=True)
    groups: dict[str, list[str]] = {}
    for name, ids in recorded["ids"].items():  # type: ignore[attr-defined]
        key = json.dumps([ids, recorded["ids_with_special"][name]])  # type: ignore[index]
        groups.setdefault(key, []).append(name)
    print(f"{len(recorded['ids'])} names, {len(groups)} different id lists:")  # type: ignore[arg-type]
    for same in groups.values():
        print("  " + ", ".join(same))
    # one line per name, so that a new recording diffs by name
    lines = [f'"{key}": {json.dumps(recorded[key], ensure_ascii=False)}'
             for key in ("vocabulary_sha256", "special_text", "corpus")]
    for key in ("ids", "ids_with_special"):
        rows = [f"{json.dumps(name)}: {json.dumps(ids, separators=(',', ':'))}"
                for name, ids in sorted(recorded[key].items())]  # type: ignore[attr-defined]
        lines.append(f'"{key}": {{\n' + ",\n".join(rows) + "\n}")
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("{\n" + ",\n".join(lines) + "\n}\n")


if __name__ == "__main__":
    main()
