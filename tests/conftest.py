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

# Tests marked `slow` (minutes each on 2 cores) run only with INFER_SLOW_TESTS=1;
# .ci/run sets it for a second pass, `python -m pytest -m slow`, after the default suite.
RUN_SLOW = os.environ.get("INFER_SLOW_TESTS") == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow(reason): minutes on 2 cores; needs INFER_SLOW_TESTS=1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if RUN_SLOW:
        return
    for item in items:
        marker = item.get_closest_marker("slow")
        if marker is not None:
            why = marker.args[0] if marker.args else "slow on a 2-core machine"
            item.add_marker(pytest.mark.skip(reason=f"{why}; set INFER_SLOW_TESTS=1"))


@pytest.fixture(params=AVAILABLE_ISAS)
def isa(request):
    previous = kernels.capabilities()["active"]
    kernels.set_isa(request.param)
    try:
        yield request.param
    finally:
        kernels.set_isa(previous)
