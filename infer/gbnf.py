"""llama.cpp's GBNF read as llama.cpp's grammar parser reads it, written out as a
llguidance Lark grammar (`to_lark`).

llguidance's own converter (``llguidance.gbnf_to_lark``) differs from llama.cpp where
users notice: ``\\u00e9`` and ``\\U...`` escapes came out as text llguidance refuses
(llama.cpp's own json.gbnf did not compile), ``.`` excluded newlines, a rule named
``start`` made the text pass for Lark, ``foo-bar``/``fooBar`` or ``x``/``X`` collided,
and rules made only of characters became greedy lexemes, so ``root ::= w w`` with
``w ::= [a-z]+`` could never end.  Here every GBNF rule stays a Lark rule and every
character class one character, so the language is the one llama.cpp accepts.

The syntax (llama.cpp's ``llama-grammar.cpp``): ``name ::= alternatives`` ending at a
newline (inside parentheses newlines are free, and after ``::=`` and ``|``); names
are letters, digits and ``-`` (``_`` too, which llama.cpp refuses); ``"literal"``, ``[class]``, ``[^class]``, ``.``,
``( ... )``, a rule name, each optionally followed by ``*``, ``+``, ``?``, ``{m}``,
``{m,}`` or ``{m,n}``; ``#`` comments; escapes ``\\xHH``, ``\\uHHHH``,
``\\UHHHHHHHH``, ``\\t``, ``\\r``, ``\\n``, ``\\\\``, ``\\"``, ``\\[``, ``\\]``.
"""
from __future__ import annotations

import json
import re
from typing import Dict, List

__all__ = ["GbnfError", "to_lark"]


class GbnfError(ValueError):
    """Text that llama.cpp's grammar parser would refuse."""


_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]"}
_HEX_DIGITS = {"x": 2, "u": 4, "U": 8}


def _is_word(c: str) -> bool:
    return len(c) == 1 and c.isascii() and (c.isalnum() or c in "-_")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        #: GBNF rule name -> its Lark body, in order of definition (a rule defined
        #: twice keeps its last body, as in llama.cpp)
        self.rules: Dict[str, str] = {}
        self.referenced: Dict[str, int] = {}  # name -> position of a first use

    # ---- errors and characters ------------------------------------------------------
    def error(self, message: str, at: int = -1) -> GbnfError:
        at = self.pos if at < 0 else at
        line = self.text.count("\n", 0, at) + 1
        column = at - (self.text.rfind("\n", 0, at) + 1) + 1
        return GbnfError(f"{message} at line {line}, column {column}: {self.text[at:at + 20]!r}")

    def peek(self, n: int = 0) -> str:
        i = self.pos + n
        return self.text[i] if i < len(self.text) else ""

    def skip_space(self, newline_ok: bool) -> None:
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c in " \t" or (newline_ok and c in "\r\n"):
                self.pos += 1
            elif c == "#":
                while self.pos < len(self.text) and self.text[self.pos] not in "\r\n":
                    self.pos += 1
            else:
                break

    def char(self) -> int:
        """One code point of a literal or a class, escapes decoded."""
        c = self.peek()
        if not c:
            raise self.error("unexpected end of input")
        if c != "\\":
            self.pos += 1
            return ord(c)
        e = self.peek(1)
        if e in _HEX_DIGITS:
            n = _HEX_DIGITS[e]
            digits = self.text[self.pos + 2:self.pos + 2 + n]
            if len(digits) != n or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise self.error(f"expecting {n} hex digits after \\{e}")
            value = int(digits, 16)
            if value > 0x10FFFF or 0xD800 <= value <= 0xDFFF:
                raise self.error(f"\\{e}{digits} is not a Unicode scalar value")
            self.pos += 2 + n
            return value
        if e in _ESCAPES:
            self.pos += 2
            return ord(_ESCAPES[e])
        raise self.error("unknown escape")

    # ---- the grammar ----------------------------------------------------------------------
    def parse(self) -> None:
        self.skip_space(True)
        while self.pos < len(self.text):
            self.rule()
            self.skip_space(True)

    def name(self) -> str:
        start = self.pos
        while _is_word(self.peek()):
            self.pos += 1
        if self.pos == start:
            raise self.error("expecting name")
        return self.text[start:self.pos]

    def rule(self) -> None:
        name = self.name()
        self.skip_space(False)
        if self.text[self.pos:self.pos + 3] != "::=":
            raise self.error("expecting ::=")
        self.pos += 3
        self.skip_space(True)
        body = self.alternatives(nested=False)
        if self.peek() == "\r":
            self.pos += 2 if self.peek(1) == "\n" else 1
        elif self.peek() == "\n":
            self.pos += 1
        elif self.peek():
            raise self.error("expecting newline or end")
        self.rules[name] = body

    def alternatives(self, nested: bool) -> str:
        alts = [self.sequence(nested)]
        while self.peek() == "|":
            self.pos += 1
            self.skip_space(True)
            alts.append(self.sequence(nested))
        return " | ".join(alts)

    def sequence(self, nested: bool) -> str:
        items: List[str] = []
        while True:
            c = self.peek()
            if c == '"':
                self.pos += 1
                chars = []
                while self.peek() != '"':
                    chars.append(chr(self.char()))
                self.pos += 1
                item = json.dumps("".join(chars), ensure_ascii=False)
            elif c == "[":
                item = self.char_class()
            elif c == ".":
                self.pos += 1
                item = "/(?s:.)/"  # llama.cpp's "." is any character, newline too
            elif _is_word(c):
                at = self.pos
                ref = self.name()
                self.referenced.setdefault(ref, at)
                item = f"\0{ref}\0"  # named in to_lark, once every rule is known
            elif c == "(":
                self.pos += 1
                self.skip_space(True)
                inner = self.alternatives(nested=True)
                if self.peek() != ")":
                    raise self.error("expecting ')'")
                self.pos += 1
                item = f"({inner})"
            else:
                break
            self.skip_space(nested)
            items.append(self.repetition(item, nested))
        return " ".join(items) if items else '""'

    def char_class(self) -> str:
        start = self.pos
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        parts = []
        while self.peek() != "]":
            first = self.char()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                last = self.char()
                if last < first:
                    raise self.error("a character range ends below its start", start)
                parts.append(f"\\x{{{first:X}}}-\\x{{{last:X}}}")
            else:
                parts.append(f"\\x{{{first:X}}}")
        self.pos += 1
        if not parts:
            if not negated:
                raise self.error("an empty character class matches nothing", start)
            return "/(?s:.)/"
        return f"/[{'^' if negated else ''}{''.join(parts)}]/"

    def repetition(self, item: str, nested: bool) -> str:
        c = self.peek()
        if c and c in "*+?":
            self.pos += 1
            self.skip_space(nested)
            return f"({item}){c}"
        if c != "{":
            return item
        self.pos += 1
        self.skip_space(nested)
        low = self.integer()
        high = low
        self.skip_space(nested)
        if self.peek() == ",":
            self.pos += 1
            self.skip_space(nested)
            high = self.integer() if self.peek().isdigit() else -1
            self.skip_space(nested)
        if self.peek() != "}":
            raise self.error("expecting '}'")
        self.pos += 1
        self.skip_space(nested)
        if high == -1:
            return f"({item}){{{low},}}"
        if high < low:
            raise self.error(f"repetition {{{low},{high}}} has its maximum below its minimum")
        if high == 0:
            return '""'  # x{0}: nothing (llguidance refuses a {0,0} range)
        return f"({item}){{{low},{high}}}"

    def integer(self) -> int:
        m = re.compile(r"[0-9]+").match(self.text, self.pos)
        if m is None:
            raise self.error("expecting an int")
        self.pos = m.end()
        return int(m.group())


def to_lark(text: str) -> str:
    """The llguidance Lark grammar (rule ``start``) of GBNF ``text`` (rule ``root``).

    Raises `GbnfError` where llama.cpp's parser would refuse the text, for a rule
    used but not defined, and when there is no ``root`` rule."""
    parser = _Parser(text)
    parser.parse()
    for ref, at in parser.referenced.items():
        if ref not in parser.rules:
            raise parser.error(f"undefined rule {ref!r}", at)
    if "root" not in parser.rules:
        raise GbnfError("the grammar has no 'root' rule (the rule output starts from)")
    # Lark names: lowercase (a parser rule, never a greedy lexeme), unique however the
    # GBNF names differ only in case, '-' or '_'.
    lark_names = {"root": "start"}
    for i, name in enumerate(parser.rules):
        if name != "root":
            lark_names[name] = f"r{i}_{re.sub(r'[^a-z0-9]', '_', name.lower())}"
    lines = ["%llguidance {}", ""]
    for name, body in parser.rules.items():
        body = re.sub("\0([^\0]*)\0", lambda m: lark_names[m.group(1)], body)
        lines.append(f"{lark_names[name]}: {body}")
    return "\n".join(lines) + "\n"
