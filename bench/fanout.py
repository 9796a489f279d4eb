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
machine it moves less with the other processes' load than the wall clock), the median of
repetitions, and the difference to the floor. The runners take turns, one execute each per
repetition, and a runner's difference to the floor is the median of its repetitions' own
differences: a slow spell of the machine lands on every runner of a repetition alike.

``--baseline DIR`` also runs ``ours`` from another checkout of this package (``DIR`` holds
its ``sdax_hamilton`` package, built: its compiled ``_core`` beside it), in a process of
its own with ``DIR`` first on ``sys.path``, with its own floor measured there; its rows are
labelled ``--baseline-label`` (default ``baseline``). For instance, main's code:
``git archive main python | tar -x -C /tmp/main-src`` and main's built ``_core`` copied
into ``/tmp/main-src/python/sdax_hamilton/``, then ``--baseline /tmp/main-src/python
--baseline-label main``.

    python bench/fanout.py [--items 1000] [--limit 50] [--reps 15] [--baseline DIR]

``--instructions`` counts instructions instead, a figure the machine's load does not move:
the floor, ours (async) and ours (sync) each run ``--reps`` executes inside a C iterator
of their own, as ``bench/instructions.py`` does, and its ``--report`` reads callgrind's
output (``-n`` is reps x items, so the figures are per item):

    valgrind --tool=callgrind --callgrind-out-file=OUT python bench/fanout.py \\
        --instructions --reps 3
    python bench/instructions.py --report OUT -n 3000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

# The branch the tests run too (tests/support/modules.py), its Collect node added here.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.modules import BRANCH_OF_TWO, SYNC_BRANCH_OF_TWO

TOTAL = """
def total(second: Collect[int]) -> list[int]:
    return second
"""
ASYNC_MODULE = BRANCH_OF_TWO + TOTAL
SYNC_MODULE = SYNC_BRANCH_OF_TWO + TOTAL


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


def _measure(
    runners: dict[str, Callable[[], Any]], floor_name: str, n: int, reps: int
) -> dict[str, tuple[float, float]]:
    """Per runner: the median µs per item and the median of its differences to the floor
    in the same repetition; the runners take turns within each repetition."""
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(reps):
        for name, run in runners.items():
            gc.collect()
            start = time.process_time()
            run()
            samples[name].append((time.process_time() - start) / n * 1e6)
    floor_samples = samples[floor_name]
    return {
        name: (
            statistics.median(own),
            statistics.median(a - b for a, b in zip(own, floor_samples, strict=True)),
        )
        for name, own in samples.items()
    }


def _count(runners: dict[str, Callable[[], Any]], reps: int) -> None:
    """Each runner's ``reps`` executes inside its own C iterator (``--instructions``)."""
    import instructions

    for run in runners.values():
        run()
    gc.collect()
    gc.freeze()
    for (name, run), wrapper in zip(runners.items(), instructions.WRAPPERS, strict=False):
        print(f"{wrapper} {name}", file=sys.stderr)
        instructions._inside(wrapper, lambda run=run: _repeat(run, reps))


def _repeat(run: Callable[[], Any], reps: int) -> None:
    for _ in range(reps):
        run()


def _baseline(directory: str, n: int, limit: int, reps: int) -> dict[str, list[float]]:
    """The floor and ours, timed in a process running the package found in ``directory``."""
    env = {**os.environ, "PYTHONPATH": directory}
    command = [sys.executable, __file__, "--items", str(n), "--limit", str(limit)]
    command += ["--reps", str(reps), "--ours-only"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    found: dict[str, list[float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--baseline", help="a directory holding another sdax_hamilton build")
    parser.add_argument("--baseline-label", default="baseline")
    parser.add_argument("--ours-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--instructions", action="store_true", help="for callgrind")
    args = parser.parse_args()
    n, limit, reps = args.items, args.limit, args.reps

    from hamilton import driver as hamilton_driver
    from hamilton.execution import executors

    import sdax_hamilton
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

    floor_name = "floor (Semaphore + gather)"
    runners: dict[str, Callable[[], Any]] = {
        floor_name: on_loop(lambda: floor(n, limit)),
        "ours (async nodes)": on_loop(lambda: ours.execute(inputs={"n": n})),
        "ours (sync nodes)": on_loop(lambda: ours_sync.execute(inputs={"n": n})),
    }
    if args.instructions:
        _count(runners, reps)
        return
    if not args.ours_only:
        runners[f"Hamilton, {limit} threads"] = hamilton(executors.MultiThreadingExecutor(limit))
        runners["Hamilton, synchronous"] = hamilton(executors.SynchronousLocalTaskExecutor())
    for name, run in runners.items():  # every runner's answer first
        got = run()
        got = got["total"] if isinstance(got, dict) else got
        assert list(got) == expected, name
    timings = _measure(runners, floor_name, n, reps)
    loop.close()
    if args.ours_only:
        print(json.dumps(timings))
        return
    rows = [(name, per, above) for name, (per, above) in timings.items()]
    if args.baseline:
        other = _baseline(args.baseline, n, limit, reps)
        label = args.baseline_label
        for name in ("ours (async nodes)", "ours (sync nodes)"):
            per, above = other[name]
            rows.append((f"{label}: {name}", per, above))
        rows.append((f"{label}: its own floor", other[floor_name][0], 0.0))
    print(f"{n} items, 2-node branch, max_concurrency={limit}, median of {reps}")
    print(f"(sdax_hamilton from {Path(sdax_hamilton.__file__).parent})\n")
    print("| runner | µs per item | above its floor, µs per item |")
    print("|---|---:|---:|")
    for name, per, above in rows:
        print(f"| {name} | {per:.1f} | {above:+.1f} |")


if __name__ == "__main__":
    main()
