"""No illegal instruction on older x86 CPUs.

The built extension is imported under qemu-user emulating an older CPU, and a quick
subset of the kernel tests runs there (the whole interpreter is emulated, so the
subset is small):

* ``-cpu Westmere`` (SSE4.2, no AVX): only the scalar set may be offered, and
  everything outside the ISA files must be plain x86-64 (a stray AVX instruction in
  the Cython module or dispatch code would be SIGILL here);
* ``-cpu Haswell`` (AVX2, FMA, F16C, no AVX-512): the AVX2 set is chosen.

The C self-test also runs under both CPUs: on Haswell it checks the AVX2 kernels on
QEMU's independent AVX2 implementation.  Skipped without ``qemu-x86_64`` (Debian:
apt-get install qemu-user) or on a non-x86-64 host.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_selftest import Outcome, build

ROOT = Path(__file__).resolve().parent.parent
QEMU = "qemu-x86_64"
CPUS = {"Westmere": ["scalar"], "Haswell": ["scalar", "avx2"]}

# The emulated run: one quantized format per scalar code shape (nibbles with an
# offset, nibbles with a min, bytes) through quantize, dequantize and matvec.  Each
# test is parametrised over every available set, so Haswell runs scalar and AVX2.
SUBSET = [
    "tests/test_kernels_quants.py::test_dequantize_matches_reference",
    "tests/test_kernels_quants.py::test_matvec_against_float64",
    "tests/test_kernels_quants.py::test_quantize_q8_1_matches_ggml_rule",
]
SUBSET_FILTER = "(q4_0 or q4_1 or q8_0 or q8_1 or f16) and not -97"

pytestmark = [
    pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                       reason="x86-64 CPU emulation needs an x86-64 host"),
    pytest.mark.skipif(shutil.which(QEMU) is None,
                       reason=f"{QEMU} not on PATH (apt-get install qemu-user)"),
]


def interpreter() -> str:
    """The Python ELF binary (qemu-user cannot run pyenv's or a venv's shell shims)."""
    return os.path.realpath(sys.executable)


def emulated_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "INFER_ISA"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


@pytest.mark.parametrize("cpu", sorted(CPUS))
def test_kernel_tests_pass_under_emulated_cpu(cpu: str) -> None:
    script = (
        "import json, sys, pytest, infer.kernels as k\n"
        "print('CAPABILITIES', json.dumps(k.capabilities()), flush=True)\n"
        f"sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-k', {SUBSET_FILTER!r}]"
        f" + {SUBSET!r}))\n")
    proc = subprocess.run([QEMU, "-cpu", cpu, interpreter(), "-c", script], cwd=ROOT,
                          env=emulated_env(), capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode != -4 and "Illegal instruction" not in out, f"SIGILL on {cpu}:\n{out}"
    caps_line = next((line for line in proc.stdout.splitlines()
                      if line.startswith("CAPABILITIES ")), None)
    assert caps_line, f"import failed under -cpu {cpu}:\n{out}"
    caps = json.loads(caps_line.split(" ", 1)[1])
    assert caps["available"] == CPUS[cpu]
    assert caps["active"] == CPUS[cpu][-1]
    assert proc.returncode == 0, f"kernel tests failed under -cpu {cpu}:\n{out[-4000:]}"
    assert " passed" in proc.stdout and " deselected" in proc.stdout, out[-2000:]


@pytest.fixture(scope="module")
def selftest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) on PATH")
    out = tmp_path_factory.mktemp("selftest_x86") / "selftest"
    build(out, LDFLAGS="-static")
    return out


@pytest.mark.parametrize("cpu", sorted(CPUS))
def test_selftest_under_emulated_cpu(selftest: Path, cpu: str) -> None:
    outcome = Outcome(subprocess.run([QEMU, "-cpu", cpu, str(selftest), "3"],
                                     capture_output=True, text=True, timeout=300))
    outcome.assert_clean()
    assert outcome.available == CPUS[cpu]
    assert outcome.default == CPUS[cpu][-1]
