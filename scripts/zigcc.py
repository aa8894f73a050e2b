#!/usr/bin/env python3
"""`zig cc` as a drop-in cross compiler for setup.py and csrc/selftest/build.sh.

    CC="python scripts/zigcc.py -target aarch64-linux-musl" csrc/selftest/build.sh out

zig (the `ziglang` package on PyPI) is a clang that carries the libc headers and
sources of many targets: musl, glibc down to 2.17 (`x86_64-linux-gnu.2.17`) and the
macOS SDK stubs, so one pip install cross-compiles for every non-Windows wheel.

One difference from gcc and clang needs translating: zig reads `-march=X` as its own
CPU name (zig issue #4911), so gcc's AArch64 spelling `-march=armv8.2-a+dotprod+fp16`
fails with "unknown CPU".  This wrapper rewrites it as the equivalent
`-mcpu=generic+v8_2a+dotprod+fullfp16` and passes every other argument through, so
the ISA flags stay those of setup.py's ISA_FLAGS.

A -target is required: without one zig compiles for the build machine's own CPU
(-mcpu=native), which is never what a wheel or a portability check wants.
"""
from __future__ import annotations

import os
import re
import sys

# gcc's AArch64 extension names where zig (LLVM) spells them differently.
ZIG_FEATURE = {"fp16": "fullfp16", "rdma": "rdm"}


def aarch64_mcpu(march: str) -> str:
    """`armv8.2-a+dotprod+fp16` -> `generic+v8_2a+dotprod+fullfp16` (`+nofoo` -> `-foo`)."""
    base, *extensions = march.split("+")
    m = re.fullmatch(r"armv(\d+)(?:\.(\d+))?-a", base)
    if m is None:
        raise SystemExit(f"zigcc: cannot translate -march={march} for zig")
    version = m.group(1) + (f"_{m.group(2)}" if m.group(2) else "")
    cpu = f"generic+v{version}a"
    for ext in extensions:
        if ext.startswith("no"):
            cpu += "-" + ZIG_FEATURE.get(ext[2:], ext[2:])
        else:
            cpu += "+" + ZIG_FEATURE.get(ext, ext)
    return cpu


def translate(args: list[str]) -> list[str]:
    out = []
    for arg in args:
        if arg.startswith("-march=armv"):
            arg = "-mcpu=" + aarch64_mcpu(arg[len("-march="):])
        out.append(arg)
    return out


def main() -> None:
    args = sys.argv[1:]
    if "-target" not in args and not any(a.startswith("--target=") for a in args):
        raise SystemExit("zigcc: pass -target (e.g. x86_64-linux-gnu.2.17); without one "
                         "zig builds for this machine's CPU")
    os.execv(sys.executable, [sys.executable, "-m", "ziglang", "cc", *translate(args)])


if __name__ == "__main__":
    main()
