"""How responsive the event loop stays while blocking nodes run (docs/lifecycle.md,
"Blocking functions").

One module: ``width`` (4) sync nodes, each blocking its thread for ``block`` seconds
(``time.sleep``, standing in for a sync client call), joined by one node. While a run
executes, a probe task sleeps ``tick`` seconds again and again and records how late each
wake-up is (the loop's lag). Runners, each for ``runs`` runs:

* ``on loop``: the nodes without ``in_thread`` (each blocks the loop in turn);
* ``in_thread``: the same nodes with ``execution(in_thread=True)``, the loop's default
  executor;
* ``in_thread pool=1``: ``Driver(..., executor=ThreadPoolExecutor(1))``: the calls queue for
  one worker, the loop stays free;
* ``Hamilton``: ``hamilton.async_driver.AsyncDriver`` on the on-loop module (it runs sync
  functions on the loop).

Reported: wall time per run, and the probe's lag (median, 99th percentile, maximum) in ms.

    python bench/blocking.py [--width 4] [--block 0.2] [--tick 0.005] [--runs 5]

Timing lives here, not in the tests (``tests/test_in_thread.py`` asserts the behaviour:
a blocking node leaves the loop free to run the node that unblocks it).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import sys
import textwrap
import time
import types
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sdax_hamilton import Driver


def module(name: str, width: int, block: float, in_thread: bool) -> types.ModuleType:
    decorator = "@execution(in_thread=True)\n" if in_thread else ""
    lines = ["import time", "from sdax_hamilton import execution", ""]
    for i in range(width):
        lines.append(f"{decorator}def blocked_{i}(x: int) -> int:")
        lines.append(f"    time.sleep({block!r})")
        lines.append(f"    return x + {i}")
        lines.append("")
    params = ", ".join(f"blocked_{i}: int" for i in range(width))
    total = " + ".join(f"blocked_{i}" for i in range(width))
    lines.append(f"def joined({params}) -> int:")
    lines.append(f"    return {total}")
    mod = types.ModuleType(name)
    sys.modules[name] = mod
    exec(compile(textwrap.dedent("\n".join(lines)), f"<{name}>", "exec"), mod.__dict__)
    return mod


async def probe(tick: float, stop: asyncio.Event, lags: list[float]) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        before = loop.time()
        await asyncio.sleep(tick)
        lags.append(max(0.0, loop.time() - before - tick))


async def measure(
    run: Callable[[], Awaitable[Any]], runs: int, tick: float
) -> tuple[list[float], list[float]]:
    walls: list[float] = []
    lags: list[float] = []
    for _ in range(runs):
        stop = asyncio.Event()
        watcher = asyncio.create_task(probe(tick, stop, lags))
        await asyncio.sleep(0)  # the probe is sleeping before the run starts
        started = time.perf_counter()
        await run()
        walls.append(time.perf_counter() - started)
        stop.set()
        await watcher
    return walls, lags


def row(name: str, walls: list[float], lags: list[float]) -> str:
    ordered = sorted(lags) or [0.0]
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return (
        f"| {name} | {statistics.median(walls) * 1e3:,.0f} | {len(lags)} | "
        f"{statistics.median(ordered) * 1e3:.2f} | {p99 * 1e3:.2f} | {ordered[-1] * 1e3:.1f} |"
    )


async def main(width: int, block: float, tick: float, runs: int) -> None:
    on_loop = module("bench_blocking_on_loop", width, block, in_thread=False)
    threaded = module("bench_blocking_in_thread", width, block, in_thread=True)
    inputs = {"x": 1}
    expected = {"joined": sum(1 + i for i in range(width))}
    runners: list[tuple[str, Callable[[], Awaitable[Any]]]] = []
    pool = ThreadPoolExecutor(1, thread_name_prefix="bench-one")
    for name, plan in (
        ("on loop", Driver(on_loop).prepare(["joined"])),
        ("in_thread", Driver(threaded).prepare(["joined"])),
        ("in_thread pool=1", Driver(threaded, executor=pool).prepare(["joined"])),
    ):
        runners.append((name, functools.partial(plan.execute, inputs=inputs)))
    from hamilton import async_driver

    hamilton = await async_driver.Builder().with_modules(on_loop).build()
    runners.append(
        ("Hamilton AsyncDriver", functools.partial(hamilton.execute, ["joined"], inputs=inputs))
    )

    print(
        f"{width} nodes each blocking {block * 1e3:.0f} ms, probe tick {tick * 1e3:.1f} ms, "
        f"{runs} runs each\n"
    )
    header = ("runner", "wall ms per run (median)", "probe wake-ups", "lag p50 ms")
    print("| " + " | ".join((*header, "lag p99 ms", "lag max ms")) + " |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, runner in runners:
        result = await runner()  # warm-up, and the value is checked
        assert dict(result) == expected, (name, result)
        walls, lags = await measure(runner, runs, tick)
        print(row(name, walls, lags))
    pool.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=4)
    parser.add_argument("--block", type=float, default=0.2)
    parser.add_argument("--tick", type=float, default=0.005)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.width, args.block, args.tick, args.runs))
