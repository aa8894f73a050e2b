"""The continuous-batching scheduler on the scripted variant: slot choice by longest
prefix, failures and cancellations that stay with their own request, and the
decode steps really shared.  The scripted context reads its own KV "cache", so a
slot whose cache were wrong would go off script."""
import threading
import time

import pytest

from infer.generate import generate
from infer.serve.scheduler import Cancelled, QueueFull, Scheduler, Stopping
from scripted import GreedySampler, RaisingSampler, ScriptedContext, scripted_model


def ids(model, text):
    return model.tokenizer.encode(text, add_special=False, parse_special=True)


OPENER = "<|im_start|>assistant\n"


def run(model, handle, prompt, max_tokens=None, sampler=None):
    handle.sampler = sampler or GreedySampler()
    try:
        gen = generate(model, prompt, context=handle, max_tokens=max_tokens)
        return "".join(gen), gen
    finally:
        handle.close()


def test_requests_decode_together_and_get_their_own_text():
    model = scripted_model(["Hello world!", "ab ab ab"])
    sched = Scheduler(model, n_slots=4, n_ctx=256)
    try:
        # k openers in the prompt: the scripted model answers with script[k - 1]
        prompts = [ids(model, "x" * i + OPENER * (1 + i % 2)) for i in range(4)]
        out = [None] * 4
        handles = [sched.open() for _ in prompts]

        def work(i):
            out[i] = run(model, handles[i], prompts[i])[0]

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert out == ["Hello world!", "ab ab ab"] * 2
        assert sched.stats.decoded_tokens == 2 * (len(ids(model, "Hello world!")) + len(ids(model, "ab ab ab")) + 2)
        assert max(sched.stats.batch_sizes) > 1  # some steps ran several slots at once
        assert sched.busy_slots == 0 and sched.queue_depth == 0
    finally:
        sched.close()


def test_a_request_takes_the_slot_sharing_its_longest_prefix():
    model = scripted_model(["ab"] * 8)
    sched = Scheduler(model, n_slots=3, n_ctx=256)
    try:
        a, b = ids(model, "Hello" + OPENER), ids(model, "user says hi" + OPENER)
        for prompt in (a, b):
            run(model, sched.open(), prompt)
        slot_b = next(s.index for s in sched.slots if s.context.tokens[:len(b)] == b)
        follow = b + ids(model, "ab<|im_end|>\n") + ids(model, "more" + OPENER)
        handle = sched.open()
        handle.sampler = GreedySampler()
        gen = generate(model, follow, context=handle, max_tokens=2)
        "".join(gen)
        assert handle.slot == slot_b
        # the slot held b, the reply and its end token (generate evaluates it), not the "\n"
        assert handle.cached_tokens == len(b) + len(ids(model, "ab<|im_end|>"))
        handle.close()
        # cache_prompt off: the whole prompt is prefilled again
        handle = sched.open()
        handle.reuse_prefix = False
        run(model, handle, follow, max_tokens=2)
        assert handle.cached_tokens == 0
    finally:
        sched.close()


def test_a_failing_request_fails_alone():
    model = scripted_model(["Hello world!"] * 2)
    sched = Scheduler(model, n_slots=2, n_ctx=256)
    try:
        prompt = ids(model, OPENER)
        results = {}

        def work(name, sampler):
            try:
                results[name] = run(model, sched.open(), prompt, sampler=sampler)[0]
            except Exception as exc:  # noqa: BLE001
                results[name] = exc

        threads = [threading.Thread(target=work, args=("bad", RaisingSampler(3, RuntimeError("boom")))),
                   threading.Thread(target=work, args=("good", GreedySampler()))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert isinstance(results["bad"], RuntimeError) and str(results["bad"]) == "boom"
        assert results["good"] == "Hello world!"
    finally:
        sched.close()


class SlowContext(ScriptedContext):
    def _forward(self, tokens, start):
        time.sleep(0.01)
        super()._forward(tokens, start)


def slow_model(script):
    model = scripted_model(script)
    engine = model.engine
    engine.create_context = lambda n_ctx=None, sampler=None: SlowContext(engine, n_ctx or 2048, GreedySampler())
    return model


def wait_until(predicate, timeout=10):
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)


def start_requests(model, sched, handles):
    """Run each handle's request (the prompt OPENER) on a thread, one after the other:
    each once the one before holds a slot and is decoding, or waits for one.  The
    threads and {name: reply text, or the Cancelled it raised}."""
    prompt, out, threads = ids(model, OPENER), {}, {}

    def work(name, handle):
        try:
            out[name] = run(model, handle, prompt)[0]
        except Cancelled as exc:
            out[name] = exc

    for name, handle in handles.items():
        threads[name] = threading.Thread(target=work, args=(name, handle))
        threads[name].start()
        wait_until(lambda: handle.generated >= 3 or handle in sched._waiting)
    return threads, out


def test_cancel_and_queue_limits():
    model = slow_model(["ab" * 500] * 4)
    sched = Scheduler(model, n_slots=1, n_ctx=2048, max_queue=1)
    try:
        running, waiting = sched.open(), sched.open()
        with pytest.raises(QueueFull):
            sched.open()
        threads, out = start_requests(model, sched, {"running": running, "waiting": waiting})
        waiting.cancel()  # while waiting for the slot
        threads["waiting"].join(timeout=10)
        running.cancel()  # mid-generation
        threads["running"].join(timeout=10)
        assert all(isinstance(out[name], Cancelled) for name in ("running", "waiting")), out
        assert running.generated < 1000 and sched.busy_slots == 0 and sched.stats.cancelled == 2
        # the slot serves the next request
        text, gen = run(model, sched.open(), ids(model, OPENER), max_tokens=4)
        assert gen.finish_reason == "length" and len(gen.tokens) == 4
    finally:
        sched.close()


def test_drain_refuses_the_waiting_and_lets_the_running_finish():
    """drain(): open() and the request waiting for a slot fail with Stopping; the
    running one ends with its whole script; close() then stops one mid-reply."""
    reply = "ab" * 40
    model = slow_model([reply] * 4)
    sched = Scheduler(model, n_slots=1, n_ctx=2048, max_queue=1)
    late = Scheduler(model, n_slots=1, n_ctx=2048)
    try:
        running, waiting = sched.open(), sched.open()
        threads, out = start_requests(model, sched, {"running": running, "waiting": waiting})
        sched.drain()
        threads["waiting"].join(timeout=10)
        assert isinstance(out["waiting"], Stopping)
        with pytest.raises(Stopping):
            sched.open()
        threads["running"].join(timeout=30)
        assert out["running"] == reply
        # close() ends a request holding a slot at its next token
        threads, out = start_requests(model, late, {"late": late.open()})
        late.close()
        threads["late"].join(timeout=10)
        assert isinstance(out["late"], Stopping)
    finally:
        sched.close()
        late.close()


def test_bad_arguments():
    model = scripted_model([])
    with pytest.raises(ValueError, match="n_slots"):
        Scheduler(model, n_slots=0)
    with pytest.raises(ValueError, match="max_queue"):
        Scheduler(model, max_queue=-1)


def test_n_choices_in_one_slot_recompute_the_stale_logits():
    from infer import api

    model = scripted_model(["Hello world!"] * 2)
    sched = Scheduler(model, n_slots=1, n_ctx=256)
    try:
        handle = sched.open()
        try:
            out = api.create_completion(model, ids(model, OPENER), n=2, max_tokens=None, temperature=0,
                                        context=handle)
        finally:
            handle.close()
        # the second choice's prompt is all in the cache: its last token is evaluated again
        assert [c["text"] for c in out["choices"]] == ["Hello world!"] * 2
    finally:
        sched.close()


def test_tokens_decoded_ahead_are_taken_back_exactly():
    """infer.Sampler decodes ahead (the scheduler samples a slot's next token before
    its worker asks).  Seeded random draws over the scripted model's logits: any
    extra draw left in the RNG, or an ahead token left in the cache, changes the
    tokens.  Reference: the same calls on a plain context with the same sampler."""
    from infer.sampler import Sampler

    model = scripted_model(["Hello world!"] * 4)
    prompt = ids(model, "user says hi" + OPENER)

    def calls(ctx, seed, bound=None):
        """next() x5, a truncation mid-reply, next() x5, a prefill, next() x3."""
        ctx.sampler = Sampler(temperature=1.5, top_k=0, top_p=1.0, seed=seed)
        ctx.prefill(prompt)
        if bound is not None:
            # all four hold a slot before any goes on: a request that finished and
            # gave its slot back before another started would hand it that slot (the
            # longest shared prefix), and a slot would stay unused
            bound.wait(timeout=30)
        seen = []
        for n in (5, 5, 3):
            seen += [ctx.next() for _ in range(n)]
            seen.append(list(ctx.tokens))
            ahead = getattr(ctx, "_ahead", None)
            if ahead is not None:  # let it run, so that it is taken back rather than withdrawn
                ahead.over.wait(timeout=10)
            if n == 5 and len(seen) < 10:
                ctx.truncate_to(len(ctx.tokens) - 2)
            elif n == 5:
                ctx.prefill(ids(model, "more"))
        return seen

    expected = [calls(model.create_context(n_ctx=256), seed) for seed in range(4)]
    sched = Scheduler(model, n_slots=4, n_ctx=256)
    try:
        handles = [sched.open() for _ in range(4)]
        out = [None] * 4
        bound = threading.Barrier(4)

        def work(i):
            try:
                out[i] = calls(handles[i], i, bound)
            finally:
                handles[i].close()

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert out == expected
        # the slots hold what each request saw, not the token decoded after it
        held = sorted(s.context.tokens for s in sched.slots)
        assert held == sorted(e[-1] for e in expected)
        assert sched.stats.discarded_tokens == 12  # the path ran: after each next() x n
        assert sched.stats.decoded_tokens == 4 * 13
        assert sched.busy_slots == 0
    finally:
        sched.close()
