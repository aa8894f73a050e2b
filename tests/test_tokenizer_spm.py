"""SentencePiece-style tokenizer (tokenizer.ggml.model == "llama").

Three independent checks:
* a tiny vocabulary with hand-chosen scores, where every expected segmentation is
  worked out by hand in the comments;
* Gemma 3's 262,144-token vocabulary: hand-verified cases (pieces named, so the
  ids come from the vocabulary), a naive quadratic merge loop written here from
  the SentencePiece BPE rule, and the `sentencepiece` library itself running a
  BPE model built from the same pieces, scores and types (user-defined pieces
  with their spaces written as U+2581: sentencepiece matches them after escaping
  whitespace, llama.cpp before, which comes to the same);
* round trips (hypothesis).
"""
import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from infer.tokenizer import SPMTokenizer, Tokenizer, TokenType, Vocabulary
from _tok_models import gemma3_missing, gemma3_path, metadata, sentencepiece_reference

N, U, C, D, B = (TokenType.NORMAL, TokenType.UNKNOWN, TokenType.CONTROL,
                 TokenType.USER_DEFINED, TokenType.BYTE)


# ---- a tiny vocabulary ---------------------------------------------------------

def tiny(add_space_prefix=False, extra=()):
    pieces = [("<unk>", U, 0.0), ("<s>", C, 0.0), ("</s>", C, 0.0)]
    pieces += [(f"<0x{b:02X}>", B, 0.0) for b in range(256)]
    pieces += [("a", N, -1.0), ("b", N, -1.0), ("c", N, -1.0), ("▁", N, -1.0),
               ("ab", N, -5.0), ("bc", N, -3.0), ("abc", N, -4.0), ("aa", N, -2.0),
               ("▁a", N, -6.0), ("<u>", D, 0.0)]
    pieces += list(extra)
    tokens = [p[0] for p in pieces]
    vocab = Vocabulary(tokens, np.array([p[1] for p in pieces], dtype=np.int32),
                       np.array([p[2] for p in pieces], dtype=np.float32),
                       bos_token_id=1, eos_token_id=2, unk_token_id=0, add_bos=True,
                       add_space_prefix=add_space_prefix)
    return SPMTokenizer(vocab)


def ids_of(tok, pieces):
    return [tok.vocab.token_id(p) for p in pieces]


def test_tiny_score_order():
    t = tiny()
    # pairs of "abc": ab (-5), bc (-3): bc first -> [a, bc]; then a+bc = abc (-4) -> [abc]
    assert t.encode("abc", add_special=False) == ids_of(t, ["abc"])
    # "abb": ab (-5) only (bb is no token) -> [ab, b]
    assert t.encode("abb", add_special=False) == ids_of(t, ["ab", "b"])
    # "aaa": aa at 0 and at 1 tie (-2): leftmost -> [aa, a]; "aaa" is no token
    assert t.encode("aaa", add_special=False) == ids_of(t, ["aa", "a"])
    # "aabc": aa (-2) beats bc (-3) and ab (-5): [aa, b, c] -> bc -> [aa, bc]
    assert t.encode("aabc", add_special=False) == ids_of(t, ["aa", "bc"])


def test_tiny_spaces_bytes_user_defined():
    t = tiny()
    # the space becomes ▁; pairs ▁a (-6) and ab (-5): ab first, and ▁ab is no piece
    assert t.encode(" ab", add_special=False) == ids_of(t, ["▁", "ab"])
    # ▁a (-6) is the only pair of "▁ac"
    assert t.encode(" ac", add_special=False) == ids_of(t, ["▁a", "c"])
    # é is no token: its UTF-8 bytes C3 A9 as byte tokens
    assert t.encode("é", add_special=False) == ids_of(t, ["<0xC3>", "<0xA9>"])
    # user-defined <u> is cut out before merging, even without parse_special
    assert t.encode("a<u>b", add_special=False) == ids_of(t, ["a", "<u>", "b"])
    # control <s> is text without parse_special: < s > are bytes
    assert t.encode("<s>", add_special=False) == ids_of(t, ["<0x3C>", "<0x73>", "<0x3E>"])
    assert t.encode("<s>a", parse_special=True) == [1, 1] + ids_of(t, ["a"])
    assert t.encode("ab") == [1] + ids_of(t, ["ab"])


def test_tiny_add_space_prefix():
    t = tiny(add_space_prefix=True)
    # a space is put before the text, and after each special token
    assert t.encode("ac", add_special=False) == ids_of(t, ["▁a", "c"])
    assert t.encode("a<s>a", add_special=False, parse_special=True) == \
        ids_of(t, ["▁a", "<s>", "▁a"])
    # decode drops that one leading space again
    assert t.decode(t.encode("ac", add_special=False)) == "ac"
    assert t.decode(t.encode(" ac", add_special=False)) == " ac"
    assert t.decode(t.encode("ac"), skip_special=True) == " ac"  # llama.cpp keeps it after BOS


def test_tiny_decode():
    t = tiny()
    ids = t.encode("é abc<u>", parse_special=True)
    assert t.decode(ids) == "<s>é abc<u>"
    assert t.decode(ids, skip_special=True) == "é abc<u>"
    assert t.token_to_piece(t.vocab.token_id("<0xC3>")) == b"\xc3"
    assert t.token_to_piece(t.vocab.token_id("▁a")) == b" a"
    with pytest.raises(ValueError, match="lone surrogate"):
        t.encode("\udfff")


# ---- Gemma 3 ---------------------------------------------------------------------

GEMMA = gemma3_path()
needs_gemma = pytest.mark.skipif(GEMMA is None, reason=gemma3_missing())


@pytest.fixture(scope="module")
def gmd():
    return metadata(GEMMA)


@pytest.fixture(scope="module")
def gemma(gmd):
    return Tokenizer.from_metadata(gmd)


@needs_gemma
def test_gemma_vocabulary(gemma, gmd):
    v = gemma.vocab
    assert isinstance(gemma, SPMTokenizer)
    assert v.size == 262144
    assert (v.bos_token_id, v.eos_token_id, v.unk_token_id, v.pad_token_id) == (2, 1, 3, 0)
    assert v.eot_token_id == v.token_id("<end_of_turn>") == 106
    # <eos>, <end_of_turn>, and </s>, which llama.cpp ends generation at wherever a
    # vocabulary has it (tests/test_vocab_specials.py has its recorded ids)
    assert v.end_of_turn_ids == frozenset({1, 106, v.token_id("</s>")}) and v.token_id("</s>") == 212
    assert v.add_bos and not v.add_eos and not v.add_space_prefix
    assert v.merges is None
    assert v.token_id("<start_of_turn>") == 105 and v.is_control(105)
    assert v.is_byte(v.token_id("<0x0A>")) and v.is_user_defined(v.token_id("\n"))


@needs_gemma
@pytest.mark.parametrize("text, pieces", [
    # whole words are pieces; the space goes with the next word as ▁
    ("Hello world!", ["Hello", "▁world", "!"]),
    # runs of spaces and newlines are user-defined pieces, cut out before merging
    ("x   y", ["x", "   ", "y"]),
    ("x y", ["x", "▁y"]),
    ("a\n\nb", ["a", "\n\n", "b"]),
    ("<table>", ["<table>"]),
    # 😀 is a piece; U+2000B is not: its four UTF-8 bytes as byte tokens
    ("😀", ["😀"]),
    ("\U0002000b", ["<0xF0>", "<0xA0>", "<0x80>", "<0x8B>"]),
])
def test_gemma_hand_verified(gemma, text, pieces):
    v = gemma.vocab
    for p in pieces:
        assert p in v.tokens
    if len(pieces) == 4:
        assert "\U0002000b" not in v.tokens
    assert gemma.encode(text, add_special=False) == [v.token_id(p) for p in pieces]
    assert gemma.encode(text) == [2] + [v.token_id(p) for p in pieces]


@needs_gemma
def test_gemma_unbelievable_by_scores(gemma):
    """'unbelievable' by the merge rule, worked through with the vocabulary's scores:
    the best merges are taken in turn until no adjacent pair forms a piece."""
    v = gemma.vocab
    ids = gemma.encode("unbelievable", add_special=False)
    assert ids == naive_spm("unbelievable", v)
    assert [v.tokens[i] for i in ids] == ["un", "bel", "ievable"]
    # the pieces a longer-match tokenizer would want are not in the vocabulary
    assert "unbel" not in v.tokens and "believ" not in v.tokens


def naive_spm(text, vocab):
    """SentencePiece BPE, quadratic: merge the adjacent pair whose concatenation is
    the best-scoring piece (leftmost on ties) until none is a piece."""
    ids = vocab._ids
    scores = vocab.scores
    syms = list(text.replace(" ", "▁"))
    while True:
        best, best_score = None, None
        for i in range(len(syms) - 1):
            t = ids.get(syms[i] + syms[i + 1])
            if t is not None and (best is None or scores[t] > best_score):
                best, best_score = i, scores[t]
        if best is None:
            break
        syms[best:best + 2] = [syms[best] + syms[best + 1]]
    out = []
    for s in syms:
        if s in ids:
            out.append(ids[s])
        else:
            out.extend(ids[f"<0x{b:02X}>"] for b in s.encode("utf-8"))
    return out


GEMMA_TEXTS = [
    "The quick brown fox jumps over the lazy dog.", "def f(x):\n    return x ** 2\n",
    "日本語のテキスト 😀 emoji 👨‍👩‍👧", "Ünïcödé àccents ñ ß Ωμέγα Кириллица", "I'm you're 12345",
    "\x00\x01 control", "a" * 40, "tabs\t\tand  spaces   ",
    # '>▁</' is Gemma's one piece with an inner ▁: no word cut may fall inside it
    "<a> </a> x> </y", "a> </b>> </", "> </ > </", " > </",
]


def random_texts(n, seed):
    rnd = random.Random(seed)
    alpha = [chr(c) for c in list(range(0x20, 0x250)) + list(range(0x3040, 0x3100))
             + list(range(0x1F600, 0x1F650)) + [0x2000B, 0x0, 0x7F]] + list("  \n\t") * 10
    return ["".join(rnd.choice(alpha) for _ in range(rnd.randint(1, 40))) for _ in range(n)]


@needs_gemma
def test_gemma_matches_naive_merge_loop(gemma):
    for text in GEMMA_TEXTS + random_texts(150, 7):
        parts = gemma._splitter_user.split(text)
        expected = []
        for part in parts:
            expected += [part] if isinstance(part, int) else naive_spm(part, gemma.vocab)
        assert gemma.encode(text, add_special=False) == expected, repr(text)


@needs_gemma
def test_gemma_matches_sentencepiece(gemma, gmd):
    pytest.importorskip("sentencepiece")
    sp = sentencepiece_reference(gmd)
    for text in GEMMA_TEXTS + random_texts(1000, 11):
        assert gemma.encode(text, add_special=False) == sp.encode(text), repr(text)


@needs_gemma
def test_gemma_parse_special(gemma):
    v = gemma.vocab
    text = "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    ids = gemma.encode(text, parse_special=True)
    plain = lambda s: gemma.encode(s, add_special=False)  # noqa: E731
    assert ids == [2, 105] + plain("user\nHi") + [106, v.token_id("\n"), 105] + plain("model\n")
    assert 105 not in gemma.encode(text)
    assert gemma.decode(ids) == "<bos>" + text
    assert gemma.decode(ids, skip_special=True) == "user\nHi\nmodel\n"


@needs_gemma
def test_gemma_stream_decoder_with_byte_tokens(gemma):
    text = "a\U0002000b b 日本 😀"
    ids = gemma.encode(text)
    dec = gemma.stream_decoder(skip_special=True)
    chunks = [dec.feed(i) for i in ids] + [dec.flush()]
    assert "".join(chunks) == text
    assert not any("\ufffd" in c for c in chunks)
    assert chunks.count("") >= 3  # the first three byte tokens of U+2000B emit nothing


@needs_gemma
@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",))))
def test_gemma_round_trip(text):
    tok = _gemma()
    assert tok.decode(tok.encode(text, add_special=False)) == text
    assert tok.decode(tok.encode(text), skip_special=True) == text
    assert tok.decode(tok.encode(text, parse_special=True), skip_special=False) == "<bos>" + text


_G = []


def _gemma():
    if not _G:
        _G.append(Tokenizer.from_metadata(metadata(GEMMA)))
    return _G[0]


def st_partition_literal(text, specials):
    """llama.cpp's tokenizer_st_partition written out literally: for each special
    text, longest first, cut its leftmost non-overlapping occurrences out of every
    raw fragment left."""
    fragments = [text]
    for tok in sorted(specials, key=lambda t: (-len(t), specials[t])):
        out = []
        for frag in fragments:
            if isinstance(frag, int):
                out.append(frag)
                continue
            pos = 0
            while True:
                at = frag.find(tok, pos)
                if at < 0:
                    break
                if at > pos:
                    out.append(frag[pos:at])
                out.append(specials[tok])
                pos = at + len(tok)
            if pos < len(frag):
                out.append(frag[pos:])
        fragments = out
    return fragments


@needs_gemma
@pytest.mark.parametrize("parse_special", [False, True])
def test_gemma_special_split_matches_literal_partition(gemma, parse_special):
    v = gemma.vocab
    kinds = (TokenType.USER_DEFINED, TokenType.CONTROL, TokenType.UNKNOWN) if parse_special \
        else (TokenType.USER_DEFINED,)
    specials = {t: i for i, t in enumerate(v.tokens) if v.token_types[i] in kinds}
    splitter = gemma._splitter_all if parse_special else gemma._splitter_user
    rnd = random.Random(3)
    pieces = ["\n", " ", "\t", "x", "<table>", "</td>", "<start_of_turn>", "<bos>", "<", ">",
              "ab", "<unused12>", "[multimodal]"]
    texts = ["".join(rnd.choice(pieces) * rnd.choice([1, 1, 2, 3, 7, 40]) for _ in range(30))
             for _ in range(150)]
    texts += ["\n" * 75 + " " * 100 + "\t" * 33, " x  y   z" * 3, "<table><table>"]
    for text in texts:
        assert splitter.split(text) == st_partition_literal(text, specials), repr(text)


def test_tiny_stream_decoder_matches_decode():
    """Streaming gives decode()'s text, prefix-space rule included, one id at a time."""
    for prefix in (False, True):
        t = tiny(add_space_prefix=prefix)
        for text in ("ac é abc", " ac", "é"):
            for skip in (False, True):
                ids = t.encode(text)
                dec = t.stream_decoder(skip_special=skip)
                chunks = [dec.feed(i) for i in ids] + [dec.flush()]
                assert "".join(chunks) == t.decode(ids, skip_special=skip), (prefix, text, skip)
                assert not any("\ufffd" in c for c in chunks)
