"""Shared pytest fixtures.

`isa` runs a test once per kernel set this CPU can execute (scalar, avx2, avx512,
neon, neon_dotprod), switching the active dispatch table for the test's duration and
restoring the previous one afterwards.
"""
import os
from pathlib import Path

import pytest

import infer.kernels as kernels

if os.environ.get("INFER_TEST_INSTALLED"):
    # scripts/test_installed_wheel.sh: the tests must exercise the installed wheel,
    # not a build lying in the source tree.
    _source_tree = Path(__file__).resolve().parent.parent
    assert not Path(kernels.__file__).resolve().is_relative_to(_source_tree), (
        f"INFER_TEST_INSTALLED is set but infer was imported from the source tree: "
        f"{kernels.__file__}")

AVAILABLE_ISAS = kernels.capabilities()["available"]


@pytest.fixture(params=AVAILABLE_ISAS)
def isa(request):
    previous = kernels.capabilities()["active"]
    kernels.set_isa(request.param)
    try:
        yield request.param
    finally:
        kernels.set_isa(previous)
