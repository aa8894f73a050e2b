"""infer.serve.greenlets: request greenlets paused on the event loop, resumed from
another thread (the scheduler's), in batches.  Expected values are hand-computed
sequences of events."""
import asyncio
import threading

import pytest

pytest.importorskip("greenlet", reason="greenlet is not installed (the serve extra and the test extra)")

from infer.serve.greenlets import Hub  # noqa: E402


def run_on_loop(body):
    """Run the coroutine function ``body(loop)`` on a fresh event loop; its result."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(body(loop))
    finally:
        loop.close()


def test_greenlets_pause_and_are_resumed_from_another_thread_in_order():
    async def body(loop):
        hub = Hub(loop)
        events = []
        waits = {}
        done = asyncio.Event()

        def request(name):
            def run(w):
                waits[name] = w
                for step in range(3):
                    events.append((name, step))
                    w.pause()
                events.append((name, "end"))
                if len(hub.running) == 1:
                    done.set()
            return run

        for name in "abc":
            hub.start(request(name))
        # each ran up to its first pause, on this thread, before start returned
        assert events == [("a", 0), ("b", 0), ("c", 0)]
        assert len(hub.running) == 3

        def scheduler():  # resumes them all, three rounds, in the order c, a, b
            for _ in range(3):
                for name in "cab":
                    waits[name].resume()
                round_seen.wait(timeout=10)
                round_seen.clear()

        round_seen = threading.Event()
        thread = threading.Thread(target=scheduler)
        thread.start()
        for expected in ([("c", 1), ("a", 1), ("b", 1)], [("c", 2), ("a", 2), ("b", 2)],
                         [("c", "end"), ("a", "end"), ("b", "end")]):
            before = len(events)
            while len(events) < before + 3:
                await asyncio.sleep(0.001)
            assert events[before:] == expected
            round_seen.set()
        await asyncio.wait_for(done.wait(), 10)
        thread.join(timeout=10)
        assert not hub.running
        return True

    assert run_on_loop(body)


def test_a_failing_greenlet_is_logged_and_the_others_still_resume(caplog):
    async def body(loop):
        hub = Hub(loop)
        waits, finished = {}, []

        def request(name, fail):
            def run(w):
                waits[name] = w
                w.pause()
                if fail:
                    raise RuntimeError("boom")
                finished.append(name)
            return run

        hub.start(request("a", True))
        hub.start(request("b", False))
        threading.Thread(target=lambda: (waits["a"].resume(), waits["b"].resume())).start()
        for _ in range(1000):
            if finished:
                break
            await asyncio.sleep(0.001)
        return finished, len(hub.running)

    assert run_on_loop(body) == (["b"], 0)
    assert "a request's greenlet failed" in caplog.text


def test_pause_outside_its_greenlet_is_an_error():
    async def body(loop):
        hub = Hub(loop)
        saved = []
        hub.start(lambda w: saved.append(w))  # returns at once: the greenlet is over
        with pytest.raises(RuntimeError, match="outside its greenlet"):
            saved[0].pause()
        return True

    assert run_on_loop(body)
