"""What an open run holds: ``open()`` contexts of a 50-resource plan alive at once.

The target is at most 80 KB of RSS per open context (1,000 contexts of the benchmark's
resources 50 shape); ``bench/open_memory.py`` measures RSS side by side with 0.2.0 and
profiles where it goes. RSS moves in allocator pools and is not the test process's to
measure, so this test guards the part of it that is deterministic: the Python heap an open
context holds, counted by ``tracemalloc``, with room below the target for the native heap
(the core's ``Run``, about 6 KB at the time of writing) and allocator slack. Nothing here
is timed.
"""

from __future__ import annotations

import contextlib
import gc
import tracemalloc
from typing import Any

from sdax_hamilton import Driver

TRIPLES = 50
CONTEXTS = 100
TRIALS = 3
TRACED_LIMIT = 32 * 1024
"""Bytes of Python heap per open context allowed (measured: about 23 KB). A run that kept
each finished node's arguments (one dict per node) would hold about 50 KB."""


def resources_source(triples: int) -> str:
    """``triples`` connection -> transaction -> query chains, both acquisitions released."""
    lines = [
        "from sdax_hamilton import Acquisition, shutdown",
        "",
        "class Conn:",
        "    __slots__ = ('dsn',)",
        "    def __init__(self, dsn: str) -> None:",
        "        self.dsn = dsn",
        "",
        "class Txn:",
        "    __slots__ = ('conn',)",
        "    def __init__(self, conn: Conn) -> None:",
        "        self.conn = conn",
    ]
    for i in range(triples):
        lines += [
            f"async def conn{i}(dsn: str) -> Conn:",
            "    return Conn(dsn)",
            f"async def txn{i}(conn{i}: Conn) -> Txn:",
            f"    return Txn(conn{i})",
            f"async def query{i}(txn{i}: Txn) -> int:",
            "    return 1",
            f"@shutdown(of=txn{i})",
            f"async def end_txn{i}(txn{i}_acq: Acquisition[Txn]) -> None:",
            "    RELEASED[0] += 1",
            f"@shutdown(of=conn{i})",
            f"async def close_conn{i}(conn{i}_acq: Acquisition[Conn]) -> None:",
            "    RELEASED[0] += 1",
        ]
    return "\n".join(lines)


async def test_an_open_context_holds_less_than_its_share_of_the_target(make_module: Any) -> None:
    module = make_module(resources_source(TRIPLES))
    module.RELEASED = [0]  # a count: a growing list would be heap of its own
    plan = Driver(module).prepare([f"query{i}" for i in range(TRIPLES)])
    inputs = {"dsn": "db"}
    async with plan.open(inputs=dict(inputs)):  # first-use caches are not the contexts'
        pass
    # tracemalloc counts every thread's allocations; a thread an earlier test left running
    # (a tracker's upload, an executor's worker) can add to one measurement, never take from
    # it: the least of a few measurements is the contexts' own.
    measured = [await _measure(plan, module, inputs) for _ in range(TRIALS)]
    held = min(h for h, _ in measured)
    left = min(lft for _, lft in measured)
    assert held <= TRACED_LIMIT, (
        f"an open context holds {held / 1024:.1f} KB of Python heap (limit "
        f"{TRACED_LIMIT / 1024:.0f} KB): python bench/open_memory.py shows where it goes"
    )
    # Once every context has exited, what they held is gone (a few KB of allocator and
    # interpreter caches may stay, not a share of each context).
    assert left <= 16 * 1024, f"{left} bytes still held after every context exited"


async def _measure(plan: Any, module: Any, inputs: dict[str, str]) -> tuple[float, int]:
    """Python heap per open context while ``CONTEXTS`` are open, and what stays once they
    have all exited; every resource is held until its context exits, then released."""
    module.RELEASED[0] = 0
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        async with contextlib.AsyncExitStack() as stack:
            for _ in range(CONTEXTS):
                values = await stack.enter_async_context(plan.open(inputs=dict(inputs)))
                assert values == {f"query{i}": 1 for i in range(TRIPLES)}
            gc.collect()
            held = (tracemalloc.get_traced_memory()[0] - before) / CONTEXTS
            assert module.RELEASED == [0]  # every resource still held
        gc.collect()
        left = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert module.RELEASED == [2 * TRIPLES * CONTEXTS]
    return held, left
