"""The NEON float ops on an x86 machine: cross-compile csrc/ with the AArch64 gcc
and run tests/c/ops_neon_check.c (NEON table against the scalar one) under
qemu-aarch64.  Skipped when either tool is missing; on an AArch64 host the main
tests run the NEON path directly."""
import os
import platform
import shutil
import subprocess
from glob import glob

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CC = shutil.which("aarch64-linux-gnu-gcc")
QEMU = shutil.which("qemu-aarch64") or shutil.which("qemu-aarch64-static")


@pytest.mark.skipif(platform.machine().lower() in ("aarch64", "arm64"),
                    reason="native AArch64: test_kernels_ops.py covers NEON")
@pytest.mark.skipif(not (CC and QEMU), reason="needs aarch64-linux-gnu-gcc and qemu-aarch64")
def test_neon_ops_match_scalar_under_qemu(tmp_path):
    exe = str(tmp_path / "ops_neon_check")
    sources = sorted(glob(os.path.join(ROOT, "csrc", "*.c")))
    build = subprocess.run(
        [CC, "-O2", "-march=armv8.2-a+dotprod+fp16", "-static", "-I", os.path.join(ROOT, "csrc"),
         *sources, os.path.join(ROOT, "tests", "c", "ops_neon_check.c"), "-lm", "-o", exe],
        capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([QEMU, exe], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip().endswith("0 failures"), run.stdout
