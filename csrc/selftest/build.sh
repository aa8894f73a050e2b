#!/bin/sh
# Builds the kernel self-test: the table's csrc files plus selftest.c, each ISA file with its
# own target flags exactly as setup.py compiles them for the extension.
#
#   csrc/selftest/build.sh [OUTPUT]                      native build
#   CC=aarch64-linux-gnu-gcc csrc/selftest/build.sh out  cross build (run: qemu-aarch64 out)
#   CC="python scripts/zigcc.py -target aarch64-macos" NEON_FLAGS= \
#       NEON_DOTPROD_FLAGS=-DINFER_NEON_DOTPROD csrc/selftest/build.sh out
#                                                         zig cc: macOS, musl, glibc 2.17
#
# Environment: CC (may be several words), ARCH (x86/arm/other: the target's ISA
# family, by default from $CC -dumpmachine), CFLAGS (default -O2 -g), LDFLAGS (-static
# spares qemu a sysroot); AVX2_FLAGS, AVX512_FLAGS, NEON_FLAGS, NEON_DOTPROD_FLAGS
# override the per-ISA flags (tests/test_selftest.py passes setup.py's ISA_FLAGS; set
# but empty means no flags).  Each *_neon.c is compiled twice, as setup.py does: with
# NEON_FLAGS (baseline ARMv8.0, the "neon" set) and with NEON_DOTPROD_FLAGS (the
# "neon_dotprod" set; csrc/neon_level.h).  On macOS arm64 setup.py drops the -march
# flags: NEON_FLAGS= NEON_DOTPROD_FLAGS=-DINFER_NEON_DOTPROD.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
csrc=$(dirname "$here")
out=${1:-$here/selftest}
CC=${CC:-cc}
CFLAGS=${CFLAGS:--O2 -g}
LDFLAGS=${LDFLAGS:-}
AVX2_FLAGS=${AVX2_FLAGS--mavx2 -mfma -mf16c}
AVX512_FLAGS=${AVX512_FLAGS--mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni}
NEON_FLAGS=${NEON_FLAGS--march=armv8-a}
NEON_DOTPROD_FLAGS=${NEON_DOTPROD_FLAGS--march=armv8.2-a+dotprod -DINFER_NEON_DOTPROD}

# ARCH (x86, arm or other) names the target's ISA family where -dumpmachine cannot:
# zig cc prints the triple for -target x86_64-linux-gnu.2.17 but fails on it.
arch=${ARCH:-}
if [ -z "$arch" ]; then
    case $($CC -dumpmachine) in
        x86_64*|amd64*|i?86*) arch=x86 ;;
        aarch64*|arm64*) arch=arm ;;
        *) arch=other ;;
    esac
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
objs=
pids=
running=0
failed=0
JOBS=${JOBS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)}
# The kernel table and what it needs: dispatch, type traits, the thread pool and
# every ISA file.  (Model code such as llama_block.c is not part of the table.)
for src in "$csrc"/dispatch.c "$csrc"/types.c "$csrc"/threadpool.c "$csrc"/iquants_grids.c \
           "$csrc"/*_scalar.c \
           "$csrc"/*_avx2.c "$csrc"/*_avx512.c "$csrc"/*_neon.c "$here"/selftest.c; do
    name=$(basename "$src" .c)
    case $name in
        *_avx2) [ $arch = x86 ] || continue; builds="$name:AVX2_FLAGS" ;;
        *_avx512) [ $arch = x86 ] || continue; builds="$name:AVX512_FLAGS" ;;
        *_neon) [ $arch = arm ] || continue
                builds="$name:NEON_FLAGS ${name}_dotprod:NEON_DOTPROD_FLAGS" ;;
        *) builds="$name:" ;;
    esac
    for build in $builds; do   # object name : variable holding its flags
        obj=${build%%:*}
        var=${build#*:}
        flags=
        [ -z "$var" ] || eval "flags=\$$var"
        # JOBS compiles at a time (default: the cores), waiting for the oldest.
        if [ "$running" -ge "$JOBS" ]; then
            set -- $pids
            wait "$1" || failed=1
            shift
            pids=$*
            running=$((running - 1))
        fi
        # shellcheck disable=SC2086  # flag lists are meant to split
        $CC -std=c11 $CFLAGS -Wall -Wextra -Wvla -fno-strict-aliasing $flags \
            -I"$csrc" -c "$src" -o "$tmp/$obj.o" &
        pids="$pids $!"
        running=$((running + 1))
        objs="$objs $tmp/$obj.o"
    done
done
for pid in $pids; do wait "$pid" || failed=1; done
[ "$failed" -eq 0 ] || { echo "build.sh: a compile failed" >&2; exit 1; }
# shellcheck disable=SC2086
$CC $CFLAGS $LDFLAGS -pthread -o "$out" $objs -lm
echo "built $out ($arch)"
