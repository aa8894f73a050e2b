"""The C sources build with MSVC too: checked by a scanner and by clang in MSVC mode.

The Windows wheels are compiled by MSVC, which has no ``__attribute__``, no
``__builtin_*``, no GNU inline ``__asm__``, no ``__thread``/``__atomic_*``, no
variable-length arrays, and ``_Static_assert`` only under ``/std:c11`` (setuptools
does not pass it).  Such constructs are fine inside a region MSVC never compiles
(``#if defined(__GNUC__)``, ``#ifdef __linux__``, the ``#else`` of an ``#ifdef _WIN32``,
an ``#if defined(__aarch64__)`` that does not also admit ``_M_ARM64``, ...).

MSVC cannot run here, so three things stand in for it:

* a scanner that follows each file's ``#if`` nesting and asks whether the enclosing
  branch can be taken under MSVC (it also sees macro bodies);
* clang targeting ``x86_64-pc-windows-msvc`` (``_MSC_VER`` 1940, Wine's MSVC-style
  CRT and SDK headers from libwine-dev) compiles every file with -Werror -Wvla -Wgnu
  -pedantic as clang-cl sees it, and with ``__clang__`` undefined, which takes the
  branches MSVC itself takes (as C99, MSVC's default, and as C11, its /std:c11);
* the second view's preprocessed output is searched for GNU-only tokens in lines
  from csrc, so the real preprocessor decides what MSVC would compile.

What this cannot show: clang accepts GNU extensions MSVC rejects that no warning
flag names (``__attribute__``, ``__builtin_*`` and friends are left to the scanner
and the token search), and MSVC's own headers, intrinsics and code generation are
not Wine's and clang's (see docs/portability.md).
"""
from __future__ import annotations

import platform
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import pytest
from test_selftest import CROSS_CC, setup_isa_flags

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc"
SOURCES = sorted(CSRC.glob("*.c")) + sorted(CSRC.glob("*.h")) + [CSRC / "selftest" / "selftest.c"]

# (_Atomic: MSVC has C11 atomics only under /experimental:c11atomics.)
GCC_ONLY = re.compile(r"\b(__attribute__|__builtin_\w+|__asm__|__asm|asm|__thread|__atomic_\w+|"
                      r"__sync_\w+|typeof|__typeof__|__int128|__label__|_Static_assert|_Atomic)\b")
# Macros only GCC-compatible compilers (or non-Windows targets) define: a branch that
# requires one of them positively is never compiled by MSVC.  (__STDC_VERSION__: MSVC
# defines it only under /std:c11, which also gives it _Static_assert.)
GCC_MACROS = re.compile(r"__STDC_VERSION__|__GNUC__|__clang__|__linux__|__APPLE__|__FreeBSD__|__unix__|"
                        r"__x86_64__|__i386__|__aarch64__|__ARM_NEON|__AVX\w*__|__SSE\w*__|"
                        r"__F16C__|__FMA__|__ARM_FEATURE_\w+")
MSVC_MACROS = re.compile(r"_MSC_VER|_WIN32|_WIN64|_M_X64|_M_AMD64|_M_IX86|_M_ARM64")


def branch_excludes_msvc(cond: str) -> bool:
    """True if a branch with this #if/#elif condition cannot be taken under MSVC."""
    cond = re.sub(r"/\*.*?\*/|//.*", "", cond)
    if re.search(r"!\s*defined\s*\(?\s*(_MSC_VER|_WIN32)\b", cond):
        return True
    if re.match(r"\s*ifndef\s+(_MSC_VER|_WIN32)\b", cond):
        return True
    # Every alternative of an || must require a GCC-only macro, and none may admit MSVC.
    for alt in cond.split("||"):
        if MSVC_MACROS.search(alt) or not GCC_MACROS.search(alt):
            return False
    return True


def branch_is_msvc_only(cond: str) -> bool:
    """True if the condition requires MSVC (its #else is then GCC-only)."""
    cond = re.sub(r"/\*.*?\*/|//.*", "", cond)
    if "||" in cond or cond.strip().startswith("ifndef"):
        return False
    # One positive conjunct naming MSVC/Windows suffices (`_MSC_VER && !__clang__`).
    return any(re.search(r"\b(_MSC_VER|_WIN32)\b", c) and "!" not in c for c in cond.split("&&"))


def unguarded_gcc_constructs(path: Path) -> list[str]:
    findings = []
    # stack of (excludes_msvc_for_current_branch, if_condition)
    stack: list[tuple[bool, str]] = []
    in_comment = False
    for lineno, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw
        if in_comment:
            if "*/" not in line:
                continue
            line = line.split("*/", 1)[1]
            in_comment = False
        line = re.sub(r"/\*.*?\*/", "", line)
        if "/*" in line:
            line, in_comment = line.split("/*", 1)[0], True
        line = re.sub(r"//.*", "", line)
        line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
        directive = re.match(r"\s*#\s*(\w+)(.*)", line)
        if directive:
            word, rest = directive.group(1), directive.group(2)
            if word == "if":
                stack.append((branch_excludes_msvc(rest), f"if {rest}"))
            elif word == "ifdef":
                stack.append((branch_excludes_msvc(f"defined({rest.strip()})"), f"ifdef {rest}"))
            elif word == "ifndef":
                stack.append((branch_excludes_msvc(f"ifndef {rest.strip()}"), f"ifndef {rest}"))
            elif word == "elif" and stack:
                stack[-1] = (branch_excludes_msvc(rest), stack[-1][1])
            elif word == "else" and stack:
                stack[-1] = (branch_is_msvc_only(stack[-1][1]), stack[-1][1])
            elif word == "endif" and stack:
                stack.pop()
            if word != "define":  # a macro body is code; other directives are not
                continue
        if any(excl for excl, _ in stack):
            continue
        m = GCC_ONLY.search(line)
        if m:
            findings.append(f"{path.relative_to(ROOT)}:{lineno}: {m.group(1)}: {raw.strip()}")
    return findings


def test_guard_detection_itself() -> None:
    """The scanner's own cases (so a pass below means something)."""
    assert branch_excludes_msvc(" defined(__GNUC__)")
    assert branch_excludes_msvc(" defined(__aarch64__)")
    assert not branch_excludes_msvc(" defined(__aarch64__) || defined(_M_ARM64)")
    assert not branch_excludes_msvc(" defined(__x86_64__) || defined(_M_X64)")
    assert branch_excludes_msvc(" !defined(_MSC_VER)")
    assert branch_is_msvc_only("ifdef _WIN32")
    assert branch_is_msvc_only("if defined(_MSC_VER)")
    assert not branch_is_msvc_only("if !defined(_MSC_VER)")
    assert branch_is_msvc_only("if defined(_MSC_VER) && !defined(__clang__)")
    assert not branch_is_msvc_only("if defined(_MSC_VER) || defined(__GNUC__)")


def test_scanner_flags_an_unguarded_attribute(tmp_path: Path) -> None:
    src = tmp_path / "x.c"
    src.write_text(
        "#if defined(__x86_64__) || defined(_M_X64)\n"
        "#define INLINE static inline __attribute__((always_inline))\n"  # flagged
        "#endif\n"
        "#ifdef _MSC_VER\n#define A __forceinline\n#else\n"
        "#define A __attribute__((always_inline))\n"                      # guarded
        "#endif\n"
        "#if defined(__GNUC__)\nstatic int b = __builtin_ctz(4);\n#endif\n"  # guarded
        "/* __builtin_expect in a comment */\n"
        "#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L\n"
        "_Static_assert(sizeof(int) == 4, \"int\");\n"                     # guarded
        "#endif\n"
        "_Static_assert(sizeof(short) == 2, \"short\");\n")                # flagged
    findings = [f.split(": ", 1)[1] for f in unguarded_gcc_constructs_at(src, tmp_path)]
    assert findings == ["__attribute__: #define INLINE static inline __attribute__((always_inline))",
                        '_Static_assert: _Static_assert(sizeof(short) == 2, "short");']


def unguarded_gcc_constructs_at(path: Path, root: Path) -> list[str]:
    global ROOT
    saved, ROOT = ROOT, root
    try:
        return unguarded_gcc_constructs(path)
    finally:
        ROOT = saved


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_no_unguarded_gcc_only_constructs(path: Path) -> None:
    findings = unguarded_gcc_constructs(path)
    assert not findings, (
        "GCC-only constructs MSVC would reject (guard them with #if defined(__GNUC__) or "
        "use a portable macro, e.g. _MSC_VER ? __forceinline : __attribute__((always_inline))):\n"
        + "\n".join(findings))


def isa_groups() -> dict[str, list[Path]]:
    groups: dict[str, list[Path]] = {}
    for path in sorted(CSRC.glob("*.c")):
        isa = next((i for i in ("avx2", "avx512", "neon") if path.stem.endswith("_" + i)), "plain")
        groups.setdefault(isa, []).append(path)
    return groups


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) on PATH")
@pytest.mark.parametrize("isa", ["plain", "avx2", "avx512", "neon", "neon_dotprod"])
def test_no_variable_length_arrays(isa: str) -> None:
    """MSVC has no VLAs; -Werror=vla finds them.  A syntax check with setup.py's flags
    for the group (a file's own #if keeps out SIMD code the host cannot compile).  The
    NEON files are compiled once per NEON level, by the aarch64 cross compiler on an
    x86 host when it is installed."""
    files = isa_groups().get(isa.split("_")[0] if isa.startswith("neon") else isa, [])
    flags = [] if isa == "plain" else setup_isa_flags()[isa]
    cc = "cc"
    on_arm = platform.machine().lower() in ("aarch64", "arm64")
    if isa.startswith("neon") and not on_arm:
        if shutil.which(CROSS_CC):
            cc = CROSS_CC
        else:
            flags = []  # the x86 compiler rejects -march=armv8-a; the file's #if empties it
    if isa in ("avx2", "avx512") and platform.machine().lower() not in ("x86_64", "amd64"):
        flags = []
    proc = subprocess.run([cc, "-std=c11", "-fsyntax-only", "-Werror=vla", f"-I{CSRC}", *flags,
                           *map(str, files)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


# ---- clang in MSVC mode ----------------------------------------------------------------

CLANG = next((c for c in ("clang", "clang-19", "clang-18", "clang-17", "clang-16", "clang-15",
                          "clang-14") if shutil.which(c)), None)
# Wine's MSVC-style C runtime and Windows SDK headers (Debian libwine-dev).  MinGW's
# headers cannot stand in: without __GNUC__ they define __attribute__ away, which
# breaks clang's own intrinsic headers.
WINE_INCLUDE = Path("/usr/include/wine/wine")
# Wine's winnt.h lacks what the Windows SDK's has for x64 (its macro for the intrinsic).
WINE_GAPS = ("long long _InterlockedExchange64(long long volatile *, long long);\n"
             "#define InterlockedExchange64 _InterlockedExchange64\n")
# The warnings stand for what MSVC rejects; __forceinline and __declspec are MSVC's
# own, not flagged.
STRICT = ["-Werror", "-Wall", "-Wextra", "-Wvla", "-Wgnu", "-pedantic",
          "-Wno-language-extension-token"]
# "msvc": the branches MSVC takes (#if !defined(__clang__) ...), without /std:c11 as
# setuptools builds (no __STDC_VERSION__ >= C11, so no _Static_assert) and with it;
# "clang-cl": the branches clang-cl takes.
VIEWS = {"msvc": ["-U__clang__", "-std=c99"], "msvc-c11": ["-U__clang__", "-std=c11"],
         "clang-cl": ["-std=c11"]}
# msvc-c11 differs from msvc only in __STDC_VERSION__, which csrc reads for
# _Static_assert alone (infer_kernels.h, selftest.c): a front-end check.  Its code
# generation is msvc's, which "msvc" already compiles to objects, so msvc-c11 stops
# after the front end (a third of the time).
FRONT_END_ONLY = {"msvc-c11"}
# Tokens only GCC-compatible compilers know.  __builtin_ia32_* and __builtin_offsetof
# also come out of clang's intrinsic and stddef macros (functions in MSVC): they count
# only where the source line spells them.
GNU_TOKENS = re.compile(r"\b(__attribute__|__builtin_\w+|__asm__|__asm|__thread|__atomic_\w+|"
                        r"__sync_\w+|__typeof__|typeof|__int128|__label__|_Atomic)\b")
FROM_HEADER_MACROS = re.compile(r"__builtin_ia32_\w+|__builtin_offsetof")

needs_msvc_mode = pytest.mark.skipif(
    CLANG is None or not (WINE_INCLUDE / "msvcrt" / "stdlib.h").is_file(),
    reason="needs clang and Wine's MSVC-style headers (apt-get install clang libwine-dev)")


@pytest.fixture(scope="module")
def msvc_flags(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    gaps = tmp_path_factory.mktemp("msvc") / "wine_gaps.h"
    gaps.write_text(WINE_GAPS)
    yield ["--target=x86_64-pc-windows-msvc", "-fms-compatibility", "-fms-extensions",
           "-fms-compatibility-version=19.40", "-nostdlibinc",
           "-idirafter", str(WINE_INCLUDE / "msvcrt"), "-idirafter", str(WINE_INCLUDE / "windows"),
           "-include", str(gaps), f"-I{CSRC}"]


def msvc_group_flags(isa: str) -> list[str]:
    """clang's flags for what setup.py gives MSVC (/arch:AVX2, /arch:AVX512).  MSVC
    offers every intrinsic whatever /arch says; clang needs the features named, so
    the gcc flags (which add F16C and VNNI to /arch's sets) are the closer match."""
    return setup_isa_flags()[isa] if isa in ("avx2", "avx512") else []


def msvc_groups() -> dict[str, list[Path]]:
    groups = isa_groups()
    # The self-test too (it includes atomics.h and calls the Win32 sleep).
    groups["plain"] = groups["plain"] + [CSRC / "selftest" / "selftest.c"]
    return groups


def compile_split(cmd: list[str], files: list[Path], cwd: Path) -> tuple[int, str]:
    """``cmd + files`` as two compiler processes at once, each given every other file
    (the machine has two cores; one clang takes its files one after another):
    (the worse exit status, both stderrs)."""
    halves = [files[0::2], files[1::2]]
    with ThreadPoolExecutor(2) as pool:
        procs = list(pool.map(lambda part: subprocess.run(
            [*cmd, *map(str, part)], cwd=cwd, capture_output=True, text=True, timeout=300),
            [h for h in halves if h]))
    return max(p.returncode for p in procs), "".join(p.stderr for p in procs)


@needs_msvc_mode
@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("isa", ["plain", "avx2", "avx512", "neon"])
def test_compiles_in_msvc_mode(isa: str, view: str, msvc_flags: list[str], tmp_path: Path) -> None:
    """Objects, not just a syntax check: an intrinsic used without its target feature
    fails only in code generation.  (NEON files must compile to nothing on x64.)"""
    files = msvc_groups()[isa]
    output = ["-fsyntax-only"] if view in FRONT_END_ONLY else ["-O1", "-c"]
    code, stderr = compile_split([str(CLANG), *msvc_flags, *VIEWS[view], *STRICT,
                                  *msvc_group_flags(isa), *output], files, tmp_path)
    assert code == 0, stderr
    objects = [] if view in FRONT_END_ONLY else sorted(f.stem + ".o" for f in files)
    assert sorted(p.name for p in tmp_path.glob("*.o")) == objects


@needs_msvc_mode
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_msvc_arm64_builds_the_baseline_neon_set(view: str, msvc_flags: list[str],
                                                 tmp_path: Path) -> None:
    """Windows ARM64 with MSVC: setup.py compiles the NEON files once, with no flags, and
    no dotprod copy (ISA_FLAGS["neon_dotprod"] has no MSVC flags), so dispatch.c must
    ask only for the baseline fill functions, which those files define.  Read from
    the assembly (-S), which names every symbol a file defines or calls."""
    flags = [f.replace("x86_64-pc-windows-msvc", "aarch64-pc-windows-msvc") for f in msvc_flags]
    files = msvc_groups()["neon"] + [CSRC / "dispatch.c"]
    output = ["-fsyntax-only"] if view in FRONT_END_ONLY else ["-O1", "-S"]
    code, stderr = compile_split([str(CLANG), *flags, *VIEWS[view], *STRICT, *output], files, tmp_path)
    assert code == 0, stderr
    if view in FRONT_END_ONLY:
        return  # the assembly is msvc's, read below for that view
    fills = {f.stem: set(re.findall(r"\binfer_fill_\w+", (tmp_path / f"{f.stem}.s").read_text()))
             for f in files}
    # The baseline set, as dispatch.c's source spells it (the dotprod copies aside).
    neon = set(re.findall(r"\b(infer_fill_\w+_neon)\(", (CSRC / "dispatch.c").read_text()))
    assert {"infer_fill_table_neon", "infer_fill_kquants_neon", "infer_fill_ops_neon"} <= neon
    defined = set().union(*(fills[f.stem] for f in msvc_groups()["neon"]))
    assert defined == neon
    called = fills["dispatch"]
    assert neon <= called
    assert not [s for s in called if "dotprod" in s]


def gnu_tokens_msvc_compiles(path: Path, msvc_flags: list[str], extra: list[str]) -> list[str]:
    """GNU-only tokens in the lines of csrc (or of path's directory) that survive
    MSVC's view of the preprocessor, as 'file:line: token'."""
    proc = subprocess.run([str(CLANG), *msvc_flags, *VIEWS["msvc"], *extra, "-E",
                           str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    ours = (str(CSRC), str(path.parent))
    sources: dict[str, list[str]] = {}
    findings = []
    current, lineno = "", 0
    for line in proc.stdout.splitlines():
        marker = re.match(r'#\s*(\d+) "([^"]*)"', line)
        if marker:
            lineno, current = int(marker.group(1)), str(Path(marker.group(2)).resolve())
            continue
        if current.startswith(ours):
            for token in GNU_TOKENS.findall(line):
                if FROM_HEADER_MACROS.fullmatch(token):
                    if current not in sources:
                        sources[current] = Path(current).read_text().splitlines()
                    spelled = sources[current][lineno - 1] if lineno <= len(sources[current]) else ""
                    if token not in spelled:
                        continue
                findings.append(f"{Path(current).name}:{lineno}: {token}")
        lineno += 1
    return findings


@needs_msvc_mode
@pytest.mark.parametrize("isa", ["plain", "avx2", "avx512"])
def test_msvc_preprocessed_sources_have_no_gnu_tokens(isa: str, msvc_flags: list[str]) -> None:
    findings = []
    for path in msvc_groups()[isa]:
        findings += gnu_tokens_msvc_compiles(path, msvc_flags, msvc_group_flags(isa))
    assert not findings, "GNU-only constructs in code MSVC compiles:\n" + "\n".join(findings)


PROBES = {
    "vla": ("int f(int n) { int a[n]; a[0] = n; return a[0]; }\n", "-Wvla"),
    "statement expression": ("int f(int n) { return ({ int y = n; y + 1; }); }\n",
                             "-Wgnu-statement-expression"),
    "case range": ("int f(int n) { switch (n) { case 1 ... 3: return 1; } return 0; }\n",
                   "-Wgnu-case-range"),
    "pthread": ("#include <pthread.h>\n", "pthread.h' file not found"),
}


@needs_msvc_mode
@pytest.mark.parametrize("probe", sorted(PROBES))
def test_msvc_mode_rejects(probe: str, msvc_flags: list[str], tmp_path: Path) -> None:
    """The compile check can fail: what MSVC rejects and clang flags."""
    code, message = PROBES[probe]
    src = tmp_path / "probe.c"
    src.write_text(code)
    proc = subprocess.run([str(CLANG), *msvc_flags, *VIEWS["msvc"], *STRICT, "-c", str(src)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


@needs_msvc_mode
def test_token_search_sees_what_msvc_compiles(msvc_flags: list[str], tmp_path: Path) -> None:
    """The token search can fail, follows the preprocessor, and tells an intrinsic
    macro's expansion from a builtin the source spells."""
    src = tmp_path / "probe.c"
    src.write_text(
        "#include <immintrin.h>\n"
        "#if defined(_MSC_VER) && !defined(__clang__)\n"
        "#define INLINE static __forceinline\n"
        "#else\n"
        "#define INLINE static inline __attribute__((always_inline))\n"   # not MSVC's
        "#endif\n"
        "INLINE int ok(__m128i v) { return _mm_extract_epi16(_mm_shuffle_epi32(v, 0), 1); }\n"
        "#define CTZ(x) __builtin_ctz(x)\n"
        "int bad(unsigned x) { return CTZ(x) + ok(_mm_setzero_si128()); }\n"   # line 9
        "int worse(void) { return __builtin_ia32_rdtsc() > 0; }\n")           # line 10
    assert gnu_tokens_msvc_compiles(src, msvc_flags, []) == [
        "probe.c:9: __builtin_ctz", "probe.c:10: __builtin_ia32_rdtsc"]
