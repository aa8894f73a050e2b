"""Record llama.cpp's end-of-generation and fill-in-the-middle token ids into
tests/data/llama_cpp_vocab_specials.json, for tests/test_vocab_specials.py.

    LLAMA_CPP_LIB_PATH=/path/to/llama.cpp/build/bin python scripts/record_vocab_specials.py

For every case of tests/vocab_cases.py (a vocab-only GGUF written on the fly) and for
the installed SmolLM2 and Gemma 3 files: the ids llama.cpp's vocabulary reports as
end of generation (llama_vocab_is_eog over the whole vocabulary), its FIM prefix,
suffix, middle, pad, repo and file-separator ids (-1: none), the kind of every token
that is not a normal or byte one (its attributes after llama.cpp's overrides: control,
user_defined, unknown, unused), and which of those generated text shows as nothing
(llama_token_to_piece without special, as llama-server renders a reply).
"""
import ctypes
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, os.path.join(HERE, ".."))

import llama_cpp  # noqa: E402

import vocab_cases  # noqa: E402
from infer.gguf import default_model_path, gemma3_model_path  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "data", "llama_cpp_vocab_specials.json")
ROLES = ("pre", "suf", "mid", "pad", "rep", "sep")


def kind_of(attr: int) -> str:
    """A token's attributes as one word, the strongest first."""
    for flag, kind in ((llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED, "user_defined"),
                       (llama_cpp.LLAMA_TOKEN_ATTR_CONTROL, "control"), (llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN, "unknown"),
                       (llama_cpp.LLAMA_TOKEN_ATTR_UNUSED, "unused")):
        if attr & flag:
            return kind
    return "normal"  # normal and byte tokens


def specials(path: str) -> dict:
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(path.encode(), params)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}")
    try:
        vocab = llama_cpp.llama_model_get_vocab(model)
        n = llama_cpp.llama_vocab_n_tokens(vocab)
        eog = [i for i in range(n) if llama_cpp.llama_vocab_is_eog(vocab, i)]
        fim = {role: int(getattr(llama_cpp, f"llama_vocab_fim_{role}")(vocab)) for role in ROLES}
        kinds, hidden = {}, []
        for i in range(n):
            kind = kind_of(int(llama_cpp.llama_vocab_get_attr(vocab, i)))
            if kind != "normal":
                kinds[str(i)] = kind
                buf = ctypes.create_string_buffer(256)
                if llama_cpp.llama_token_to_piece(vocab, i, buf, len(buf), 0, False) == 0:
                    hidden.append(i)  # what generated text shows of it: nothing
        return {"eog": eog, "fim": fim, "kinds": kinds, "hidden": hidden}
    finally:
        llama_cpp.llama_model_free(model)


def main() -> None:
    llama_cpp.llama_backend_init()
    out = {}
    with tempfile.TemporaryDirectory() as folder:
        for case, path in vocab_cases.write_all(folder).items():
            out[case] = specials(path)
    for name, find in (("smollm2", default_model_path), ("gemma3", gemma3_model_path)):
        assert name not in out, f"case {name!r} would be overwritten"
        try:
            out[name] = specials(str(find()))
        except FileNotFoundError:
            print(f"{name}: not installed, skipped", file=sys.stderr)
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {OUT}: {len(out)} vocabularies")


if __name__ == "__main__":
    main()
