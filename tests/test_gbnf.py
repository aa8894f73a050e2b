"""GBNF grammars (infer.gbnf) read as llama.cpp's grammar parser reads them.

References: the languages below are worked out by hand from the GBNF rules of
llama.cpp's grammars/README.md (a string is in the language or not); generated
text is checked with `json`, `re` and hand-written checks, never with llguidance.
The grammar texts are small copies of llama.cpp's grammars/*.gbnf (MIT).
"""
import json
import re

import pytest

pytest.importorskip("llguidance")

import infer  # noqa: E402
from infer.gbnf import GbnfError, to_lark  # noqa: E402
from infer.structured import Constraint, Grammar, GrammarError  # noqa: E402
from _tok_models import load_installed  # noqa: E402

JSON_GBNF = r'''# Grammar for subset of JSON - doesn't support full string or number syntax

root  ::= object
value ::= object | array | string | number | boolean

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}"

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]"

string  ::=
  "\"" (
    [\x20\x21\x23-\x5b\x5d-\U0010FFFF] | # any code point except " (\x22) and \ (\x5c)
    "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F]) # escapes
  )* "\""

# Only plain integers currently
number  ::= "-"? [0-9]+ ws
boolean ::= ("true" | "false") ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= ([ \t\n] ws)?
'''

LIST_GBNF = r'''root ::= item+

# Excludes various line break characters
item ::= "- " [^\r\n\x0b\x0c\x85\u2028\u2029]+ "\n"
'''

CHESS_GBNF = r'''root    ::= "1. " move " " move "\n" ([1-9] [0-9]? ". " move " " move "\n")+
move    ::= (pawn | nonpawn | castle) [+#]?
nonpawn ::= [NBKQR] [a-h]? [1-8]? "x"? [a-h] [1-8]
pawn    ::= ([a-h] "x")? [a-h] [1-8] ("=" [NBKQR])?
castle  ::= "O-O" "-O"?
'''

ENGLISH_GBNF = r'''# note: this might be incomplete, mostly an example
root        ::= en-char+ ([ \t\n] en-char+)*
en-char     ::= letter | digit | punctuation
letter      ::= [a-zA-Z]
digit       ::= [0-9]
punctuation ::= [!"#$%&'()*+,-./:;<=>?@[\\\]^_`{|}~]
'''

JAPANESE_GBNF = r'''# A probably incorrect grammar for Japanese
root        ::= jp-char+ ([ \t\n] jp-char+)*
jp-char     ::= hiragana | katakana | punctuation | cjk
hiragana    ::= [ぁ-ゟ]
katakana    ::= [ァ-ヿ]
punctuation ::= [、-〾]
cjk         ::= [一-鿿]
'''

ARITHMETIC_GBNF = r'''root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*
'''

LLAMA_CPP_GRAMMARS = {"json": JSON_GBNF, "list": LIST_GBNF, "chess": CHESS_GBNF, "english": ENGLISH_GBNF,
                      "japanese": JAPANESE_GBNF, "arithmetic": ARITHMETIC_GBNF}


@pytest.fixture(scope="module")
def smollm2():
    with load_installed("smollm2") as m:
        yield m


def accepts(model, gbnf, text):
    """Whether the grammar admits ``text`` whole: every token of it allowed by the mask
    in turn, and the grammar complete after the last."""
    c = Constraint(Grammar.gbnf(gbnf), model.tokenizer, background=False)
    for t in model.tokenizer.encode(text, add_special=False):
        if not c.allowed()[t]:
            return False
        c.consume(t)
    return c.is_accepting


@pytest.mark.parametrize("name", sorted(LLAMA_CPP_GRAMMARS))
def test_llama_cpp_grammars_compile(name):
    Grammar.gbnf(LLAMA_CPP_GRAMMARS[name])


def _is_json_gbnf_text(text):
    """json.gbnf's language: a JSON object with integers only and whitespace only
    where the grammar puts ``ws``; checked through Python's json parser."""
    value = json.loads(text)
    assert isinstance(value, dict)

    def walk(v):
        assert not isinstance(v, float) and v is not None, v
        for x in (v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()):
            walk(x)
    walk(value)
    return True


@pytest.mark.parametrize("name,prompt,check", [
    ("json", "A cat as JSON:", _is_json_gbnf_text),
    ("list", "Three fruits:\n", lambda t: re.fullmatch("(- [^\r\n\x0b\x0c\x85\u2028\u2029]+\n)+", t)),
    ("chess", "A chess game:\n", lambda t: re.fullmatch(
        r"1\. (\S+) (\S+)\n([1-9][0-9]?\. \S+ \S+\n)+", t)),
])
def test_llama_cpp_grammars_constrain_generation(smollm2, name, prompt, check):
    """Output under llama.cpp's grammars; a "length" cut is checked as a prefix of a
    complete text by the grammar itself (it must still be able to go on)."""
    gen = infer.generate(smollm2, prompt, grammar=LLAMA_CPP_GRAMMARS[name], max_tokens=48, temperature=0)
    text = "".join(gen)
    if gen.finish_reason == "stop":
        assert check(text), text
    else:
        c = Constraint(Grammar.gbnf(LLAMA_CPP_GRAMMARS[name]), smollm2.tokenizer, background=False)
        for t in gen.tokens:
            c.consume(t)
        assert c.allowed().any()


@pytest.mark.parametrize("gbnf,text,expected", [
    # \u and \U escapes are code points, in literals and in classes (llguidance's converter
    # wrote "\u42" and "\U1F600", which llguidance itself refuses)
    (r'root ::= "\u0042" [\u00e0-\u00ef] "\U0001F600"', "Bé😀", True),
    (r'root ::= [\x41-\x43]+', "ABCA", True),
    (r'root ::= [^\x00-\x1f"]+', "a\nb", False),
    (LIST_GBNF, "- a\u2028b\n", False),
    (LIST_GBNF, "- apples\n- pears\n", True),
    # "." is any character, a newline too
    ('root ::= "a" . "b"', "a\nb", True),
    # rules made only of characters are not greedy: "ab" + "cd", "xx" + "xy"
    ('root ::= w w\nw ::= [a-z]+', "abcd", True),
    ('root ::= a b\na ::= "x"*\nb ::= "xy"', "xxxy", True),
    # a rule named start, and names that differ only in case, '-' or '_'
    ('root ::= start\nstart ::= "a"', "a", True),
    ('root ::= x X\nx ::= "a"\nX ::= "b"', "ab", True),
    ('root ::= foo-bar foo_bar\nfoo-bar ::= "a"\nfoo_bar ::= "b"', "ab", True),
    # repetitions, x{0} included; comments; alternatives across lines inside parentheses
    ('root ::= "a"{2} "b"{1,} "c"{0,2} "d"{0}', "aabbbcc", True),
    ('root ::= "a"{2} "b"{1,} "c"{0,2} "d"{0}', "aabd", False),
    ('# c\nroot ::= ( # c\n  "a"\n  | "b" # c\n)+ # c\n', "abba", True),
    ('root ::= ""', "", True),
    (ENGLISH_GBNF, "Hi, [you] \\ there!", True),
    (JAPANESE_GBNF, "こんにちは 世界", True),
    (ARITHMETIC_GBNF, "x = 2\n(a+b)*3 = y\n", True),
    (CHESS_GBNF, "1. e4 e5\n2. Nf3 Nc6\n", True),
    (CHESS_GBNF, "1. e4 e5\n", False),
])
def test_gbnf_language_is_llama_cpp_s(smollm2, gbnf, text, expected):
    assert accepts(smollm2, gbnf, text) is expected


@pytest.mark.parametrize("gbnf,message", [
    ('foo ::= "a"', "no 'root' rule"),
    ('root ::= bar', "undefined rule 'bar' at line 1, column 10"),
    ('root ::= "a"\n  | "b"', "expecting name at line 2"),  # a top-level alternative must not start a line
    ('root ::= "\\q"', "unknown escape"),
    ('root ::= "\\u12"', "4 hex digits"),
    ('root ::= "\\uD800"', "not a Unicode scalar value"),
    ('root ::= "a"{,3}', "expecting an int"),
    ('root ::= "a"{3,1}', "maximum below its minimum"),
    ('root ::= [z-a]', "range ends below its start"),
    ('root ::= "abc', "unexpected end of input"),
    ('root ::= ("a"', "expecting ')'"),
    ('root ::= "a" )', "expecting newline or end"),
    ('root = "a"', "expecting ::="),
])
def test_bad_gbnf_is_a_grammar_error_saying_where(gbnf, message):
    with pytest.raises(GbnfError, match=re.escape(message)):
        to_lark(gbnf)
    with pytest.raises(GrammarError, match="invalid GBNF grammar"):
        Grammar.gbnf(gbnf)


def test_lark_text_passes_through_but_a_gbnf_start_rule_is_gbnf():
    assert Grammar.gbnf('start: "a" | "b"').llg_grammar == Grammar.lark('start: "a" | "b"').llg_grammar
    assert "r1_start" in to_lark('root ::= start\nstart ::= "a"')
