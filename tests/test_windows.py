"""The C kernels built for Windows: MinGW-w64 cross build, run under Wine.

``csrc/selftest`` is cross-compiled with Debian's ``x86_64-w64-mingw32-gcc`` (static,
with -Wall -Wextra -Werror), so every ``_WIN32`` branch is compiled: the thread pool
on Win32 threads, SRW locks and condition variables, ``atomics.h`` on
``Interlocked*``, CPU detection.  Under ``wine64`` it then checks every kernel set
the CPU offers against the scalar one and runs the thread pool with 2, 3 and 4
threads (each run passes a barrier only if all its threads ran at once).

MSVC itself cannot run here; tests/test_portability.py compiles the sources with
clang in MSVC mode instead.  Tools: ``apt-get install gcc-mingw-w64-x86-64-win32 wine64``.
"""
from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest
from test_selftest import ROOT, Outcome, build

MINGW_CC = "x86_64-w64-mingw32-gcc"
MINGW_OBJDUMP = "x86_64-w64-mingw32-objdump"
# DLLs every Windows installation has: a static build must need no other.
SYSTEM_DLLS = {"kernel32.dll", "msvcrt.dll"}

needs_mingw = pytest.mark.skipif(shutil.which(MINGW_CC) is None,
                                 reason=f"needs {MINGW_CC} (apt-get install gcc-mingw-w64-x86-64-win32)")


def find_wine() -> tuple[str, str] | None:
    """(wine loader, wineserver).  Debian's wine64 package puts them in /usr/lib/wine
    and only the `wine` package adds /usr/bin/wine."""
    for loader, server in (("wine64", "wineserver"), ("wine", "wineserver")):
        if shutil.which(loader) and shutil.which(server):
            return shutil.which(loader), shutil.which(server)  # type: ignore[return-value]
    for loader in ("/usr/lib/wine/wine64", "/usr/lib/wine/wine"):
        server = "/usr/lib/wine/wineserver"
        if os.access(loader, os.X_OK) and os.access(server, os.X_OK):
            return loader, server
    return None


# wine64 runs x86-64 Windows programs on an x86-64 host only.
WINE = find_wine() if platform.machine().lower() in ("x86_64", "amd64") else None
needs_wine = pytest.mark.skipif(WINE is None, reason="needs wine64 on an x86-64 host "
                                "(apt-get install wine64)")


@pytest.fixture(scope="module")
def windows_selftest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which(MINGW_CC) is None:
        pytest.skip(f"needs {MINGW_CC} (apt-get install gcc-mingw-w64-x86-64-win32)")
    out = tmp_path_factory.mktemp("selftest_win") / "selftest.exe"
    build(out, cc=MINGW_CC, CFLAGS="-O2 -Wall -Wextra -Werror", LDFLAGS="-static")
    return out


@pytest.fixture(scope="module")
def wine_env() -> Iterator[dict[str, str]]:
    """A throw-away Wine prefix (Wine fills one with ~700 MB of its DLLs on first
    use, about 8 s), and no wineserver left running afterwards."""
    if WINE is None:
        pytest.skip("needs wine64 on an x86-64 host (apt-get install wine64)")
    with tempfile.TemporaryDirectory(prefix="infer-wine-") as prefix:
        env = dict(os.environ, WINEPREFIX=prefix, WINEDEBUG="-all",
                   WINEDLLOVERRIDES="mscoree=;mshtml=")  # no Mono/Gecko installer prompts
        env.pop("INFER_ISA", None)
        env.pop("INFER_NUM_THREADS", None)
        try:
            yield env
        finally:
            subprocess.run([WINE[1], "-k"], env=env, capture_output=True, timeout=60)


def run_wine(exe: Path, env: dict[str, str], *args: str) -> Outcome:
    assert WINE is not None
    proc = subprocess.run([WINE[0], str(exe), *args], env=env, capture_output=True, text=True,
                          timeout=300)
    return Outcome(proc)


@needs_mingw
def test_mingw_build_needs_only_system_dlls(windows_selftest: Path) -> None:
    """The build itself is the first check (-Werror); then its imports."""
    if shutil.which(MINGW_OBJDUMP) is None:
        pytest.skip(f"needs {MINGW_OBJDUMP} (binutils-mingw-w64-x86-64)")
    headers = subprocess.run([MINGW_OBJDUMP, "-p", str(windows_selftest)], capture_output=True,
                             text=True, check=True).stdout
    assert "file format pei-x86-64" in headers, headers[:500]
    dlls = {name.lower() for name in re.findall(r"DLL Name: (\S+)", headers)}
    assert "kernel32.dll" in dlls, headers
    assert dlls <= SYSTEM_DLLS, f"needs DLLs Windows lacks: {sorted(dlls - SYSTEM_DLLS)}"


def native_capabilities() -> tuple[list[str], int]:
    """The Linux build's kernel sets and default thread count, from a fresh process."""
    env = {k: v for k, v in os.environ.items() if k not in ("INFER_ISA", "INFER_NUM_THREADS")}
    out = subprocess.run(
        [sys.executable, "-c", "import infer.kernels as k; c = k.capabilities(); "
         "print(' '.join(c['available'])); print(k.get_num_threads())"],
        env=env, cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\n")
    return out[0].split(), int(out[1])


@needs_mingw
@needs_wine
def test_selftest_under_wine(windows_selftest: Path, wine_env: dict[str, str]) -> None:
    outcome = run_wine(windows_selftest, wine_env, "7")
    outcome.assert_clean()
    available, default_threads = native_capabilities()
    # Same CPU, same answer: Windows CPUID/XGETBV under Wine agree with the Linux build.
    assert outcome.available == available
    assert outcome.default == available[-1]
    simd = [isa for isa in available if isa != "scalar"]
    assert sorted(outcome.overrides) == sorted(simd)
    assert all(n > 0 for n in outcome.overrides.values()), outcome.overrides
    # The pool ran on Win32 threads: each count passed its barrier 200 times.
    pool = re.findall(r"^thread pool: (\d+) threads, (\d+) runs", outcome.text, re.M)
    assert [int(n) for n, _ in pool] == [2, 3, 4, 2], outcome.text
    assert all(int(runs) == 200 for _, runs in pool)
    # Affinity mask / SMT siblings (Win32 API) give the count the Linux build gets.
    m = re.search(r"^thread pool: default (\d+) threads", outcome.text, re.M)
    assert m and int(m.group(1)) == default_threads, outcome.text


@needs_mingw
@needs_wine
@pytest.mark.parametrize("isa", ["scalar", "avx2"])
def test_forced_isa_under_wine(windows_selftest: Path, wine_env: dict[str, str], isa: str) -> None:
    """INFER_ISA reaches the Windows process and picks the default set; every offered
    set is still checked."""
    available, _ = native_capabilities()
    if isa not in available:
        pytest.skip(f"this CPU has no {isa}")
    outcome = run_wine(windows_selftest, dict(wine_env, INFER_ISA=isa), "11")
    outcome.assert_clean()
    assert outcome.default == isa
    assert outcome.available == available
    assert sorted(outcome.overrides) == sorted(i for i in available if i != "scalar")


@needs_wine
def test_wine_reports_a_failing_program(wine_env: dict[str, str], tmp_path: Path) -> None:
    """The harness can fail: a Windows program's exit status and output come through."""
    if shutil.which(MINGW_CC) is None:
        pytest.skip(f"needs {MINGW_CC}")
    src = tmp_path / "fail.c"
    src.write_text('#include <stdio.h>\nint main(void) { printf("1 passed, 2 failed\\n"); '
                   "return 3; }\n")
    exe = tmp_path / "fail.exe"
    subprocess.run([MINGW_CC, "-static", "-o", str(exe), str(src)], check=True)
    assert WINE is not None
    proc = subprocess.run([WINE[0], str(exe)], env=wine_env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 3
    assert proc.stdout.splitlines() == ["1 passed, 2 failed"]
