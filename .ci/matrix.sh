#!/usr/bin/env bash
# The whole Python suite (campaign included) from the one abi3 wheel, on every CPython >= 3.11
# this machine has, under each event loop: asyncio and uvloop everywhere, asyncio's eager task
# factory on 3.12+ (tests/support/loops.py reads SDAX_TEST_LOOP).
#
#   .ci/matrix.sh [WHEEL]     (no WHEEL: builds it with `maturin build --release`)
#
# One virtualenv per interpreter with the wheel and its test extra; the suite runs from a
# directory outside the source tree, so only the installed wheel can be imported (each cell's
# pytest header names the loop and where sdax_hamilton came from). Cells run MATRIX_JOBS at a
# time (default 2). Prints a table interpreter x loop -> passed/failed/skipped and the
# campaign's run count; exits non-zero if any cell failed. A missing interpreter prints a
# line, never a failure. Logs stay in $MATRIX_DIR (default: a fresh temporary directory,
# removed when every cell passed).
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
jobs="${MATRIX_JOBS:-2}"
work="${MATRIX_DIR:-$(mktemp -d)}"
mkdir -p "$work"
own_work="${MATRIX_DIR:+no}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

wheel="${1:-}"
if [ -z "$wheel" ]; then
    echo "== matrix: building the abi3 wheel"
    (cd "$src" && maturin build --release --quiet --out "$work/dist")
    wheels=("$work"/dist/*-abi3-*.whl)
    wheel="${wheels[0]}"
fi
[ -f "$wheel" ] || { echo "matrix: no wheel at $wheel" >&2; exit 1; }
echo "== matrix: wheel $(basename "$wheel")"

# --- interpreters: pyenv's, then the PATH's; one per minor version, CPython only ----------
declare -A found=()
candidates=()
if command -v pyenv >/dev/null 2>&1; then
    root="$(pyenv root)"
    while read -r version; do
        candidates+=("$root/versions/$version/bin/python")
    done < <(pyenv versions --bare 2>/dev/null | grep -E '^3\.[0-9]+\.[0-9]+$' || true)
else  # pyenv's versions even when pyenv itself is not on PATH
    for python in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.*/bin/python; do
        candidates+=("$python")
    done
fi
for minor in 11 12 13 14 15; do
    path="$(command -v "python3.$minor" 2>/dev/null || true)"
    [ -n "$path" ] && candidates+=("$path")
done
for python in "${candidates[@]}"; do
    [ -x "$python" ] || continue
    info="$("$python" -c 'import sys, platform
print(platform.python_implementation(), "%d.%d" % sys.version_info[:2], platform.python_version())' 2>/dev/null)" || continue
    read -r impl minor full <<<"$info"
    [ "$impl" = CPython ] || continue
    [ "$(printf '%s\n3.11\n' "$minor" | sort -V | head -n 1)" = 3.11 ] || continue
    [ -n "${found[$minor]:-}" ] && continue
    found[$minor]="$python $full"
done
for minor in 3.11 3.12 3.13 3.14; do
    if [ -z "${found[$minor]:-}" ]; then
        echo "matrix: CPython $minor: not on this machine (pyenv versions, PATH): not tested"
    fi
done
mapfile -t minors < <(printf '%s\n' "${!found[@]}" | sort -V)
if [ "${#minors[@]}" -eq 0 ]; then
    echo "matrix: no CPython >= 3.11 found" >&2
    exit 1
fi
for minor in "${minors[@]}"; do
    echo "matrix: CPython $minor: ${found[$minor]}"
done

# --- one virtualenv per interpreter (in parallel) --------------------------------------------
setup() {
    local minor="$1" python="$2"
    local venv="$work/venv-$minor"
    "$python" -m venv "$venv" &&
        "$venv/bin/python" -m pip install -q --upgrade pip &&
        "$venv/bin/python" -m pip install -q "$wheel[test]" &&
        "$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$wheel"  # this very wheel
}
declare -A setup_pid=()
for minor in "${minors[@]}"; do
    read -r python _ <<<"${found[$minor]}"
    setup "$minor" "$python" >"$work/setup-$minor.log" 2>&1 &
    setup_pid[$minor]=$!
done
ready=()
for minor in "${minors[@]}"; do
    if wait "${setup_pid[$minor]}"; then
        ready+=("$minor")
    else
        echo "matrix: CPython $minor: installing the wheel failed:" >&2
        cat "$work/setup-$minor.log" >&2
    fi
done

# --- cells ---------------------------------------------------------------------------------
cells=()
for minor in "${ready[@]}"; do
    cells+=("$minor asyncio" "$minor uvloop")
    if [ "$(printf '%s\n3.12\n' "$minor" | sort -V | head -n 1)" = 3.12 ]; then
        cells+=("$minor eager")
    fi
done

run_cell() {
    local minor="$1" loop="$2"
    local name="$minor-$loop" dir="$work/cell-$minor-$loop"
    mkdir -p "$dir"
    cd "$dir"  # away from the source tree: only the installed wheel can be imported
    local start=$SECONDS rc=0
    SDAX_TEST_LOOP="$loop" "$work/venv-$minor/bin/python" -m pytest -p no:cacheprovider \
        --rootdir "$src" -c "$src/pyproject.toml" --junitxml "$dir/junit.xml" "$src/tests" \
        >"$dir/log" 2>&1 || rc=$?
    # The wheel, not a source tree, must have been tested (the header names the import).
    if ! grep -q '^sdax_hamilton imported from .*/site-packages/' "$dir/log"; then
        echo "matrix: CPython $minor x $loop did not import the installed wheel" >>"$dir/log"
        [ "$rc" = 0 ] && rc=1
    fi
    echo "$rc $((SECONDS - start))" >"$dir/status"
    echo "matrix: cell CPython $minor x $loop finished: exit $rc in $((SECONDS - start)) s;" \
        "$(grep -m 1 '^event loop (SDAX_TEST_LOOP=' "$dir/log" || echo 'no loop line')"
}
export -f run_cell
export work src

echo "== matrix: ${#cells[@]} cells, $jobs at a time"
printf '%s\n' "${cells[@]}" | xargs -P "$jobs" -L 1 bash -c 'run_cell "$0" "$1"' || true

# --- summary -------------------------------------------------------------------------------
failed=0
printf '\n%-10s %-8s %7s %7s %7s %6s %10s %6s\n' python loop passed failed skipped exit campaign secs
for cell in "${cells[@]}"; do
    read -r minor loop <<<"$cell"
    dir="$work/cell-$minor-$loop"
    read -r rc secs <"$dir/status" 2>/dev/null || { rc=missing; secs=-; }
    counts="$(python3 - "$dir/junit.xml" <<'EOF'
import sys
import xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError):
    print("- - -")
    raise SystemExit
suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
total = sum(int(s.get("tests", 0)) for s in suites)
failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
skipped = sum(int(s.get("skipped", 0)) for s in suites)
print(total - failed - skipped, failed, skipped)
EOF
)"
    read -r passed nfailed skipped <<<"$counts"
    campaign="$(sed -n 's/^campaign runs: \([0-9]*\).*/\1/p' "$dir/log" | tail -n 1)"
    printf '%-10s %-8s %7s %7s %7s %6s %10s %6s\n' \
        "$minor" "$loop" "$passed" "$nfailed" "$skipped" "$rc" "${campaign:--}" "$secs"
    if [ "$rc" != 0 ]; then
        failed=1
    fi
done
for cell in "${cells[@]}"; do
    read -r minor loop <<<"$cell"
    dir="$work/cell-$minor-$loop"
    read -r rc _ <"$dir/status" 2>/dev/null || rc=missing
    if [ "$rc" != 0 ]; then
        echo
        echo "== matrix: CPython $minor x $loop failed (log $dir/log); its last lines:"
        grep -E '^(FAILED|ERROR) ' "$dir/log" || true
        tail -n 40 "$dir/log"
    fi
done
if [ "${#ready[@]}" -ne "${#minors[@]}" ]; then
    failed=1
fi
if [ "$failed" -ne 0 ]; then
    echo "matrix: FAILED (logs and virtualenvs kept in $work)" >&2
    exit 1
fi
echo "matrix: every cell passed"
if [ -z "$own_work" ]; then
    rm -rf "$work"  # a temporary directory of our own: its virtualenvs take gigabytes
fi
