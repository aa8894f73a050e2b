"""The Context contract of infer/runtime.py, on a toy variant with a position-addressed cache."""
import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from infer.runtime import Context, ContextBusyError, ContextOverflowError, Engine, Model, decode_batch, next_batch

VOCAB = 11


class GreedySampler:
    """Argmax; records what the runtime tells it (the real Sampler has the same methods)."""

    def __init__(self):
        self.history = []

    def sample(self, logits):
        return int(np.argmax(logits))

    def accept(self, token):
        self.history.append(int(token))

    def reset(self):
        self.history = []

    def set_history(self, tokens):
        self.history = [int(t) for t in tokens]


class ChainEngine(Engine):
    """cache[p] = (7 * cache[p-1] + token + 1) mod 1009; logits peak at cache[p] mod VOCAB.

    The state at a position depends on the whole history through the cache, so a
    stale or half-written slot shows in the next token.
    """
    vocab_size = VOCAB
    max_seq_len = 32

    def __init__(self):
        self.fail_at = None       # position at which _forward raises
        self.block = None         # (entered, release) events to hold a call inside _forward

    def create_context(self, n_ctx=None, sampler=None):
        return ChainContext(self, n_ctx or self.max_seq_len, sampler or GreedySampler())


class ChainContext(Context):
    def __init__(self, engine, n_ctx, sampler):
        super().__init__(engine, n_ctx, sampler)
        self.cache = np.full(n_ctx, -1, dtype=np.int64)
        self.forward_calls = 0

    def _forward(self, tokens, start):
        self.forward_calls += 1
        if self.engine.block is not None:
            entered, release = self.engine.block
            entered.set()
            release.wait(5)
        for i, t in enumerate(tokens):
            p = start + i
            if self.engine.fail_at == p:
                raise RuntimeError("injected failure")
            prev = self.cache[p - 1] if p > 0 else 0
            assert prev >= 0, "read a slot that was never written"
            self.cache[p] = (7 * prev + int(t) + 1) % 1009
        self.logits[:] = -1.0
        self.logits[self.cache[start + len(tokens) - 1] % VOCAB] = 1.0

    def _truncate_cache(self, n):
        self.cache[n:] = -1  # poison, so reading a dropped slot fails loudly


def reference_continuation(prompt, n):
    """The greedy continuation computed directly from the recurrence."""
    s, out = 0, []
    for t in prompt:
        s = (7 * s + t + 1) % 1009
    for _ in range(n):
        t = s % VOCAB
        out.append(t)
        s = (7 * s + t + 1) % 1009
    return out


def test_prefill_then_next_follows_the_recurrence():
    ctx = ChainEngine().create_context()
    ctx.prefill([3, 1, 4, 1, 5])
    got = [ctx.next() for _ in range(6)]
    assert got == reference_continuation([3, 1, 4, 1, 5], 6)
    assert ctx.n_past == 11 and ctx.tokens[:5] == [3, 1, 4, 1, 5]
    assert ctx.sampler.history == ctx.tokens


def test_overflowing_prompt_raises_and_leaves_context_unchanged():
    ctx = ChainEngine().create_context(n_ctx=8)
    ctx.prefill([2, 7, 1])
    logits = ctx.logits.copy()
    calls = ctx.forward_calls
    with pytest.raises(ContextOverflowError):
        ctx.prefill([1, 2, 3, 4, 5, 6])   # 3 + 6 > 8
    assert ctx.tokens == [2, 7, 1] and ctx.n_past == 3
    assert ctx.forward_calls == calls     # nothing was evaluated
    np.testing.assert_array_equal(ctx.logits, logits)
    assert [ctx.next() for _ in range(5)] == reference_continuation([2, 7, 1], 5)
    with pytest.raises(ContextOverflowError):
        ctx.next()                        # full: 8 of 8
    assert ctx.n_past == 8


def test_overflow_is_a_value_error():
    assert issubclass(ContextOverflowError, ValueError)


def test_truncate_to_then_next_recomputes_logits():
    ctx = ChainEngine().create_context()
    ctx.prefill([5, 9, 2, 6])
    [ctx.next() for _ in range(4)]
    ctx.truncate_to(3)
    assert ctx.tokens == [5, 9, 2] and ctx.sampler.history == [5, 9, 2]
    got = [ctx.next() for _ in range(5)]
    assert got == reference_continuation([5, 9, 2], 5)


def test_truncate_to_zero_then_prefill_and_restart():
    ctx = ChainEngine().create_context()
    ctx.prefill([1, 2, 3])
    ctx.truncate_to(0)
    with pytest.raises(RuntimeError):
        ctx.next()                        # empty context
    ctx.prefill([4])
    assert ctx.next() == reference_continuation([4], 1)[0]
    ctx.restart()
    assert ctx.n_past == 0 and ctx.sampler.history == []
    ctx.prefill([8, 8])
    assert [ctx.next() for _ in range(3)] == reference_continuation([8, 8], 3)


def test_truncate_to_bounds():
    ctx = ChainEngine().create_context()
    ctx.prefill([1, 2])
    with pytest.raises(ValueError):
        ctx.truncate_to(3)
    with pytest.raises(ValueError):
        ctx.truncate_to(-1)
    ctx.truncate_to(2)                    # no-op keeps valid logits
    assert ctx.next() == reference_continuation([1, 2], 1)[0]


@pytest.mark.parametrize("bad", [True, 1.0, 1.5, "1", None])
def test_truncate_to_a_non_int_raises_type_error_and_changes_nothing(bad):
    ctx = ChainEngine().create_context()
    ctx.prefill([4, 8, 1])
    uncommits = []
    ctx.sampler.uncommit = uncommits.append   # a grammar's rollback would see this
    with pytest.raises(TypeError, match="n: expected an int"):
        ctx.truncate_to(bad)
    assert ctx.tokens == [4, 8, 1] and uncommits == []
    assert [ctx.next() for _ in range(3)] == reference_continuation([4, 8, 1], 3)
    ctx.truncate_to(np.int64(2))          # numpy integers are ints
    assert ctx.tokens == [4, 8] and uncommits == [4]   # 6 held, 4 dropped


def test_failed_forward_leaves_context_unchanged():
    eng = ChainEngine()
    ctx = eng.create_context()
    ctx.prefill([3, 3])
    eng.fail_at = 4
    with pytest.raises(RuntimeError, match="injected"):
        ctx.prefill([1, 2, 3])            # positions 2, 3 written, then 4 fails
    assert ctx.tokens == [3, 3]
    eng.fail_at = None
    assert [ctx.next() for _ in range(4)] == reference_continuation([3, 3], 4)


@pytest.mark.parametrize("bad, exc", [([VOCAB], ValueError), ([-1], ValueError),
                                       ([[1, 2]], ValueError), ([1.5], TypeError)])
def test_bad_tokens_raise_typed_errors(bad, exc):
    ctx = ChainEngine().create_context()
    with pytest.raises(exc):
        ctx.prefill(bad)
    assert ctx.n_past == 0


def test_n_ctx_must_be_positive():
    with pytest.raises(ValueError, match="n_ctx"):
        ChainEngine().create_context(n_ctx=-3)


def test_one_context_from_two_threads_raises_busy():
    eng = ChainEngine()
    ctx = eng.create_context()
    ctx.prefill([1])
    entered, release = threading.Event(), threading.Event()
    eng.block = (entered, release)
    errors = []
    t = threading.Thread(target=lambda: ctx.next())
    t.start()
    assert entered.wait(5)
    try:
        for call in (ctx.next, lambda: ctx.prefill([2]), lambda: ctx.truncate_to(0), ctx.restart):
            try:
                call()
            except ContextBusyError as e:
                errors.append(e)
    finally:
        release.set()
        t.join(5)
    eng.block = None
    assert len(errors) == 4
    assert ctx.n_past == 2                # the first thread's token went in, nothing else
    assert ctx.tokens == [1] + reference_continuation([1], 1)


def test_two_contexts_from_two_threads_do_not_interfere():
    eng = ChainEngine()
    results = {}

    def run(seed):
        ctx = eng.create_context()
        ctx.prefill([seed, seed + 1])
        results[seed] = [ctx.next() for _ in range(20)]

    threads = [threading.Thread(target=run, args=(s,)) for s in (1, 6)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for s in (1, 6):
        assert results[s] == reference_continuation([s, s + 1], 20)


# ---- one decode step for several contexts (runtime.next_batch / decode_batch) --------
def test_next_batch_follows_each_recurrence():
    eng = ChainEngine()
    prompts = [[1], [2, 5], [9, 9, 9]]
    ctxs = [eng.create_context() for _ in prompts]
    for c, p in zip(ctxs, prompts):
        c.prefill(p)
    steps = [next_batch(ctxs) for _ in range(5)]
    for i, p in enumerate(prompts):
        assert [s[i] for s in steps] == reference_continuation(p, 5)
        assert ctxs[i].tokens == p + reference_continuation(p, 5)
        assert ctxs[i].sampler.history == ctxs[i].tokens


def test_decode_batch_appends_forced_tokens():
    eng = ChainEngine()
    a, b = eng.create_context(), eng.create_context()
    a.prefill([4])
    decode_batch([a, b], [3, 7])          # b starts empty: a forced token is a prefill of one
    assert a.tokens == [4, 3] and b.tokens == [7]
    assert a.next() == reference_continuation([4, 3], 1)[0]
    assert b.next() == reference_continuation([7], 1)[0]


def test_failed_batch_leaves_every_context_unchanged():
    eng = ChainEngine()
    a, b = eng.create_context(), eng.create_context()
    a.prefill([1, 2])
    b.prefill([3, 4, 5])
    eng.fail_at = 3                       # b's slot 3 fails after a's slot 2 was written
    with pytest.raises(RuntimeError, match="injected"):
        next_batch([a, b])
    assert a.tokens == [1, 2] and b.tokens == [3, 4, 5]
    eng.fail_at = None
    assert next_batch([a, b]) == [reference_continuation([1, 2], 1)[0], reference_continuation([3, 4, 5], 1)[0]]


@pytest.mark.parametrize("batched", [False, True])
def test_a_failed_decode_takes_back_its_random_draw(batched):
    """A decode that fails after the sampler drew (Ctrl-C inside the forward pass)
    leaves the sampler's RNG where it was: a seeded context that is interrupted and
    retried samples what one that was never interrupted samples."""
    from infer.sampler import Sampler

    def make(eng):
        ctx = eng.create_context(sampler=Sampler(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=11))
        ctx.prefill([3, 1, 4])
        return ctx

    eng = ChainEngine()
    reference = make(eng)
    expected = [reference.next() for _ in range(12)]
    assert len(set(expected)) > 1        # the draws matter: not one token over and over
    ctx = make(eng)
    got = [ctx.next() for _ in range(2)]
    eng.fail_at = 5                       # the third token's slot
    for _ in range(2):
        with pytest.raises(RuntimeError, match="injected"):
            next_batch([ctx]) if batched else ctx.next()
    eng.fail_at = None
    with pytest.raises(ValueError, match="top"):
        ctx.next_with_logprobs(-1)        # refused after the draw: taken back too
    got += [ctx.next() for _ in range(10)]
    assert got == expected


def test_batch_misuse_raises_typed_errors():
    eng = ChainEngine()
    a = eng.create_context(n_ctx=1)
    with pytest.raises(RuntimeError, match="empty"):
        next_batch([a])
    a.prefill([1])
    with pytest.raises(ContextOverflowError):
        next_batch([a])
    b = eng.create_context()
    with pytest.raises(ValueError, match="twice"):
        decode_batch([b, b], [1, 2])
    with pytest.raises(ValueError, match="one engine"):
        decode_batch([b, ChainEngine().create_context()], [1, 2])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        decode_batch([b], [VOCAB])
    assert b.tokens == [] and a.tokens == [1]


@pytest.mark.parametrize("bad", [[2**32 + 5], [2**63], [2**64 + 1], [-(2**32) + 5],
                                 np.array([2**32 + 5], np.int64), np.array([2**63], np.uint64)])
def test_token_ids_are_checked_before_the_cast(bad):
    # int32 casting first would run token 5 (or 0) instead of refusing.
    ctx = ChainEngine().create_context()
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ctx.prefill(bad)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        decode_batch([ctx], [bad[0]])
    assert ctx.n_past == 0 and ctx.forward_calls == 0


def test_bools_are_not_token_ids():
    ctx = ChainEngine().create_context()
    with pytest.raises(TypeError):
        ctx.prefill([True])
    with pytest.raises(TypeError):
        ctx.prefill(np.array([True]))


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_failed_next_after_truncate_keeps_the_history(exc):
    # next() after truncate_to recomputes the last token's logits; when that fails
    # (an error, or Ctrl-C landing inside the forward) the token must stay in history.
    eng = ChainEngine()
    ctx = eng.create_context()
    prompt = [3, 1, 4, 1, 5]
    ctx.prefill(prompt + [9, 2])
    ctx.truncate_to(5)
    real_forward = ctx._forward

    def failing(tokens, start):
        raise exc("injected")

    ctx._forward = failing
    for _ in range(3):  # repeated failures change nothing either
        with pytest.raises(exc):
            ctx.next()
        assert ctx.tokens == prompt and ctx.n_past == 5
    ctx._forward = real_forward
    assert [ctx.next() for _ in range(4)] == reference_continuation(prompt, 4)


def test_prefill_and_decode_batch_after_a_failed_recompute():
    # The dropped cache slot of the last token is evaluated again before new tokens.
    eng = ChainEngine()
    for use_batch in (False, True):
        ctx = eng.create_context()
        ctx.prefill([2, 7, 1])
        ctx.truncate_to(2)
        eng.fail_at = 1
        with pytest.raises(RuntimeError):
            ctx.next()
        eng.fail_at = None
        assert ctx.tokens == [2, 7]
        if use_batch:
            decode_batch([ctx], [8])
        else:
            ctx.prefill([8])
        assert ctx.tokens == [2, 7, 8]
        assert [ctx.next() for _ in range(3)] == reference_continuation([2, 7, 8], 3)


def test_model_create_context_refuses_sampling_keywords_beside_a_sampler():
    """They were dropped without a word: temperature=0 beside sampler= sampled with
    the sampler's own settings."""
    from infer.sampler import Sampler

    model = Model(tokenizer=None, engine=ChainEngine())
    sampler = Sampler(temperature=0.9, seed=1)
    with pytest.raises(TypeError, match="temperature"):
        model.create_context(sampler=sampler, temperature=0)
    assert model.create_context(sampler=sampler).sampler is sampler
    assert model.create_context(temperature=0).sampler.temperature == 0


@pytest.mark.parametrize("picked", [-1, VOCAB, 2**40])
def test_a_sampler_pick_outside_the_vocabulary_is_refused(picked):
    """A custom sampler's bad id reached the variant (a Python table indexes -1 as its
    last row) and the history; now a ValueError, the context unchanged."""

    class BadSampler(GreedySampler):
        def sample(self, logits):
            return picked

    for batched in (False, True):
        ctx = ChainEngine().create_context(sampler=BadSampler())
        ctx.prefill([2, 5])
        calls = ctx.forward_calls
        with pytest.raises(ValueError, match="outside the vocabulary"):
            next_batch([ctx]) if batched else ctx.next()
        assert ctx.tokens == [2, 5] and ctx.forward_calls == calls


def test_logits_from_takes_numpy_integers():
    """np.int64(1) was "logits_from: must be an int" (token ids and truncate_to take them)."""
    from infer.runtime import prefill_batch

    ctx = ChainEngine().create_context()
    rows = ctx.prefill([3, 1, 4], all_logits=True, logits_from=np.int64(1))
    assert rows.shape == (2, VOCAB)
    assert [int(r.argmax()) for r in rows] == [reference_continuation([3, 1], 1)[0],
                                              reference_continuation([3, 1, 4], 1)[0]]
    got = prefill_batch([ChainEngine().create_context()], [[3, 1, 4]], all_logits=True, logits_from=np.int32(2))
    assert got[0].shape == (1, VOCAB)
    with pytest.raises(ValueError, match="logits_from"):
        ctx.prefill([1], all_logits=True, logits_from=np.bool_(True))


_OPS = st.lists(st.one_of(
    st.tuples(st.just("prefill"), st.lists(st.integers(0, VOCAB - 1), max_size=5), st.booleans()),
    st.tuples(st.just("next"), st.booleans()),
    st.tuples(st.just("next_batch"), st.booleans()),
    st.tuples(st.just("decode_batch"), st.integers(0, VOCAB - 1), st.booleans()),
    st.tuples(st.just("truncate_to"), st.integers(-2, 12)),
    st.tuples(st.just("restart")),
), max_size=20)


@settings(max_examples=300, deadline=None)
@given(_OPS)
def test_failed_calls_leave_no_trace(ops):
    """Random calls, some failing (bad arguments, a full context, a forward pass that
    raises at its last position): the context then continues exactly as a fresh one
    given only the calls that succeeded, random draws included."""
    from infer.sampler import Sampler

    def make(eng):
        return eng.create_context(n_ctx=10, sampler=Sampler(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
                                                            repeat_penalty=1.3, seed=5))

    def run(ctx, op):
        kind = op[0]
        if kind == "prefill":
            ctx.prefill(op[1])
        elif kind == "next":
            ctx.next()
        elif kind == "next_batch":
            next_batch([ctx])
        elif kind == "decode_batch":
            decode_batch([ctx], [op[1]])
        elif kind == "truncate_to":
            ctx.truncate_to(op[1])
        else:
            ctx.restart()

    eng = ChainEngine()
    ctx, done = make(eng), []
    for op in ops:
        fail = op[0] in ("prefill", "next", "next_batch", "decode_batch") and op[-1]
        width = len(op[1]) if op[0] == "prefill" else 1
        eng.fail_at = ctx.n_past + width - 1 if fail and width else None
        try:
            run(ctx, op)
        except (RuntimeError, ValueError):
            continue
        finally:
            eng.fail_at = None
        done.append(op)
    replay = make(ChainEngine())
    for op in done:
        run(replay, op)
    assert ctx.tokens == replay.tokens and ctx.sampler.history == replay.sampler.history
    if ctx.tokens:
        more = [ctx.next() for _ in range(ctx.n_ctx - ctx.n_past)]
        assert more == [replay.next() for _ in range(len(more))]
