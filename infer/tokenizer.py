"""Vocabulary and tokenizers built from GGUF metadata.

Four tokenizer families, chosen by ``tokenizer.ggml.model``:

* ``"gpt2"``: byte-level BPE (GPT-2, Llama 3, SmolLM, Qwen2...).  The text is cut
  into pieces by the pre-tokenizer regexes named by ``tokenizer.ggml.pre`` (the
  same split rules llama.cpp uses for each name), each piece's UTF-8 bytes are
  mapped to printable characters (GPT-2's byte-to-unicode table) and merged by
  rank from ``tokenizer.ggml.merges``.
* ``"llama"``: SentencePiece-style BPE (Llama 1/2, Gemma).  Spaces become ``▁``,
  the highest-scoring adjacent pair whose concatenation is a token is merged
  first (ties: leftmost), and characters that are not tokens fall back to the
  byte tokens ``<0xNN>``.

* ``"bert"``: WordPiece (BERT-family encoders), in `infer.wordpiece`.

* ``"gemma4"``: Gemma 4's BPE over raw UTF-8 (no byte-level table).  Spaces become
  ``▁``, the text is cut only at runs of newlines, merges apply by rank, and a
  symbol without a token falls back to ``<0xNN>`` byte tokens (llama.cpp's
  LLAMA_VOCAB_PRE_TYPE_GEMMA4).

All first split out special tokens written in the text: user-defined tokens
always, control tokens only with ``parse_special=True`` (as llama.cpp's
``tokenizer_st_partition``: longest token text first).

Decoding is lossless for text tokens: ``decode(encode(s)) == s`` for any string
that UTF-8 can encode.  (llama.cpp's ``clean_spaces`` post-processing, which
removes the space in " ," and " 's" for some vocabularies, is deliberately not
applied: it breaks that round trip.)
"""
from __future__ import annotations

import codecs
import functools
import heapq
import operator
import warnings
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

import numpy as np
from numpy.typing import NDArray

import regex

__all__ = [
    "TokenType", "Vocabulary", "Tokenizer", "BPETokenizer", "SPMTokenizer",
    "StreamDecoder", "PRE_TOKENIZERS", "Gemma4Tokenizer", "UnsupportedPreTokenizerError",
    "UnsupportedTokenizerError",
]


class TokenType:
    """Values of ``tokenizer.ggml.token_type`` (llama.cpp's ``llama_token_type``)."""

    UNDEFINED = 0
    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


# Token texts that end generation wherever a vocabulary has them: llama.cpp's EOG list
# (llama-vocab.cpp), besides EOS, EOT, EOM and the FIM pad, repo and file-separator tokens.
_END_OF_TURN_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",  # o200k_harmony
                      "<|flush|>", "<|calls|>",  # solar-open
                      "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>",
                      "[EOT]", "[EOS]",  # Kimi-K2
                      "<|end_of_text|>", "<end_of_utterance>",
                      "<eos>", "<turn|>", "<|tool_response>",  # Gemma 4: a turn's end, a tool call's
                      "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~[")
# In this order, the first one present is ``eot_token_id`` when the GGUF names none.
_EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<turn|>", "<|endoftext|>",
              "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<\uff5cend\u2581of\u2581sentence\uff5c>",
              "<end_of_utterance>")
# The fill-in-the-middle tokens by their texts, when the GGUF names none (llama.cpp's
# lists, first match wins): prefix, suffix, middle, pad, repository name, file separator.
FIM_ROLES = ("pre", "suf", "mid", "pad", "rep", "sep")
_FIM_TEXTS = {
    "pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\uff5cfim\u2581begin\uff5c>", "<PRE>",
            "\u2581<PRE>", "<|code_prefix|>", "<|prefix|>"),
    "suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\uff5cfim\u2581hole\uff5c>", "<SUF>",
            "\u2581<SUF>", "<|code_suffix|>", "<|suffix|>"),
    "mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\uff5cfim\u2581end\uff5c>", "<MID>",
            "\u2581<MID>", "<|code_middle|>", "<|middle|>"),
    "pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "sep": ("<|file_sep|>",),
}
# GGUF keys of the FIM tokens; the first three also under their older names.
_OLDER_FIM_KEYS = {"pre": "prefix", "suf": "suffix", "mid": "middle"}
_FIM_KEYS = {role: (f"tokenizer.ggml.fim_{role}_token_id",)
             + ((f"tokenizer.ggml.{_OLDER_FIM_KEYS[role]}_token_id",) if role in _OLDER_FIM_KEYS else ())
             for role in FIM_ROLES}


# tokenizer.ggml.pre names for which llama.cpp adds BOS when add_bos_token is absent
_PRE_ADDING_BOS = ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                   "jina-v5-nano", "tekken", "chameleon")


def _token_id(value: object, name: str) -> int:
    """``value`` as a token id (Python or numpy integer); TypeError naming ``name`` else.
    (``int()`` would turn 1.5 into 1 and "7" into 7; a bool is not an id, as in
    ``Context.prefill``.)"""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected an integer token id, got {type(value).__name__}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name}: expected an integer token id, got {type(value).__name__}") from None


def _numbers(values: Any, name: str, n: int, kinds: str) -> NDArray[Any]:
    """``values`` as a 1-D numpy array of n numbers of the dtype kinds given
    (ValueError naming ``name``: no wrapping cast of an int64 2**40 to int32)."""
    try:
        arr = np.asarray(values)
    except (ValueError, OverflowError) as exc:
        raise ValueError(f"{name}: not an array of numbers ({exc})") from None
    if arr.dtype.kind not in kinds:
        raise ValueError(f"{name}: expected numbers, got dtype {arr.dtype}")
    if arr.shape != (n,):
        raise ValueError(f"{name}: expected {n} entries, got shape {arr.shape}")
    return arr


def _md_int(md: Mapping[str, Any], key: str) -> Optional[int]:
    value = md.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"metadata {key!r}: expected an integer, got {type(value).__name__}")
    return int(value)


def _md_bool(md: Mapping[str, Any], key: str, default: bool) -> bool:
    value = md.get(key)
    if value is None:
        return default
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"metadata {key!r}: expected a bool, got {type(value).__name__}")
    return bool(value)


class Vocabulary:
    """Token texts, types, scores and the special ids of one model.

    ``tokens[i]`` is the text of id ``i`` as the GGUF stores it (byte-level
    characters for BPE, ``▁`` for spaces in SentencePiece vocabularies).
    Ids that the GGUF does not name are ``None``.
    """

    def __init__(self, tokens: Sequence[str], token_types: Optional[NDArray[Any]] = None,
                 scores: Optional[NDArray[Any]] = None, *, bos_token_id: Optional[int] = None,
                 eos_token_id: Optional[int] = None, eot_token_id: Optional[int] = None,
                 pad_token_id: Optional[int] = None, unk_token_id: Optional[int] = None,
                 add_bos: bool = False, add_eos: bool = False,
                 add_space_prefix: bool = False, merges: Optional[Sequence[str]] = None,
                 fim_token_ids: Optional[Mapping[str, Optional[int]]] = None) -> None:
        if not isinstance(tokens, (list, tuple)) or not all(isinstance(t, str) for t in tokens[:1]):
            raise TypeError("tokens: expected a list of str")
        n = len(tokens)
        if n == 0:
            raise ValueError("tokens: the vocabulary is empty")
        self.tokens: list[str] = list(tokens)
        if token_types is None:
            token_types = np.full(n, TokenType.NORMAL, dtype=np.int32)
        token_types = _numbers(token_types, "token_types", n, "iu")
        if token_types.size and not (0 <= token_types.min() and token_types.max() <= TokenType.BYTE):
            i = int(np.flatnonzero((token_types < 0) | (token_types > TokenType.BYTE))[0])
            raise ValueError(f"token_types: {int(token_types[i])} (token {i}) is not a token "
                             f"type (0..{TokenType.BYTE})")
        token_types = token_types.astype(np.int32)
        if scores is None:
            scores = np.zeros(n, dtype=np.float32)
        scores = _numbers(scores, "scores", n, "iuf").astype(np.float32)
        self.token_types = token_types
        self.scores = scores
        if merges is not None and not isinstance(merges, (list, tuple)):
            raise TypeError(f"merges: expected a list of str, got {type(merges).__name__}")
        #: BPE merges "left right", highest priority first (None for SentencePiece)
        self.merges: Optional[list[str]] = list(merges) if merges is not None else None
        # Later duplicates win, as in llama.cpp's token_to_id map.
        self._ids: dict[str, int] = dict(zip(self.tokens, range(n)))

        for name, value in (("bos_token_id", bos_token_id), ("eos_token_id", eos_token_id),
                            ("eot_token_id", eot_token_id), ("pad_token_id", pad_token_id),
                            ("unk_token_id", unk_token_id)):
            if value is not None and not 0 <= value < n:
                raise ValueError(f"{name}: {value} is outside the vocabulary [0, {n})")
        given_eot = eot_token_id
        if eot_token_id is None:
            eot_token_id = next((self._ids[t] for t in _EOT_TEXTS if t in self._ids), None)
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id
        self.eot_token_id = eot_token_id
        self.pad_token_id = pad_token_id
        self.unk_token_id = unk_token_id
        self.add_bos = bool(add_bos)
        self.add_eos = bool(add_eos)
        self.add_space_prefix = bool(add_space_prefix)
        if self.add_bos and bos_token_id is None:
            raise ValueError("add_bos is set but the vocabulary has no BOS token")
        if self.add_eos and eos_token_id is None:
            raise ValueError("add_eos is set but the vocabulary has no EOS token")

        #: the fill-in-the-middle tokens by role (FIM_ROLES): the GGUF's keys, else found
        #: by their texts as llama.cpp finds them; None where the vocabulary has none
        self.fim_token_ids: dict[str, Optional[int]] = {}
        for role in FIM_ROLES:
            given: Optional[int] = (fim_token_ids or {}).get(role)
            if given is not None and not 0 <= given < n:
                given = None  # llama.cpp ignores an id outside the vocabulary
            if given is None:
                given = next((self._ids[t] for t in _FIM_TEXTS[role] if t in self._ids), None)
            self.fim_token_ids[role] = given

        eog = {self._ids[t] for t in _END_OF_TURN_TEXTS if t in self._ids}
        eog.update(i for i in (eos_token_id, eot_token_id, self._ids.get("<|eom_id|>")) if i is not None)
        eog.update(f for role in ("pad", "rep", "sep") if (f := self.fim_token_ids[role]) is not None)
        # llama.cpp's overrides of the file's token types (llama-vocab.cpp): the tokens that
        # end generation, the FIM ones and EOT/EOM typed as normal are control tokens;
        # gpt-oss's message markers are user-defined (always read in text, always shown)
        types = {}
        fim = {i for i in self.fim_token_ids.values() if i is not None}
        for i in sorted(eog | fim | {i for i in (eot_token_id, self._ids.get("<|eom_id|>")) if i is not None}):
            if token_types[i] == TokenType.NORMAL:
                types[i] = TokenType.CONTROL
        # A user-defined token that llama.cpp also marks control (one its lists name: the
        # end-of-generation texts, and EOT and FIM tokens it had to find by their texts)
        # is read in text as user-defined but not shown in a reply (Gemma 3's </s>).
        by_text = set(eog) - {i for i in (eos_token_id, given_eot) if i is not None} | {
            i for role, i in self.fim_token_ids.items() if i is not None and (fim_token_ids or {}).get(role) != i}
        if given_eot is None and eot_token_id is not None:
            by_text.add(eot_token_id)
        by_text |= {self._ids[t] for t in _END_OF_TURN_TEXTS if t in self._ids}
        self._hidden_user_defined = {i for i in by_text if token_types[i] == TokenType.USER_DEFINED}
        for text in ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"):
            if text in self._ids:
                types[self._ids[text]] = TokenType.USER_DEFINED
        texts = {self.tokens[i] for i in eog}
        if "<|end|>" in texts and (("<|return|>" in texts and "<|call|>" in texts)
                                   or ("<|flush|>" in texts and texts & {"<|call|>", "<|calls|>"})):
            # gpt-oss (o200k_harmony) and solar-open: <|end|> ends one of a reply's
            # messages, and more follow (llama.cpp's llama-vocab.cpp drops it so too)
            eog.discard(self._ids["<|end|>"])
            types[self._ids["<|end|>"]] = TokenType.USER_DEFINED
            self._hidden_user_defined.discard(self._ids["<|end|>"])
        if "</s>" in texts and texts & {"<|tool_response>", "<|plamo:eos|>"}:
            eog.discard(self._ids["</s>"])  # Gemma 4 and PLaMo: a normal token there
            types[self._ids["</s>"]] = TokenType.NORMAL
            self._hidden_user_defined.discard(self._ids["</s>"])
        self.end_of_turn_ids: frozenset[int] = frozenset(eog)
        if types:
            self.token_types = token_types = token_types.copy()
            token_types[list(types)] = list(types.values())

        # Texts split out of the input before tokenizing: user-defined always,
        # control and unknown only when parsing special tokens.
        special = np.flatnonzero((token_types == TokenType.CONTROL)
                                 | (token_types == TokenType.UNKNOWN)
                                 | (token_types == TokenType.USER_DEFINED))
        self._user_defined = {self.tokens[i]: int(i) for i in special
                              if token_types[i] == TokenType.USER_DEFINED and self.tokens[i]}
        self._control = {self.tokens[i]: int(i) for i in special
                         if token_types[i] != TokenType.USER_DEFINED and self.tokens[i]}

    @classmethod
    def from_metadata(cls, md: Mapping[str, Any]) -> "Vocabulary":
        """Build from a GGUF metadata dict (``tokenizer.ggml.*`` keys)."""
        tokens = md.get("tokenizer.ggml.tokens")
        if tokens is None:
            raise ValueError("metadata: 'tokenizer.ggml.tokens' is missing; the GGUF has no vocabulary")
        if not isinstance(tokens, (list, tuple)):
            raise TypeError("metadata 'tokenizer.ggml.tokens': expected a list of str, "
                            f"got {type(tokens).__name__}")
        bad = next((i for i, t in enumerate(tokens) if not isinstance(t, str)), None)
        if bad is not None:
            raise ValueError(f"metadata 'tokenizer.ggml.tokens': entry {bad} is "
                             f"{type(tokens[bad]).__name__}, not a string")
        merges = md.get("tokenizer.ggml.merges")
        if merges is not None and (not isinstance(merges, (list, tuple))
                                   or not all(isinstance(m, str) for m in merges)):
            raise ValueError("metadata 'tokenizer.ggml.merges': expected a list of strings")
        try:
            return cls._from_checked_metadata(md, tokens, merges)
        except ValueError as exc:
            # Vocabulary names its arguments; the user also needs the GGUF key.
            arg = str(exc).split(":", 1)[0]
            key = {"token_types": "tokenizer.ggml.token_type",
                   "scores": "tokenizer.ggml.scores"}.get(arg)
            if key is None:
                raise
            raise ValueError(f"metadata {key!r}: {str(exc).split(':', 1)[1].strip()}") from None

    @classmethod
    def _from_checked_metadata(cls, md: Mapping[str, Any], tokens: Sequence[str],
                               merges: Optional[Sequence[str]]) -> "Vocabulary":
        return cls(
            tokens, md.get("tokenizer.ggml.token_type"), md.get("tokenizer.ggml.scores"),
            bos_token_id=_md_int(md, "tokenizer.ggml.bos_token_id"),
            eos_token_id=_md_int(md, "tokenizer.ggml.eos_token_id"),
            eot_token_id=_md_int(md, "tokenizer.ggml.eot_token_id"),
            pad_token_id=_md_int(md, "tokenizer.ggml.padding_token_id"),
            unk_token_id=_md_int(md, "tokenizer.ggml.unknown_token_id"),
            # llama.cpp's defaults when the key is absent: SentencePiece and the
            # llama3-style split rules add BOS, others do not.
            # Gemma 4: llama.cpp adds BOS whatever the key says
            add_bos=md.get("tokenizer.ggml.model") == "gemma4"
            or _md_bool(md, "tokenizer.ggml.add_bos_token",
                        md.get("tokenizer.ggml.model") == "llama"
                        or md.get("tokenizer.ggml.pre") in _PRE_ADDING_BOS),
            add_eos=_md_bool(md, "tokenizer.ggml.add_eos_token", False),
            add_space_prefix=_md_bool(md, "tokenizer.ggml.add_space_prefix",
                                      md.get("tokenizer.ggml.model") == "llama"),
            merges=merges,
            fim_token_ids={role: next((v for k in keys if (v := _md_int(md, k)) is not None), None)
                           for role, keys in _FIM_KEYS.items()},
        )

    @property
    def size(self) -> int:
        return len(self.tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def token_id(self, text: str) -> int:
        """The id whose text is exactly ``text``; KeyError if there is none."""
        try:
            return self._ids[text]
        except KeyError:
            raise KeyError(f"no token with text {text!r} in the vocabulary") from None

    def get(self, text: str) -> Optional[int]:
        return self._ids.get(text)

    def _check(self, token: int) -> int:
        if not 0 <= token < len(self.tokens):
            raise ValueError(f"token id {token} is outside the vocabulary [0, {len(self.tokens)})")
        return token

    def token_type(self, token: int) -> int:
        return int(self.token_types[self._check(token)])

    def is_control(self, token: int) -> bool:
        return self.token_type(token) == TokenType.CONTROL

    def is_byte(self, token: int) -> bool:
        return self.token_type(token) == TokenType.BYTE

    def is_user_defined(self, token: int) -> bool:
        return self.token_type(token) == TokenType.USER_DEFINED

    def is_special(self, token: int) -> bool:
        """Control or unknown (or a user-defined token llama.cpp also marks control): what
        ``decode(skip_special=True)`` drops, as llama.cpp's token_to_piece without special."""
        return self.token_type(token) in (TokenType.CONTROL, TokenType.UNKNOWN) or token in self._hidden_user_defined

    def is_end_of_turn(self, token: int) -> bool:
        return token in self.end_of_turn_ids


# ---- special-token partition ----------------------------------------------------

#: text cut into raw-text fragments (str) and special-token ids (int), in order
Fragments = list[Union[str, int]]


def _is_run(text: str) -> bool:
    """True for a text made of one repeated character."""
    return text == text[0] * len(text)


class _SpecialSplitter:
    """Cuts special-token texts out of a string, as llama.cpp's st_partition does.

    llama.cpp takes the token texts longest first (ties here: lower id) and cuts
    each one out of every fragment of raw text still left, leftmost occurrences
    first, never overlapping.  The same result in one pass over the text: all
    occurrences are found by walking a trie of the token texts from each position
    that holds a first character of some token text, then each text, longest
    first, claims its leftmost occurrences that touch nothing claimed yet.  The
    trie has one node per character of the texts, so a 64K-character token costs
    64K entries (a set of its prefixes cost 2 GB).

    Runs of one repeated character (Gemma's newline, space and tab runs) take a short
    cut when no other token text holds that character: a maximal run of it is
    then cut greedily, longest token first from the left, which is what the rule
    above gives, without listing the many overlapping occurrences in the run.
    """

    def __init__(self, texts: Mapping[str, int]) -> None:
        self.ids = dict(texts)
        chars_elsewhere = {c for t in texts if not _is_run(t) for c in t}
        by_char: dict[str, dict[int, int]] = {}
        for t, tid in texts.items():
            if _is_run(t):
                by_char.setdefault(t[0], {})[len(t)] = tid
        self.runs = {c: sorted(lengths.items(), reverse=True) for c, lengths in by_char.items()
                     if c not in chars_elsewhere and len(lengths) > 1}
        others = {t: tid for t, tid in texts.items() if not (_is_run(t) and t[0] in self.runs)}
        # The trie as one flat dict: (node, next character) -> child node; node 0 is
        # the root.  ends[node] is the text a node completes, for those that do.
        trie: dict[tuple[int, str], int] = {}
        ends: dict[int, str] = {}
        for t in others:
            node = 0
            for c in t:
                child = trie.get((node, c))
                if child is None:
                    child = trie[(node, c)] = len(trie) + 1
                node = child
            ends[node] = t
        self.trie, self.ends = trie, ends
        first = sorted({t[0] for t in others})
        self.first = (regex.compile("[" + "".join(regex.escape(c) for c in first) + "]")
                      if first else None)
        self.run_pattern = (regex.compile("|".join(
            f"{regex.escape(c)}{{{min(n for n, _ in lengths)},}}" for c, lengths in self.runs.items()))
            if self.runs else None)

    def split(self, text: str) -> Fragments:
        """``text`` as a list of str fragments and int ids, in order."""
        if not text:
            return []
        found: list[tuple[int, int, int]] = []
        if self.run_pattern is not None:
            runs = self.runs
            for m in self.run_pattern.finditer(text):
                at, end = m.span()
                for size, tid in runs[text[at]]:
                    while end - at >= size:
                        found.append((at, size, tid))
                        at += size
        if self.first is not None:
            self._split_others(text, found)
        if not found:
            return [text]
        found.sort()
        parts: Fragments = []
        pos = 0
        for at, size, tid in found:
            if at > pos:
                parts.append(text[pos:at])
            parts.append(tid)
            pos = at + size
        if pos < len(text):
            parts.append(text[pos:])
        return parts

    def _split_others(self, text: str, found: list[tuple[int, int, int]]) -> None:
        ids = self.ids
        trie, ends = self.trie, self.ends
        starts: dict[str, list[int]] = {}
        n = len(text)
        assert self.first is not None
        for m in self.first.finditer(text):
            start = m.start()
            node = 0
            at = start
            while at < n:
                node = trie.get((node, text[at]), 0)
                if not node:
                    break
                found_text = ends.get(node)
                if found_text is not None:
                    starts.setdefault(found_text, []).append(start)
                at += 1
        if not starts:
            return
        claimed = bytearray(n)
        for tok in sorted(starts, key=lambda t: (-len(t), ids[t])):
            size = len(tok)
            last_end = 0
            for at in starts[tok]:
                # What is claimed already came from texts at least this long, so it
                # overlaps [at, at + size) only if it covers one of its ends.
                if at < last_end or claimed[at] or claimed[at + size - 1]:
                    continue
                claimed[at:at + size] = b"\x01" * size
                found.append((at, size, ids[tok]))
                last_end = at + size


# ---- byte-level BPE ---------------------------------------------------------------

def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table: each byte to a printable character (printable bytes map to themselves)."""
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
            + list(range(ord("®"), ord("ÿ") + 1)))
    table = {}
    extra = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_TO_UNICODE = _bytes_to_unicode()
UNICODE_TO_BYTE = {c: b for b, c in BYTE_TO_UNICODE.items()}
# bytes.decode("latin-1") gives chr(b) per byte; translate maps those to the table.
_LATIN1_TO_BYTE_LEVEL = {b: c for b, c in BYTE_TO_UNICODE.items()}

# The split rules of each tokenizer.ggml.pre name: llama.cpp's regexes (llama-vocab.cpp,
# llm_tokenizer_bpe) in the form llama.cpp runs them.  llama.cpp writes the
# case-insensitive contractions out as classes ('[sS]...): (?i:'s) would also take
# U+017F (long s).  It matches \p{Lu}, \p{Ll}, \p{Lt}, \p{Lm} and \p{Lo} all as
# \p{L} (its category table has one letter class, ASCII included), so those
# regexes keep llama.cpp's spelling here and go through _collapse_letter_cases.
_CONTRACTIONS_CI = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (_CONTRACTIONS_CI + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (_CONTRACTIONS_CI + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen 3.5: letter runs take combining marks along
_QWEN35 = (_CONTRACTIONS_CI + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# llama3's, with whitespace runs cut into 512, 256, ... 4, then 2 or 1
_JAIS2 = (_CONTRACTIONS_CI + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
          + "".join(rf"|\s{{{n}}}(?!\S)" for n in (512, 256, 128, 64, 32, 16, 8, 4)) + r"|\s{1,2}(?!\S)|\s{1}")
_HUNYUAN_DENSE = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
                  r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_SPARK2_5 = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
             r"| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+")
_CJK_KANA = r"[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
_CJK_HANGUL = r"[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
# GPT-4o's and Tekken's upper/lower-case letter runs, as llama.cpp adapted them: an
# "upper" letter is a letter that is not a-z, a "lower" one a letter that is not A-Z
_UPPER = r"(?:(?=[\p{L}])[^a-z])"
_LOWER = r"(?:(?=[\p{L}])[^A-Z])"
_TEKKEN = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*|\p{{N}}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_GPT4O = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTIONS_CI}?"
          rf"|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTIONS_CI}?|\p{{N}}{{1,3}}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Granite multilingual embeddings: GPT-4o's with combining marks counted as letters
_GRANITE_EMB_MULTI = _GPT4O.replace(r"(?=[\p{L}])", r"(?=[\p{L}\p{M}])")
_CASED_WORDS = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+" + _CONTRACTIONS_CI
                + r"?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*" + _CONTRACTIONS_CI
                + "?")
_TINY_AYA = _CASED_WORDS + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_YOUTU_CJK = (r"[\uac00-\ud7a3\u3131-\u318e]+|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c"
              r"\u3001-\u303f\ufe30-\ufe4f]+|[\u3105-\u312f]+|[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+")
_YOUTU = _CASED_WORDS + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
# Kimi K2: llama.cpp's own splitter (unicode.cpp) in place of tokenization_kimi.py's
# regex: Han runs (its unicode_cpt_is_han ranges), then letter runs without Han and
# without combining marks, contractions in either case, digits in threes.
_HAN = ("\u4e00-\u9fff\u3400-\u4dbf\U00020000-\U0002a6df\U0002a700-\U0002b73f\U0002b740-\U0002b81f"
        "\U0002b820-\U0002ceaf\U0002ceb0-\U0002ebef\uf900-\ufaff\U0002f800-\U0002fa1f")
_KIMI_K2 = (rf"[{_HAN}]+|[^\r\n\p{{L}}\p{{N}}]?(?:(?![{_HAN}])\p{{L}})+{_CONTRACTIONS_CI}?|\p{{N}}{{1,3}}"
            r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_BAILINGMOE = (r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+")
_SEED_CODER = (_CONTRACTIONS_CI + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+")
# Qwen 2's without the contractions: Turkish apostrophe suffixes stay on their word
_UFAKZEKA = r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
# (\u8c48, not \uf900, starts the third range in llama.cpp's source)
_AFMOE_ASIAN = (r"[\u4e00-\u9fff\u3400-\u4dbf\u8c48-\ufaff\u3040-\u309f\u30a0-\u30ff\uff65-\uff9f\u2f00-\u2fdf"
                r"\u0e40-\u0e7f\u0e80-\u0eff\u1780-\u17ff\u1000-\u109f\uaa60-\uaa7f\ua9e0-\ua9ff\uac00-\ud7af"
                r"\u1100-\u11ff]+")
_EXAONE_MOE = (_CONTRACTIONS_CI + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+")
_MINICPM5 = (_CONTRACTIONS_CI + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
             r"|\s+(?!\S)|\s+")
_BLOOM = r" ?[^(\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"
# DeepSeek LLM's letters and punctuation as literal ranges
_DEEPSEEK_LLM_LETTERS = (
    r"\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373"
    r"\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f"
    r"\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
    r"\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d"
    r"\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4"
    r"\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    r"\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d"
    r"\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a"
    r"\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2"
    r"\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+")
_DEEPSEEK_LLM_PUNCT = r"\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"
_NEWLINE_RUNS = r"[^\n]+|[\n]+"
#: llama.cpp's digit splitter for AFMoE and Tiny Aya (unicode_regex_split_custom_afmoe),
#: not a regex: see _split_afmoe_digits
_AFMOE_DIGITS = r"\p{AFMoE_digits}"
#: SuperBPE's cuts, run as _split_digits_in_threes (the lookahead rescans the run from
#: every position: quadratic in a long run of digits)
_DIGITS_IN_THREES = r"(?=(\d{3})+(?!\d))"

# tokenizer.ggml.pre -> (regexes applied in turn, each splitting the pieces of the
# previous one and keeping unmatched gaps as pieces; ignore_merges).  One entry per
# LLAMA_VOCAB_PRE_TYPE of llama.cpp, with the names llama-vocab.cpp maps to it.
PRE_TOKENIZERS: dict[str, tuple[tuple[str, ...], bool]] = {}
for _names, _exprs, _ignore in (
    (("default",), (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"), False),
    (("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"),
     (_LLAMA3,), True),
    (("deepseek-llm",), ("[\r\n]", _DEEPSEEK_LLM_LETTERS, _DEEPSEEK_LLM_PUNCT, r"\s+$", _CJK_HANGUL, r"\p{N}+"),
     False),
    (("deepseek-coder",), (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK_HANGUL, r"\p{N}"), False),
    (("falcon",), (r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]"), False),
    (("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b", "mellum2"),
     (r"\p{N}", _GPT2), False),
    # "gpt2" is not a llama.cpp name; infer has always taken it for "gpt-2"
    (("gpt2", "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
      "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais", "exaone4",
      "trillion", "granite-docling"), (_GPT2,), False),
    (("jais-2",), (_JAIS2,), False),
    (("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "megrez", "hunyuan", "solar-open", "grok-2"),
     (_QWEN2,), False),
    (("qwen35",), (_QWEN35,), False),
    (("dbrx", "smaug-bpe", "chatglm-bpe"), (_LLAMA3,), False),
    (("glm4", "glm5"), (_LLAMA3,), True),
    (("poro-chat", "bloom", "gpt3-finnish"), (_BLOOM,), False),
    (("viking",), (_BLOOM, r"\p{N}"), False),
    (("tekken",), (_TEKKEN,), True),
    (("chameleon",), ("<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", r"([\t\n]|    |  )", r"\p{N}",
                      r"[\p{P}!-/:-@\[-`{-~]", _GPT2), False),
    (("gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"), (_GPT4O,), False),
    (("granite-embed-multi-97m",), (_GRANITE_EMB_MULTI,), True),
    (("tiny_aya", "cohere2moe"), (_AFMOE_DIGITS, _TINY_AYA), False),
    (("kimi-k2",), (_KIMI_K2,), False),
    # SuperBPE: digit runs, cut into threes from the right; nothing else is split
    (("superbpe",), (r"\p{N}+", _DIGITS_IN_THREES), False),
    (("bailingmoe", "bailingmoe2", "llada-moe"), (_BAILINGMOE,), False),
    (("seed-coder",), (_SEED_CODER,), False),
    (("ufakzeka",), (_UFAKZEKA,), False),
    (("deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"), (r"\p{N}{1,3}", _CJK_KANA, _HUNYUAN_DENSE), False),
    (("spark2_5",), (r"\p{N}{1,3}", _CJK_KANA, _SPARK2_5, r"\p{N}"), False),
    (("youtu",), (_YOUTU_CJK, _YOUTU), True),
    (("afmoe",), (_AFMOE_DIGITS, _AFMOE_ASIAN, _HUNYUAN_DENSE), False),
    (("laguna",), (_NEWLINE_RUNS, _QWEN2), False),
    (("exaone-moe",), (_EXAONE_MOE,), False),
    (("minicpm5",), (r"\p{N}{1,3}", _MINICPM5), True),
):
    for _name in _names:
        PRE_TOKENIZERS[_name] = (_exprs, _ignore)

# Names llama.cpp knows whose tokenizer is not byte-level BPE over regex pieces.
_PRE_NOT_BYTE_LEVEL = {
    name: "a BPE over raw UTF-8 with spaces as U+2581 (no byte-level table), which infer implements only for "
          "tokenizer.ggml.model 'gemma4'"
    for name in ("gemma4", "granite-embed-multi-311m", "sarvam-moe")}
_PRE_NOT_BYTE_LEVEL["whitespace"] = ("a whitespace split over raw UTF-8 (no byte-level table), which infer "
                                     "does not implement")


class UnsupportedTokenizerError(ValueError):
    """``tokenizer.ggml.model`` names a tokenizer infer does not implement ("t5", "rwkv", ...)."""


class UnsupportedPreTokenizerError(ValueError):
    """``tokenizer.ggml.pre`` names split rules infer does not implement."""


def _collapse_letter_cases(expr: str) -> str:
    collapsed: str = regex.sub(r"\\p\{L[ultmo]\}", r"\\p{L}", expr)
    return collapsed


def _pre_tokenizer(name: str) -> tuple[list[Callable[[str, list[str]], None]], bool]:
    """The splitters of ``name`` in order, and its ignore_merges."""
    try:
        exprs, ignore_merges = PRE_TOKENIZERS[name]
    except KeyError:
        why = _PRE_NOT_BYTE_LEVEL.get(name)
        if why is not None:
            raise UnsupportedPreTokenizerError(
                f"tokenizer.ggml.pre: pre-tokenizer {name!r} is {why}") from None
        known = ", ".join(sorted(PRE_TOKENIZERS))
        raise UnsupportedPreTokenizerError(
            f"tokenizer.ggml.pre: unknown pre-tokenizer {name!r} (known: {known})") from None
    return [_CUSTOM_SPLITTERS.get(e) or functools.partial(_split_keeping_gaps, regex.compile(_collapse_letter_cases(e)))
            for e in exprs], ignore_merges


# llama.cpp matches its regexes (all but the splitters of its own: GPT-2's, Llama 3's,
# Qwen 2's, Qwen 3.5's, Kimi K2's, AFMoE's digits) on a copy of the text in which every
# non-ASCII space is \v: a literal range such as DeepSeek's U+0800-U+4E00 holds
# U+3000, yet only \s takes an ideographic space there.  Elsewhere \s matches the
# same either way.
_NON_ASCII_SPACE = regex.compile(r"[\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]")


def _split_keeping_gaps(pattern: Any, text: str, out: list[str]) -> None:
    subject = text
    if not text.isascii() and _NON_ASCII_SPACE.search(text) is not None:
        subject = _NON_ASCII_SPACE.sub("\v", text)
    pos = 0
    for m in pattern.finditer(subject):
        start, end = m.span()
        if start > pos:
            out.append(text[pos:start])
        if end > start:   # SuperBPE's lookahead matches are empty: cuts, not pieces
            out.append(text[start:end])
        pos = end
    if pos < len(text):
        out.append(text[pos:])


_NUMBER_RUNS = regex.compile(r"\p{N}+")


def _split_afmoe_digits(text: str, out: list[str]) -> None:
    """llama.cpp's AFMoE digit splitter: each run of digits cut into threes from the
    right.  As llama.cpp does, the text before a run stays joined to the run's first
    group ("ab1234" gives "ab1", "234"), and the rest of the text is one piece."""
    prev = 0
    for m in _NUMBER_RUNS.finditer(text):
        start, end = m.span()
        cut = start + (end - start) % 3
        if cut > start:
            out.append(text[prev:cut])
            prev = cut
        while cut < end:
            out.append(text[prev:cut + 3])
            prev = cut = cut + 3
    if prev < len(text):
        out.append(text[prev:])


_ASCII_DIGIT_RUNS = regex.compile(r"[0-9]+")


def _split_digits_in_threes(text: str, out: list[str]) -> None:
    """The cuts of (?=(\\d{3})+(?!\\d)): before every ASCII digit that has a multiple
    of three digits from it to the end of its run (llama.cpp matches it with
    std::wregex, whose \\d is ASCII only)."""
    prev = 0
    for m in _ASCII_DIGIT_RUNS.finditer(text):
        start, end = m.span()
        for cut in range(start + (end - start) % 3, end, 3):
            if cut > prev:
                out.append(text[prev:cut])
                prev = cut
    if prev < len(text):
        out.append(text[prev:])


_CUSTOM_SPLITTERS: dict[str, Callable[[str, list[str]], None]] = {
    _AFMOE_DIGITS: _split_afmoe_digits, _DIGITS_IN_THREES: _split_digits_in_threes}


class Tokenizer:
    """Base of the tokenizers: special-token handling, decoding, streaming."""

    #: words kept in the encode cache before it is cleared
    cache_size = 1 << 16

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self._cache: dict[str, tuple[int, ...]] = {}
        self._splitter_all = _SpecialSplitter({**vocab._control, **vocab._user_defined})
        self._splitter_user = _SpecialSplitter(vocab._user_defined)
        self._pieces: list[Optional[bytes]] = [None] * vocab.size

    @staticmethod
    def from_metadata(md: Mapping[str, Any]) -> "Tokenizer":
        """The tokenizer that ``tokenizer.ggml.model`` names, built from GGUF metadata."""
        model = md.get("tokenizer.ggml.model")
        if model == "gpt2":
            return BPETokenizer.from_metadata(md)
        if model == "llama":
            return SPMTokenizer.from_metadata(md)
        if model == "gemma4":
            return Gemma4Tokenizer.from_metadata(md)
        if model == "bert":
            from .wordpiece import WordPieceTokenizer

            return WordPieceTokenizer.from_metadata(md)
        raise UnsupportedTokenizerError(f"tokenizer.ggml.model: {model!r} is not supported "
                         f"(known: 'gpt2', 'llama', 'gemma4', 'bert')")

    # ---- encoding ----------------------------------------------------------
    def encode(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids of ``text``.

        ``add_special`` adds BOS/EOS where the GGUF's add_bos_token/add_eos_token say;
        ``parse_special`` turns control-token texts written in ``text``
        (``"<|im_start|>"``) into their ids, otherwise they are plain text.
        """
        if not isinstance(text, str):
            raise TypeError(f"text: expected str, got {type(text).__name__}")
        try:
            return self._encode(text, add_special, parse_special)
        except UnicodeEncodeError:
            i = next(i for i, c in enumerate(text) if 0xD800 <= ord(c) <= 0xDFFF)
            raise ValueError(f"text: U+{ord(text[i]):04X} at index {i} is a lone surrogate, "
                             f"which UTF-8 cannot encode") from None

    def _encode(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        vocab = self.vocab
        out: list[int] = []
        if add_special and vocab.add_bos and vocab.bos_token_id is not None:
            out.append(vocab.bos_token_id)
        splitter = self._splitter_all if parse_special else self._splitter_user
        prev_special = True
        for part in splitter.split(text):
            if isinstance(part, int):
                out.append(part)
                prev_special = True
            else:
                self._encode_text(part, out, prev_special)
                prev_special = False
        if add_special and vocab.add_bos and len(out) > 1 and out[0] == out[1] == vocab.bos_token_id:
            # llama.cpp warns about this too: the text already began with the BOS text.
            warnings.warn("the text starts with the BOS token and the model adds one too, so the prompt "
                          "now starts with two BOS tokens; drop it from the text or pass add_special=False",
                          stacklevel=3)
        if add_special and vocab.add_eos and vocab.eos_token_id is not None:
            out.append(vocab.eos_token_id)
        return out

    def _encode_text(self, text: str, out: list[int], after_special: bool) -> None:
        raise NotImplementedError

    def _encode_word(self, word: str) -> tuple[int, ...]:
        raise NotImplementedError

    def _encode_words(self, words: Iterable[str], out: list[int]) -> None:
        """Ids of each word, through a cache: text repeats its words a lot."""
        cache = self._cache
        for word in words:
            ids = cache.get(word)
            if ids is None:
                ids = self._encode_word(word)
                if len(cache) >= self.cache_size:
                    cache.clear()
                cache[word] = ids
            out.extend(ids)

    # ---- decoding ----------------------------------------------------------
    def token_to_piece(self, token: int) -> bytes:
        """The bytes token ``token`` stands for (special tokens: their text)."""
        token = _token_id(token, "token")
        piece = self._pieces[self.vocab._check(token)]
        if piece is None:
            piece = self._pieces[token] = self._piece(token)
        return piece

    def _piece(self, token: int) -> bytes:
        vocab = self.vocab
        text = vocab.tokens[token]
        kind = vocab.token_types[token]
        # "surrogateescape": a token text that is not UTF-8 in the file (the reader
        # keeps such bytes as surrogates) gives back its bytes, as llama.cpp does.
        if kind in (TokenType.CONTROL, TokenType.UNKNOWN, TokenType.USER_DEFINED):
            return text.encode("utf-8", "surrogateescape")
        if kind == TokenType.NORMAL:
            return self._normal_piece(text)
        if kind == TokenType.BYTE:
            return self._byte_piece(text)
        return b""  # unused / undefined: llama.cpp prints nothing

    def _normal_piece(self, text: str) -> bytes:
        raise NotImplementedError

    def _byte_piece(self, text: str) -> bytes:
        return b""

    def _pieces_of(self, ids: Iterable[int], skip_special: bool) -> list[bytes]:
        vocab = self.vocab
        ids = [_token_id(i, "ids") for i in ids]
        if not ids:
            return []
        pieces = []
        strip_space = vocab.add_space_prefix
        if skip_special and vocab.add_bos and ids[0] == vocab.bos_token_id:
            # llama.cpp keeps the prefix space when it drops a leading BOS.
            ids = ids[1:]
            strip_space = False
        for i in ids:
            if skip_special and vocab.is_special(i):
                piece = b""
            else:
                piece = self.token_to_piece(i)
            if strip_space and piece.startswith(b" "):
                piece = piece[1:]
            strip_space = False
            pieces.append(piece)
        return pieces

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Text of ``ids``; ``skip_special`` drops control and unknown tokens."""
        return b"".join(self._pieces_of(ids, skip_special)).decode("utf-8", errors="replace")

    def stream_decoder(self, skip_special: bool = False) -> "StreamDecoder":
        return StreamDecoder(self, skip_special)


class StreamDecoder:
    """Decodes one id at a time, emitting only complete UTF-8 characters.

    Bytes of a character split across tokens (emoji, CJK from byte tokens) are
    held back until the character is complete; ``flush()`` returns whatever is
    left (an incomplete tail becomes U+FFFD).
    """

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = False) -> None:
        self.tokenizer = tokenizer
        self.skip_special = skip_special
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._first = True
        self._first_ids: list[int] = []

    def feed(self, token: int) -> str:
        vocab = self.tokenizer.vocab
        token = _token_id(token, "token")
        vocab._check(token)
        if self._first:
            # The prefix space rule depends on the first one or two ids.
            if (self.skip_special and vocab.add_bos and token == vocab.bos_token_id
                    and not self._first_ids):
                self._first_ids.append(token)
                return ""
            self._first_ids.append(token)
            pieces = self.tokenizer._pieces_of(self._first_ids, self.skip_special)
            self._first = False
            return self._utf8.decode(b"".join(pieces))
        if self.skip_special and vocab.is_special(token):
            return ""
        return self._utf8.decode(self.tokenizer.token_to_piece(token))

    def flush(self) -> str:
        text = self._utf8.decode(b"", final=True)
        self._utf8.reset()
        return text


class BPETokenizer(Tokenizer):
    """Byte-level BPE (``tokenizer.ggml.model == "gpt2"``)."""

    def __init__(self, vocab: Vocabulary, pre: str = "default") -> None:
        super().__init__(vocab)
        # No merges (llama.cpp refuses such a file) leaves every byte its own token:
        # small test vocabularies of 256 byte tokens are written that way.
        merges = vocab.merges or []
        self.pre = pre
        self._splitters, self._ignore_merges = _pre_tokenizer(pre)
        # A merge "a b" is keyed by its own text: byte-level tokens never hold a
        # space, so the left and right parts are unambiguous.  A merge listed twice
        # keeps its first rank, as in llama.cpp's bpe_ranks.
        self._ranks: dict[str, int] = dict(zip(reversed(merges), range(len(merges) - 1, -1, -1)))
        self._to_byte_level = str.maketrans(_LATIN1_TO_BYTE_LEVEL)

    @classmethod
    def from_metadata(cls, md: Mapping[str, Any]) -> "BPETokenizer":
        pre = md.get("tokenizer.ggml.pre") or "default"
        if not isinstance(pre, str):
            raise TypeError(f"metadata 'tokenizer.ggml.pre': expected a string, got {type(pre).__name__}")
        return cls(Vocabulary.from_metadata(md), pre)

    def pre_tokenize(self, text: str) -> list[str]:
        """The pieces that are merged separately (no merge crosses two pieces)."""
        pieces = [text]
        for split in self._splitters:
            out: list[str] = []
            for piece in pieces:
                split(piece, out)
            pieces = out
        return pieces

    def _encode_text(self, text: str, out: list[int], after_special: bool) -> None:
        self._encode_words(self.pre_tokenize(text), out)

    def _encode_word(self, piece: str) -> tuple[int, ...]:
        word = piece.encode("utf-8").decode("latin-1").translate(self._to_byte_level)
        ids = self.vocab._ids
        if self._ignore_merges and word in ids:
            return (ids[word],)
        symbols = self._merge(word)
        result = []
        for s in symbols:
            tid = ids.get(s)
            if tid is not None:
                result.append(tid)
            else:
                # llama.cpp: a symbol without a token goes out byte by byte,
                # dropping bytes that have no token either.
                result.extend(ids[c] for c in s if c in ids)
        return tuple(result)

    def _merge(self, word: str) -> list[str]:
        """Apply merges to one pre-tokenized word: lowest rank first, leftmost on ties.

        A linked list of symbols and a heap of candidate pairs keyed (rank, left
        position), as llama.cpp's llm_bigram_bpe and HF tokenizers do: O(n log n) in
        the word's length (a pasted base64 string is one long word).  A heap entry
        is stale when either side has been merged since: a merged-away symbol is
        empty, and a symbol that grew changed the pair's length.
        """
        n = len(word)
        if n < 2:
            return [word] if word else []
        ranks = self._ranks
        sym = list(word)
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        prev = list(range(-1, n - 1))
        heap = []
        for i in range(n - 1):
            r = ranks.get(sym[i] + " " + sym[i + 1])
            if r is not None:
                heap.append((r, i, i + 1, 2))
        heapq.heapify(heap)
        push = heapq.heappush
        pop = heapq.heappop
        while heap:
            _, left, right, size = pop(heap)
            ls, rs = sym[left], sym[right]
            if not ls or not rs or len(ls) + len(rs) != size:
                continue
            merged = ls + rs
            sym[left] = merged
            sym[right] = ""
            after = nxt[right]
            nxt[left] = after
            if after >= 0:
                prev[after] = left
                r = ranks.get(merged + " " + sym[after])
                if r is not None:
                    push(heap, (r, left, after, len(merged) + len(sym[after])))
            before = prev[left]
            if before >= 0:
                r = ranks.get(sym[before] + " " + merged)
                if r is not None:
                    push(heap, (r, before, left, len(sym[before]) + len(merged)))
        out = []
        i = 0
        while i >= 0:
            out.append(sym[i])
            i = nxt[i]
        return out

    def _normal_piece(self, text: str) -> bytes:
        try:
            return bytes(UNICODE_TO_BYTE[c] for c in text)
        except KeyError:
            # a character outside the byte-level table: keep it as UTF-8
            return b"".join(bytes([UNICODE_TO_BYTE[c]]) if c in UNICODE_TO_BYTE
                            else c.encode("utf-8", "surrogateescape") for c in text)


class Gemma4Tokenizer(BPETokenizer):
    """Gemma 4's BPE (``tokenizer.ggml.model == "gemma4"``): merges by rank over the
    UTF-8 characters of the text with spaces as ``▁``, cut only between runs of
    newlines and the rest; byte fallback to ``<0xNN>``."""

    _pieces_re = regex.compile(r"[^\n]+|[\n]+")

    def __init__(self, vocab: Vocabulary) -> None:
        super().__init__(vocab, "default")
        ids = vocab._ids
        self._byte_ids: list[tuple[int, ...]] = [
            (ids[f"<0x{b:02X}>"],) if f"<0x{b:02X}>" in ids else () for b in range(256)]

    @classmethod
    def from_metadata(cls, md: Mapping[str, Any]) -> "Gemma4Tokenizer":
        return cls(Vocabulary.from_metadata(md))

    def pre_tokenize(self, text: str) -> list[str]:
        pieces: list[str] = self._pieces_re.findall(text)
        return pieces

    def _encode_text(self, text: str, out: list[int], after_special: bool) -> None:
        self._encode_words(self.pre_tokenize(text.replace(" ", "\u2581")), out)

    def _encode_word(self, piece: str) -> tuple[int, ...]:
        ids = self.vocab._ids
        if piece[0] == "\n" and piece in ids:   # a run of newlines that is a token is one
            return (ids[piece],)
        result: list[int] = []
        for s in self._merge(piece):
            tid = ids.get(s)
            if tid is not None:
                result.append(tid)
            else:   # byte fallback; a byte without a token is dropped, as llama.cpp does
                for b in s.encode("utf-8", "surrogateescape"):
                    result.extend(self._byte_ids[b])
        return tuple(result)

    def _normal_piece(self, text: str) -> bytes:
        return text.replace("\u2581", " ").encode("utf-8", "surrogateescape")

    def _byte_piece(self, text: str) -> bytes:
        return bytes([int(text[3:5], 16)])  # "<0xNN>"


class SPMTokenizer(Tokenizer):
    """SentencePiece-style BPE (``tokenizer.ggml.model == "llama"``), e.g. Gemma 3."""

    def __init__(self, vocab: Vocabulary) -> None:
        super().__init__(vocab)
        ids = vocab._ids
        # The token of each byte for byte fallback: <0xNN>, else the byte as text
        # (llama.cpp's byte_to_token), else <unk>; a byte with none of them is dropped.
        self._byte_ids: list[tuple[int, ...]] = []
        for b in range(256):
            tid = ids.get(f"<0x{b:02X}>")
            if tid is None:
                tid = ids.get(chr(b)) if b < 128 else None
            if tid is None:
                tid = vocab.unk_token_id
            self._byte_ids.append(() if tid is None else (tid,))
        self._scores = vocab.scores.tolist()
        self._inner_space_tokens = [t for t in vocab.tokens if "\u2581" in t[1:]]

    @classmethod
    def from_metadata(cls, md: Mapping[str, Any]) -> "SPMTokenizer":
        return cls(Vocabulary.from_metadata(md))

    def _encode_text(self, text: str, out: list[int], after_special: bool) -> None:
        if self.vocab.add_space_prefix and after_special:
            text = " " + text
        self._encode_words(self._words(text.replace(" ", "\u2581")), out)

    def _words(self, text: str) -> list[str]:
        """``text`` cut before each ``▁`` that no merge can cross.

        A merged symbol is always a token, so a symbol can only span a ``▁`` at
        an inner position if some token has a ``▁`` there; the cuts avoid every
        occurrence of such tokens (Gemma 3 has one, ``>▁</``).  Merges in
        separate words never interact, so merging word by word gives the same
        ids as merging the whole text, and lets words be cached.
        """
        if "\u2581" not in text:
            return [text]
        blocked: set[int] = set()
        for tok in self._inner_space_tokens:
            inner = [j for j in range(1, len(tok)) if tok[j] == "\u2581"]
            at = text.find(tok)
            while at >= 0:
                blocked.update(at + j for j in inner)
                at = text.find(tok, at + 1)
        words = []
        start = 0
        at = text.find("\u2581", 1)
        while at >= 0:
            if at not in blocked:
                words.append(text[start:at])
                start = at
            at = text.find("\u2581", at + 1)
        words.append(text[start:])
        return words

    def _encode_word(self, text: str) -> tuple[int, ...]:
        """SentencePiece BPE on one word: a linked list of symbols and a heap of
        candidate pairs, best score first, leftmost on ties (llama.cpp's llm_bigram_spm)."""
        ids = self.vocab._ids
        scores = self._scores
        n = len(text)
        sym = list(text)
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        prev = list(range(-1, n - 1))
        heap: list[tuple[float, int, int, int]] = []
        for i in range(n - 1):
            merged = sym[i] + sym[i + 1]
            tid = ids.get(merged)
            if tid is not None:
                heap.append((-scores[tid], i, i + 1, len(merged)))
        heapq.heapify(heap)
        push = heapq.heappush
        pop = heapq.heappop
        while heap:
            _, left, right, size = pop(heap)
            ls, rs = sym[left], sym[right]
            if not ls or not rs or len(ls) + len(rs) != size:
                continue  # one side has been merged since
            merged = ls + rs
            sym[left] = merged
            sym[right] = ""
            after = nxt[right]
            nxt[left] = after
            if after >= 0:
                prev[after] = left
            before = prev[left]
            if before >= 0:
                m = sym[before] + merged
                tid = ids.get(m)
                if tid is not None:
                    push(heap, (-scores[tid], before, left, len(m)))
            if after >= 0:
                m = merged + sym[after]
                tid = ids.get(m)
                if tid is not None:
                    push(heap, (-scores[tid], left, after, len(m)))
        out = []
        byte_ids = self._byte_ids
        i = 0
        while i >= 0:
            s = sym[i]
            tid = ids.get(s)
            if tid is not None:
                out.append(tid)
            else:
                for b in s.encode("utf-8"):
                    out.extend(byte_ids[b])
            i = nxt[i]
        return tuple(out)

    def _normal_piece(self, text: str) -> bytes:
        return text.replace("\u2581", " ").encode("utf-8", "surrogateescape")

    def _byte_piece(self, text: str) -> bytes:
        return bytes([int(text[3:5], 16)])  # "<0xNN>"
