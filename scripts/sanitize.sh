#!/usr/bin/env bash
# Runs the kernels under AddressSanitizer + UndefinedBehaviorSanitizer.
#
#   scripts/sanitize.sh                  the C self-test, then the kernel tests
#   scripts/sanitize.sh tests/test_x.py  the C self-test, then the given pytest arguments
#
# The extension is built with INFER_SANITIZE=1 in a scratch copy of the source tree,
# so the working tree's own build is left alone.  Needs gcc (or clang) with the
# sanitizer runtimes (Debian: libasan8, libubsan1, installed with gcc).
# Any ASan report or UBSan diagnostic fails the run.  See docs/sanitizers.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python}
cc=${CC:-gcc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=0:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"

echo "== C self-test (every SIMD table entry against scalar), ASan+UBSan"
CC=$cc CFLAGS="-O1 -g $san" LDFLAGS="$san" sh "$root/csrc/selftest/build.sh" "$work/selftest"
"$work/selftest"

# The NEON files too, when the Debian cross toolchain and qemu-user are installed.
arm_sysroot=/usr/aarch64-linux-gnu
if command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 && command -v qemu-aarch64 >/dev/null 2>&1 &&
   [ -n "$(ls "$arm_sysroot"/lib/libasan.so* 2>/dev/null)" ]; then
    echo "== the same for AArch64 (NEON) under qemu-aarch64"
    CC=aarch64-linux-gnu-gcc CFLAGS="-O1 -g $san" LDFLAGS="$san" \
        sh "$root/csrc/selftest/build.sh" "$work/selftest-arm"
    qemu-aarch64 -L "$arm_sysroot" "$work/selftest-arm"
fi

echo "== infer.kernels built with INFER_SANITIZE=1"
mkdir "$work/src"
(cd "$root" && tar cf - --exclude='*.so' --exclude='build' --exclude='.git' \
    --exclude='*.egg-info' --exclude='__pycache__' --exclude='infer/*.c' \
    setup.py pyproject.toml README.md csrc infer tests) | (cd "$work/src" && tar xf -)
cd "$work/src"
CC=$cc INFER_SANITIZE=1 "$python" setup.py -q build_ext --inplace -j2 >"$work/build.log" 2>&1 \
    || { cat "$work/build.log"; exit 1; }

# A Python that was not built with ASan must load the ASan runtime first.
case $("$cc" --version | head -1) in
    *clang*) asan_rt=$("$cc" -print-file-name="libclang_rt.asan-$(uname -m).so") ;;
    *) asan_rt=$("$cc" -print-file-name=libasan.so) ;;
esac
[ -f "$asan_rt" ] || { echo "no ASan runtime at $asan_rt" >&2; exit 1; }
if [ $# -eq 0 ]; then
    # The kernel tests, and the GGUF reader's (tensors at odd file offsets, which
    # general.alignment = 1 allows, reach the kernels as aligned copies).  Not tests
    # that start compilers or qemu: LD_PRELOAD would reach them too.  The self-tests
    # above cover NEON.
    # shellcheck disable=SC2046
    set -- $(ls tests/test_kernels*.py) tests/test_gguf.py
fi
echo "== pytest $* (LD_PRELOAD=$asan_rt)"
LD_PRELOAD=$asan_rt "$python" -m pytest -q -p no:cacheprovider "$@"
