"""The C under other compilers and for other targets than this machine's gcc.

* clang (Debian's clang-14): the self-test built with clang and run natively.
* zig cc (the ``ziglang`` package on PyPI: a clang that carries the libc of many
  targets; ``scripts/zigcc.py`` wraps it), for every non-Windows wheel:

  - macOS arm64 and x86_64: every csrc file compiled with the flags setup.py uses
    there, and the self-test linked (a Mach-O that needs only libSystem); it cannot
    run here;
  - manylinux2014 x86_64 and aarch64 (glibc 2.17): every csrc file compiled, the
    self-test run natively and under qemu-aarch64 (Debian's arm64 sysroot), and no
    symbol it imports newer than GLIBC_2.17;
  - musllinux x86_64 and aarch64 (static): the self-test run natively and under
    qemu-aarch64.

  Only macOS arm64 (the one target whose NEON flags differ) and the manylinux x86_64
  self-test run by default; the others, at 10-20 s each with a cold zig cache and
  ~90 s more for each musl libc zig builds from source, run with INFER_SLOW_TESTS=1.

A compiler warning fails a test: ``-Wall -Wextra`` is clean under gcc 12, clang 14
and zig's clang.
"""
from __future__ import annotations

import importlib.util
import re
import shutil
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from test_selftest import Outcome, build, run, setup_constant, setup_isa_flags

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
ZIGCC = ROOT / "scripts" / "zigcc.py"
QEMU_ARM = "qemu-aarch64"
ARM64_SYSROOT = Path("/usr/aarch64-linux-gnu")  # Debian's libc6-arm64-cross

needs_zig = pytest.mark.skipif(importlib.util.find_spec("ziglang") is None,
                               reason="needs zig cc (pip install ziglang)")
needs_qemu_arm = pytest.mark.skipif(shutil.which(QEMU_ARM) is None,
                                    reason=f"needs {QEMU_ARM} (apt-get install qemu-user)")
# A cold zig cache (as in CI) costs 10-20 s per target and ~90 s more for a musl
# target, whose libc zig builds from source: the default suite keeps one macOS and one
# manylinux target, INFER_SLOW_TESTS=1 runs the rest.
slow = pytest.mark.slow("slow with a cold zig cache")
# The whole file runs in .ci/run's slow pass: its zig builds take ~1.5 min even warm,
# which the default suite's 10-minute budget cannot hold.
pytestmark = pytest.mark.slow("zig cross builds, ~1.5 min warm")


def zig_cc(target: str) -> str:
    """A CC value for build.sh (word-split there, so no path may contain a space)."""
    return f"{sys.executable} {ZIGCC} -target {target}"


def is_arm(target: str) -> bool:
    return target.startswith("aarch64")


def is_macos(target: str) -> bool:
    return "-macos" in target


def extension_flags(level: str, target: str) -> list[str]:
    """The flags setup.py's BuildExt gives one build (level) of an ISA file on that target."""
    flags = setup_isa_flags()[level]
    # setup.py: Apple clang enables dotprod by default for arm64, so no -march there.
    if is_macos(target) and is_arm(target):
        return [f for f in flags if not f.startswith("-march")]
    return flags


def isa_of(path: Path) -> str | None:
    builds = setup_constant("BUILDS")
    assert isinstance(builds, dict)
    return next((isa for isa in builds if path.stem.endswith("_" + isa)), None)


def levels_of(isa: str | None) -> tuple[str, ...]:
    """The builds setup.py makes of an ISA file (a NEON file: one per NEON level)."""
    builds = setup_constant("BUILDS")
    assert isinstance(builds, dict)
    return tuple(builds[isa]) if isa else ()


def compiled_on(isa: str | None, target: str) -> bool:
    if isa is None:
        return True
    arm_isas = setup_constant("ARM_ISAS")
    assert isinstance(arm_isas, tuple)
    return (isa in arm_isas) == is_arm(target)


def selftest_env(target: str) -> dict[str, str]:
    """build.sh's environment for target besides CC (setup.py's ISA flags come from build())."""
    env = {"ARCH": "arm" if is_arm(target) else "x86"}
    if is_macos(target) and is_arm(target):  # as extension_flags(): no -march there
        env["NEON_FLAGS"] = " ".join(extension_flags("neon", target))
        env["NEON_DOTPROD_FLAGS"] = " ".join(extension_flags("neon_dotprod", target))
    return env


def assert_no_warnings(stderr: str, what: str) -> None:
    assert "warning:" not in stderr and "error:" not in stderr, f"{what}:\n{stderr}"


def compile_every_csrc_file(target: str, out_dir: Path) -> None:
    """Every csrc file the extension is built from, with setup.py's flags for target
    (-O3 -fno-strict-aliasing, the file's ISA flags, -fPIC as for a shared object),
    an ISA file once per build setup.py makes of it."""
    sources = [s for s in sorted(CSRC.glob("*.c")) if compiled_on(isa_of(s), target)]
    assert any(isa_of(s) for s in sources), "no ISA file for this target"
    builds = [(src, level) for src in sources for level in levels_of(isa_of(src)) or (None,)]

    def compile_one(build: tuple[Path, str | None]) -> subprocess.CompletedProcess[str]:
        src, level = build
        flags = extension_flags(level, target) if level else []
        obj = out_dir / f"{src.stem}.{level or 'plain'}.o"
        cmd = [sys.executable, str(ZIGCC), "-target", target, "-O3", "-fno-strict-aliasing",
               "-fPIC", "-Wall", "-Wextra", *flags, f"-I{CSRC}", "-c", str(src), "-o", str(obj)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300)

    with ThreadPoolExecutor(2) as pool:  # the machine has two cores
        for (src, level), proc in zip(builds, pool.map(compile_one, builds)):
            what = f"{src.name} ({level or 'plain'}) for {target}"
            assert proc.returncode == 0, f"{what}:\n{proc.stderr}"
            assert_no_warnings(proc.stderr, what)


def zig_selftest(target: str, out: Path, **env: str) -> Path:
    """The self-test built by build.sh with zig for target, without a warning."""
    proc = build(out, cc=zig_cc(target), **selftest_env(target), **env)
    assert_no_warnings(proc.stderr, f"self-test for {target}")
    return out


def assert_every_offered_set_checked(outcome: Outcome) -> None:
    """A native run: clean, and every SIMD set the CPU offers compared with scalar."""
    outcome.assert_clean()
    simd = [isa for isa in outcome.available if isa != "scalar"]
    assert sorted(outcome.overrides) == sorted(simd)


# ---- clang ----------------------------------------------------------------------------

@pytest.mark.skipif(shutil.which("clang") is None, reason="needs clang (apt-get install clang)")
def test_selftest_built_with_clang(tmp_path: Path) -> None:
    out = tmp_path / "selftest"
    assert_no_warnings(build(out, cc="clang").stderr, "clang build")
    assert_every_offered_set_checked(run([str(out), "3"]))


# ---- macOS: compile and link only --------------------------------------------------------

MACHO_MAGIC_64 = 0xFEEDFACF
MACHO_CPU = {"aarch64": 0x0100000C, "x86_64": 0x01000007}  # CPU_TYPE_ARM64, CPU_TYPE_X86_64
LC_LOAD_DYLIB = 0xC


def macho_summary(path: Path) -> tuple[int, list[str]]:
    """(cpu type, the dylibs it loads) from a thin 64-bit Mach-O executable's header."""
    data = path.read_bytes()
    magic, cputype, _, _, ncmds, _, _, _ = struct.unpack_from("<IiiIIIII", data, 0)
    assert magic == MACHO_MAGIC_64, f"not a 64-bit little-endian Mach-O: {magic:#x}"
    dylibs = []
    offset = 32  # sizeof(mach_header_64)
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<II", data, offset)
        if cmd == LC_LOAD_DYLIB:
            (name_offset,) = struct.unpack_from("<I", data, offset + 8)
            name = data[offset + name_offset:offset + size].split(b"\0")[0]
            dylibs.append(name.decode())
        offset += size
    return cputype, dylibs


# macOS 11 is the wheels' MACOSX_DEPLOYMENT_TARGET (pyproject's [tool.cibuildwheel.macos]).
MACOS_TARGETS = ["aarch64-macos.11.0", pytest.param("x86_64-macos.11.0", marks=slow)]


@needs_zig
@pytest.mark.parametrize("target", MACOS_TARGETS)
def test_macos_csrc_compiles(target: str, tmp_path: Path) -> None:
    compile_every_csrc_file(target, tmp_path)


@needs_zig
@pytest.mark.parametrize("target", MACOS_TARGETS)
def test_macos_selftest_links(target: str, tmp_path: Path) -> None:
    out = zig_selftest(target, tmp_path / "selftest")
    cputype, dylibs = macho_summary(out)
    assert cputype == MACHO_CPU[target.split("-")[0]]
    assert dylibs == ["/usr/lib/libSystem.B.dylib"]


# ---- manylinux2014: glibc 2.17 ------------------------------------------------------------

def assert_glibc_2_17(path: Path) -> None:
    """A dynamically linked ELF file imports no GLIBC_x.y symbol version above 2.17."""
    objdump = shutil.which("objdump") or shutil.which("aarch64-linux-gnu-objdump")
    if objdump is None:
        pytest.skip("needs objdump (binutils)")
    text = subprocess.run([objdump, "-T", str(path)], capture_output=True, text=True,
                          check=True).stdout
    versions = {tuple(map(int, v.split("."))) for v in re.findall(r"GLIBC_([\d.]+)", text)}
    assert versions and max(versions) <= (2, 17), sorted(versions)


@needs_zig
@pytest.mark.parametrize("target", [pytest.param("x86_64-linux-gnu.2.17", marks=slow),
                                    pytest.param("aarch64-linux-gnu.2.17", marks=slow)])
def test_manylinux2014_csrc_compiles(target: str, tmp_path: Path) -> None:
    compile_every_csrc_file(target, tmp_path)


@needs_zig
def test_manylinux2014_x86_64_selftest(tmp_path: Path) -> None:
    out = zig_selftest("x86_64-linux-gnu.2.17", tmp_path / "selftest")
    assert_glibc_2_17(out)
    assert_every_offered_set_checked(run([str(out), "5"]))


@slow
@needs_zig
@needs_qemu_arm
@pytest.mark.skipif(not (ARM64_SYSROOT / "lib" / "ld-linux-aarch64.so.1").exists(),
                    reason=f"needs the arm64 glibc in {ARM64_SYSROOT} "
                           "(apt-get install libc6-arm64-cross)")
def test_manylinux2014_aarch64_selftest_under_qemu(tmp_path: Path) -> None:
    out = zig_selftest("aarch64-linux-gnu.2.17", tmp_path / "selftest")
    assert_glibc_2_17(out)
    outcome = run([QEMU_ARM, "-L", str(ARM64_SYSROOT), "-cpu", "max", str(out), "9"])
    outcome.assert_clean()
    assert outcome.available == ["scalar", "neon", "neon_dotprod"]
    assert outcome.default == "neon_dotprod"


# ---- musllinux: static, slow the first time ------------------------------------------------

PT_INTERP = 3


def elf_interpreter(path: Path) -> bytes | None:
    """The dynamic loader a 64-bit little-endian ELF executable names, None if static."""
    data = path.read_bytes()
    assert data[:6] == b"\x7fELF\x02\x01", "not a 64-bit little-endian ELF file"
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == PT_INTERP:
            return data[p_offset:p_offset + p_filesz].rstrip(b"\0")
    return None


def static_musl_selftest(target: str, out: Path) -> Path:
    zig_selftest(target, out, LDFLAGS="-static")
    assert elf_interpreter(out) is None, "the musl self-test should be static"
    return out


@slow
@needs_zig
def test_musllinux_x86_64_selftest(tmp_path: Path) -> None:
    out = static_musl_selftest("x86_64-linux-musl", tmp_path / "selftest")
    assert_every_offered_set_checked(run([str(out), "13"]))


@slow
@needs_zig
@needs_qemu_arm
def test_musllinux_aarch64_selftest_under_qemu(tmp_path: Path) -> None:
    out = static_musl_selftest("aarch64-linux-musl", tmp_path / "selftest")
    outcome = run([QEMU_ARM, "-cpu", "max", str(out), "17"])
    outcome.assert_clean()
    assert outcome.default == "neon_dotprod"
    # musl's getauxval(AT_HWCAP) is what keeps an ARMv8.0 core off the dotprod set.
    outcome = run([QEMU_ARM, "-cpu", "cortex-a53", str(out)])
    outcome.assert_clean()
    assert outcome.available == ["scalar", "neon"]


def test_zigcc_translates_gcc_march_for_aarch64() -> None:
    sys.path.insert(0, str(ZIGCC.parent))
    try:
        import zigcc
    finally:
        sys.path.remove(str(ZIGCC.parent))
    assert zigcc.aarch64_mcpu("armv8.2-a+dotprod+fp16") == "generic+v8_2a+dotprod+fullfp16"
    assert zigcc.aarch64_mcpu("armv8-a") == "generic+v8a"
    assert zigcc.aarch64_mcpu("armv8.4-a+nofp16") == "generic+v8_4a-fullfp16"
    assert zigcc.translate(["-O2", "-march=armv8-a+dotprod", "-mavx2"]) == [
        "-O2", "-mcpu=generic+v8a+dotprod", "-mavx2"]
