"""Fill-in-the-middle prompts: the code between a prefix and a suffix, as code models
(Qwen2.5-Coder, StarCoder2, Granite, CodeLlama, DeepSeek-Coder, ...) were trained to
write it, in llama-server's ``/infill`` layout (its format_prompt_infill) so that
editor plugins written for llama-server (llama.vscode, llama.vim) get the same
prompt from infer:

    [FIM_REP]myproject\\n                 (when the vocabulary has a repo token)
    [FIM_SEP]name\\n extra text ...        (each extra chunk: another file's text)
    [FIM_SEP]filename\\n
    [FIM_PRE]prefix prompt [FIM_SUF]suffix [FIM_MID]

The prefix keeps its last tokens and the suffix its first ones, so that both fit a
batch (3/4 of it for the prefix); the extra chunks fill what is left of the context
before generation, their latest tokens kept.  Without a file-separator token each
chunk is introduced by a "--- snippet ---" line instead.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

#: llama-server's defaults for the two sizes the layout is cut to
N_BATCH = 2048
#: the separator of extra chunks when the vocabulary has no file-separator token
SNIPPET = "\n\n--- snippet ---\n\n"


class InfillUnsupportedError(ValueError):
    """The model's vocabulary has no fill-in-the-middle prefix, suffix or middle token."""


def fim_ids(tokenizer: Any) -> dict[str, Optional[int]]:
    """The vocabulary's FIM tokens by role (``pre``, ``suf``, ``mid``, ``pad``, ``rep``,
    ``sep``), or an error naming the ones infill needs and it lacks."""
    ids: dict[str, Optional[int]] = dict(getattr(tokenizer.vocab, "fim_token_ids", None) or {})
    missing = [name for role, name in (("pre", "prefix"), ("suf", "suffix"), ("mid", "middle"))
               if ids.get(role) is None]
    if missing:
        raise InfillUnsupportedError(f"Infill is not supported by this model: its vocabulary has no fill-in-the-middle "
                                     f"{', '.join(missing)} token")
    return ids


def infill_prompt(tokenizer: Any, prefix: Sequence[int], suffix: Sequence[int], extra: Sequence[tuple[str, str]],
                  prompt: Sequence[int], *, n_ctx: int, n_predict: int = -1, n_batch: int = N_BATCH,
                  encode: Optional[Callable[[str], list[int]]] = None, suffix_first: bool = False) -> list[int]:
    """The token ids of a fill-in-the-middle prompt.

    ``prefix``, ``suffix`` and ``prompt`` are token ids (``prompt`` goes after the
    prefix, where generation continues); ``extra`` are (file name, text) pairs of
    other files; ``n_ctx``, ``n_predict`` (the server's, -1 for none) and ``n_batch``
    bound how much of each is kept; ``suffix_first`` puts the suffix before the
    prefix (llama-server's ``--spm-infill``).  ``encode(text)`` tokenizes without
    BOS and without reading special tokens (the default)."""
    ids = fim_ids(tokenizer)
    pre, suf, mid = (int(ids[role] or 0) for role in ("pre", "suf", "mid"))  # fim_ids checked they exist
    rep, sep = ids.get("rep"), ids.get("sep")
    if encode is None:
        def encode(text: str) -> list[int]:
            return list(tokenizer.encode(text, add_special=False, parse_special=False))

    extra_ids: list[int] = []
    if rep is not None:
        extra_ids += [rep] + encode("myproject\n")
    for name, text in extra:
        extra_ids += [sep] + encode(name + "\n") if sep is not None else encode(SNIPPET)
        extra_ids += encode(text)
    if sep is not None:
        extra_ids += [sep] + encode("filename\n")

    n_prefix = min(len(prefix), 3 * (n_batch // 4))
    n_suffix = min(len(suffix), max(0, n_batch // 4 - (2 + len(prompt))))
    n_extra = min(max(0, n_ctx - n_batch - 2 * n_predict), len(extra_ids))
    head = [pre] + list(prefix[len(prefix) - n_prefix:]) + list(prompt)
    tail = [suf] + list(suffix[:n_suffix])
    first, second = (tail, head) if suffix_first else (head, tail)
    if tokenizer.vocab.add_bos:
        first = [int(tokenizer.vocab.bos_token_id)] + first
    return extra_ids[len(extra_ids) - n_extra:] + first + second + [mid]


def prefix_suffix_middle(tokenizer: Any, prefix: Sequence[int], suffix: Sequence[int]) -> list[int]:
    """The plain layout, ``[BOS][PRE]prefix[SUF]suffix[MID]``: what ollama's fill-in-the-middle
    templates render for Qwen2.5-Coder, StarCoder2, Granite code and DeepSeek-Coder (its
    ``suffix`` field), without llama-server's repository and file lines or cuts."""
    ids = fim_ids(tokenizer)
    pre, suf, mid = (int(ids[role] or 0) for role in ("pre", "suf", "mid"))
    bos = [int(tokenizer.vocab.bos_token_id)] if tokenizer.vocab.add_bos else []
    return bos + [pre] + list(prefix) + [suf] + list(suffix) + [mid]
