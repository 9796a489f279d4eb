#!/usr/bin/env bash
# What CI needs on the machine besides Python 3.11, cargo, maturin and pytest: Graphviz's
# `dot` (the plan picture test) and the rustfmt/clippy components. Idempotent.
set -euo pipefail
if ! command -v dot >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz >/dev/null
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
