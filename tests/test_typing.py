"""infer/kernels.pyi matches the compiled module (mypy.stubtest compares every
name and signature against the Cython functions' embedded signatures), and code
using the stubs type-checks."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from under_test import IMPORT_ROOT

pytest.importorskip("mypy")
ROOT = Path(__file__).resolve().parent.parent


def mypy_cwd(tmp_path: Path) -> Path:
    """Where mypy finds the `infer` under test: the source tree, or for an installed
    wheel any other directory (mypy then reads the wheel's stubs via py.typed; run in
    site-packages it would take every module there for the user's own)."""
    return ROOT if Path(IMPORT_ROOT) == ROOT else tmp_path


def test_kernels_stub_matches_module(tmp_path: Path) -> None:
    allow = tmp_path / "allowlist.txt"
    # Cython's doctest dict and pickling hooks
    allow.write_text("infer.kernels.__test__\ninfer\\.kernels\\..*__(reduce|setstate)_cython__\n")
    # Only the stub is under test: errors in modules it pulls in (infer/__init__) are
    # the business of a mypy run over the package, not of this test.
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\nfollow_imports = silent\nignore_missing_imports = True\n")
    proc = subprocess.run([sys.executable, "-m", "mypy.stubtest", "infer.kernels",
                           "--allowlist", str(allow), "--mypy-config-file", str(config)],
                          cwd=mypy_cwd(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_stub_types_catch_misuse(tmp_path: Path) -> None:
    """The stubs are precise enough to reject a wrong call and accept right ones."""
    good = tmp_path / "good.py"
    good.write_text(textwrap.dedent("""
        import numpy as np
        import infer.kernels as K
        out = np.empty(32, np.float32)
        y = K.dequantize(bytes(18), "q4_0", out)
        reveal = y.sum()
        caps = K.capabilities()
        active: str = caps["active"]
        n: int = K.row_bytes("q8_0", 64)
    """))
    bad = tmp_path / "bad.py"
    bad.write_text(textwrap.dedent("""
        import infer.kernels as K
        K.set_num_threads("two")
        K.capabilities()["nonexistent"]
    """))
    cmd = [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-incremental",
           "--cache-dir", str(tmp_path / "c")]
    ok = subprocess.run([*cmd, str(good)], cwd=mypy_cwd(tmp_path), capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0, ok.stdout
    ko = subprocess.run([*cmd, str(bad)], cwd=mypy_cwd(tmp_path), capture_output=True, text=True, timeout=300)
    assert 'incompatible type "str"' in ko.stdout and '"nonexistent"' in ko.stdout, ko.stdout


def test_package_is_clean_under_mypy_strict() -> None:
    """The whole package type-checks under the strict configuration in pyproject.toml."""
    proc = subprocess.run([sys.executable, "-m", "mypy", "infer"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_is_clean() -> None:
    ruff = pytest.importorskip("ruff")
    del ruff
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
