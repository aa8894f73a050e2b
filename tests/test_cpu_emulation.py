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
from test_selftest import Outcome, native_selftest

import infer

ROOT = Path(__file__).resolve().parent.parent
# Where the `infer` under test lives: the source tree in a development checkout, the
# venv's site-packages when the tests run against an installed wheel (.ci/run does
# both).  The emulated interpreter must import that same package.
PACKAGE_PARENT = Path(infer.__file__).resolve().parent.parent
QEMU = "qemu-x86_64"
# CPU model -> the sets dispatch must offer there.  SandyBridge has AVX but neither
# AVX2 nor FMA/F16C: the AVX2 set must not be offered to it.
CPUS = {"Westmere": ["scalar"], "SandyBridge": ["scalar"], "Haswell": ["scalar", "avx2"]}

# The emulated run: a few cases of each kernel family, named by node id so a renamed
# test fails here instead of silently selecting nothing.  "{isa}" becomes each set
# the best set the emulated CPU offers (scalar itself is tested natively).
SUBSET = [
    *(f"tests/test_kernels_quants.py::test_matvec_against_float64[{{isa}}-{fmt}-33]"
      for fmt in ("f16", "q4_0", "q4_1", "q5_0", "q8_0")),
    *(f"tests/test_kernels_quants.py::test_dequantize_matches_reference[{{isa}}-{fmt}-17]"
      for fmt in ("q4_1", "q8_0")),
    "tests/test_kernels_quants.py::test_quantize_matches_gguf[{isa}-q8_0-33-0]",
    "tests/test_kernels_quants.py::test_quantize_q8_1_matches_ggml_rule[{isa}-33-0]",
    *(f"tests/test_kernels_kquants.py::test_matvec_quantized_weights[{{isa}}-{fmt}-3]"
      for fmt in ("q4_k", "q6_k")),
    "tests/test_kernels_ops.py::test_rmsnorm[{isa}-65]",
    "tests/test_kernels_ops.py::test_glu[{isa}-silu-65]",
    "tests/test_kernels_ops.py::test_rope[{isa}-False-64]",
    "tests/test_kernels_ops.py::test_attention_decode[{isa}-True-3-64]",
]


def subset_for(isas: list[str]) -> list[str]:
    return [str(ROOT / node.format(isa=isa)) for isa in isas for node in SUBSET]


pytestmark = [
    pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                       reason="x86-64 CPU emulation needs an x86-64 host"),
    pytest.mark.skipif(shutil.which(QEMU) is None,
                       reason=f"{QEMU} not on PATH (apt-get install qemu-user)"),
]


def interpreter() -> str:
    """The Python ELF binary.  A venv's python is a symlink qemu-user runs as is (and
    so keeps the venv); a shell wrapper such as a pyenv shim it cannot run."""
    with open(sys.executable, "rb") as f:
        is_elf = f.read(4) == b"\x7fELF"
    return sys.executable if is_elf else os.path.realpath(sys.executable)


def emulated_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "INFER_ISA"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(PACKAGE_PARENT), env.get("PYTHONPATH", "")])
    # numpy's bundled OpenBLAS dies with SIGILL on these models under qemu unless told
    # its kernel family (its own detection/kernels, not ours); Nehalem = SSE4.2 only.
    env["OPENBLAS_CORETYPE"] = "Nehalem"
    return env


# Where the kernel-test subset runs; elsewhere only the import and the dispatch
# decision are checked (a pytest session costs ~10 s of emulated CPU).
RUN_SUBSET = {"Westmere", "Haswell"}


@pytest.mark.parametrize("cpu", sorted(CPUS))
def test_kernel_tests_pass_under_emulated_cpu(cpu: str, tmp_path: Path) -> None:
    subset = subset_for(CPUS[cpu][-1:]) if cpu in RUN_SUBSET else []
    script = (
        "import json, os, sys, pytest, infer.kernels as k\n"
        "print('CAPABILITIES', json.dumps(k.capabilities()), flush=True)\n"
        f"assert os.path.realpath(k.__file__).startswith({str(PACKAGE_PARENT)!r}), k.__file__\n"
        # Plugins the subset does not use cost seconds of emulated imports;
        # pyproject's pythonpath would put the source tree first.
        "plugins = ['-p', 'no:cacheprovider', '-p', 'no:hypothesispytest', '-p', 'no:anyio',\n"
        "           '-o', 'pythonpath=']\n"
        f"sys.exit(pytest.main(['-q', *plugins, *{subset!r}]) if {subset!r} else 0)\n")
    # cwd outside the source tree: `python -c` puts the cwd first on sys.path.
    proc = subprocess.run([QEMU, "-cpu", cpu, interpreter(), "-c", script], cwd=tmp_path,
                          env=emulated_env(), capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    if proc.returncode in (-4, 132) or "Illegal instruction" in out:
        numpy_alone = subprocess.run([QEMU, "-cpu", cpu, interpreter(), "-c", "import numpy"],
                                     env=emulated_env(), capture_output=True, timeout=600)
        if numpy_alone.returncode != 0:
            pytest.skip(f"this numpy build itself dies on -cpu {cpu} (SIGILL importing numpy); "
                        "the C self-test below still covers infer's code on this CPU")
    assert proc.returncode not in (-4, 132) and "Illegal instruction" not in out, \
        f"SIGILL on {cpu}:\n{out}"
    caps_line = next((line for line in proc.stdout.splitlines()
                      if line.startswith("CAPABILITIES ")), None)
    assert caps_line, f"import failed under -cpu {cpu}:\n{out}"
    caps = json.loads(caps_line.split(" ", 1)[1])
    assert caps["available"] == CPUS[cpu]
    assert caps["active"] == CPUS[cpu][-1]
    assert proc.returncode == 0, f"kernel tests failed under -cpu {cpu}:\n{out[-4000:]}"
    if subset:
        assert f"{len(subset)} passed" in proc.stdout, out[-2000:]


@pytest.fixture(scope="module")
def selftest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return native_selftest(tmp_path_factory)  # static, shared with test_selftest


@pytest.mark.parametrize("cpu", sorted(CPUS))
def test_selftest_under_emulated_cpu(selftest: Path, cpu: str) -> None:
    outcome = Outcome(subprocess.run([QEMU, "-cpu", cpu, str(selftest), "3"],
                                     capture_output=True, text=True, timeout=300))
    outcome.assert_clean()
    assert outcome.available == CPUS[cpu]
    assert outcome.default == CPUS[cpu][-1]
