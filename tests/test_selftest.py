"""The C self-test (csrc/selftest): every SIMD kernel against the scalar one.

Natively it checks the x86 (or host NEON) sets.  With Debian's gcc-aarch64-linux-gnu
and qemu-user on PATH it also cross-compiles the self-test for AArch64 and runs it
under qemu-aarch64, which is how the NEON files are tested on an x86 machine:

* ``-cpu max`` (ARMv8.2+ with dotprod): both NEON sets are offered, neon_dotprod is
  chosen, and every entry of each agrees with scalar;
* ``-cpu cortex-a53`` and ``cortex-a72`` (ARMv8.0, no SDOT: Raspberry Pi 3/4, Graviton
  1): the baseline neon set is offered and chosen, neon_dotprod is not, its entries
  agree with scalar, and nothing dies with SIGILL.
"""
from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest
from _concurrent import pool, selected

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "csrc" / "selftest" / "build.sh"
CROSS_CC = "aarch64-linux-gnu-gcc"
QEMU_ARM = "qemu-aarch64"
NEON_ENTRIES_OF_QUANTS = 23  # quants_neon.c's own overrides; kquants/ops add more


def setup_constant(name: str) -> object:
    """A module-level constant of setup.py, read without running setup.py."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"setup.py defines no {name}")


def setup_isa_flags() -> dict[str, list[str]]:
    """setup.py's gcc/clang flags per ISA."""
    value = setup_constant("ISA_FLAGS")
    assert isinstance(value, dict)
    return {isa: list(flags[0]) for isa, flags in value.items()}


def build(out: Path, cc: str = "cc", script: Path = BUILD,
          **flags: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CC=cc)
    isa = setup_isa_flags()
    env.update(AVX2_FLAGS=" ".join(isa["avx2"]), AVX512_FLAGS=" ".join(isa["avx512"]),
               NEON_FLAGS=" ".join(isa["neon"]),
               NEON_DOTPROD_FLAGS=" ".join(isa["neon_dotprod"]))
    env.update(flags)
    proc = subprocess.run(["sh", str(script), str(out)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, f"self-test build failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


class Outcome:
    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.proc = proc
        self.text = proc.stdout + proc.stderr
        m = re.search(r"available:([\w ]*); default: (\w+)", self.text)
        assert m, f"no 'available:' line in:\n{self.text}"
        self.available = m.group(1).split()
        self.default = m.group(2)
        self.overrides = {isa: int(n) for isa, n in
                          re.findall(r"^isa (\w+): (\d+) entries", self.text, re.M)}
        m = re.search(r"^(\d+) passed, (\d+) failed$", self.text, re.M)
        assert m, f"no summary line (crashed?) rc={proc.returncode}:\n{self.text}"
        self.passed, self.failed = int(m.group(1)), int(m.group(2))

    def assert_clean(self) -> None:
        assert self.failed == 0 and self.proc.returncode == 0, self.text
        # An override that was not compared would mean the self-test skipped it.
        if any(self.overrides.values()):
            assert self.passed > 0, self.text


def run(cmd: list[str]) -> Outcome:
    return Outcome(subprocess.run(cmd, capture_output=True, text=True, timeout=300))


_NATIVE: dict[str, Path] = {}


def native_selftest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The native self-test, built once per session and, on Linux, linked -static:
    the tests here run it as it is and test_cpu_emulation under qemu-x86_64 (which
    then needs no sysroot), so one build serves both."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) on PATH")
    if "out" not in _NATIVE:
        out = tmp_path_factory.mktemp("selftest") / "selftest"
        build(out, **({"LDFLAGS": "-static"} if sys.platform.startswith("linux") else {}))
        _NATIVE["out"] = out
    return _NATIVE["out"]


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return native_selftest(tmp_path_factory)


def test_native_selftest(native: Path) -> None:
    outcome = run([str(native), "1"])
    outcome.assert_clean()
    assert "scalar" in outcome.available
    simd = [isa for isa in outcome.available if isa != "scalar"]
    assert sorted(outcome.overrides) == sorted(simd)


def test_native_selftest_second_seed(native: Path) -> None:
    run([str(native), "20261130"]).assert_clean()


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    """The self-test built from a copy of csrc broken twice, and run once (one build
    instead of two; each breakage is reported under its own kernel name):

    * every SIMD set's F32 vec_dot replaced by one that is 1% off (dispatch.c, the one
      file that sees all sets, fills it after the normal fill);
    * thread-pool workers that never take a share, so the caller runs every share in
      turn and no run passes its barrier (a barrier of under a second keeps it short).
    """
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) on PATH")
    src = tmp_path_factory.mktemp("broken") / "csrc"
    shutil.copytree(ROOT / "csrc", src)
    dispatch = (src / "dispatch.c").read_text()
    wrong = dispatch.replace(
        "    t->name = isa_names[isa];",
        "    if (isa != INFER_ISA_SCALAR) t->vec_dot[INFER_TYPE_F32] = off_by_one_percent;\n"
        "    t->name = isa_names[isa];")
    assert wrong != dispatch, "dispatch.c changed shape: update this test"
    wrong = wrong.replace(
        "static void fill(int isa",
        "static float off_by_one_percent(int64_t n, const void *w, const void *a) {\n"
        "    const float *x = w, *y = a; float s = 0;\n"
        "    for (int64_t i = 0; i < n; i++) s += x[i] * y[i];\n"
        "    return s * 1.01f;\n"
        "}\n"
        "static void fill(int isa")
    (src / "dispatch.c").write_text(wrong)
    pool = (src / "threadpool.c").read_text()
    serial = pool.replace("        take_shares(gen);\n    }", "        (void)take_shares;\n    }")
    assert serial != pool, "threadpool.c's worker loop changed shape: update this test"
    (src / "threadpool.c").write_text(serial)
    out = src.parent / "selftest"
    build(out, script=src / "selftest" / "build.sh", CFLAGS="-O1 -DPOOL_BARRIER_SECONDS=0")
    return run([str(out)])


def test_selftest_reports_a_wrong_kernel(broken: Outcome) -> None:
    """The harness can fail: a SIMD set whose F32 dot is 1% off is reported."""
    if not [isa for isa in broken.available if isa != "scalar"]:
        pytest.skip("no SIMD set on this CPU to break")
    assert broken.proc.returncode == 1
    assert re.search(r"^FAIL \w+ +vec_dot +f32 ", broken.text, re.M), broken.text
    # nothing else fails but the pool (below)
    others = [line for line in re.findall(r"^FAIL .*$", broken.text, re.M)
              if not re.match(r"FAIL \w+ +vec_dot +f32 ", line) and not line.startswith("FAIL pool ")]
    assert not others, others


def test_selftest_reports_a_serial_thread_pool(broken: Outcome) -> None:
    """The pool check can fail: serial workers are reported, at each thread count."""
    assert broken.proc.returncode == 1
    failures = re.findall(r"^FAIL pool +thread_pool +n=(\d+) +shares did not run at the same time$",
                          broken.text, re.M)
    assert [int(n) for n in failures] == [2, 3, 4, 2], broken.text
    dots = len(re.findall(r"^FAIL \w+ +vec_dot +f32 ", broken.text, re.M))
    assert broken.failed == 4 + dots


# ---- AArch64 under qemu-user ---------------------------------------------------------

cross = pytest.mark.skipif(
    shutil.which(CROSS_CC) is None or shutil.which(QEMU_ARM) is None,
    reason=f"needs {CROSS_CC} and {QEMU_ARM} (apt-get install gcc-aarch64-linux-gnu "
           "libc6-dev-arm64-cross qemu-user)")


@pytest.fixture(scope="module")
def arm_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built with setup.py's flags for both NEON levels, static for qemu."""
    out = tmp_path_factory.mktemp("selftest_arm") / "selftest"
    build(out, cc=CROSS_CC, LDFLAGS="-static")
    return out


ARM_SEEDS = {"max": "7", "cortex-a53": "11", "cortex-a72": "11"}   # qemu -cpu -> seed


@pytest.fixture(scope="module")
def arm_runs(request: pytest.FixtureRequest,
             arm_release: Path) -> Iterator[dict[str, Future[Outcome]]]:
    """The qemu-aarch64 runs of the tests below, started together, a core each
    (tests/_concurrent.py): each keeps one core busy for 15-30 s."""
    cpus = ["max"] if selected(request, "test_neon_dotprod_selftest_under_qemu") else []
    cpus += selected(request, "test_armv8_0_cpu_gets_baseline_neon", "cpu")
    with pool() as workers:
        yield {cpu: workers.submit(run, [QEMU_ARM, "-cpu", cpu, str(arm_release), ARM_SEEDS[cpu]])
               for cpu in cpus}


@cross
def test_neon_dotprod_selftest_under_qemu(arm_runs: dict[str, Future[Outcome]]) -> None:
    outcome = arm_runs["max"].result()
    outcome.assert_clean()
    assert outcome.available == ["scalar", "neon", "neon_dotprod"]
    assert outcome.default == "neon_dotprod"
    # The two builds of the same files override the same entries.
    assert outcome.overrides["neon_dotprod"] == outcome.overrides["neon"]
    assert outcome.overrides["neon"] >= NEON_ENTRIES_OF_QUANTS
    assert outcome.passed >= 2 * NEON_ENTRIES_OF_QUANTS * 13  # 13 lengths per entry


@cross
@pytest.mark.parametrize("cpu", ["cortex-a53", "cortex-a72"])
def test_armv8_0_cpu_gets_baseline_neon(arm_runs: dict[str, Future[Outcome]], cpu: str) -> None:
    """ARMv8.0 cores lack SDOT: baseline NEON chosen, its kernels agree, no SIGILL."""
    outcome = arm_runs[cpu].result()
    outcome.assert_clean()
    assert outcome.available == ["scalar", "neon"]
    assert outcome.default == "neon"
    assert outcome.overrides["neon"] >= NEON_ENTRIES_OF_QUANTS
    assert outcome.passed >= NEON_ENTRIES_OF_QUANTS * 13
