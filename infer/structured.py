"""Constrained decoding: grammars compiled by llguidance, applied as a token mask.

llguidance (the grammar engine llama.cpp uses with ``--llguidance``) does the
work; this module connects it to infer:

* `Grammar`: a constraint written as a JSON Schema (or ``{"type": "json_object"}``),
  a regex, a Lark grammar or a GBNF grammar, compiled and checked when it is made:
  a bad one raises `GrammarError` before any token is generated.
* `llg_tokenizer(tokenizer)`: llguidance's view of infer's vocabulary, built once per
  tokenizer: the bytes each token stands for (byte tokens ``<0xNN>`` as their byte,
  SentencePiece's ``▁`` as a space), control tokens marked special the way llama.cpp
  marks them (a ``0xFF`` byte in front), the end-of-turn ids as llguidance's EOS.
* `Constraint`: one grammar's parse state over one generation.  The sampler asks it
  for the mask of the next token (`Sampler` applies it right after the logit bias and
  penalties, ahead of top-k, top-p, min-p and temperature) and tells it which token
  was chosen.  The mask of the following step is computed on a worker thread while
  the forward pass runs (llguidance releases the GIL), so a masked step costs
  little more than an unmasked one.

    from infer.structured import Grammar
    g = Grammar.json_schema({"type": "object", "properties": {"n": {"type": "integer"}}})
    text = "".join(infer.generate(model, prompt, grammar=g))
"""
from __future__ import annotations

import concurrent.futures
import json
import re
import threading
import weakref
from typing import Any, Mapping, Optional, Union

import numpy as np
from numpy.typing import NDArray

__all__ = ["GrammarError", "Grammar", "Constraint", "llg_tokenizer", "grammar_from",
           "grammar_from_response_format"]

#: JSON output as OpenAI's and llama.cpp's JSON modes write it: one space after ``:``
#: and ``,``, no free whitespace (a small model left free to emit whitespace can
#: fill the token budget with newlines).  A schema's ``x-guidance`` overrides these.
JSON_DEFAULTS: dict[str, Any] = {"whitespace_flexible": False, "item_separator": ", ",
                                 "key_separator": ": "}


class GrammarError(ValueError):
    """A JSON Schema or grammar that llguidance cannot compile, or a constraint that
    the generated tokens broke."""


def _llguidance() -> Any:
    try:
        import llguidance
    except ImportError:  # pragma: no cover - the extra is missing
        raise ImportError('constrained decoding needs llguidance: pip install "infer-llm[structured]"') from None
    return llguidance


class Grammar:
    """A compiled constraint (llguidance's grammar text) and what it was made from.

    Make one with `json_schema`, `json_object`, `regex`, `lark` or `gbnf`; each checks
    the grammar at once and raises `GrammarError` with llguidance's message."""

    def __init__(self, llg_grammar: str, kind: str, source: Any) -> None:
        llg = _llguidance()
        is_error, messages = llg.LLMatcher.validate_grammar_with_warnings(llg_grammar)
        if is_error:
            raise GrammarError(f"invalid {kind}: {messages[0] if messages else 'rejected by llguidance'}")
        #: llguidance's grammar text (what LLMatcher takes)
        self.llg_grammar = llg_grammar
        #: "json_schema", "regex", "lark" or "gbnf"
        self.kind = kind
        #: the schema or grammar text it was made from
        self.source = source

    def __repr__(self) -> str:
        return f"Grammar.{self.kind}({self.source!r})"

    @classmethod
    def json_schema(cls, schema: Union[Mapping[str, Any], str]) -> "Grammar":
        """Output that is JSON valid against ``schema`` (a dict, or its JSON text)."""
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except json.JSONDecodeError as e:
                raise GrammarError(f"invalid JSON schema: not JSON ({e})") from None
        if isinstance(schema, bool):
            schema = {} if schema else {"not": {}}
        if not isinstance(schema, Mapping):
            raise GrammarError(f"invalid JSON schema: expected an object, got {type(schema).__name__}")
        llg = _llguidance()
        try:
            text = llg.LLMatcher.grammar_from_json_schema(closed_objects(schema), defaults=dict(JSON_DEFAULTS))
        except (ValueError, TypeError) as e:
            raise GrammarError(f"invalid JSON schema: {e}") from None
        return cls(text, "json_schema", schema)

    @classmethod
    def json_object(cls) -> "Grammar":
        """Any JSON object (OpenAI's ``response_format={"type": "json_object"}``)."""
        return cls.json_schema({"type": "object"})

    @classmethod
    def regex(cls, pattern: str) -> "Grammar":
        """Output that matches ``pattern`` whole (Rust regex syntax)."""
        _check_text("regex", pattern)
        return cls(_llguidance().LLMatcher.grammar_from_regex(pattern), "regex", pattern)

    @classmethod
    def lark(cls, text: str) -> "Grammar":
        """A Lark grammar (llguidance's dialect, rule ``start``)."""
        _check_text("Lark grammar", text)
        return cls(_llguidance().LLMatcher.grammar_from_lark(text), "lark", text)

    @classmethod
    def gbnf(cls, text: str) -> "Grammar":
        """A llama.cpp GBNF grammar (rule ``root``), read as llama.cpp reads it
        (`infer.gbnf`); a Lark grammar (one with a ``start:`` rule or ``%llguidance``)
        passes through unchanged."""
        _check_text("GBNF grammar", text)
        if _LARK_SYNTAX.search(text):
            return cls(_llguidance().LLMatcher.grammar_from_lark(text), "gbnf", text)
        from .gbnf import GbnfError, to_lark

        try:
            lark = to_lark(text)
        except GbnfError as e:
            raise GrammarError(f"invalid GBNF grammar: {e}") from None
        return cls(_llguidance().LLMatcher.grammar_from_lark(lark), "gbnf", text)


#: Lark, not GBNF: a ``%llguidance`` line or a ``start:`` rule (GBNF's ``start ::=`` is
#: a rule of that name)
_LARK_SYNTAX = re.compile(r"(?m)^\s*(%llguidance\b|start\s*:(?!:=))")


def lark_json(schema: Mapping[str, Any]) -> str:
    """A Lark ``%json`` item for ``schema`` that reads it as `Grammar.json_schema` does:
    objects closed (`closed_objects`) and `JSON_DEFAULTS`' fixed separators.  Without
    them llguidance's ``%json`` takes any whitespace between tokens, so a model can pad
    a call with blank lines until ``max_tokens`` runs out."""
    closed = dict(closed_objects(schema))
    closed["x-guidance"] = {**JSON_DEFAULTS, **(closed.get("x-guidance") or {})}
    return f"%json {json.dumps(closed)}"


_SUBSCHEMA = ("items", "additionalProperties", "additionalItems", "not", "contains", "propertyNames",
              "if", "then", "else", "unevaluatedProperties", "unevaluatedItems")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def closed_objects(schema: Any, in_all_of: bool = False) -> Any:
    """A copy of ``schema`` in which an object schema that lists ``properties`` (or
    ``patternProperties``) and says nothing of ``additionalProperties`` admits no other
    keys, as llama.cpp's JSON-schema grammars read it (JSON Schema itself would allow
    any; a small model then pads tool arguments with made-up keys).  Branches of an
    ``allOf`` stay open: closing each would reject the keys of the others.  Only
    subschemas are visited, never values such as ``const`` or ``enum``."""
    if not isinstance(schema, Mapping):
        return schema
    out = dict(schema)
    for key, value in schema.items():
        if key in _SUBSCHEMA_LISTS and isinstance(value, list):
            out[key] = [closed_objects(v, key == "allOf") for v in value]
        elif key in _SUBSCHEMA_MAPS and isinstance(value, Mapping):
            out[key] = {name: closed_objects(v) for name, v in value.items()}
        elif key in _SUBSCHEMA:
            out[key] = closed_objects(value)
    if (not in_all_of and "additionalProperties" not in out and "allOf" not in out
            and ("properties" in out or "patternProperties" in out)):
        out["additionalProperties"] = False
    return out


def _check_text(what: str, text: object) -> None:
    if not isinstance(text, str):
        raise TypeError(f"{what}: expected str, got {type(text).__name__}")
    if not text.strip():
        raise GrammarError(f"invalid {what}: it is empty")


GrammarSpec = Union[Grammar, Mapping[str, Any], str]


def grammar_from(spec: GrammarSpec) -> Grammar:
    """A `Grammar` as given, a dict read as a JSON Schema, a str as a GBNF or Lark grammar."""
    if isinstance(spec, Grammar):
        return spec
    if isinstance(spec, Mapping):
        return Grammar.json_schema(spec)
    if isinstance(spec, str):
        return Grammar.gbnf(spec)
    raise TypeError(f"grammar: expected a Grammar, a JSON schema dict or a grammar str, "
                    f"got {type(spec).__name__}")


def grammar_from_response_format(response_format: Union[Mapping[str, Any], Grammar, None]) -> Optional[Grammar]:
    """The grammar of an OpenAI ``response_format``: ``{"type": "text"}`` (None),
    ``{"type": "json_object"}`` (llama-cpp-python's optional ``"schema"`` key
    included) or ``{"type": "json_schema", "json_schema": {"schema": {...}}}``."""
    if response_format is None:
        return None
    if isinstance(response_format, Grammar):  # compiled by the caller (llama-server's grammar field)
        return response_format
    if not isinstance(response_format, Mapping):
        raise TypeError(f"response_format: expected a dict, got {type(response_format).__name__}")
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = response_format.get("schema")
        return Grammar.json_object() if schema is None else Grammar.json_schema(schema)
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, Mapping) or "schema" not in spec:
            raise GrammarError("response_format: 'json_schema' needs {'name': ..., 'schema': {...}}")
        return Grammar.json_schema(spec["schema"])
    raise GrammarError(f"response_format: type {kind!r} is not one of 'text', 'json_object', 'json_schema'")


# ---- the vocabulary as llguidance sees it -----------------------------------------

_TOKENIZERS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()
_TOKENIZERS_LOCK = threading.Lock()


def llg_tokenizer(tokenizer: Any, n_vocab: Optional[int] = None) -> Any:
    """llguidance's LLTokenizer for an infer Tokenizer (built once, about a second per
    50k tokens, then cached for the tokenizer's lifetime)."""
    with _TOKENIZERS_LOCK:
        cached = _TOKENIZERS.get(tokenizer)
        if cached is None or (n_vocab is not None and cached.vocab_size != n_vocab):
            cached = _TOKENIZERS[tokenizer] = _build_llg_tokenizer(tokenizer, n_vocab)
        return cached


def _build_llg_tokenizer(tokenizer: Any, n_vocab: Optional[int]) -> Any:
    from .tokenizer import TokenType

    llg = _llguidance()
    vocab = tokenizer.vocab
    pieces: list[bytes] = []
    special: list[int] = []
    for i in range(vocab.size):
        kind = int(vocab.token_types[i])
        piece = tokenizer.token_to_piece(i)
        # llama.cpp's rule (llguidance's llamacpp.py): control tokens, and user-defined
        # ones that look like "<...>", are special: the grammar never spells text with them.
        if kind in (TokenType.CONTROL, TokenType.UNKNOWN) or (
                kind == TokenType.USER_DEFINED and piece.startswith(b"<") and piece.endswith(b">")):
            piece = b"\xff" + piece
            special.append(i)
        pieces.append(piece)
    eos = sorted(vocab.end_of_turn_ids) or ([vocab.eos_token_id] if vocab.eos_token_id is not None else [])
    if not eos:
        raise GrammarError("the vocabulary has no end-of-turn token to end a constrained output with")

    class _Wrapped:
        eos_token_id = eos[0]
        bos_token_id = vocab.bos_token_id
        tokens = pieces
        special_token_ids = special

        def __call__(self, text: bytes) -> list[int]:
            return list(tokenizer.encode(text.decode("utf-8", errors="replace"), add_special=False))

    return llg.LLTokenizer(llg.TokenizerWrapper(_Wrapped()), n_vocab=n_vocab or vocab.size,
                           eos_token=eos)


# ---- one generation's parse state -----------------------------------------------------

_EXECUTOR: Optional[concurrent.futures.ThreadPoolExecutor] = None


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _EXECUTOR
    if _EXECUTOR is None:
        _EXECUTOR = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="infer-grammar")
    return _EXECUTOR


class Constraint:
    """A `Grammar` bound to a vocabulary, holding where the output is in it.

    ``allowed()`` is the mask of the next token (bool per id); ``consume(token)``
    moves on and starts computing the next mask in the background; ``rollback(n)``
    forgets the last ``n`` tokens; ``reset()`` starts over."""

    def __init__(self, grammar: GrammarSpec, tokenizer: Any, n_vocab: Optional[int] = None,
                 background: bool = True) -> None:
        self.grammar = grammar_from(grammar)
        llg = _llguidance()
        self._llt = llg_tokenizer(tokenizer, n_vocab)
        self.n_vocab = int(self._llt.vocab_size)
        self._matcher = llg.LLMatcher(self._llt, self.grammar.llg_grammar, log_level=0)
        if self._matcher.is_error():
            raise GrammarError(f"invalid {self.grammar.kind}: {self._matcher.get_error()}")
        self.background = background
        #: tokens consumed since the start (or the last reset)
        self.n_consumed = 0
        self._words = np.zeros((self.n_vocab + 31) // 32, dtype=np.int32)
        self._allowed: Optional[NDArray[np.bool_]] = None
        self._pending: Optional[concurrent.futures.Future[NDArray[np.bool_]]] = None
        self._start_mask()

    # ---- state ----------------------------------------------------------------------
    def consume(self, token: int) -> None:
        """The sampler chose ``token``; the next mask starts computing at once."""
        self._wait()
        if not self._matcher.consume_token(int(token)):
            raise GrammarError(f"token {token} breaks the {self.grammar.kind}: "
                               f"{self._matcher.get_error() or 'not allowed here'}")
        self.n_consumed += 1
        self._start_mask()

    def rollback(self, n: int) -> None:
        """Forget the last ``n`` consumed tokens (at most all of them)."""
        n = min(int(n), self.n_consumed)
        if n <= 0:
            return
        self._wait()
        self._matcher.rollback(n)
        self.n_consumed -= n
        self._start_mask()

    def reset(self) -> None:
        self._wait()
        self._matcher.reset()
        self.n_consumed = 0
        self._start_mask()

    @property
    def is_accepting(self) -> bool:
        """The output so far is complete (the grammar allows ending here)."""
        self._wait()
        return bool(self._matcher.is_accepting())

    @property
    def is_stopped(self) -> bool:
        """Nothing but an end-of-turn token can follow."""
        self._wait()
        return bool(self._matcher.is_stopped())

    # ---- the mask -----------------------------------------------------------------------
    def allowed(self) -> NDArray[np.bool_]:
        """bool per token id: may it come next?"""
        if self._allowed is None:
            if self._pending is None:
                self._start_mask()
            assert self._pending is not None
            pending, self._pending = self._pending, None
            self._allowed = pending.result()
        return self._allowed

    def apply(self, logits: NDArray[Any]) -> NDArray[Any]:
        """A copy of ``logits`` with the tokens the grammar forbids set to -inf."""
        allowed = self.allowed()
        n = logits.shape[0]
        out = np.full(n, -np.inf, dtype=np.float32)
        m = min(n, allowed.shape[0])
        np.copyto(out[:m], logits[:m], where=allowed[:m])
        return out

    def _compute(self) -> NDArray[np.bool_]:
        self._matcher.unsafe_compute_mask_ptr(self._words.ctypes.data, self._words.nbytes)
        if self._matcher.is_error():
            raise GrammarError(f"the {self.grammar.kind} cannot continue: {self._matcher.get_error()}")
        bits = np.unpackbits(self._words.view(np.uint8), count=self.n_vocab, bitorder="little")
        return bits.view(np.bool_)

    def _start_mask(self) -> None:
        self._allowed = None
        if self.background:
            self._pending = _executor().submit(self._compute)
        else:
            done: concurrent.futures.Future[NDArray[np.bool_]] = concurrent.futures.Future()
            try:
                done.set_result(self._compute())
            except GrammarError as e:
                done.set_exception(e)
            self._pending = done

    def _wait(self) -> None:
        """Let a mask being computed finish before the matcher changes."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            try:
                self._allowed = pending.result()
            except GrammarError:
                self._allowed = None  # allowed() computes it again and raises

    def __deepcopy__(self, memo: dict[int, Any]) -> "Constraint":
        self._wait()
        twin = object.__new__(Constraint)
        twin.grammar = self.grammar
        twin._llt = self._llt
        twin.n_vocab = self.n_vocab
        twin._matcher = self._matcher.deep_copy()
        twin.background = self.background
        twin.n_consumed = self.n_consumed
        twin._words = np.zeros_like(self._words)
        twin._allowed = None
        twin._pending = None
        twin._start_mask()
        return twin
