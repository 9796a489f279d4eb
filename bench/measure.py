"""Timing and memory helpers shared by the harness and the worker (standard library only).

``SdaxRunner`` drives whichever ``sdax_hamilton`` the running interpreter imports: this
package in the project venv, sdax-hamilton 0.2.0 in the ``--with-old`` worker's venv. Both
expose ``Driver(module).prepare(final_vars)`` and ``await plan.execute(inputs=...)`` /
``plan.open(inputs=...)``; nothing else of either package is used.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import os
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from shapes import Case

Execute = Callable[[], Awaitable[dict[str, Any]]]


async def time_batch(execute: Execute, inner: int, concurrency: int = 1) -> float:
    """Seconds per execute: ``inner`` rounds of ``concurrency`` simultaneous executes."""
    gc.collect()
    if concurrency == 1:
        start = time.perf_counter()
        for _ in range(inner):
            await execute()
        return (time.perf_counter() - start) / inner
    start = time.perf_counter()
    for _ in range(inner):
        await asyncio.gather(*(execute() for _ in range(concurrency)))
    return (time.perf_counter() - start) / (inner * concurrency)


def inner_for(seconds_per_call: float, target_seconds: float, cap: int = 2000) -> int:
    """How many calls make one timed batch of about ``target_seconds``."""
    if seconds_per_call <= 0:
        return cap
    return max(1, min(cap, round(target_seconds / seconds_per_call)))


def sdax_prepare_seconds(module: ModuleType, outputs: list[str]) -> tuple[float, float]:
    """Seconds for ``Driver(module)`` and for ``.prepare(outputs)``, one fresh build."""
    driver_cls: Any = importlib.import_module("sdax_hamilton").Driver
    start = time.perf_counter()
    driver = driver_cls(module)
    built = time.perf_counter()
    driver.prepare(outputs)
    return built - start, time.perf_counter() - built


class SdaxRunner:
    """One prepared plan of the importable ``sdax_hamilton`` for one case."""

    def __init__(self, case: Case, module: ModuleType) -> None:
        sdax = importlib.import_module("sdax_hamilton")
        self.case = case
        self.module = module
        self.plan: Any = sdax.Driver(module).prepare(list(case.outputs))
        self._inputs = dict(case.inputs)

    def prepare_seconds(self) -> tuple[float, float]:
        return sdax_prepare_seconds(self.module, list(self.case.outputs))

    async def execute(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.plan.execute(inputs=self._inputs)
        return result


def _rss_bytes() -> int:
    """Resident set size: ``/proc/self/statm``'s resident pages (Linux)."""
    resident = int(Path("/proc/self/statm").read_text().split()[1])
    return resident * os.sysconf("SC_PAGE_SIZE")


async def _hold_open(plan: Any, inputs: dict[str, Any], n: int, probe: Callable[[], int]) -> int:
    """Bytes ``probe`` grows by while ``n`` ``plan.open()`` contexts are alive at once."""
    async with contextlib.AsyncExitStack() as stack:
        gc.collect()
        before = probe()
        for _ in range(n):
            await stack.enter_async_context(plan.open(inputs=dict(inputs)))
        gc.collect()
        held = probe() - before
    return held


async def memory_per_open(plan: Any, inputs: dict[str, Any], n: int) -> dict[str, float]:
    """Per open plan: RSS delta (includes native heaps), tracemalloc delta (Python heap) and
    the objects the cyclic collector tracks.

    Run in a fresh process: the RSS pass comes first, before the interpreter's pools have
    grown, and without tracemalloc (whose own bookkeeping would inflate RSS).
    """
    # warm the code paths once so first-use caches are not billed to the contexts
    async with plan.open(inputs=dict(inputs)):
        pass
    rss = await _hold_open(plan, inputs, n, _rss_bytes)
    tracemalloc.start()
    try:
        traced = await _hold_open(plan, inputs, n, lambda: tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    objects = await _hold_open(plan, inputs, n, lambda: len(gc.get_objects()))
    return {"tracemalloc_bytes": traced / n, "rss_bytes": rss / n, "gc_objects": objects / n}
