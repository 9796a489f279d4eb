#!/usr/bin/env bash
# Runs the README's test command verbatim: the line of its first console block that ends in
# "# every test ...". A fresh machine with Python 3.11, cargo, maturin and pytest must pass it.
set -euo pipefail
cd "$(dirname "$0")/.."
test_command="$(sed -n 's/^\$ \(.*\)  # every test.*$/\1/p' README.md | head -n 1)"
if [ -z "$test_command" ]; then
    echo "README test command not found" >&2
    exit 1
fi
echo "+ $test_command"
bash -c "$test_command"
