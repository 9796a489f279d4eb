#!/usr/bin/env bash
# The whole Python suite once more with SDAX_HAMILTON_PUBLIC_ASYNCIO=1: the executor then uses
# no private asyncio call (Python 3.11's eager phase tasks fall back to create_task; see
# python/sdax_hamilton/_executor/eager.py), so the fallback stays tested. Runs in the virtualenv
# `make ci` used (.ci/run has it active), from the source tree.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== public asyncio only: the whole suite with SDAX_HAMILTON_PUBLIC_ASYNCIO=1"
SDAX_HAMILTON_PUBLIC_ASYNCIO=1 python -c \
    'from sdax_hamilton._executor import eager; assert eager.USES_PRIVATE_ASYNCIO is False'
# The heap measurement of open() contexts runs in a process of its own: earlier tests leave
# live tasks behind (tests/test_hostile_run.py: about 120, on either path), and asyncio's
# task registry grown around them shows in its "nothing left after exit" figure.
SDAX_HAMILTON_PUBLIC_ASYNCIO=1 python -m pytest -q -p no:cacheprovider \
    --deselect tests/test_open_memory.py::test_an_open_context_holds_less_than_its_share_of_the_target
SDAX_HAMILTON_PUBLIC_ASYNCIO=1 python -m pytest -q -p no:cacheprovider tests/test_open_memory.py
