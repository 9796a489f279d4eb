"""Fan-out: N items through a 2-node branch (docs/fanout.md), side by side.

Runners, on the same item values and node functions (trivial bodies):

* ``floor``: the hand-written asyncio version: an ``asyncio.Semaphore(limit)`` and one
  ``gather`` over the items, each awaiting the two functions in turn;
* ``ours``: ``Driver(mod).prepare(["total"])`` once, then ``await plan.execute(...)``, with
  ``execution(max_concurrency=limit)`` on the ``Parallelizable`` node (async functions);
* ``ours sync``: the same with sync node functions;
* ``hamilton``: Hamilton's dynamic execution on the sync module
  (``Builder().enable_dynamic_execution(...)``), with its ``MultiThreadingExecutor`` of
  ``limit`` workers and with its ``SynchronousLocalTaskExecutor``.

Figures: CPU µs per item (``time.process_time``, every thread of the process: on a shared
machine it moves less with the other processes' load than the wall clock; median of
repetitions) and the difference to the floor.

    python bench/fanout.py [--items 1000] [--limit 50] [--reps 15]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ASYNC_MODULE = """
from hamilton.htypes import Collect, Parallelizable
from sdax_hamilton import execution

@execution(max_concurrency={limit})
def items(n: int) -> Parallelizable[int]:
    yield from range(n)

async def first(items: int) -> int:
    return items + 1

async def second(first: int) -> int:
    return first * 2

def total(second: Collect[int]) -> list[int]:
    return second
"""

SYNC_MODULE = """
from hamilton.htypes import Collect, Parallelizable
from sdax_hamilton import execution

@execution(max_concurrency={limit})
def items(n: int) -> Parallelizable[int]:
    yield from range(n)

def first(items: int) -> int:
    return items + 1

def second(first: int) -> int:
    return first * 2

def total(second: Collect[int]) -> list[int]:
    return second
"""


async def _first(item: int) -> int:
    return item + 1


async def _second(first: int) -> int:
    return first * 2


async def floor(n: int, limit: int) -> list[int]:
    """What a hand-written version does: a semaphore, one gather."""
    semaphore = asyncio.Semaphore(limit)

    async def branch(item: int) -> int:
        async with semaphore:
            return await _second(await _first(item))

    return await asyncio.gather(*(branch(i) for i in range(n)))


def _module(name: str, source: str, where: Path) -> Any:
    path = where / f"{name}.py"
    path.write_text(source)
    sys.path.insert(0, str(where))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(where))


def _time(run: Callable[[], Any], reps: int) -> float:
    samples = []
    for _ in range(reps):
        gc.collect()
        start = time.process_time()
        run()
        samples.append(time.process_time() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    n, limit, reps = args.items, args.limit, args.reps

    from hamilton import driver as hamilton_driver
    from hamilton.execution import executors

    from sdax_hamilton import Driver

    where = Path(tempfile.mkdtemp(prefix="sdax-fanout-bench-"))
    async_mod = _module("fanout_async", ASYNC_MODULE.format(limit=limit), where)
    sync_mod = _module("fanout_sync", SYNC_MODULE.format(limit=limit), where)
    expected = [(i + 1) * 2 for i in range(n)]

    loop = asyncio.new_event_loop()
    ours = Driver(async_mod).prepare(["total"])
    ours_sync = Driver(sync_mod).prepare(["total"])

    def on_loop(make: Callable[[], Awaitable[Any]]) -> Callable[[], Any]:
        return lambda: loop.run_until_complete(make())

    def hamilton(executor: Any) -> Callable[[], Any]:
        dr = (
            hamilton_driver.Builder()
            .with_modules(sync_mod)
            .enable_dynamic_execution(allow_experimental_mode=True)
            .with_local_executor(executor)
            .build()
        )
        return lambda: dr.execute(["total"], inputs={"n": n})

    runners: dict[str, Callable[[], Any]] = {
        "floor (Semaphore + gather)": on_loop(lambda: floor(n, limit)),
        "ours (async nodes)": on_loop(lambda: ours.execute(inputs={"n": n})),
        "ours (sync nodes)": on_loop(lambda: ours_sync.execute(inputs={"n": n})),
        f"Hamilton, {limit} threads": hamilton(executors.MultiThreadingExecutor(limit)),
        "Hamilton, synchronous": hamilton(executors.SynchronousLocalTaskExecutor()),
    }
    for name, run in runners.items():  # every runner's answer first
        got = run()
        got = got["total"] if isinstance(got, dict) else got
        assert list(got) == expected, name
    timings = {name: _time(run, reps) for name, run in runners.items()}
    base = timings["floor (Semaphore + gather)"]
    print(f"{n} items, 2-node branch, max_concurrency={limit}, median of {reps}\n")
    print("| runner | µs per item | above floor, µs per item |")
    print("|---|---:|---:|")
    for name, seconds in timings.items():
        per = seconds / n * 1e6
        print(f"| {name} | {per:.1f} | {per - base / n * 1e6:+.1f} |")
    loop.close()


if __name__ == "__main__":
    main()
