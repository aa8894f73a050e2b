"""Requests as greenlets on the event loop, not a thread each.

A request's `infer.api` call is blocking code: its `SlotContext` waits for the
scheduler at every token.  With a thread per request each token cost two thread
switches (the scheduler wakes the worker, the worker wakes the event loop), and
on a machine whose cores all run the decode step that CPU comes out of the step.
Here each request runs in a greenlet on the event loop's thread instead.  Where
it would wait it switches back to the loop (`GreenletWaits.pause`); the
scheduler thread resumes it through `Hub`, which wakes the loop once for all
the requests whose tokens one step produced.

Code in a request's greenlet must not await (it is not a coroutine): it hands
what it produces to the loop's side through plain calls such as
``asyncio.Queue.put_nowait``.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Callable

import greenlet

__all__ = ["GreenletWaits", "Hub"]

log = logging.getLogger("infer.serve")


class Hub:
    """Resumes paused request greenlets on ``loop``'s thread, in batches."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._pending: list[greenlet.greenlet] = []
        self._scheduled = False
        #: the greenlets started and not yet finished (a paused greenlet that nothing
        #: references would be collected, and killed with GreenletExit)
        self.running: set[greenlet.greenlet] = set()

    def start(self, run: Callable[["GreenletWaits"], None]) -> None:
        """Run ``run(waits)`` in a new greenlet until it first pauses (on the loop's
        thread).  ``run`` should handle its own errors; one that escapes is logged
        (raised out of the greenlet, it would stop the resuming of the others)."""
        waits = GreenletWaits(self)

        def body() -> None:
            try:
                run(waits)
            except Exception:
                log.exception("a request's greenlet failed")
            finally:
                self.running.discard(glet)

        glet = greenlet.greenlet(body)
        waits.glet = glet
        self.running.add(glet)
        glet.switch()

    def wake(self, glet: greenlet.greenlet) -> None:
        """Resume ``glet`` soon (from any thread)."""
        with self._lock:
            self._pending.append(glet)
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop is closed: the server is stopping
            pass

    def _drain(self) -> None:
        with self._lock:
            pending, self._pending, self._scheduled = self._pending, [], False
        for glet in dict.fromkeys(pending):  # once each, in order
            if not glet.dead:
                glet.switch()


class GreenletWaits:
    """A request greenlet's `infer.serve.scheduler.Waits`."""

    def __init__(self, hub: Hub) -> None:
        self._hub = hub
        self.glet: Any = None

    def pause(self) -> None:
        if greenlet.getcurrent() is not self.glet:
            raise RuntimeError("a request greenlet's wait ran outside its greenlet")
        self.glet.parent.switch()

    def resume(self) -> None:
        self._hub.wake(self.glet)
