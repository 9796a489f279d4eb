#!/usr/bin/env bash
# CI: the Hamilton adapter integrations against a real Hamilton UI server.
# tests/test_hamilton_ui.py starts the UI (apache-hamilton[ui,sdk], from the [test] extra) on
# loopback with a fresh sqlite database and stops it at the end. With CI=true a server that
# cannot start fails the tests with its output instead of skipping them.
set -euo pipefail
cd "$(dirname "$0")/.."
python -c "import hamilton_ui, hamilton_sdk, tqdm, rich" 2>/dev/null \
    || python -m pip install -q "apache-hamilton[ui,sdk]>=1.90,<1.91" "tqdm>=4.60" "rich>=13"
CI=true python -m pytest -q -p no:cacheprovider tests/test_hamilton_ui.py tests/test_adapters_plugins.py
