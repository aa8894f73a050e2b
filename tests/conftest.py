"""Shared pytest fixtures.

`isa` runs a test once per kernel set this CPU can execute (scalar, avx2, avx512,
neon, neon_dotprod), switching the active dispatch table for the test's duration and
restoring the previous one afterwards.
"""
import pytest

import infer.kernels as kernels

AVAILABLE_ISAS = kernels.capabilities()["available"]


@pytest.fixture(params=AVAILABLE_ISAS)
def isa(request):
    previous = kernels.capabilities()["active"]
    kernels.set_isa(request.param)
    try:
        yield request.param
    finally:
        kernels.set_isa(previous)
