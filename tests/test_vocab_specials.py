"""The tokens that end generation and the fill-in-the-middle tokens of a vocabulary,
against llama.cpp's own: tests/data/llama_cpp_vocab_specials.json holds, for each
case of tests/vocab_cases.py and for the installed SmolLM2 and Gemma 3 files, the ids
llama.cpp reports (llama_vocab_is_eog over the whole vocabulary, llama_vocab_fim_*),
and the kind of every special token after llama.cpp's overrides, and which of them a
reply shows as nothing, recorded by scripts/record_vocab_specials.py."""
import json
import os

import pytest

import _tok_models
import vocab_cases
from infer.tokenizer import FIM_ROLES, TokenType, Vocabulary

DATA = os.path.join(os.path.dirname(__file__), "data", "llama_cpp_vocab_specials.json")
with open(DATA) as _f:
    RECORDED = json.load(_f)


KINDS = {TokenType.CONTROL: "control", TokenType.USER_DEFINED: "user_defined", TokenType.UNKNOWN: "unknown",
         TokenType.UNUSED: "unused"}


def check(vocab: Vocabulary, recorded: dict) -> None:
    assert sorted(vocab.end_of_turn_ids) == recorded["eog"]
    got = {role: -1 if vocab.fim_token_ids[role] is None else vocab.fim_token_ids[role] for role in FIM_ROLES}
    assert got == recorded["fim"]
    # every token's kind after llama.cpp's overrides (normal and byte tokens left out)
    kinds = {str(i): KINDS[int(t)] for i, t in enumerate(vocab.token_types) if int(t) in KINDS}
    assert kinds == recorded["kinds"]
    # the tokens a reply shows as nothing: control and unknown ones
    assert sorted(int(i) for i in recorded["kinds"] if vocab.is_special(int(i))) == recorded["hidden"]


@pytest.mark.parametrize("case", sorted(vocab_cases.CASES))
def test_cases_as_llama_cpp(case, tmp_path):
    path = vocab_cases.write(case, str(tmp_path / f"{case}.gguf"))
    check(Vocabulary.from_metadata(_tok_models.metadata(path)), RECORDED[case])


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_installed_models_as_llama_cpp(name):
    try:
        path = _tok_models.installed_path(name)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    check(Vocabulary.from_metadata(_tok_models.metadata(path)), RECORDED[name])


def test_every_case_recorded():
    assert set(vocab_cases.CASES) | {"smollm2", "gemma3"} == set(RECORDED)
