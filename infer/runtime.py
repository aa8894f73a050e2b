"""The runtime contract: Engine, Context, Model.

A *variant* (one model architecture) subclasses `Engine` and `Context`.  The
shared code here owns the bookkeeping every variant needs the same way: token
history, bounds checks, the sampler's window, thread-safety and the rule that a
failed call leaves the context as it was.  A variant implements two hooks:

* ``Context._forward(tokens, start)``: run ``tokens`` (int32 array) at positions
  ``start, start+1, ...`` writing their K/V into the cache slots of those
  positions, and write the logits of the last one into ``self.logits``.
* ``Context._truncate_cache(n)``: forget cache positions ``>= n`` (a no-op for a
  cache addressed by position, as ours are).

and may override a third (its default here is slow but correct):

* ``Context._forward_rows(tokens, start, rows)``: `_forward`, also filling ``rows``
  (a `RowOutputs`): the logits of every position from ``rows.first`` on and/or the
  final hidden states (after the output norm), in the same batched pass.  The
  default runs one token at a time through ``_forward`` and has no hidden states.

See docs/variants.md for a complete small example.
"""
from __future__ import annotations

import copy
import threading
from abc import ABC, abstractmethod
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np
from numpy.typing import NDArray


class ContextOverflowError(ValueError):
    """The tokens do not fit in the context window."""


class ContextBusyError(RuntimeError):
    """A Context was used from two threads at once."""


#: characters from which tokenizing a text is long work for `run_apart` (tens of ms)
LONG_TEXT = 1 << 15


def run_apart(context: Any, work: Callable[[], Any]) -> Any:
    """``work()`` (long work of a request that is not the context's own forward pass:
    tokenizing a long text, an extra pass over the prompt) where ``context`` wants it
    run.  A serving slot (`infer.serve.scheduler.SlotContext`) runs it on a thread of
    its own, since its request runs on the event loop's thread; a Context in place."""
    apart = getattr(context, "run_apart", None)
    return work() if apart is None else apart(work)


def is_int(value: Any) -> bool:
    """An integer count or token id: an int or a numpy integer, not a bool (True would
    read as 1) nor a float (1.5 would be cut to 1)."""
    return not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, np.integer))


class RowOutputs:
    """What ``prefill(all_logits=True)`` / ``prefill(hidden_states=True)`` asks of a pass:
    ``logits`` (rows ``first...n-1``, shape (n - first, vocab)) and/or ``hidden``
    (every row, shape (n, n_embd)), float32 arrays the variant fills."""

    __slots__ = ("first", "logits", "hidden")

    def __init__(self, first: int, logits: Optional[NDArray[Any]], hidden: Optional[NDArray[Any]]) -> None:
        self.first = first
        self.logits = logits
        self.hidden = hidden


class ModelClosedError(RuntimeError):
    """The model was closed (its weights released) before or while this call ran."""


class Engine(ABC):
    """A loaded model: its metadata and a factory of contexts."""

    #: architecture name as GGUF writes it ("llama", "gemma3", ...)
    architecture: str = ""
    vocab_size: int = 0
    #: longest sequence the model was trained for (the default context size)
    max_seq_len: int = 0
    #: width of the hidden states ``prefill(hidden_states=True)`` returns (0: none)
    n_embd: int = 0

    @abstractmethod
    def create_context(self, n_ctx: Optional[int] = None, sampler: Any = None) -> "Context":
        """A fresh conversation state with its own KV cache of ``n_ctx`` positions."""

    def close(self) -> None:
        """Release the weights (the file map).  Contexts must not be used after it."""

    #: set by infer.load: raises if the mapped file changed (GGUFFile.check_unchanged)
    file_check: Optional[Callable[[], None]] = None

    def forward_batch(self, contexts: Sequence["Context"], tokens: NDArray[Any],
                      positions: Sequence[int]) -> None:
        """Evaluate ``tokens[i]`` in ``contexts[i]`` at position ``positions[i]``, setting
        each context's logits: one decode step for several conversations.

        The contexts are this engine's and distinct.  This default runs them one at
        a time through ``_forward``; a variant overrides it to read the weights once
        for all of them.  On an exception the callers roll every context back."""
        for ctx, token, pos in zip(contexts, tokens, positions):
            ctx._forward(np.array([token], dtype=np.int32), int(pos))

    def prefill_batch(self, contexts: Sequence["Context"], batches: Sequence[NDArray[Any]],
                      starts: Sequence[int], rows: Sequence[Optional[RowOutputs]]) -> None:
        """Evaluate ``batches[i]`` (int32) in ``contexts[i]`` from position ``starts[i]``,
        setting each context's logits and filling ``rows[i]`` when it is not None: a
        prefill of several conversations.  This default runs them one at a time; a
        variant overrides it to read the weights once per pass for all of them."""
        for ctx, batch, start, r in zip(contexts, batches, starts, rows):
            if r is None:
                ctx._forward(batch, int(start))
            else:
                ctx._forward_rows(batch, int(start), r)


class Context(ABC):
    """The state of one conversation: history, KV cache, logits, sampler."""

    def __init__(self, engine: Engine, n_ctx: int, sampler: Any = None) -> None:
        if not is_int(n_ctx):
            raise TypeError(f"n_ctx: expected an int, got {type(n_ctx).__name__}")
        if n_ctx < 1:
            raise ValueError(f"n_ctx: must be >= 1, got {n_ctx}")
        if sampler is None:
            from .sampler import Sampler

            sampler = Sampler()
        self.engine = engine
        self.n_ctx = int(n_ctx)
        self.sampler = sampler
        self.tokens: list[int] = []
        self.logits = np.zeros(engine.vocab_size, dtype=np.float32)
        # False when self.logits do not belong to the last token of history
        # (after truncate_to, or before any prefill).
        self._logits_valid = False
        # History tokens [0, _n_cached) have their K/V in the cache.  Less than
        # len(tokens) only after a failed recompute of the last token's logits: the
        # rest is evaluated again, before anything else, by the next call.
        self._n_cached = 0
        self._lock = threading.Lock()

    # ---- hooks a variant implements ---------------------------------------
    @abstractmethod
    def _forward(self, tokens: NDArray[Any], start: int) -> None:
        """Evaluate ``tokens`` at positions ``start...``; set ``self.logits`` for the last."""

    def _truncate_cache(self, n: int) -> None:
        """Forget cache positions >= n.  Position-addressed caches need nothing."""

    def _forward_rows(self, tokens: NDArray[Any], start: int, rows: RowOutputs) -> None:
        """`_forward`, also filling ``rows``.  This default decodes one token at a time
        (a variant overrides it to use its batched pass) and has no hidden states."""
        if rows.hidden is not None:
            raise NotImplementedError(f"{type(self).__name__} does not expose hidden states")
        for i in range(len(tokens)):
            self._forward(tokens[i:i + 1], start + i)
            if rows.logits is not None and i >= rows.first:
                rows.logits[i - rows.first] = self.logits

    def _state_options(self) -> dict[str, Any]:
        """Keywords of ``engine.create_context`` that a saved state must be loaded with."""
        return {}

    def _cache_state(self, n: int) -> dict[str, NDArray[Any]]:
        """The cache's arrays for positions < n, to save (`infer.state`)."""
        raise NotImplementedError(f"{type(self).__name__} cannot save its cache")

    def _load_cache_state(self, arrays: dict[str, NDArray[Any]], n: int) -> None:
        """Put back what `_cache_state(n)` returned (shapes to check: the data is foreign)."""
        raise NotImplementedError(f"{type(self).__name__} cannot load a cache")

    #: attributes a copy shares with the original rather than copies
    _shared_on_copy: frozenset[str] = frozenset({"engine"})

    def __deepcopy__(self, memo: dict[int, Any]) -> "Context":
        """An independent context with the same history, cache, logits and sampler
        state (the engine and its weights are shared)."""
        with self._exclusive():
            twin = object.__new__(type(self))
            memo[id(self)] = twin
            for name, value in self.__dict__.items():
                if name == "_lock":
                    value = threading.Lock()
                elif name not in self._shared_on_copy:
                    value = copy.deepcopy(value, memo)
                setattr(twin, name, value)
            self._after_copy(twin)
            return twin

    def _after_copy(self, twin: "Context") -> None:
        """Fix up what a plain copy of the attributes gets wrong (a variant hook)."""

    # ---- saved state ----------------------------------------------------------------
    def save_state(self) -> bytes:
        """This context as bytes: tokens, the used KV cache, logits, sampler state
        (see `infer.state`); `Context.load_state(model, data)` reads them back."""
        from . import state

        with self._exclusive():
            return state.save_state(self)

    @classmethod
    def load_state(cls, model: Any, data: bytes) -> "Context":
        """A new context of ``model`` continuing exactly where the saved one stopped;
        `infer.state.StateError` for data from another model, truncated or altered."""
        from . import state

        return state.load_state(model, data)  # type: ignore[no-any-return]

    def save(self, path: Any) -> None:
        """`save_state` written to ``path`` atomically."""
        from . import state

        with self._exclusive():
            state.save(self, path)

    # ---- the contract -------------------------------------------------------
    @property
    def n_past(self) -> int:
        """Number of positions held in the KV cache (= len(self.tokens))."""
        return len(self.tokens)

    def restart(self) -> None:
        """Drop the whole history and cache; reset the sampler (its RNG and window)."""
        with self._exclusive():
            self._truncate_cache(0)
            self.tokens = []
            self._n_cached = 0
            self._logits_valid = False
            self.sampler.reset()

    def truncate_to(self, n: int) -> None:
        """Drop tokens >= n from history and cache; earlier ones are kept as computed."""
        if not is_int(n):
            # Checked before anything is dropped: a float or True would otherwise reach
            # the cache, the grammar's rollback and the history as a length.
            raise TypeError(f"n: expected an int, got {type(n).__name__}")
        n = int(n)
        with self._exclusive():
            if not 0 <= n <= len(self.tokens):
                raise ValueError(f"n: must be in [0, {len(self.tokens)}], got {n}")
            if n == len(self.tokens):
                return
            self._truncate_cache(n)
            _sampler_call(self.sampler, "uncommit", len(self.tokens) - n)  # a grammar forgets them too
            del self.tokens[n:]
            self._n_cached = min(self._n_cached, n)
            self._logits_valid = False
            self.sampler.set_history(self.tokens)

    def prefill(self, tokens: Iterable[int], all_logits: bool = False, logits_from: int = 0,
                hidden_states: bool = False) -> Any:
        """Append ``tokens`` after the history in one batched pass; logits of the last.

        ``all_logits=True`` returns the logits of every position of ``tokens`` (from
        index ``logits_from`` on: shape (n - logits_from, vocab)), computed in the same
        pass (the output head runs on those rows only).  ``hidden_states=True``
        returns the final hidden states (after the output norm, (n, n_embd)); both:
        a tuple (logits, hidden)."""
        with self._exclusive():
            self._check_file()
            batch = self._check_tokens(tokens)
            n = len(batch)
            logits_from = self._check_room(n, logits_from)
            rows = self._rows_for(n, all_logits, logits_from, hidden_states)
            if n:
                self._eval(batch, rows)
            if rows is None:
                return None
            if all_logits and hidden_states:
                return rows.logits, rows.hidden
            return rows.logits if all_logits else rows.hidden

    def _check_room(self, n: int, logits_from: Any, which: str = "") -> int:
        """``logits_from`` valid for n tokens (returned as an int), and n tokens fit after
        the history (``which``: the "contexts[i]: " of a batched call, for the messages)."""
        if not is_int(logits_from) or not 0 <= logits_from <= n:
            raise ValueError(f"{which}logits_from: must be an int in [0, {n}], got {logits_from!r}")
        if len(self.tokens) + n > self.n_ctx:
            raise ContextOverflowError(
                f"{which}{n} tokens after {len(self.tokens)} already held exceed the "
                f"context of {self.n_ctx} tokens")
        return int(logits_from)

    def _accept(self, batch: NDArray[Any]) -> None:
        """Append an evaluated batch to the history (its K/V now cached, logits valid)."""
        self.tokens.extend(int(t) for t in batch)
        for t in batch:
            self.sampler.accept(int(t))
        self._n_cached = len(self.tokens)
        self._logits_valid = True

    def _rows_for(self, n: int, all_logits: bool, logits_from: int, hidden_states: bool) -> Optional[RowOutputs]:
        """The RowOutputs a prefill of n tokens asks for (None: the last logits only)."""
        if not (all_logits or hidden_states):
            return None
        width = getattr(self.engine, "n_embd", 0)
        if hidden_states and not width:
            raise NotImplementedError(f"{type(self.engine).__name__} does not expose hidden states")
        return RowOutputs(
            logits_from,
            np.zeros((n - logits_from, self.engine.vocab_size), np.float32) if all_logits else None,
            np.zeros((n, width), np.float32) if hidden_states else None)

    def next(self) -> int:
        """Sample a token from ``self.logits``, append it, decode it; return it."""
        return self._next(None)[0]

    def next_with_logprobs(self, top: int = 0) -> tuple[int, Any]:
        """`next`, also returning the token's `infer.sampler.TokenLogprob` (with the
        ``top`` most likely alternatives) from the logits the sampler saw."""
        return self._next(top)

    def _next(self, top: Optional[int]) -> tuple[int, Any]:
        with self._exclusive():
            if not self.tokens:
                raise RuntimeError("next(): the context is empty; prefill a prompt first")
            if len(self.tokens) >= self.n_ctx:
                raise ContextOverflowError(f"the context of {self.n_ctx} tokens is full")
            self._check_file()
            self._ensure_logits()
            draw = _rng_state(self.sampler)
            try:
                token = _sampled(self.sampler.sample(self.logits), self.engine.vocab_size)
                record = None if top is None else self.sampler.logprobs(self.logits, token, top)
                # The grammar (if any) computes its next mask while the forward pass runs.
                _sampler_call(self.sampler, "commit", token)
            except BaseException:
                _restore_rng(self.sampler, draw)  # a bad ``top``, say: the draw is taken back
                raise
            try:
                self._eval(np.array([token], dtype=np.int32))
            except BaseException:
                _sampler_call(self.sampler, "uncommit", 1)
                _restore_rng(self.sampler, draw)
                raise
            return token, record

    # ---- shared machinery -----------------------------------------------------
    def _eval(self, batch: NDArray[Any], rows: Optional[RowOutputs] = None) -> None:
        """Evaluate ``batch`` after the history (first any history tokens not cached);
        with ``rows``, also the all-position outputs of ``batch``."""
        if rows is not None and self._n_cached < len(self.tokens):
            self._eval(np.empty(0, dtype=np.int32))  # the uncached history first, without rows
        start = self._n_cached
        run = batch
        if start < len(self.tokens):
            run = np.concatenate([np.asarray(self.tokens[start:], dtype=np.int32), batch])
        try:
            if rows is None:
                self._forward(run, start)
            else:
                self._forward_rows(run, start, rows)
        except BaseException:
            # Cache slots past `start` may hold partial results; history does not
            # name them, so the context is as before.  Logits may be half-written.
            self._truncate_cache(start)
            self._logits_valid = False
            raise
        # An interrupt between these lines leaves _n_cached short: safe, the
        # next call evaluates those tokens again.
        self._accept(batch)

    def _ensure_logits(self) -> None:
        """Recompute the logits of the last token if a truncation made them stale.
        The token stays in the history whatever happens: only its cache slot is
        dropped and evaluated again."""
        if self._logits_valid:
            return
        if self._n_cached == len(self.tokens):
            self._n_cached -= 1
            self._truncate_cache(self._n_cached)
        self._eval(np.empty(0, dtype=np.int32))

    def _check_file(self) -> None:
        check = self.engine.file_check
        if check is not None:
            check()

    def _ensure_cached(self) -> None:
        """Evaluate history tokens whose cache slots a failed call dropped."""
        if self._n_cached < len(self.tokens):
            self._eval(np.empty(0, dtype=np.int32))

    def _check_tokens(self, tokens: Iterable[int]) -> NDArray[Any]:
        """``tokens`` as int32, every id checked against the vocabulary *before* the
        cast (an int64 2**32 + 504 would otherwise become token 504)."""
        vocab = self.engine.vocab_size
        if isinstance(tokens, np.ndarray):
            batch = tokens
            if batch.ndim != 1:
                raise ValueError(f"tokens: expected a 1-D sequence, got shape {batch.shape}")
            if batch.size and not np.issubdtype(batch.dtype, np.integer):
                raise TypeError(f"tokens: expected integers, got {batch.dtype}")
            values: Sequence[Any] = batch.tolist()  # Python ints: the bounds cannot wrap
        else:
            values = list(tokens)
            for t in values:
                if not is_int(t):
                    if isinstance(t, (list, tuple, np.ndarray)):
                        raise ValueError("tokens: expected a 1-D sequence of token ids")
                    raise TypeError(f"tokens: expected integers, got {type(t).__name__}")
        if values and not (0 <= min(values) and max(values) < vocab):
            bad = next(int(t) for t in values if not 0 <= t < vocab)
            raise ValueError(f"tokens: id {bad} outside the vocabulary [0, {vocab})")
        return np.array(values, dtype=np.int32)

    def _exclusive(self) -> "_Exclusive":
        return _Exclusive(self._lock)


def next_batch(contexts: Sequence[Context]) -> list[int]:
    """`Context.next()` for several contexts of one engine in one decode step: each
    samples its token from its own logits, then all are evaluated together
    (`Engine.forward_batch`).  Returns the tokens, in the order of ``contexts``."""
    return _step_batch(contexts, None)


def decode_batch(contexts: Sequence[Context], tokens: Sequence[int]) -> None:
    """Append ``tokens[i]`` to ``contexts[i]`` and compute its logits, for all the
    contexts in one decode step (a batched `prefill` of one token each)."""
    if len(tokens) != len(contexts):
        raise ValueError(f"tokens: expected {len(contexts)}, one per context, got {len(tokens)}")
    _step_batch(contexts, tokens)


def prefill_batch(contexts: Sequence[Context], tokens: Sequence[Iterable[int]],
                  all_logits: bool = False, logits_from: int = 0) -> Optional[list[NDArray[Any]]]:
    """`Context.prefill` of ``tokens[i]`` into ``contexts[i]``, for all the contexts of
    one engine in one batched pass (`Engine.prefill_batch`): every weight is read once
    per pass for all of them.  With ``all_logits``, returns each context's logits from
    index ``logits_from`` of its tokens on; if anything fails, every context is as it was."""
    contexts = list(contexts)
    if len(tokens) != len(contexts):
        raise ValueError(f"tokens: expected {len(contexts)} sequences, one per context, got {len(tokens)}")
    if not contexts:
        return [] if all_logits else None
    with _holding(contexts):
        batches = [c._check_tokens(t) for c, t in zip(contexts, tokens)]
        firsts = [c._check_room(len(batch), logits_from, f"contexts[{i}]: ")
                  for i, (c, batch) in enumerate(zip(contexts, batches))]
        rows = [c._rows_for(len(b), all_logits, first, False) for c, b, first in zip(contexts, batches, firsts)]
        for c in contexts:
            c._ensure_cached()
        todo = [i for i, b in enumerate(batches) if len(b)]
        starts = [len(c.tokens) for c in contexts]
        try:
            contexts[0].engine.prefill_batch([contexts[i] for i in todo], [batches[i] for i in todo],
                                             [starts[i] for i in todo], [rows[i] for i in todo])
        except BaseException:
            for i in todo:
                contexts[i]._truncate_cache(starts[i])
                contexts[i]._logits_valid = False
            raise
        for i in todo:
            contexts[i]._accept(batches[i])
    if not all_logits:
        return None
    return [r.logits for r in rows if r is not None and r.logits is not None]


class _holding:
    """Holds the locks of several distinct contexts of one engine (ContextBusyError
    if another thread has one) and checks the model file once."""

    def __init__(self, contexts: Sequence[Context]) -> None:
        engine = contexts[0].engine
        if any(c.engine is not engine for c in contexts):
            raise ValueError("contexts: all must belong to one engine")
        if len({id(c) for c in contexts}) != len(contexts):
            raise ValueError("contexts: a context appears twice")
        self.contexts = contexts
        self.held: list[_Exclusive] = []

    def __enter__(self) -> None:
        try:
            for c in self.contexts:
                guard = c._exclusive()
                guard.__enter__()
                self.held.append(guard)
            self.contexts[0]._check_file()
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc: object) -> None:
        for guard in self.held:
            guard.__exit__()
        self.held = []


def _step_batch(contexts: Sequence[Context], forced: Optional[Sequence[int]]) -> list[int]:
    contexts = list(contexts)
    if not contexts:
        return []
    with _holding(contexts):
        if forced is not None:
            batch = [c._check_tokens([t]) for c, t in zip(contexts, forced)]
        for i, c in enumerate(contexts):
            if len(c.tokens) >= c.n_ctx:
                raise ContextOverflowError(f"contexts[{i}]: the context of {c.n_ctx} tokens is full")
            if forced is None and not c.tokens:
                raise RuntimeError(f"contexts[{i}]: the context is empty; prefill a prompt first")
        if forced is None:
            for c in contexts:
                c._ensure_logits()
            draws = [_rng_state(c.sampler) for c in contexts]
            try:
                chosen = [_sampled(c.sampler.sample(c.logits), c.engine.vocab_size) for c in contexts]
            except BaseException:
                for c, draw in zip(contexts, draws):
                    _restore_rng(c.sampler, draw)
                raise
            for c, token in zip(contexts, chosen):
                _sampler_call(c.sampler, "commit", token)
        else:
            for c in contexts:
                c._ensure_cached()
            chosen = [int(b[0]) for b in batch]
        starts = [len(c.tokens) for c in contexts]
        try:
            contexts[0].engine.forward_batch(contexts, np.array(chosen, dtype=np.int32), starts)
        except BaseException:
            for i, (c, start) in enumerate(zip(contexts, starts)):
                c._truncate_cache(start)
                c._logits_valid = False
                if forced is None:
                    _sampler_call(c.sampler, "uncommit", 1)
                    _restore_rng(c.sampler, draws[i])
            raise
        for c, token in zip(contexts, chosen):
            c.tokens.append(token)
            c.sampler.accept(token)
            c._n_cached = len(c.tokens)
            c._logits_valid = True
        return chosen


def _sampler_call(sampler: Any, hook: str, arg: int) -> None:
    """``commit``/``uncommit`` are optional in a sampler (infer's Sampler has them,
    for its grammar); a sampler with only sample/accept/reset/set_history works."""
    method = getattr(sampler, hook, None)
    if method is not None:
        method(arg)


def _sampled(token: Any, vocab_size: int) -> int:
    """A sampler's pick, checked: a custom sampler's -1 would index the last row of a
    Python variant's table without a word (the C decode step refuses it itself)."""
    picked = int(token)
    if not 0 <= picked < vocab_size:
        raise ValueError(f"the sampler returned token {picked}, outside the vocabulary [0, {vocab_size})")
    return picked


def _rng_state(sampler: Any) -> Any:
    """The sampler's RNG position before a draw (None: a sampler without
    ``get_rng_state``), so that a decode failing after the draw can take it back."""
    get = getattr(sampler, "get_rng_state", None)
    return None if get is None else get()


def _restore_rng(sampler: Any, state: Any) -> None:
    if state is not None:
        sampler.set_rng_state(state)


class _Exclusive:
    """Holds a context's lock for one call; a second thread gets ContextBusyError."""

    __slots__ = ("lock",)

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock

    def __enter__(self) -> None:
        if not self.lock.acquire(blocking=False):
            raise ContextBusyError("this Context is being used by another thread; "
                                   "create one context per thread")

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


class Model:
    """A light view over a loaded model: tokenizer, engine and optional chat template."""

    def __init__(self, tokenizer: Any, engine: Engine, chat: Any = None,
                 metadata: Optional[dict[str, Any]] = None, closer: Optional[Callable[[], None]] = None):
        self.tokenizer = tokenizer
        self.engine = engine
        self.chat = chat
        self.metadata = metadata or {}
        self._closer = closer

    def create_context(self, n_ctx: Optional[int] = None, sampler: Any = None, **sampling: Any) -> Context:
        """A new Context; sampling keywords (temperature=..., top_k=...) build its Sampler."""
        if self.engine.file_check is _model_closed:
            _model_closed()
        if sampler is not None and sampling:
            raise TypeError(f"sampling keywords ({', '.join(sorted(sampling))}) build a Sampler; "
                            f"with sampler= give them to that sampler instead")
        if sampler is None and sampling:
            from .sampler import Sampler

            sampler = Sampler(**sampling)
        return self.engine.create_context(n_ctx=n_ctx, sampler=sampler)

    def embed(self, texts: Any, pooling: Optional[str] = None, normalize: bool = True) -> NDArray[Any]:
        """Embeddings of a text or a list of texts from the final hidden states
        (``pooling`` "mean", "last" or "cls"; None: the file's, else "mean"); see `infer.embeddings`."""
        from .embeddings import embed

        return embed(self, texts, pooling=pooling, normalize=normalize)

    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        """Relevance scores of ``documents`` to ``query`` from a reranking model (an
        encoder with pooling rank), in the documents' order; see `infer.embeddings.rerank`."""
        from .embeddings import rerank

        return rerank(self, query, documents)

    def load_context(self, path: Any) -> Context:
        """A context saved with ``ctx.save(path)``, continuing where it stopped."""
        from . import state

        return state.load(self, path)  # type: ignore[no-any-return]

    def create_chat_completion(self, messages: Any, **options: Any) -> Any:
        """OpenAI's chat completion: a ``chat.completion`` dict, or chunk dicts with
        ``stream=True``; the options are `infer.api.create_chat_completion`'s."""
        from .api import create_chat_completion

        return create_chat_completion(self, messages, **options)

    def create_embedding(self, input: Any, **options: Any) -> Any:
        """OpenAI's embeddings (``{"object": "list", "data": [...]}``); `infer.api.create_embedding`."""
        from .api import create_embedding

        return create_embedding(self, input, **options)

    def create_completion(self, prompt: Any, **options: Any) -> Any:
        """OpenAI's (legacy) text completion; the options are `infer.api.create_completion`'s."""
        from .api import create_completion

        return create_completion(self, prompt, **options)

    def close(self) -> None:
        self.engine.close()
        if self._closer is not None:
            self._closer()
            self._closer = None
        # Every Context call that runs the model checks engine.file_check first: so a
        # variant whose close() just drops its weights (docs/variants.md's) still gives
        # ModelClosedError, not whatever indexing its dropped weights raises.
        self.engine.file_check = _model_closed

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _model_closed() -> None:
    raise ModelClosedError("the model is closed")


# ---- variant registry -----------------------------------------------------------
class UnsupportedModelError(ValueError):
    """A GGUF file infer cannot run as it is meant to be run: an unknown architecture,
    or tensors / metadata keys that change the maths and that its variant does not
    implement.  ``names`` lists the offending tensors or keys (or the architecture)."""

    def __init__(self, message: str, names: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.names = list(names)


#: the entry-point group through which other packages add variants: an entry point's
#: name is a GGUF ``general.architecture``, its value a factory (gguf_file, n_threads) -> Engine
ENTRY_POINT_GROUP = "infer.variants"

# architecture name -> function(gguf_file, n_threads) -> Engine
_VARIANTS: dict[str, Callable[..., Engine]] = {}


def register_variant(*architectures: str) -> Callable[[Callable[..., Engine]], Callable[..., Engine]]:
    """Decorator: register an Engine factory for GGUF ``general.architecture`` names."""

    def deco(factory: Callable[..., Engine]) -> Callable[..., Engine]:
        for arch in architectures:
            _VARIANTS[arch] = factory
        return factory

    return deco


def _entry_points() -> list[Any]:
    from importlib.metadata import entry_points

    eps: Any = entry_points()
    if hasattr(eps, "select"):  # Python >= 3.10
        return list(eps.select(group=ENTRY_POINT_GROUP))
    return list(eps.get(ENTRY_POINT_GROUP, ()))  # Python 3.9: a dict of groups


def _register_builtin_variants() -> None:
    """Import `infer.variants`, whose modules register the built-in architectures, so
    that lookups before any `infer.load` see them (and see them before entry points)."""
    import importlib

    importlib.import_module(f"{__package__}.variants")


def variant_for(architecture: str) -> Callable[..., Engine]:
    """The Engine factory of a GGUF architecture: a registered one (the built-in
    variants), else an installed package's ``infer.variants`` entry point of that name."""
    _register_builtin_variants()
    if architecture not in _VARIANTS:
        for ep in _entry_points():
            if ep.name == architecture:
                try:
                    factory = ep.load()
                except Exception as e:
                    raise UnsupportedModelError(
                        f"architecture {architecture!r}: the entry point {ep.value!r} of "
                        f"{ENTRY_POINT_GROUP!r} failed to load: {type(e).__name__}: {e}",
                        [architecture]) from e
                if not callable(factory):
                    raise UnsupportedModelError(
                        f"architecture {architecture!r}: the entry point {ep.value!r} is not callable",
                        [architecture])
                _VARIANTS[architecture] = factory
                break
    if architecture not in _VARIANTS:
        known = ", ".join(known_architectures()) or "none"
        raise UnsupportedModelError(f"architecture {architecture!r} is not supported (known: {known})",
                                    [architecture])
    return _VARIANTS[architecture]


def known_architectures() -> Sequence[str]:
    """Registered architectures (the built-in ones included) and those installed
    packages offer as entry points."""
    _register_builtin_variants()
    return sorted(set(_VARIANTS) | {ep.name for ep in _entry_points()})
