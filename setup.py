"""Build of infer's C kernels and their Cython wrapper.

The C sources fall into ISA groups by file-name suffix.  Only the SIMD files get
target flags, each group its own, so the dispatch code and the Cython-generated
module stay baseline (a wheel built here runs on any CPU of its architecture).
"""
import os
import platform
import sys
from glob import glob

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

CSRC = "csrc"

# Per-ISA compiler flags: (gcc/clang, MSVC); MSVC flags None = not built with MSVC.
ISA_FLAGS = {
    "avx2": (["-mavx2", "-mfma", "-mf16c"], ["/arch:AVX2"]),
    "avx512": (
        ["-mavx2", "-mfma", "-mf16c", "-mavx512f", "-mavx512bw", "-mavx512vl",
         "-mavx512dq", "-mavx512vnni"],
        ["/arch:AVX512"],
    ),
    # Every AArch64 CPU (ARMv8.0: Cortex-A53/A72, Graviton 1) runs the baseline set.
    "neon": (["-march=armv8-a"], []),
    # Chosen at run time when the CPU has SDOT (csrc/neon_level.h, dispatch.c).  MSVC
    # gets only the baseline set (dispatch.c knows: no _dotprod symbols there).
    "neon_dotprod": (["-march=armv8.2-a+dotprod", "-DINFER_NEON_DOTPROD"], None),
}
# The builds of each ISA file, by file-name suffix: *_neon.c is compiled once per
# NEON level, each object with its own flags.
BUILDS = {"avx2": ("avx2",), "avx512": ("avx512",), "neon": ("neon", "neon_dotprod")}
X86_ISAS = ("avx2", "avx512")
ARM_ISAS = ("neon",)


def machine():
    m = platform.machine().lower()
    # Cross builds (cibuildwheel, macOS universal) say what they target here.
    archflags = os.environ.get("ARCHFLAGS", "")
    if "arm64" in archflags and "x86_64" not in archflags:
        return "arm64"
    if "x86_64" in archflags and "arm64" not in archflags:
        return "x86_64"   # an x86_64 wheel built on an Apple-silicon runner
    # Other cross builds name the target as sysconfig.get_platform() would
    # ("linux-aarch64": scripts/test_aarch64.sh; cibuildwheel sets it on macOS too).
    target = os.environ.get("_PYTHON_HOST_PLATFORM", "").rsplit("-", 1)[-1].lower()
    if target in ("aarch64", "arm64", "x86_64", "amd64"):
        return target
    return m


def isa_of(path):
    stem = os.path.splitext(os.path.basename(path))[0]
    for isa in BUILDS:
        if stem.endswith("_" + isa):
            return isa
    return None


class BuildExt(build_ext):
    """Compiles each ISA group with its own flags, then links them in."""

    def build_extension(self, ext):
        msvc = self.compiler.compiler_type == "msvc"
        m = machine()
        on_x86 = m in ("x86_64", "amd64", "i686", "x86")
        on_arm = m in ("aarch64", "arm64")
        base = ["/O2"] if msvc else ["-O3", "-fno-strict-aliasing"]
        if not msvc and os.environ.get("INFER_SANITIZE"):
            base += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g", "-O1"]
        extra_objects = []
        plain = []
        ext_sources = list(ext.sources)
        for src in ext.sources:
            isa = isa_of(src)
            if isa is None:
                plain.append(src)
                continue
            if (isa in X86_ISAS and not on_x86) or (isa in ARM_ISAS and not on_arm):
                continue  # the file's own #if keeps it empty anyway
            for level in BUILDS[isa]:
                flags = ISA_FLAGS[level][1 if msvc else 0]
                if flags is None:
                    continue
                if level.startswith("neon") and m == "arm64" and sys.platform == "darwin":
                    # Apple clang targets an Apple core (dotprod included) by default.
                    flags = [f for f in flags if not f.startswith("-march")]
                objs = self.compiler.compile(
                    [src], output_dir=os.path.join(self.build_temp, level),
                    include_dirs=ext.include_dirs, macros=ext.define_macros,
                    extra_postargs=base + flags, depends=ext.depends)
                extra_objects += objs
        ext.sources = plain
        # build_ext relinks only when a source or dependency is newer than the
        # module; the ISA files are no longer sources, so they must be dependencies.
        ext.depends = list(ext.depends or []) + [s for s in ext_sources if isa_of(s)]
        ext.extra_objects = list(ext.extra_objects or []) + extra_objects
        ext.extra_compile_args = list(ext.extra_compile_args or []) + base
        if not msvc:
            ext.extra_link_args = list(ext.extra_link_args or []) + ["-pthread"]
            if os.environ.get("INFER_SANITIZE"):
                ext.extra_link_args += ["-fsanitize=address,undefined"]
        super().build_extension(ext)


def cython_extensions():
    from Cython.Build import cythonize

    c_sources = sorted(glob(os.path.join(CSRC, "*.c")))
    headers = sorted(glob(os.path.join(CSRC, "*.h")))
    exts = [
        Extension("infer.kernels", ["infer/kernels.pyx"] + c_sources,
                  include_dirs=[CSRC], depends=headers),
    ]
    # Other Cython modules of the package (no C kernels of their own).
    for pyx in sorted(glob("infer/**/*.pyx", recursive=True)):
        name = pyx[:-4].replace(os.sep, ".").replace("/", ".")
        if name != "infer.kernels":
            exts.append(Extension(name, [pyx]))
    return cythonize(exts, language_level=3,
                     compiler_directives={"boundscheck": False, "wraparound": False,
                                          "cdivision": True, "embedsignature": True},
                     include_path=["infer"])


setup(ext_modules=cython_extensions(), cmdclass={"build_ext": BuildExt})
