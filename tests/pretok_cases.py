"""The texts and the vocabulary on which llama.cpp's pre-tokenizers were recorded
(tests/data/llama_cpp_pretok_ids.json, scripts/record_pretok_ids.py) and are replayed
(tests/test_tokenizer_pretok.py).

The vocabulary is SmolLM2's (the default model's tokens and merges) with merges put in
front that make the split points show in the ids: every non-ASCII character of the
corpus becomes one token, then each pair of neighbouring characters in the corpus (those of
two kinds first: a letter and a digit, lower and upper case, a word and a space), and
every run of two or three digits.  A cut that one pre-tokenizer makes and another does
not then changes which of these merges apply.  A few words are tokens that no merge
makes, which only ignore_merges finds.
"""
from __future__ import annotations

import hashlib
import json
import unicodedata
from typing import Any

from _tok_models import metadata, smollm2_path

from infer.tokenizer import BYTE_TO_UNICODE

#: texts that tell split rules apart: digit runs of 1 to 7, CJK, kana and Hangul,
#: contractions in both cases, runs of spaces, tabs and newlines before words, emoji,
#: code, accented Latin (composed and not), Arabic, mixed scripts, outer whitespace
CORPUS = [
    "1 22 333 4444 55555 666666 7777777",
    "a1b22c333d4444e55555f666666g7777777 12345678901234567890",
    "Price: $1234567.89, 12,345 and 0.5% (x2)",
    "中文字符和日本語のテキスト、カタカナ。",
    "こんにちは世界 ひらがな カタカナ 漢字 ｶﾀｶﾅ",
    "한국어 텍스트입니다. 안녕하세요! ㄱㄴㄷ ㄅㄆㄇ",
    "I'm you're he's we've they'll I'd it's",
    "I'M YOU'RE HE'S WE'VE THEY'LL I'D IT'S Don'T wOn'T",
    "  two spaces,   three,\t\ttabs\n\nnewlines\r\n  indented\n\t\tcode",
    "    four before word\n        eight\n\n\n   three newlines",
    "emoji 😀👍🏽 family 👨\u200d👩\u200d👧 flags 🇫🇷!",
    "def f(x):\n    return x**2 + y[i] // 3  # comment\n",
    'if (a && b) { c->d = e[0]; } else { printf("%d\\n", x); }',
    "naïve café résumé Ångström über straße ÉCOLE école aÉb",
    "cafe\u0301 e\u0301le\u0300ve n\u0303o",
    "مرحبا بالعالم ١٢٣٤٥ العربية، نعم.",
    "Привет мир! Ελληνικά γλώσσα",
    "mixed中文English한국어123日本語abc",
    "   leading and trailing   ",
    "\n\nleading newlines, trailing newlines\n\n",
    " ",
    "\t",
    "\n",
    "CamelCaseWord XMLHttpRequest iPhone McDonald's",
    "ＡＢＣ１２３ fullwidth　ideographic　space",
    "word\u00a0nbsp\u2003emspace \u3000 ideographic",
    "नमस्ते दुनिया। हिन्दी",
    "ไทยภาษา ພາສາລາວ ខ្មែរ မြန်မာ",
    "<sentinel:12> IMGIMGABCZ chameleon",
    "a.b,c!d?e…f。g，h、i۔j،k",
    "Türkiye'nin başkenti Ankara'dır.",
    "x = 3.14159; y=-2e10; z = 0x1F",
    "™ © ® ° ± × ÷ € £ ¥ § ¶ ①②③ ²³ ½ Ⅻ",
    "path/to/file.txt and a?b=c&d=e // x/",
    "end with space ",
    "tab\tseparated\tvalues\t",
    "中 文 中文 ,中文",
    "東京タワー123と大阪城 4567年",
]

#: words of the corpus added as tokens without merges that make them
UNMERGED = (" Ankara", " başkenti", "Ankara", "başkenti")

#: the text recorded with BOS/EOS added as each name's vocabulary says
SPECIAL_TEXT = "Hello world"


def _byte_level(text: str) -> str:
    return "".join(BYTE_TO_UNICODE[b] for b in text.encode("utf-8"))


def _kind(c: str) -> str:
    return c if c.isspace() else unicodedata.category(c)


def _rank_of_pair(a: str, b: str) -> int:
    """0 for the pairs some split rules cut and others keep: lower then upper case
    (GPT-4o, Tekken), a letter then an apostrophe (GPT-4o's contractions, Turkish
    suffixes), a letter then a space (EXAONE MoE's word runs), a letter then a
    combining mark (Qwen 3.5), punctuation then a newline (Qwen 2, Seed-Coder), a
    contraction's letter then more letters; 1 for other pairs of two kinds; 2 else."""
    ka, kb = _kind(a), _kind(b)
    if ((ka == "Ll" and kb == "Lu") or (ka[0] == "L" and b in "' ") or (ka[0] in "LN" and kb[0] == "M")
            or (ka[0] == "P" and b in "\r\n") or a + b == "dı"):
        return 0
    return 1 if ka != kb else 2


def _extra_merges(tokens: list[str]) -> tuple[list[str], list[str]]:
    """The merges put before SmolLM2's and the tokens they make that it lacks."""
    merges: list[str] = []
    made: list[str] = []
    known = set(tokens)

    def merge(left: str, right: str) -> None:
        merges.append(f"{left} {right}")
        if left + right not in known:
            known.add(left + right)
            made.append(left + right)

    text = "".join(CORPUS)
    non_ascii = sorted({c for c in text if ord(c) > 127})
    for c in non_ascii:
        b = _byte_level(c)
        for i in range(1, len(b)):
            merge(b[:i], b[i])
    # Pairs where split rules differ first: merged early, they show a cut there.
    pairs = sorted({(a, b) for line in CORPUS for a, b in zip(line, line[1:])},
                   key=lambda ab: (_rank_of_pair(*ab), ab))
    for a, b in pairs:
        merge(_byte_level(a), _byte_level(b))
    digits = "0123456789"
    for a in digits:
        for b in digits:
            merge(a, b)
    for a in digits:
        for b in digits:
            for c in digits:
                merge(a + b, c)
                merge(a, b + c)
    # tokens no merge makes: only ignore_merges takes a piece that is one of them whole
    for word in UNMERGED:
        if _byte_level(word) not in known:
            known.add(_byte_level(word))
            made.append(_byte_level(word))
    return merges, made


def vocabulary_metadata(pre: str) -> dict[str, Any]:
    """The test vocabulary as GGUF metadata with ``tokenizer.ggml.pre`` = ``pre`` (no
    add_bos_token key: each name's own default applies)."""
    md = metadata(smollm2_path())
    tokens = list(md["tokenizer.ggml.tokens"])
    merges, made = _extra_merges(tokens)
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens + made,
        "tokenizer.ggml.token_type": [int(t) for t in md["tokenizer.ggml.token_type"]] + [1] * len(made),
        "tokenizer.ggml.merges": merges + list(md["tokenizer.ggml.merges"]),
        "tokenizer.ggml.bos_token_id": int(md["tokenizer.ggml.bos_token_id"]),
        "tokenizer.ggml.eos_token_id": int(md["tokenizer.ggml.eos_token_id"]),
    }


def vocabulary_sha256(md: dict[str, Any]) -> str:
    """Of the tokens, types and merges (what llama.cpp read must be what is replayed)."""
    keys = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges")
    return hashlib.sha256(json.dumps([md[k] for k in keys]).encode()).hexdigest()


def write(md: dict[str, Any], path: str) -> str:
    """A vocabulary-only GGUF (a llama header, no tensors) that llama.cpp loads with vocab_only."""
    import gguf

    w = gguf.GGUFWriter(path, "llama")
    for key, value in (("context_length", 64), ("embedding_length", 8), ("block_count", 1),
                       ("feed_forward_length", 8), ("attention.head_count", 1)):
        w.add_uint32(f"llama.{key}", value)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_string("tokenizer.ggml.model", md["tokenizer.ggml.model"])
    w.add_string("tokenizer.ggml.pre", md["tokenizer.ggml.pre"])
    w.add_array("tokenizer.ggml.tokens", md["tokenizer.ggml.tokens"])
    w.add_array("tokenizer.ggml.token_type", md["tokenizer.ggml.token_type"])
    w.add_array("tokenizer.ggml.merges", md["tokenizer.ggml.merges"])
    w.add_uint32("tokenizer.ggml.bos_token_id", md["tokenizer.ggml.bos_token_id"])
    w.add_uint32("tokenizer.ggml.eos_token_id", md["tokenizer.ggml.eos_token_id"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
