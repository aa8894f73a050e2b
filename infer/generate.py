"""generate(): a streaming text loop over any variant's Context.

It owns the rules users rely on when they stream text:

* text comes out in pieces as tokens are sampled, but a piece never ends inside a
  UTF-8 character (a token holding half of one waits for the rest);
* a tail that could still grow into a stop string is withheld until it cannot,
  and the stop string itself is never emitted;
* the model's end-of-turn tokens end generation (their text is not emitted);
* ``finish_reason`` says why it ended: "stop" (end-of-turn or a stop string) or
  "length" (``max_tokens`` reached, or the context is full);
* with ``grammar=`` the output follows a JSON Schema, regex, Lark or GBNF grammar
  (`infer.structured`); with ``logprobs=k`` each token's log-probability and its
  ``k`` most likely alternatives are kept in OpenAI's shape (``Generation.logprobs``).
* a cut by length inside a character does not end the text with U+FFFD: the
  incomplete bytes are held back, and ``incomplete_tokens`` names their tokens.
"""
from __future__ import annotations

import functools
import inspect
import weakref
from typing import Any, Callable, FrozenSet, Generator, Iterable, Iterator, List, Optional, Sequence, Union

from .runtime import Context, is_int

# A token whose bytes end inside a UTF-8 character decodes to U+FFFD; wait at most
# this many further tokens for the rest of the character (UTF-8 is <= 4 bytes).
_MAX_PENDING_TOKENS = 4


def reply_decode(tokenizer: Any) -> Callable[[List[int]], str]:
    """The tokenizer's decode as a reply shows text: without control tokens, as llama.cpp
    renders a reply (token_to_piece without special); a tokenizer whose decode takes no
    ``skip_special`` (a variant's own) decodes as it does."""
    try:
        inspect.signature(tokenizer.decode).bind([], skip_special=True)
    except (TypeError, ValueError):
        return tokenizer.decode  # type: ignore[no-any-return]
    return functools.partial(tokenizer.decode, skip_special=True)


class TextStream:
    """Turns a growing list of token ids into complete-character text increments.

    Decoding a suffix of the ids on its own can differ at its start from decoding
    them in context (SentencePiece drops a leading space), so each increment is
    the difference between two decodes that share a few tokens of left context.
    """

    def __init__(self, decode: Callable[[List[int]], str]) -> None:
        self._decode = decode
        self.ids: List[int] = []
        self._prefix = 0  # ids[_prefix:_read] give left context; already emitted
        self._read = 0
        #: ids whose incomplete text the last flush(drop_incomplete=True) left out
        self.dropped: List[int] = []

    def push(self, token: int) -> str:
        self.ids.append(int(token))
        context_text = self._decode(self.ids[self._prefix:self._read])
        full_text = self._decode(self.ids[self._prefix:])
        if full_text.endswith("\ufffd") and len(self.ids) - self._read < _MAX_PENDING_TOKENS:
            return ""
        new_text = full_text[len(context_text):]
        self._prefix = self._read
        self._read = len(self.ids)
        return new_text

    def flush(self, drop_incomplete: bool = False) -> str:
        """Whatever is still held back (an incomplete character at the very end).

        With ``drop_incomplete`` the replacement characters that end it are left out
        (the text was cut inside a character); ``dropped`` then holds their tokens."""
        self.dropped = []
        if self._read == len(self.ids):
            return ""
        context_text = self._decode(self.ids[self._prefix:self._read])
        new_text = self._decode(self.ids[self._prefix:])[len(context_text):]
        if drop_incomplete and new_text.endswith("\ufffd"):
            self.dropped = self.ids[self._read:]
            new_text = new_text.rstrip("\ufffd")
        self._prefix = self._read = len(self.ids)
        return new_text


def _held_back(text: str, stops: Sequence[str]) -> int:
    """Length of the longest tail of ``text`` that is a proper prefix of a stop string."""
    best = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), best, -1):
            if text.endswith(s[:n]):
                best = n
                break
    return best


def end_of_turn_ids(tokenizer: Any) -> FrozenSet[int]:
    """The token ids that end a model's turn (EOS, <|im_end|>, <|eot_id|>, ...)."""
    vocab = getattr(tokenizer, "vocab", None)
    ids: Any = getattr(vocab, "end_of_turn_ids", None)
    if ids is None:
        ids = getattr(tokenizer, "end_of_turn_ids", ())
    return frozenset(int(i) for i in ids)


#: the Generation (its id) each context last started: one left suspended while another
#: ran on its context must not go on from the other's tokens
_running: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()


def _runner(ctx: Any) -> Optional[int]:
    try:
        return _running.get(ctx)
    except TypeError:
        return None


class Generation:
    """An iterator of text pieces; afterwards ``finish_reason``, ``tokens``, ``text``.

    Built by :func:`generate`; iterate it once.
    """

    def __init__(self, context: Context, tokenizer: Any, prompt_ids: Sequence[int],
                 max_tokens: Optional[int], stop: Sequence[str], stop_ids: Iterable[int],
                 constraint: Any = None, logprobs: Optional[int] = None) -> None:
        self.context = context
        self.tokenizer = tokenizer
        self.prompt_ids = list(prompt_ids)
        self.max_tokens = max_tokens
        self.stop = [s for s in stop if s]
        self.stop_ids = frozenset(stop_ids)
        #: token ids sampled (end-of-turn token included if one ended generation)
        self.tokens: List[int] = []
        #: all text emitted so far
        self.text = ""
        #: "stop" or "length" once iteration is over; None before
        self.finish_reason: Optional[str] = None
        #: with logprobs=k: one OpenAI ``logprobs.content`` entry per token (a final
        #: end-of-turn token excluded), {"token", "logprob", "bytes", "top_logprobs"}
        self.logprobs: Optional[List[dict[str, Any]]] = [] if logprobs is not None else None
        #: with logprobs=k: the sampler's `TokenLogprob` of every sampled token (ids, and
        #: the end-of-turn token too), for callers that report ids (llama-server's n_probs)
        self.token_logprobs: Optional[List[Any]] = [] if logprobs is not None else None
        #: the stop string that ended generation (finish_reason "stop" by a string), else None
        self.stop_string: Optional[str] = None
        self._top = logprobs
        self._constraint = constraint
        #: tokens at the end of a "length" cut whose bytes stop inside a character
        #: (their partial text is not emitted, rather than shown as U+FFFD)
        self.incomplete_tokens: List[int] = []
        self._iter = self._run()

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        return next(self._iter)

    def close(self) -> None:
        """Stop early (as a generator's close() does); before the model is closed."""
        self._iter.close()

    def _emit(self, piece: str) -> str:
        self.text += piece
        return piece

    def _run(self) -> Generator[str, None, None]:
        _prefill_reusing_prefix(self.context, self.prompt_ids)
        try:
            _running[self.context] = id(self)  # an id, not self: the context must not keep it alive
        except TypeError:
            pass  # a context that cannot be a weak key: only n_past is checked
        yield from self._loop()

    def _loop(self) -> Iterator[str]:
        ctx = self.context
        stream = TextStream(reply_decode(self.tokenizer))
        pending = ""  # decoded, not yet emitted (could start a stop string)
        reason = "length"
        held = ctx.n_past  # what this generation left in the context
        while self.max_tokens is None or len(self.tokens) < self.max_tokens:
            if ctx.n_past != held or _runner(ctx) not in (id(self), None):
                raise RuntimeError("the context changed under this generation (another generate() or a "
                                   "truncate_to/prefill on it while it was suspended); start a new one")
            if held >= ctx.n_ctx:
                break
            token, lp = _sample_next(ctx, self._top, self._constraint)
            held = ctx.n_past
            self.tokens.append(token)
            if self.token_logprobs is not None:
                self.token_logprobs.append(lp)
            if token in self.stop_ids:
                reason = "stop"
                break
            if self.logprobs is not None:
                self.logprobs.append(logprob_entry(self.tokenizer, lp))
            pending += stream.push(token)
            if self.stop:
                hit = _first_stop(pending, self.stop)
                if hit is not None:
                    self.stop_string = _stop_at(pending, hit, self.stop)
                    pending = pending[:hit]
                    reason = "stop"
                    break
                keep = _held_back(pending, self.stop)
            else:
                keep = 0
            out, pending = pending[:len(pending) - keep], pending[len(pending) - keep:]
            if out:
                yield self._emit(out)
        if reason == "length":
            pending += stream.flush(drop_incomplete=True)
            self.incomplete_tokens = stream.dropped
            if self.stop:
                hit = _first_stop(pending, self.stop)
                if hit is not None:
                    self.stop_string = _stop_at(pending, hit, self.stop)
                    pending, reason = pending[:hit], "stop"
        self.finish_reason = reason
        if pending:
            yield self._emit(pending)


def _sample_next(ctx: Context, top: Optional[int], constraint: Any = None) -> tuple[int, Any]:
    """`ctx.next()`, with its `TokenLogprob` when ``top`` is not None (else None),
    following ``constraint`` (an `infer.structured.Constraint`) for this token.

    The constraint sits on the sampler for the call only: a generation left suspended
    (a ``break`` out of its loop) never constrains what the context samples next, and
    truncating the context between tokens (a context shift) does not roll it back."""
    if constraint is None:
        return ctx.next_with_logprobs(top) if top is not None else (ctx.next(), None)
    sampler = ctx.sampler
    previous = sampler.grammar
    sampler.grammar = constraint
    try:
        return ctx.next_with_logprobs(top) if top is not None else (ctx.next(), None)
    finally:
        sampler.grammar = previous


def logprob_entry(tokenizer: Any, record: Any) -> dict[str, Any]:
    """An OpenAI ``logprobs.content`` entry for a `TokenLogprob`: token, logprob,
    bytes and top_logprobs (each alternative with its token, logprob and bytes)."""

    def one(token: int, logprob: float) -> dict[str, Any]:
        piece = _token_bytes(tokenizer, token)
        return {"token": piece.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(piece)}

    entry = one(record.token, record.logprob)
    entry["top_logprobs"] = [one(t, v) for t, v in record.top]
    return entry


def _token_bytes(tokenizer: Any, token: int) -> bytes:
    piece = getattr(tokenizer, "token_to_piece", None)
    if piece is not None:
        return bytes(piece(token))
    return str(tokenizer.decode([token])).encode("utf-8")


def _first_stop(text: str, stops: Sequence[str]) -> Optional[int]:
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(hits) if hits else None


def _stop_at(text: str, at: int, stops: Sequence[str]) -> str:
    """The stop string `_first_stop` found at ``at`` (the first listed of those starting there)."""
    return next(s for s in stops if text.startswith(s, at))


def _prefill_reusing_prefix(ctx: Context, ids: Sequence[int]) -> None:
    """Make the context hold exactly ``ids``, keeping a common prefix already computed."""
    if not ids:
        raise ValueError("prompt: is empty (it needs at least one token, e.g. BOS)")
    held = ctx.tokens
    common = 0
    for a, b in zip(held, ids):
        if a != b:
            break
        common += 1
    if len(ids) > ctx.n_ctx:
        from .runtime import ContextOverflowError

        raise ContextOverflowError(
            f"prompt of {len(ids)} tokens exceeds the context of {ctx.n_ctx} tokens")
    if common < len(held):
        ctx.truncate_to(common)
    if common < len(ids):
        ctx.prefill(ids[common:])
    # common == len(ids): the logits of the last token are recomputed by next()
    # when truncate_to made them stale.


def generate(model: Any, prompt: Union[str, Sequence[int]], *, context: Optional[Context] = None,
             max_tokens: Optional[int] = 256, stop: Union[str, Sequence[str], None] = None,
             add_special: Optional[bool] = None, parse_special: bool = False,
             stop_at_end_of_turn: bool = True, grammar: Any = None,
             logprobs: Optional[int] = None, **sampling: Any) -> Generation:
    """Continue ``prompt`` with ``model``; returns an iterator of text pieces.

    ``prompt`` is text (encoded with BOS as the GGUF says unless ``add_special``
    says otherwise) or a list of token ids used as they are.  With ``context``
    the prompt continues in it (a prefix it already holds is not recomputed; it
    ends holding prompt + generated tokens); otherwise a new context is made with
    ``sampling`` keywords (temperature=..., top_k=..., seed=...) for its sampler,
    holding just the prompt and ``max_tokens`` (the trained length if None).

        gen = generate(model, "The capital of France is", max_tokens=16, temperature=0)
        text = "".join(gen); gen.finish_reason  # "length" or "stop"

    ``grammar`` constrains the output: an `infer.structured.Grammar`, a dict (a JSON
    Schema) or a str (a GBNF or Lark grammar); a bad one raises GrammarError here,
    before any token.  It is on the context's sampler only while each token is drawn
    (a generation left suspended does not constrain the context).  ``logprobs=k``
    (k >= 0) keeps, per token, its log-probability
    and the k most likely alternatives in ``gen.logprobs``.
    """
    tok = model.tokenizer
    if isinstance(prompt, str):
        ids = tok.encode(prompt, add_special=True if add_special is None else add_special,
                         parse_special=parse_special)
    else:
        # Checked here, not cast: int() would turn 1.7 into token 1 and bytes into their values.
        if isinstance(prompt, (bytes, bytearray)):
            raise TypeError("prompt: expected a str or a list of token ids, got bytes (decode it first)")
        ids = list(prompt)
        for t in ids:
            if not is_int(t):
                raise TypeError(f"prompt: expected a str or a list of token ids, got a {type(t).__name__} in it")
        ids = [int(t) for t in ids]
    if max_tokens is not None:
        if not is_int(max_tokens):
            raise TypeError(f"max_tokens: expected an int or None, got {type(max_tokens).__name__}")
        if max_tokens < 0:
            raise ValueError(f"max_tokens: must be >= 0 or None, got {max_tokens}")
        max_tokens = int(max_tokens)
    stops = [stop] if isinstance(stop, str) else list(stop or ())
    if isinstance(stop, (bytes, bytearray)) or not all(isinstance(s, str) for s in stops):
        raise TypeError(f"stop: expected a str or a list of str, got {stop!r}")
    if context is None:
        # A context sized to this call, not to the trained length (32K positions
        # for Gemma 3): memory follows what the generation can use.
        n_ctx = None
        limit = getattr(model.engine, "max_seq_len", 0)
        if max_tokens is not None and ids:
            n_ctx = len(ids) + max(max_tokens, 1)
            n_ctx = min(n_ctx, limit) if limit else n_ctx
        context = model.create_context(n_ctx=n_ctx, **sampling)
    elif sampling:
        raise TypeError("sampling keywords go to the context's sampler; "
                        "pass them to create_context() when you pass context=")
    if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int) or logprobs < 0):
        raise ValueError(f"logprobs: expected an int >= 0 (alternatives per token) or None, got {logprobs!r}")
    constraint = None
    if grammar is not None:
        from .structured import Constraint

        if not hasattr(context.sampler, "grammar"):
            raise TypeError(f"grammar: the context's sampler {type(context.sampler).__name__} has no "
                            f"grammar hook (use infer.Sampler)")
        constraint = Constraint(grammar, tok, n_vocab=model.engine.vocab_size)
    stop_ids = end_of_turn_ids(tok) if stop_at_end_of_turn else frozenset()
    return Generation(context, tok, ids, max_tokens, stops, stop_ids,
                      constraint=constraint, logprobs=logprobs)
