"""infer/kernels.pyi matches the compiled module (mypy.stubtest compares every
name and signature against the Cython functions' embedded signatures), and code
using the stubs type-checks."""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest
from _concurrent import pool, selected
from under_test import IMPORT_ROOT

pytest.importorskip("mypy")
ROOT = Path(__file__).resolve().parent.parent


def mypy_cwd(tmp_path: Path) -> Path:
    """Where mypy finds the `infer` under test: the source tree, or for an installed
    wheel any other directory (mypy then reads the wheel's stubs via py.typed; run in
    site-packages it would take every module there for the user's own)."""
    return ROOT if Path(IMPORT_ROOT) == ROOT else tmp_path


GOOD = """
import numpy as np
import infer.kernels as K
out = np.empty(32, np.float32)
y = K.dequantize(bytes(18), "q4_0", out)
reveal = y.sum()
caps = K.capabilities()
active: str = caps["active"]
n: int = K.row_bytes("q8_0", 64)
"""
BAD = """
import infer.kernels as K
K.set_num_threads("two")
K.capabilities()["nonexistent"]
"""


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def checks(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future[subprocess.CompletedProcess[str]]]]:
    """The mypy, stubtest and ruff runs of this module's tests, started together, a
    core each (tests/_concurrent.py): each is one process busy for 10-30 s.  Each
    has its own mypy cache, so none reads another's half-written one."""
    tmp = tmp_path_factory.mktemp("typing")
    commands: dict[str, tuple[list[str], Path]] = {}
    if selected(request, "test_kernels_stub_matches_module"):
        allow = tmp / "allowlist.txt"
        # Cython's doctest dict and pickling hooks
        allow.write_text("infer.kernels.__test__\ninfer\\.kernels\\..*__(reduce|setstate)_cython__\n")
        # Only the stub is under test: errors in modules it pulls in (infer/__init__) are
        # the business of a mypy run over the package, not of this test.
        config = tmp / "mypy.ini"
        config.write_text("[mypy]\nfollow_imports = silent\nignore_missing_imports = True\n"
                          f"cache_dir = {tmp / 'stubtest-cache'}\n")
        commands["stubtest"] = ([sys.executable, "-m", "mypy.stubtest", "infer.kernels", "--allowlist", str(allow),
                                 "--mypy-config-file", str(config)], mypy_cwd(tmp))
    if selected(request, "test_stub_types_catch_misuse"):
        # One mypy process for both files: each file's errors are reported under its name.
        (tmp / "good.py").write_text(GOOD)
        (tmp / "bad.py").write_text(BAD)
        commands["misuse"] = ([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
                               "--no-incremental", "--cache-dir", str(tmp / "misuse-cache"),
                               str(tmp / "good.py"), str(tmp / "bad.py")], mypy_cwd(tmp))
    if selected(request, "test_package_is_clean_under_mypy_strict"):
        commands["package"] = ([sys.executable, "-m", "mypy", "infer"], ROOT)
    if selected(request, "test_ruff_is_clean") and importlib.util.find_spec("ruff") is not None:
        commands["ruff"] = ([sys.executable, "-m", "ruff", "check", "."], ROOT)
    with pool() as workers:
        yield {name: workers.submit(run, cmd, cwd) for name, (cmd, cwd) in commands.items()}


def test_kernels_stub_matches_module(checks: dict[str, Future[subprocess.CompletedProcess[str]]]) -> None:
    proc = checks["stubtest"].result()
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_stub_types_catch_misuse(checks: dict[str, Future[subprocess.CompletedProcess[str]]]) -> None:
    """The stubs are precise enough to reject a wrong call and accept right ones."""
    proc = checks["misuse"].result()
    lines = proc.stdout.splitlines()
    good = [line for line in lines if re.match(r"\S*good\.py:", line)]
    bad = "\n".join(line for line in lines if re.match(r"\S*bad\.py:", line))
    assert not good, proc.stdout
    assert 'incompatible type "str"' in bad and '"nonexistent"' in bad, proc.stdout
    assert proc.returncode == 1 and "Found 2 errors in 1 file" in proc.stdout, proc.stdout + proc.stderr


def test_package_is_clean_under_mypy_strict(checks: dict[str, Future[subprocess.CompletedProcess[str]]]) -> None:
    """The whole package type-checks under the strict configuration in pyproject.toml."""
    proc = checks["package"].result()
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_is_clean(checks: dict[str, Future[subprocess.CompletedProcess[str]]]) -> None:
    if "ruff" not in checks:
        pytest.skip("ruff is not installed")
    proc = checks["ruff"].result()
    assert proc.returncode == 0, proc.stdout + proc.stderr
