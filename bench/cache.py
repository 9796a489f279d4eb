"""Cost of ``Driver(..., cache=)`` (docs/caching.md), side by side with Hamilton's own cache.

```console
$ python bench/cache.py            # about 30 s
$ python bench/cache.py --quick    # about 10 s
```

One module file (Hamilton versions a node by its source) with a sync node returning a list
of 1,000 ints, cached in one directory shared by both drivers:

* **hit**: a run whose node is a hit, ours (``await plan.execute(...)``) and Hamilton's
  (``Builder().with_modules(m).with_cache(dir).build().execute(...)``), interleaved, median
  wall time per run; also ours without a cache and Hamilton without one, for the floor.
* **miss**: a run with a new input each time, ours with and without the cache, and the
  write alone (what Hamilton's adapter writes for a run storing one node: the metadata
  store's ``initialize(run_id)``, the result store's ``set``, the metadata store's
  ``set``; each metadata call is a SQLite commit), timed directly.
* **single flight**: 100 concurrent runs missing one key; how many calls the node got.
* **loop lag**: the longest a 1 ms ticker on the loop overslept while a run stores, then
  loads, a 50 MB value (``bytes``), ours; and the same run done with Hamilton's sync driver
  called on the loop, for comparison.

Standard library plus the package and Hamilton; figures go to stdout as markdown.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import os
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from sdax_hamilton import Driver

SOURCE = """
import asyncio

CALLS = {"n": 0}


def numbers(x: int) -> list[int]:
    CALLS["n"] += 1
    return list(range(x, x + 1000))


BLOBS: dict = {}


def blob(size: int) -> bytes:
    # made before the timed runs (``made``): the node itself costs the loop nothing
    return BLOBS[size]


async def shared(x: int) -> int:
    CALLS["n"] += 1
    await asyncio.sleep(0.01)
    return x
"""


def load(directory: Path) -> Any:
    path = directory / "sdax_bench_cache_graph.py"
    path.write_text("import os\n" + textwrap.dedent(SOURCE))
    spec = importlib.util.spec_from_file_location("sdax_bench_cache_graph", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sdax_bench_cache_graph"] = module
    spec.loader.exec_module(module)
    return module


def median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


async def timed(fn: Callable[[], Awaitable[Any]] | Callable[[], Any]) -> float:
    start = time.perf_counter()
    result = fn()
    if asyncio.iscoroutine(result):
        await result
    return time.perf_counter() - start


async def interleaved(runners: dict[str, Callable[[], Any]], reps: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in runners}
    names = list(runners)
    for rep in range(reps):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            samples[name].append(await timed(runners[name]))
    return {name: median_us(values) for name, values in samples.items()}


async def lag_during(work: Callable[[], Awaitable[Any]]) -> float:
    """The longest a 1 ms sleep on the loop overslept while ``work`` ran (ms)."""
    worst = 0.0
    running = True

    async def ticker() -> None:
        nonlocal worst
        while running:
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            worst = max(worst, time.perf_counter() - before - 0.001)

    tick = asyncio.ensure_future(ticker())
    await asyncio.sleep(0.005)
    try:
        await work()
    finally:
        running = False
        await tick
    return worst * 1e3


async def main(quick: bool) -> None:
    reps = 200 if quick else 1000
    work = Path(tempfile.mkdtemp(prefix="sdax-bench-cache-"))
    module = load(work)
    directory = str(work / "cache")
    hamilton = await hits(module, directory, reps)
    await misses(module, directory, reps // 4)
    await single_flight(module, directory)
    await loop_lag(module, directory, hamilton)
    print(f"\n(cpu count {os.cpu_count()}, Python {sys.version.split()[0]}, {reps} hit reps)")


async def hits(module: Any, directory: str, reps: int) -> Any:
    from hamilton import driver as hamilton_driver

    ours = Driver(module, cache=directory).prepare(["numbers"])
    plain = Driver(module).prepare(["numbers"])
    hamilton = hamilton_driver.Builder().with_modules(module).with_cache(directory).build()
    hamilton_plain = hamilton_driver.Builder().with_modules(module).build()
    await ours.execute(inputs={"x": 1})  # the entry, then hits for both
    assert module.CALLS["n"] == 1
    hamilton.execute(["numbers"], inputs={"x": 1})
    assert module.CALLS["n"] == 1
    gc.collect()
    gc.freeze()
    hit = await interleaved(
        {
            "ours, hit": lambda: ours.execute(inputs={"x": 1}),
            "Hamilton sync, hit": lambda: hamilton.execute(["numbers"], inputs={"x": 1}),
            "ours, no cache": lambda: plain.execute(inputs={"x": 1}),
            "Hamilton sync, no cache": lambda: hamilton_plain.execute(["numbers"], inputs={"x": 1}),
        },
        reps,
    )
    assert module.CALLS["n"] == 1 + reps * 2  # only the two uncached runners called it
    print("## Hit: one node (a list of 1,000 ints), one shared cache directory\n")
    print("| runner | µs per run (median) |")
    print("|---|---|")
    for name, us in hit.items():
        print(f"| {name} | {us:.0f} |")
    return hamilton


async def misses(module: Any, directory: str, miss_reps: int) -> None:
    ours = Driver(module, cache=directory).prepare(["numbers"])
    plain = Driver(module).prepare(["numbers"])
    counter = iter(range(10, 10**9))
    miss = await interleaved(
        {
            "ours, miss (computed + stored)": lambda: ours.execute(inputs={"x": next(counter)}),
            "ours, no cache": lambda: plain.execute(inputs={"x": next(counter)}),
        },
        miss_reps,
    )
    adapter = Driver(module, cache=directory)._cache.adapter  # type: ignore[union-attr]
    value = list(range(1000))
    writes = []
    for i in range(miss_reps):
        # What Hamilton's adapter writes for one run that stores one node: the run's id,
        # the result, the metadata.
        start = time.perf_counter()
        adapter.metadata_store.initialize(f"bench-run-{i}")
        adapter.result_store.set(data_version=f"bench-{i}", result=value)
        adapter.metadata_store.set(
            cache_key=f"bench-key-{i}", data_version=f"bench-{i}", run_id=f"bench-run-{i}",
            node_name="numbers", code_version="bench",
        )  # fmt: skip
        writes.append(time.perf_counter() - start)
    print("\n## Miss: a new input each run\n")
    print("| runner | µs per run (median) |")
    print("|---|---|")
    for name, us in miss.items():
        print(f"| {name} | {us:.0f} |")
    alone = median_us(writes)
    print(f"| the write alone (Hamilton's stores: run id, result, metadata) | {alone:.0f} |")


async def single_flight(module: Any, directory: str) -> None:
    shared = Driver(module, cache=directory).prepare(["shared"])
    module.CALLS["n"] = 0
    start = time.perf_counter()
    results = await asyncio.gather(*(shared.execute(inputs={"x": 7}) for _ in range(100)))
    elapsed = time.perf_counter() - start
    assert all(r == {"shared": 7} for r in results)
    print("\n## Single flight: 100 concurrent runs missing one key\n")
    print(f"node called {module.CALLS['n']} time(s); all 100 runs done in {elapsed * 1e3:.1f} ms")


async def loop_lag(module: Any, directory: str, hamilton: Any) -> None:
    size = 50 * 1024 * 1024
    for made in (size, size + 1):
        module.BLOBS[made] = os.urandom(made)
    blob = Driver(module, cache=directory).prepare(["blob"])
    store_lag = await lag_during(lambda: blob.execute(inputs={"size": size}))
    hamilton.execute(["blob"], inputs={"size": size})  # Hamilton's own entry for the next run
    ours_blob = Driver(module, cache=directory).prepare(["blob"])
    load_lags = []
    for _ in range(3):
        load_lags.append(await lag_during(lambda: ours_blob.execute(inputs={"size": size})))

    async def hamilton_on_loop() -> None:
        hamilton.execute(["blob"], inputs={"size": size + 1})

    sync_lag = await lag_during(hamilton_on_loop)
    print("\n## Loop lag while a 50 MB value is stored and loaded\n")
    print("| what | longest oversleep of a 1 ms ticker |")
    print("|---|---|")
    print(f"| ours, miss: computed and stored | {store_lag:.1f} ms |")
    print(f"| ours, hit: loaded (worst of 3) | {max(load_lags):.1f} ms |")
    print(f"| Hamilton's sync driver called on the loop, miss | {sync_lag:.1f} ms |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    asyncio.run(main(parser.parse_args().quick))
