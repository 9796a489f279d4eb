"""Real modules from source text: declarations must live in loaded modules, so test graphs
are real, registered modules (docs/contract.md#discovery)."""

from __future__ import annotations

import sys
import textwrap
import types
from typing import Any

_module_counter = 0


def load_module(source: str, name: str | None = None) -> Any:
    """Create, execute and register (``sys.modules``) a module from source text.

    The source is dedented; each call gets a fresh unique name unless one is given.
    """
    global _module_counter
    _module_counter += 1
    module_name = name or f"sdax_test_graph_{_module_counter}"
    module = types.ModuleType(module_name)
    sys.modules[module_name] = module
    code = compile(textwrap.dedent(source), f"<{module_name}>", "exec", dont_inherit=True)
    exec(code, module.__dict__)
    return module


RETRIED_RUN = """
import asyncio
from sdax_hamilton import Acquisition, execution, shutdown

class Service:
    def __init__(self) -> None:
        self.calls = 0

async def service() -> Service:
    return Service()

@shutdown(of=service, retries=1, initial_delay=0)
async def close_service(acquired: Acquisition[Service]) -> None:
    if acquired.value.calls == 3:
        acquired.value.calls += 1
        raise ConnectionError("close failed once")

@execution(retries=3, initial_delay=0.01, backoff_factor=1.0)
async def fetched(service: Service) -> int:
    service.calls += 1
    if service.calls < 3:
        raise ConnectionResetError("dropped")
    return service.calls

@execution(timeout=0.05)
async def stuck(fetched: int, hang: bool) -> int:
    if hang:
        await asyncio.Event().wait()
    return fetched

async def after(stuck: int) -> int:
    return stuck + 1
"""
"""A run with a retried node, a release retried once and a node that can hang past its
timeout (``hang``): what the run report and its timeline are tested on."""

# Fan-out (docs/fanout.md). bench/fanout.py times this very branch (its figures are in
# bench/PERFORMANCE.md): a change here changes what the benchmark measures.
BRANCH_OF_TWO = """
from hamilton.htypes import Collect, Parallelizable
from sdax_hamilton import execution

@execution(max_concurrency={limit})
def items(n: int) -> Parallelizable[int]:
    yield from range(n)

async def first(items: int) -> int:
    return items + 1

async def second(first: int) -> int:
    return first * 2
"""
"""Each of ``n`` items runs the 2-node branch ``first`` (+ 1) -> ``second`` (* 2), at most
``{limit}`` at once (a ``str.format`` field); the module adds its own ``Collect`` node of
``second``."""

SYNC_BRANCH_OF_TWO = BRANCH_OF_TWO.replace("async def", "def")
"""``BRANCH_OF_TWO`` with sync node functions (Hamilton's own executors run only those)."""


def fanout_pool(*, sync_release: bool) -> str:
    """The outer resource of the fan-out tests whose branches acquire one each from it
    (tests/test_parallelizable.py, tests/test_fanout_campaign.py): a pool, noted in the
    module's ``LOG`` when opened and when released, by a sync or an async release (both
    are run)."""
    release = "def" if sync_release else "async def"
    return f"""
class Pool:
    pass

async def pool() -> Pool:
    LOG.append("open pool")
    return Pool()

@shutdown(of=pool)
{release} close_pool(acquired: Acquisition[Pool]) -> None:
    LOG.append("close pool")
"""
