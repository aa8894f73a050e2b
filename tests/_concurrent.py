"""Subprocesses a test module starts together, each test then waiting for its own.

A qemu-user run or a mypy pass keeps one core busy for tens of seconds while pytest
waits.  A module fixture submits such runs to a pool with a worker per core, so on a
2-core machine they take half the wall time they take one after another; each test
asserts on its own run's result exactly as before.  Only the runs of tests the session
will run are submitted, so `pytest -k` still starts just its own.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

import pytest


def cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(cores())


def selected(request: pytest.FixtureRequest, test: str, param: Optional[str] = None) -> list[Any]:
    """The values of parameter `param` (or [None] when `param` is None) of the items of
    `test` in the requesting module that this session runs, in collection order."""
    values: list[Any] = []
    for item in request.session.items:
        if getattr(item, "module", None) is not request.module or getattr(item, "originalname", None) != test:
            continue
        value = item.callspec.params.get(param) if param is not None else None  # type: ignore[attr-defined]
        if value not in values:
            values.append(value)
    return values
