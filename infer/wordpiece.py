"""WordPiece (``tokenizer.ggml.model == "bert"``), as llama.cpp's ``llm_tokenizer_wpm``.

The GGUF vocabulary marks word starts, not continuations: the converter turns
BERT's ``hello`` into ``▁hello`` and ``##lo`` into ``lo`` (control tokens such as
``[CLS]`` stay as they are).  Encoding a piece of text:

1. Normalise each code point as llama.cpp does: with ``strip_accents``, replace it
   by the first code point of its NFD decomposition (``é`` -> ``e``: one code point
   in, one out) and drop combining marks (category M); with ``lowercase``, take its
   simple lowercase mapping.  Controls (category C), U+0000 and U+FFFD are dropped.
2. Cut words at whitespace, and make each punctuation character (category P), each
   ASCII symbol (``$+<=>^`|~``) and each CJK ideograph a word of its own.
3. Greedy longest match first over ``▁`` + word; a word some part of which matches
   no token becomes ``[UNK]`` as a whole.

With ``add_special``, ``[CLS]`` (the BOS id) comes first and ``[SEP]`` last,
whatever ``add_bos_token`` says: llama.cpp adds both for every WordPiece vocabulary.
Decoding joins the pieces (``▁`` read as a space) and applies llama.cpp's
``clean_spaces`` (" ." -> ".", " 's" -> "'s", ...).
"""
from __future__ import annotations

import unicodedata
from typing import Any, Mapping, Optional

from .tokenizer import Tokenizer, Vocabulary

__all__ = ["WordPieceTokenizer", "wordpiece_words"]

#: llama.cpp's ids for a WordPiece vocabulary whose file names none (BERT's vocab.txt)
_DEFAULT_IDS = {"tokenizer.ggml.bos_token_id": 101, "tokenizer.ggml.unknown_token_id": 100,
                "tokenizer.ggml.padding_token_id": 0}
_DEFAULT_SEP = 102
_SEP_KEY = "tokenizer.ggml.seperator_token_id"  # sic: the GGUF key is spelt so

#: llama.cpp's whitespace set (unicode-data.cpp, from PropList's White_Space)
_WHITESPACE = frozenset([*range(0x09, 0x0E), *range(0x2000, 0x200B), 0x20, 0x85, 0xA0, 0x1680,
                         0x2028, 0x2029, 0x202F, 0x205F, 0x3000])

#: CJK ideograph blocks that are words of their own (llama.cpp's is_chinese_char,
#: with its 0x2B920 start where BERT's has 0x2B820)
_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _is_cjk(cpt: int) -> bool:
    return any(lo <= cpt <= hi for lo, hi in _CJK)


def _lower(c: str) -> str:
    """The simple (one code point) lowercase mapping llama.cpp's table holds; Python's
    full mapping differs only for U+0130, whose first code point is the simple one."""
    low = c.lower()
    return low if len(low) == 1 else low[0]


def wordpiece_words(text: str, lowercase: bool = True, strip_accents: bool = True) -> list[str]:
    """``text`` normalised and cut into words as llama.cpp's WordPiece preprocessing does."""
    words: list[str] = []
    word: list[str] = []
    for c in text:
        if strip_accents:
            c = unicodedata.normalize("NFD", c)[0]
        cpt = ord(c)
        if cpt in _WHITESPACE:
            if word:
                words.append("".join(word))
                word = []
            continue
        category = unicodedata.category(c)
        if cpt == 0 or cpt == 0xFFFD or (category[0] == "C" and category != "Cn"):
            continue
        if strip_accents and category[0] == "M":
            continue
        if lowercase:
            c = _lower(c)
        if category[0] == "P" or (cpt < 0x7F and category[0] == "S") or _is_cjk(cpt):
            if word:
                words.append("".join(word))
                word = []
            words.append(c)
        else:
            word.append(c)
    if word:
        words.append("".join(word))
    return words


class WordPieceTokenizer(Tokenizer):
    """BERT's WordPiece over a GGUF ``bert`` vocabulary (see the module's docstring)."""

    def __init__(self, vocab: Vocabulary, sep_token_id: Optional[int], lowercase: bool = True,
                 strip_accents: bool = True) -> None:
        super().__init__(vocab)
        if vocab.unk_token_id is None:
            raise ValueError("a WordPiece vocabulary needs an unknown token ([UNK]); the file names none")
        self.sep_token_id = sep_token_id
        self.lowercase = lowercase
        self.strip_accents = strip_accents
        #: llama.cpp's add_sep: a rerank pair puts [SEP] between query and document
        self.add_sep = True
        self._max_len = max(len(t) for t in vocab.tokens)

    @classmethod
    def from_metadata(cls, md: Mapping[str, Any]) -> "WordPieceTokenizer":
        tokens = md.get("tokenizer.ggml.tokens")
        n = len(tokens) if isinstance(tokens, (list, tuple)) else 0
        filled = dict(md)
        # llama.cpp's defaults fill keys the file lacks (only when in range: it drops them otherwise)
        for key, value in _DEFAULT_IDS.items():
            if filled.get(key) is None and value < n:
                filled[key] = value
        filled.setdefault("tokenizer.ggml.add_bos_token", True)
        vocab = Vocabulary.from_metadata(filled)
        sep = md.get(_SEP_KEY)
        if sep is None:
            sep = _DEFAULT_SEP if _DEFAULT_SEP < n else None
        elif isinstance(sep, bool) or not isinstance(sep, int) or not 0 <= sep < n:
            raise ValueError(f"metadata {_SEP_KEY!r}: {sep!r} is not a token id of the vocabulary [0, {n})")
        lowercase = md.get("tokenizer.ggml.normalizer.lowercase", True)
        strip = md.get("tokenizer.ggml.normalizer.strip_accents", lowercase)
        for key, value in (("lowercase", lowercase), ("strip_accents", strip)):
            if not isinstance(value, bool):
                raise TypeError(f"metadata 'tokenizer.ggml.normalizer.{key}': expected a bool, "
                                f"got {type(value).__name__}")
        add_sep = md.get("tokenizer.ggml.add_sep_token", True)
        if not isinstance(add_sep, bool):
            raise TypeError(f"metadata 'tokenizer.ggml.add_sep_token': expected a bool, got {type(add_sep).__name__}")
        tokenizer = cls(vocab, sep, lowercase, strip)
        tokenizer.add_sep = add_sep
        return tokenizer

    def _encode(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        out = super()._encode(text, False, parse_special)
        if not add_special:
            return out
        bos, sep = self.vocab.bos_token_id, self.sep_token_id
        if bos is None or sep is None:
            raise ValueError("this WordPiece vocabulary has no [CLS] (BOS) or no [SEP] token to add; "
                             "encode with add_special=False")
        return [bos, *out, sep]

    def _encode_text(self, text: str, out: list[int], after_special: bool) -> None:
        self._encode_words(wordpiece_words(text, self.lowercase, self.strip_accents), out)

    def _encode_word(self, word: str) -> tuple[int, ...]:
        ids = self.vocab._ids
        text = "\u2581" + word
        n = len(text)
        found: list[int] = []
        i = 0
        while i < n:
            for j in range(min(n, i + self._max_len), i, -1):
                tid = ids.get(text[i:j])
                if tid is not None:
                    found.append(tid)
                    i = j
                    break
            else:  # a part of the word matches nothing: the whole word is unknown
                return (self.vocab.unk_token_id,)  # type: ignore[return-value]
        return tuple(found)

    def _normal_piece(self, text: str) -> bytes:
        return text.replace("\u2581", " ").encode("utf-8", "surrogateescape")

    def decode(self, ids: Any, skip_special: bool = False) -> str:
        """Text of ``ids`` with llama.cpp's clean_spaces applied, as its detokenize does
        for WordPiece vocabularies."""
        raw = b"".join(self._pieces_of(ids, skip_special))
        return clean_spaces(raw).decode("utf-8", errors="replace")


def clean_spaces(text: bytes) -> bytes:
    """llama.cpp's three clean_spaces passes over the detokenized bytes: drop the space
    before ``? ! . ,``; turn `` ' `` into ``'``; drop the space before ``'s 'm 're 've``."""
    if not text:
        return text
    out = bytearray(text[:1])
    for i in range(1, len(text)):
        if text[i - 1:i] == b" " and text[i:i + 1] in (b"?", b"!", b".", b","):
            out.pop()
        out.append(text[i])
    first = bytearray(out)
    out = bytearray(first[:1])
    i = 1
    while i < len(first):
        x = first[i]
        if x == 0x27 and i + 1 < len(first) and first[i - 1] == 0x20 and first[i + 1] == 0x20:
            out.pop()
            out.append(x)
            first[i + 1] = 0  # llama.cpp blanks the next space in place and skips it
            i += 2
            continue
        out.append(x)
        i += 1
    second = bytes(out)
    out = bytearray(second[:1])
    for i in range(1, len(second)):
        if second[i - 1:i] == b" " and second[i:i + 1] == b"'" and i + 1 < len(second):
            after = second[i + 1:i + 3]
            if after[:1] in (b"s", b"m") or after in (b"re", b"ve"):
                out.pop()
        out.append(second[i])
    return bytes(out)
