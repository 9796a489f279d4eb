#!/usr/bin/env bash
# Create a throwaway virtualenv holding the pure-Python predecessor sdax-hamilton 0.2.0
# (from PyPI, with its own pinned dependencies) for `python bench/run.py --with-old`.
# The benchmark only *runs* that package in a worker process; nothing is copied from it.
#
# Usage: bash bench/setup_old_venv.sh [VENV_DIR]   (default: /tmp/sdax-old-venv)
# The base interpreter defaults to the one behind the active `python` (same CPython build as
# the package under test, so the two are comparable); override with PYTHON=/path/to/python3.
set -euo pipefail

venv_dir="${1:-/tmp/sdax-old-venv}"
if [[ -z "${PYTHON:-}" ]]; then
    PYTHON="$(python -c 'import sys; print(sys._base_executable)' 2>/dev/null || echo python3)"
fi

if [[ ! -x "$venv_dir/bin/python" ]]; then
    "$PYTHON" -m venv "$venv_dir"
fi
"$venv_dir/bin/python" -m pip install --quiet --disable-pip-version-check "sdax-hamilton==0.2.0"
"$venv_dir/bin/python" - <<'PY'
import importlib.metadata as md
for dist in ("sdax-hamilton", "sdax", "apache-hamilton"):
    print(f"{dist}=={md.version(dist)}")
PY
echo "old venv ready: $venv_dir/bin/python"
