#!/usr/bin/env bash
# PostgreSQL server binaries for tests/test_postgres.py, which starts (and stops) its own
# throwaway server on 127.0.0.1 in a temporary directory; nothing is started here.
# Debian's `postgresql` package puts initdb/pg_ctl under /usr/lib/postgresql/<major>/bin
# and creates the `postgres` system user the server runs as when the tests run as root.
set -euo pipefail
if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || ! id postgres >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
ls -d /usr/lib/postgresql/*/bin
