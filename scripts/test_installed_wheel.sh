#!/usr/bin/env bash
# Builds the sdist and, from it, the wheel (python -m build), installs the wheel into
# a fresh venv and runs the kernel tests and the emulated-CPU tests (qemu-x86_64
# -cpu Westmere/SandyBridge/Haswell) from outside the source tree against it.
#
#   scripts/test_installed_wheel.sh [PYTHON]      (default: python)
#
# .ci/run calls this after the README's test command.
set -euo pipefail
python=${1:-python}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM

"$python" -m pip install -q build
"$python" -m build --outdir "$work/dist" "$root"
"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "$work"/dist/infer_llm-*.whl \
    "pytest>=7" "hypothesis>=6" "gguf>=0.10"

cd "$work"   # not the source tree: `import infer` must find the wheel
INFER_TEST_INSTALLED=1 "$work/venv/bin/python" -m pytest -q -o pythonpath= -p no:cacheprovider \
    "$root/tests/test_kernels_quants.py" "$root/tests/test_kernels_kquants.py" \
    "$root/tests/test_kernels_ops.py" "$root/tests/test_cpu_emulation.py"
