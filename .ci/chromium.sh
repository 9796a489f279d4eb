#!/usr/bin/env bash
# Headless Chromium (and a font) from Debian's packages for tests/test_timeline_browser.py,
# which renders the run's timeline SVG to PNG and reads back its DOM. Idempotent.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1 || ! fc-list : family 2>/dev/null | grep -i dejavu >/dev/null; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        chromium fonts-dejavu-core >/dev/null
fi
chromium --version
