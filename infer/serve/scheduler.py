"""Continuous batching: N slots decoded together by one scheduler thread.

Each request runs the ordinary `infer.api` code (ChatSession, generate) in a
thread or greenlet of its own, over a `SlotContext`: an object shaped like a
Context whose ``prefill`` and ``next`` are jobs for the scheduler instead of
forward passes.
The scheduler thread alone runs the model.  Each round it

1. waits until every bound slot has a job (or ``gather`` seconds have passed: a
   request is between tokens, turning the last one into text);
2. runs one chunk of the oldest pending prefill, so that a long prompt joining
   does not stall the streams already decoding;
3. samples a token for every slot waiting for one and evaluates them all in one
   step, `runtime.decode_batch`: one pass over the weights for all of them when
   the engine overrides `Engine.forward_batch`.

Decode ahead: when a slot's token is done and its request is waiting for it, the
scheduler queues that slot's next token at once, before the request has turned
the last one into text.  The step loop then never waits for the requests: their
Python (detokenizing, the reply parser, JSON) runs while the next step does,
with the GIL free.  A token decoded ahead that the request does not take (its
reply ended, or it prefills or truncates instead) is taken back: the context
is truncated and the sampler's RNG put back where it was, so the results are
those of one token at a time.  Only samplers without a grammar and with
``get_rng_state``/``set_rng_state`` (infer.Sampler) decode ahead.  The requests
are woken only as the next step starts (`_wake_requests`), so that their Python
does not hold up the sampling before it.

A request waits in one of two ways.  By default its thread blocks (the job's
event, the scheduler's condition).  With ``SlotContext.waits`` set (`Waits`: the
server runs each request in a greenlet on its event loop) it calls
``waits.pause()`` instead until told, and the scheduler calls ``waits.resume()``
where it would set the event or notify the condition.

A request takes a slot at its first prefill, when its prompt is known: the free
slot whose cached tokens share the longest prefix with it, so a chat's next
turn prefills only what is new.  A cancelled request (its client went away)
gets `Cancelled` from its next job; a job that fails fails alone.
"""
from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol, Sequence

import numpy as np

from ..generate import end_of_turn_ids
from ..runtime import ContextOverflowError, decode_batch

__all__ = ["Cancelled", "QueueFull", "Scheduler", "SlotContext", "Stopping", "Waits"]


class Cancelled(Exception):
    """The request was cancelled (its client disconnected, or the server is stopping)."""


class Stopping(Cancelled):
    """The server is stopping: it takes no more requests, or ended this one."""


class QueueFull(RuntimeError):
    """Every slot is busy and the queue of waiting requests is full."""


_PREFILL, _DECODE = "prefill", "decode"


class Waits(Protocol):
    """How a request waits for the scheduler when its thread must not block."""

    def pause(self) -> None:
        """Return when resumed (or earlier: the caller checks again)."""

    def resume(self) -> None:
        """Make the paused request go on (from any thread)."""


class _NotRun(Exception):
    """A token to decode ahead that was not (the sampler got a grammar meanwhile)."""


@dataclass
class _Job:
    kind: str
    request: "SlotContext"
    tokens: Any = None  # prefill: int32 array still to run
    done: int = 0       # prefill: tokens of it already run
    result: int = -1    # decode: the sampled token
    error: Optional[BaseException] = None
    top: Optional[int] = None  # decode: alternatives wanted with the token's logprob (None: no logprob)
    record: Any = None  # decode: the token's infer.sampler.TokenLogprob when top is set
    #: set when the job is over and its request told (it waits on it)
    over: threading.Event = field(default_factory=threading.Event)
    # the rest is read and written under the scheduler's lock
    taken: bool = False   # a round holds it: it can no longer be withdrawn
    finished: bool = False
    ahead: bool = False   # decode: queued by the scheduler before the request asked
    follow: bool = False  # decode: the request wants it, so its next token may be decoded ahead
    rng: Any = None       # ahead: the sampler's RNG state before its draw
    length: int = 0       # decode: the context's length with the token
    nth: int = 0          # decode: the token's place in its reply (1: the first)


@dataclass
class _Slot:
    index: int
    context: Any
    request: Optional["SlotContext"] = None
    last_used: float = 0.0


@dataclass
class Stats:
    """Counters the scheduler keeps for /metrics (read without the lock: ints)."""

    decode_steps: int = 0
    decoded_tokens: int = 0
    prefilled_tokens: int = 0
    cached_tokens: int = 0
    cancelled: int = 0
    rejected: int = 0
    #: tokens decoded ahead and taken back (not in decoded_tokens)
    discarded_tokens: int = 0
    #: batch size -> decode steps run at that size
    batch_sizes: dict[int, int] = field(default_factory=dict)


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class Scheduler:
    """``n_slots`` contexts of ``n_ctx`` tokens each over one model's engine.

    ``max_queue`` requests may wait for a slot beyond the ``n_slots`` running;
    `open` refuses more with `QueueFull`.  ``prefill_chunk`` tokens of prompt run
    between two decode steps.  ``gather`` seconds is the longest a round waits for
    the requests between tokens: they take well under a millisecond each, so it
    only bounds the wait for one that is stuck (on a loaded machine a short bound
    would split the batch and read the weights twice).
    """

    def __init__(self, model: Any, n_slots: int = 1, n_ctx: Optional[int] = None, max_queue: int = 64,
                 prefill_chunk: int = 64, gather: float = 0.02) -> None:
        for name, value, lo in (("n_slots", n_slots, 1), ("max_queue", max_queue, 0),
                                ("prefill_chunk", prefill_chunk, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise ValueError(f"{name}: must be an integer >= {lo}, got {value!r}")
        self.model = model
        self.n_slots = n_slots
        self.max_queue = max_queue
        self.prefill_chunk = prefill_chunk
        self.gather = float(gather)
        self.slots = [_Slot(i, model.create_context(n_ctx=n_ctx)) for i in range(n_slots)]
        self.n_ctx = int(self.slots[0].context.n_ctx)
        self.stats = Stats()
        # no token is decoded ahead after these (the reply is over)
        self._end_ids = end_of_turn_ids(model.tokenizer)
        self._cond = threading.Condition()
        self._jobs: dict[int, _Job] = {}  # slot index -> its pending job
        self._waiting: collections.deque[SlotContext] = collections.deque()  # FIFO for free slots
        self._open = 0  # requests opened and not yet closed
        # jobs over whose requests are not yet told: see _wake_requests
        self._unwoken: list[_Job] = []
        self._stopping = False
        self._draining = False  # see drain
        self._thread = threading.Thread(target=self._run, name="infer-scheduler", daemon=True)
        self._thread.start()

    # ---- what the server asks -------------------------------------------------------
    def open(self) -> "SlotContext":
        """A handle for one request, or QueueFull."""
        with self._cond:
            if self._stopping or self._draining:
                raise Stopping("the server is stopping")
            if self._open >= self.n_slots + self.max_queue:
                self.stats.rejected += 1
                raise QueueFull(f"all {self.n_slots} slots are busy and {self.max_queue} requests are waiting")
            self._open += 1
        return SlotContext(self)

    @property
    def busy_slots(self) -> int:
        return sum(1 for s in self.slots if s.request is not None)

    @property
    def queue_depth(self) -> int:
        """Requests opened that hold no slot (waiting for one, or not yet prefilling)."""
        return max(0, self._open - self.busy_slots)

    def drain(self) -> None:
        """Take no more requests: `open` and the requests waiting for a slot fail with
        `Stopping`, while those holding a slot go on (until `close`)."""
        with self._cond:
            self._draining = True
            self._notify_all()

    def close(self) -> None:
        """Stop the thread; pending and later jobs fail with `Stopping`."""
        with self._cond:
            self._stopping = True
            self._notify_all()
        self._thread.join(timeout=30)

    # ---- what SlotContext asks (from its request) --------------------------------------
    def _bind(self, request: "SlotContext", prompt: Sequence[int]) -> _Slot:
        with self._cond:
            self._waiting.append(request)
            try:
                while True:
                    if request.cancelled:
                        raise Cancelled("the request was cancelled while waiting for a slot")
                    if self._stopping or self._draining:
                        raise Stopping("the server is stopping")
                    free = [s for s in self.slots if s.request is None]
                    if free and self._waiting[0] is request:
                        break
                    if request.waits is None:
                        self._cond.wait()
                    else:
                        self._cond.release()
                        try:
                            request.waits.pause()
                        finally:
                            self._cond.acquire()
            finally:
                self._waiting.remove(request)
                self._notify_all()  # the next in line may now be first
            # longest common prefix; ties go to the slot idle longest
            slot = max(free, key=lambda s: (_common_prefix(s.context.tokens, prompt), -s.last_used))
            slot.request = request
        return slot

    def _release(self, request: "SlotContext") -> None:
        request._settle()
        with self._cond:
            slot = request._slot
            if slot is not None and slot.request is request:
                slot.request = None
                slot.last_used = time.monotonic()
                self._jobs.pop(slot.index, None)
            request._slot = None
            self._open -= 1
            if request.cancelled:
                self.stats.cancelled += 1
            self._notify_all()

    def _submit(self, job: _Job) -> _Job:
        self._enqueue(job)
        job.request._wait(job)
        if job.error is not None:
            raise job.error
        return job

    def _enqueue(self, job: _Job) -> None:
        request = job.request
        slot = request._slot
        assert slot is not None
        with self._cond:
            if request.cancelled:
                raise Cancelled("the request was cancelled")
            if self._stopping:
                raise Stopping("the server is stopping")
            self._jobs[slot.index] = job
            self._cond.notify_all()

    # ---- decode ahead (under self._cond) --------------------------------------------------
    def _queue_ahead(self, index: int, job: _Job) -> None:
        """After ``job``, a decode its request waits for, queue the slot's next token,
        unless the reply is surely over (an end-of-turn token, its max_tokens)."""
        request = job.request
        ctx = self.slots[index].context
        sampler = ctx.sampler
        limit = request.reply_limit
        if (request.cancelled or self._stopping or request._ahead is not None or index in self._jobs
                or job.result in self._end_ids or (limit is not None and job.nth >= limit)
                or getattr(sampler, "grammar", None) is not None or not hasattr(sampler, "set_rng_state")
                or len(ctx.tokens) >= ctx.n_ctx):
            return
        request._ahead = self._jobs[index] = _Job(_DECODE, request, top=job.top, ahead=True, nth=job.nth + 1)
        self._cond.notify_all()

    def _withdraw(self, job: _Job) -> None:
        """Undo a job decoded ahead that its request does not take (it is over or not taken)."""
        index = job.request._index
        if not job.taken:
            if self._jobs.get(index) is job:
                del self._jobs[index]
            return
        ctx = self.slots[index].context
        if job.rng is not None:
            ctx.sampler.set_rng_state(job.rng)
        if job.error is None:
            ctx.truncate_to(job.length - 1)  # the sampler's penalty window follows
            job.request._stale = True  # the logits are those of the token taken back
            self.stats.decoded_tokens -= 1
            self.stats.discarded_tokens += 1

    def _count_cached(self, n: int) -> None:
        with self._cond:
            self.stats.cached_tokens += n

    def _wake(self) -> None:
        with self._cond:
            self._notify_all()

    def _notify_all(self) -> None:
        """Wake whoever waits on the condition: threads, and the requests that wait
        for a slot by pausing (under self._cond)."""
        self._cond.notify_all()
        for request in self._waiting:
            if request.waits is not None:
                request.waits.resume()

    # ---- the thread ----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._jobs or len(self._jobs) < self.busy_slots:
                    self._wake_requests()  # this round may wait for them
                while not self._jobs and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    self._wake_requests()
                    for job in self._jobs.values():
                        job.error = Stopping("the server is stopping")
                        job.finished = True
                        _tell(job)
                    self._jobs.clear()
                    return
                deadline = time.monotonic() + self.gather
                while len(self._jobs) < self.busy_slots and not self._stopping:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                jobs = list(self._jobs.items())
                for _, job in jobs:
                    job.taken = True
            finished = self._round(jobs)
            with self._cond:
                for index, job in finished:
                    if self._jobs.get(index) is job:
                        del self._jobs[index]
                    job.finished = True
                    if job.kind == _DECODE and job.error is None and job.follow:
                        self._queue_ahead(index, job)
            self._unwoken.extend(job for _, job in finished)

    def _wake_requests(self) -> None:
        """Tell the requests whose jobs are over.  Deferred until the scheduler waits or
        is about to release the GIL into a forward pass: woken at once, eight requests
        would take turns at the GIL with the sampling of the next step and delay it,
        while in the step their Python runs beside the kernels."""
        for job in self._unwoken:
            _tell(job)
        self._unwoken.clear()

    def _round(self, jobs: list[tuple[int, _Job]]) -> list[tuple[int, _Job]]:
        """Run one round; returns the jobs it finished."""
        finished = []
        live = []
        for index, job in jobs:
            if job.request.cancelled:
                job.error = Cancelled("the request was cancelled")
                finished.append((index, job))
            else:
                live.append((index, job))
        prefills = [(i, j) for i, j in live if j.kind == _PREFILL]
        if prefills:
            # the oldest first: it finishes sooner than if all shared the chunks
            index, job = min(prefills, key=lambda p: p[1].request.opened)
            if self._prefill_chunk(job):
                finished.append((index, job))
        decodes = [(i, j) for i, j in live if j.kind == _DECODE]
        if decodes:
            self._decode(decodes)
            finished.extend(decodes)
        return finished

    def _prefill_chunk(self, job: _Job) -> bool:
        ctx = self.slots[job.request._index].context
        chunk = job.tokens[job.done:job.done + self.prefill_chunk]
        self._wake_requests()
        try:
            ctx.prefill(chunk)
        except Exception as exc:
            job.error = exc
            return True
        job.done += len(chunk)
        self.stats.prefilled_tokens += len(chunk)
        return job.done >= len(job.tokens)

    def _decode(self, decodes: list[tuple[int, _Job]]) -> None:
        """Sample each slot's token, then evaluate them all in one step.

        Sampling is done here, slot by slot, rather than inside `next_batch`, so
        that a request whose sampler fails (a logit_bias that bans every token)
        fails alone and the others' random draws are not replayed."""
        ready: list[tuple[_Job, Any]] = []
        tokens: list[int] = []
        for index, job in decodes:
            ctx = self.slots[index].context
            try:
                if job.ahead:
                    if getattr(ctx.sampler, "grammar", None) is not None:
                        raise _NotRun("the sampler has a grammar now")
                    job.rng = ctx.sampler.get_rng_state()
                token = int(ctx.sampler.sample(ctx.logits))
                if job.top is not None:  # from the logits the sampler saw, before the grammar moves on
                    job.record = ctx.sampler.logprobs(ctx.logits, token, job.top)
                _sampler_hook(ctx.sampler, "commit", token)  # a grammar, if any, moves past it
            except Exception as exc:
                job.error = exc
                continue
            ready.append((job, ctx))
            tokens.append(token)
        self._wake_requests()
        if not ready:
            return
        try:
            decode_batch([ctx for _, ctx in ready], tokens)
        except Exception:
            # decode_batch rolled every context back: find the one at fault, each alone
            for (job, ctx), token in zip(ready, tokens):
                try:
                    decode_batch([ctx], [token])
                except Exception as exc:
                    job.error = exc
                    _sampler_hook(ctx.sampler, "uncommit", 1)
                else:
                    job.result, job.length = token, len(ctx.tokens)
                    self._count_step(1)
            return
        for (job, ctx), token in zip(ready, tokens):
            job.result, job.length = token, len(ctx.tokens)
        self._count_step(len(ready))

    def _count_step(self, size: int) -> None:
        stats = self.stats
        stats.decode_steps += 1
        stats.decoded_tokens += size
        stats.batch_sizes[size] = stats.batch_sizes.get(size, 0) + 1


def _tell(job: _Job) -> None:
    """Tell a job's request that the job is over."""
    job.over.set()
    if job.request.waits is not None:
        job.request.waits.resume()


def _sampler_hook(sampler: Any, hook: str, arg: int) -> None:
    """A grammar's commit/uncommit (infer.Sampler has them; other samplers may not)."""
    method = getattr(sampler, hook, None)
    if method is not None:
        method(arg)


class SlotContext:
    """What a request's ChatSession or generate() drives: a Context's surface
    (``tokens``, ``n_past``, ``n_ctx``, ``sampler``, ``prefill``, ``next``,
    ``truncate_to``) over a scheduler slot taken at the first prefill.

    Only its request's thread (or greenlet) uses it; `cancel` may come from any thread.
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler
        self._slot: Optional[_Slot] = None
        #: the next token, decoded ahead (see the module's doc); set under the scheduler's lock
        self._ahead: Optional[_Job] = None
        #: the tokens of the slot's history this request has seen (an ahead token is beyond)
        self._length = 0
        self.n_ctx = scheduler.n_ctx
        self._sampler: Any = None
        self.cancelled = False
        self.opened = time.monotonic()
        #: prompt tokens found in the slot's cache when it was taken
        self.cached_tokens = 0
        #: time.monotonic() of the first sampled token, None before
        self.first_token_at: Optional[float] = None
        self.generated = 0
        #: the longest reply (max_tokens): no token is decoded ahead beyond it
        self.reply_limit: Optional[int] = None
        self._replied = 0  # tokens taken since the last prefill: the reply so far
        #: keep the prefix the slot's cache shares with the prompt (llama-server's
        #: cache_prompt); False prefills the whole prompt, as a fresh context would
        self.reuse_prefix = True
        # the slot's logits are not those of its last token (after a truncation)
        self._stale = False
        #: how to wait for the scheduler without blocking the thread (None: block it)
        self.waits: Optional[Waits] = None

    def _wait(self, job: _Job) -> None:
        """Until ``job`` is over and its request told."""
        if self.waits is None:
            job.over.wait()
            return
        while not job.over.is_set():
            self.waits.pause()

    @property
    def _index(self) -> int:
        assert self._slot is not None
        return self._slot.index

    @property
    def slot(self) -> Optional[int]:
        """The index of the slot held, or None."""
        return None if self._slot is None else self._slot.index

    @property
    def sampler(self) -> Any:
        return self._sampler

    @sampler.setter
    def sampler(self, sampler: Any) -> None:
        self._settle()
        self._sampler = sampler
        if self._slot is not None:
            self._slot.context.sampler = sampler

    @property
    def tokens(self) -> list[int]:
        return [] if self._slot is None else self._slot.context.tokens[:self._length]

    @property
    def n_past(self) -> int:
        return 0 if self._slot is None else self._length

    def _settle(self) -> None:
        """Take back the token decoded ahead, if any: the request does something else."""
        job = self._ahead
        if job is None:
            return
        scheduler = self._scheduler
        with scheduler._cond:
            self._ahead = None
            if not job.taken:
                scheduler._withdraw(job)
                return
        self._wait(job)
        with scheduler._cond:
            scheduler._withdraw(job)

    def truncate_to(self, n: int) -> None:
        if self._slot is None:
            if n != 0:
                raise ValueError(f"n: must be in [0, 0], got {n}")
            return
        self._settle()
        if n < len(self.tokens):
            self._stale = True
        self._slot.context.truncate_to(n)  # no forward pass: done here, the slot is ours
        self._length = len(self._slot.context.tokens)

    def restart(self) -> None:
        self.truncate_to(0)

    def prefill(self, tokens: Any) -> None:
        self._settle()
        batch = np.asarray(list(tokens) if not isinstance(tokens, np.ndarray) else tokens, dtype=np.int64)
        if batch.ndim != 1:
            raise ValueError(f"tokens: expected a 1-D sequence, got shape {batch.shape}")
        if len(self.tokens) + len(batch) > self.n_ctx:
            raise ContextOverflowError(f"{len(batch)} tokens after {len(self.tokens)} already held exceed the "
                                       f"context of {self.n_ctx} tokens")
        if self._slot is None:
            if len(batch) == 0:
                return
            batch = self._take_slot(batch)
        if len(batch) == 0:
            return
        vocab = int(self._scheduler.model.engine.vocab_size)
        if batch.min() < 0 or batch.max() >= vocab:
            raise ValueError(f"tokens: an id outside the vocabulary [0, {vocab})")
        self._scheduler._submit(_Job(_PREFILL, self, tokens=batch.astype(np.int32)))
        assert self._slot is not None
        self._length = len(self._slot.context.tokens)
        self._replied = 0
        self._stale = False

    def _take_slot(self, prompt: Any) -> Any:
        """Bind to the best slot for ``prompt``; returns the part it must still prefill."""
        ids = [int(t) for t in prompt]
        slot = self._scheduler._bind(self, ids)
        self._slot = slot
        ctx = slot.context
        # keep the shared prefix, but recompute at least the last token for its logits
        keep = min(_common_prefix(ctx.tokens, ids), len(ids) - 1) if self.reuse_prefix else 0
        ctx.truncate_to(keep)
        self._length = keep
        if self._sampler is not None:
            ctx.sampler = self._sampler
            self._sampler.set_history(ctx.tokens)
        self.cached_tokens = keep
        self._scheduler._count_cached(keep)
        return prompt[keep:]

    def next(self) -> int:
        return self._next(None)[0]

    def next_with_logprobs(self, top: int = 0) -> tuple[int, Any]:
        """`next`, with the token's `infer.sampler.TokenLogprob` (as Context's)."""
        return self._next(top)

    def _next(self, top: Optional[int]) -> tuple[int, Any]:
        if self._slot is None:
            raise RuntimeError("next(): the context is empty; prefill a prompt first")
        if self._length >= self.n_ctx:
            raise ContextOverflowError(f"the context of {self.n_ctx} tokens is full")
        scheduler = self._scheduler
        job = self._ahead
        if job is not None and job.top != top:
            self._settle()
            job = None
        if self._stale:  # recompute the last token's logits, as Context.next does
            last = self.tokens[-1]
            self.truncate_to(len(self.tokens) - 1)
            self.prefill([last])
        late = False
        if job is not None:
            with scheduler._cond:
                self._ahead = None
                late = job.finished  # too late to ask for the token after it: queued below
                job.follow = True
            self._wait(job)
            if isinstance(job.error, _NotRun):
                job = None
        if job is None:
            job = scheduler._submit(_Job(_DECODE, self, top=top, follow=True, nth=self._replied + 1))
        elif job.error is not None:
            raise job.error
        self._length = job.length
        self._replied = job.nth
        if late:
            with scheduler._cond:
                scheduler._queue_ahead(self._index, job)
        if self.first_token_at is None:
            self.first_token_at = time.monotonic()
        self.generated += 1
        return job.result, job.record

    def run_apart(self, work: Callable[[], Any]) -> Any:
        """``work()``, long work of the request that is not a job of the scheduler's
        (`infer.runtime.run_apart`: tokenizing a long text, the echoed prompt's logprobs),
        on a thread of its own: a request that waits by pausing runs on the event loop's
        thread, which must go on serving the others meanwhile."""
        waits = self.waits
        if waits is None:
            return work()
        done = threading.Event()
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["value"] = work()
            except BaseException as exc:
                outcome["error"] = exc
            finally:
                done.set()
                waits.resume()

        threading.Thread(target=run, name="infer-request-apart", daemon=True).start()
        while not done.is_set():
            waits.pause()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    def cancel(self) -> None:
        """Make the next job fail with Cancelled (from any thread)."""
        self.cancelled = True
        self._scheduler._wake()

    def close(self) -> None:
        """Give the slot back (its request calls this once, when it is over)."""
        self._scheduler._release(self)
