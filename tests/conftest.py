"""Shared pytest fixtures.

`isa` runs a test once per kernel set this CPU can execute (scalar, avx2, avx512,
neon), switching the active dispatch table for the test's duration and restoring
the previous one afterwards.

With INFER_TEST_INSTALLED=1 the suite refuses to run against the source tree: it is
then testing an installed wheel (run it from outside the tree with
`-o pythonpath=`, which drops pyproject's pythonpath = ["."]).
"""
import os
from pathlib import Path

import pytest

import infer

SOURCE_ROOT = Path(__file__).resolve().parent.parent
if os.environ.get("INFER_TEST_INSTALLED") == "1" and SOURCE_ROOT in Path(infer.__file__).resolve().parents:
    raise pytest.UsageError(f"INFER_TEST_INSTALLED=1 but infer was imported from the source tree "
                            f"({infer.__file__}); run from outside it with -o pythonpath=")

import infer.kernels as kernels  # noqa: E402

AVAILABLE_ISAS = kernels.capabilities()["available"]


@pytest.fixture(params=AVAILABLE_ISAS)
def isa(request):
    previous = kernels.capabilities()["active"]
    kernels.set_isa(request.param)
    try:
        yield request.param
    finally:
        kernels.set_isa(previous)
