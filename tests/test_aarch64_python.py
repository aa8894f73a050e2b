"""The Python package cross-built for AArch64, under qemu-aarch64 (scripts/test_aarch64.sh).

2.5-4 minutes from scratch (a Debian arm64 root filesystem, the cross build, the
kernel tests on two emulated CPUs, a greedy generation on each), so it runs only with
INFER_SLOW_TESTS=1; .ci/run runs the script itself.  docs/portability.md has the numbers.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ("debootstrap", "dpkg-deb", "qemu-aarch64", "aarch64-linux-gnu-gcc")

pytestmark = [
    pytest.mark.slow("2.5-4 minutes (.ci/run runs the script)"),
    pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS),
                       reason="needs " + ", ".join(TOOLS) + " (apt-get install debootstrap "
                              "qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross)"),
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                       reason="debootstrap needs root"),
]


def test_kernel_tests_and_generation_under_qemu_aarch64() -> None:
    proc = subprocess.run(["sh", str(ROOT / "scripts" / "test_aarch64.sh")], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800,
                          env=dict(os.environ, CPUS="cortex-a72 max"))
    out = proc.stdout + proc.stderr
    if proc.returncode == 2:
        pytest.skip(f"scripts/test_aarch64.sh could not run: {out.strip().splitlines()[-1]}")
    assert proc.returncode == 0, out
    per_cpu = dict(re.findall(r"^== qemu-aarch64 -cpu (\S+)\n(.*?)(?=^== |^total )", out,
                              re.M | re.S))
    assert sorted(per_cpu) == ["cortex-a72", "max"], out
    assert "available: scalar neon | active: neon\n" in per_cpu["cortex-a72"]
    assert "available: scalar neon neon_dotprod | active: neon_dotprod\n" in per_cpu["max"]
    for cpu, text in per_cpu.items():
        m = re.search(r"^(\d+) passed(.*) in ", text, re.M)
        assert m and "failed" not in m.group(2) and "error" not in m.group(2), (cpu, text)
        # every kernel test runs once per offered set: more sets, more tests
        assert int(m.group(1)) > 1000, (cpu, text)
    assert int(re.search(r"^(\d+) passed", per_cpu["max"], re.M).group(1)) > \
        int(re.search(r"^(\d+) passed", per_cpu["cortex-a72"], re.M).group(1))
    if "x86-64 greedy:" in out:
        # each CPU's generation is the host's text, or greedy under the host's logits
        # up to near ties (scripts/greedy_within_margin.py: an AVX-512 host prints
        # '321 million' where NEON prints '311')
        accepted = (out.count("same text as the x86-64 build")
                    + out.count("but greedy on the host up to near ties"))
        assert accepted == 2, out
