"""Cost of ``Driver(..., cache=)`` (docs/caching.md), side by side with Hamilton's own cache.

```console
$ python bench/cache.py            # about 4 min
$ python bench/cache.py --quick    # about 2 min
$ python bench/cache.py --lag      # only the loop lag, about 3 min
$ git show main:python/sdax_hamilton/_hamilton/cache_io.py > other_cache_io.py
$ python bench/cache.py --lag --against other_cache_io.py   # and another revision's
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
* **loop lag**: the longest a 1 ms ticker on the loop overslept while a 50 MB value is
  stored, then loaded, for five kinds of value (``bytes``, a float64 array, a data frame of
  8 float64 columns, a list of 600,000 ``(int, str)`` tuples, an ASCII ``str``). Side by
  side: *before*, the calls the cache's threads made until the values were written in
  pieces (Hamilton's ``fingerprinting.hash_value`` and its ``FileResultStore.set`` /
  ``get``), *after*, the
  cache's own calls in the same threads (``Cache.write`` / ``Cache.read``: the same data
  version and file, in pieces, ``python/sdax_hamilton/_hamilton/cache_io.py``), and a
  whole run of ours (a miss that stores, a hit that loads); the idle loop's oversleep and
  Hamilton's sync driver called on the loop for comparison. With ``--against FILE`` (the
  ``cache_io.py`` of another revision), the cache's calls are also timed with that file's
  ``data_version`` / ``write_result`` / ``read_result`` in their place, in the same run. A
  value is dropped after the ticker stopped (freeing 50 MB is its owner's cost, not the
  store's).

Standard library plus the package and Hamilton (with its numpy and pandas); figures go to
stdout as markdown.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
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


def blob(kind: str, salt: int) -> object:
    # made before the timed runs: the node itself costs the loop nothing
    return BLOBS[kind]


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


async def lag_during(work: Callable[[], Awaitable[Any]], kept: list[Any] | None = None) -> float:
    """The longest a 1 ms sleep on the loop overslept while ``work`` ran (ms); what it
    returned is kept in ``kept`` (dropped after the ticker stopped)."""
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
        result = await work()
        if kept is not None:
            kept.append(result)
    finally:
        running = False
        await tick
    return worst * 1e3


async def main(quick: bool, lag_only: bool, against: str | None) -> None:
    from hamilton import driver as hamilton_driver

    reps = 200 if quick else 1000
    load_average = os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix="sdax-bench-cache-"))
    module = load(work)
    directory = str(work / "cache")
    if lag_only:
        hamilton = hamilton_driver.Builder().with_modules(module).with_cache(directory).build()
    else:
        hamilton = await hits(module, directory, reps)
        await misses(module, directory, reps // 4)
        await single_flight(module, directory)
    other = None if against is None else load_other(against)
    await loop_lag(module, directory, hamilton, 1 if quick else 3, other)
    print(
        f"\n(cpu count {os.cpu_count()}, Python {sys.version.split()[0]}, {reps} hit reps, "
        f"load average {load_average:.1f} at the start, {os.getloadavg()[0]:.1f} at the end)"
    )


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


SIZE = 50 * 1024 * 1024


def kinds() -> dict[str, Callable[[], Any]]:
    import numpy
    import pandas

    rows = SIZE // 8 // 8
    return {
        "bytes": lambda: os.urandom(SIZE),
        "ndarray (float64)": lambda: numpy.random.default_rng(0).random(SIZE // 8),
        "DataFrame (8 float64 columns)": lambda: pandas.DataFrame(
            {f"c{i}": numpy.random.default_rng(i).random(rows) for i in range(8)}
        ),
        "list of 600,000 (int, str) tuples": lambda: [(i, str(i)) for i in range(600_000)],
        "str (ASCII)": lambda: "abcdefghij" * (SIZE // 10),
    }


def ms(lags: list[float]) -> str:
    """Median (worst) of the repetitions."""
    if len(lags) == 1:
        return f"{lags[0]:.1f}"
    return f"{statistics.median(lags):.1f} ({max(lags):.1f})"


def load_other(path: str) -> Any:
    """Another revision's ``cache_io.py``, as a module."""
    spec = importlib.util.spec_from_file_location("sdax_bench_other_cache_io", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def swapped(other: Any | None) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """Runs a call with ``other``'s data version, writer and reader in the cache's place."""
    from sdax_hamilton._hamilton import caching

    def wrap(work: Callable[[], Any]) -> Callable[[], Any]:
        def run() -> Any:
            if other is None:
                return work()
            names = ("data_version", "write_result", "read_result")
            saved = {name: getattr(caching, name) for name in names}
            for name in names:
                setattr(caching, name, getattr(other, name))
            try:
                return work()
            finally:
                for name, function in saved.items():
                    setattr(caching, name, function)

        return run

    return wrap


async def kind_lags(
    value: Any, kind: str, cache: Any, plan: Any, reps: int, salt: int, other: Any | None
) -> dict[str, list[float]]:
    """Loop lags while ``value`` is stored and loaded, before / after / in a run."""
    from hamilton.caching import fingerprinting

    from sdax_hamilton._hamilton.cache_io import data_version
    from sdax_hamilton._hamilton.caching import executor

    loop = asyncio.get_running_loop()
    results = cache.adapter.result_store
    node = cache.nodes["blob"]
    version = data_version(value)
    assert version == fingerprinting.hash_value(value)  # the same data version
    key = f"bench-lag-{version}"

    def before_store() -> None:
        # the calls the cache's threads made before: Hamilton's fingerprint and store
        results.set(data_version=fingerprinting.hash_value(value), result=value)

    def before_load() -> Any:
        return results.get(data_version=version)

    def after_store() -> None:
        cache.write(node, key, value, "bench-lag")

    def after_load() -> Any:
        return cache.read(key)

    kept: list[Any] = []
    lags: dict[str, list[float]] = {}
    after_store()  # the key's metadata, for the reads of Hamilton's file below
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("before: store", before_store),
        ("before: load", before_load),
        ("after: load, Hamilton file", after_load),
        ("after: store", after_store),
        ("after: load", after_load),
    ]
    if other is not None:
        steps += [
            ("other: store", swapped(other)(after_store)),
            ("other: load", swapped(other)(after_load)),
        ]
    for rep in range(reps):
        for name, work in steps:
            if name.endswith("store"):
                results.delete(version)  # so that the value is written
            lags.setdefault(name, []).append(
                await lag_during(lambda: loop.run_in_executor(executor(), work), kept)  # noqa: B023
            )
            kept.clear()
        results.delete(version)
        inputs = {"kind": kind, "salt": salt + rep}
        miss = await lag_during(lambda: plan.execute(inputs=inputs), kept)  # noqa: B023
        hit = await lag_during(lambda: plan.execute(inputs=inputs), kept)  # noqa: B023
        kept.clear()
        lags.setdefault("run, miss", []).append(miss)
        lags.setdefault("run, hit", []).append(hit)
    return lags


async def loop_lag(
    module: Any, directory: str, hamilton: Any, reps: int, other: Any | None
) -> None:
    driver = Driver(module, cache=directory)
    cache = driver._cache
    assert cache is not None
    plan = driver.prepare(["blob"])
    salts = iter(range(0, 10**9, 100))

    from sdax_hamilton._hamilton.caching import executor

    def python_for_half_a_second() -> int:
        end = time.perf_counter() + 0.5
        n = 0
        while time.perf_counter() < end:
            n += 1
        return n

    def pieces_for_half_a_second() -> int:
        piece = bytes(1 << 20)
        end = time.perf_counter() + 0.5
        n = 0
        while time.perf_counter() < end:
            hashlib.md5(piece)  # the lock is let go while a piece is hashed
            n += 1
        return n

    loop = asyncio.get_running_loop()
    idle = [await lag_during(lambda: asyncio.sleep(0.5)) for _ in range(reps)]
    floors = {
        name: [
            await lag_during(lambda: loop.run_in_executor(executor(), work))  # noqa: B023
            for _ in range(reps)
        ]
        for name, work in (
            ("python", python_for_half_a_second),
            ("pieces", pieces_for_half_a_second),
        )
    }
    print("\n## Loop lag while a 50 MB value is stored and loaded\n")
    print(
        "Longest oversleep of a 1 ms ticker on the loop, ms"
        + (f", median (worst) of {reps}" if reps > 1 else "")
        + f". Floors on this machine meanwhile: the idle loop {ms(idle)}; a cache thread "
        f"hashing 1 MiB pieces for 0.5 s (the lock let go during each piece, as the "
        f"cache's I/O does) {ms(floors['pieces'])}; a cache thread running Python code for "
        f"0.5 s (the lock taken back every {sys.getswitchinterval() * 1e3:.0f} ms, the "
        f"interpreter's switch interval) {ms(floors['python'])}.\n"
    )
    columns = [
        ("store: before", "before: store"),
        ("store: other", "other: store"),
        ("store: after", "after: store"),
        ("run, miss (stores)", "run, miss"),
        ("load: before", "before: load"),
        ("load: other", "other: load"),
        ("load: after", "after: load"),
        ("load: after, Hamilton's file", "after: load, Hamilton file"),
        ("run, hit (loads)", "run, hit"),
    ]
    if other is None:
        columns = [column for column in columns if not column[1].startswith("other")]
    print("| value | " + " | ".join(title for title, _ in columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for kind, make in kinds().items():
        module.BLOBS[kind] = make()
        lags = await kind_lags(module.BLOBS[kind], kind, cache, plan, reps, next(salts), other)
        print(f"| {kind} | " + " | ".join(ms(lags[name]) for _, name in columns) + " |")
        del module.BLOBS[kind]
        gc.collect()

    from sdax_hamilton._hamilton.cache_io import TEXT_PIECE

    text = kinds()["str (ASCII)"]()
    pieces = [text[start : start + TEXT_PIECE] for start in range(0, len(text), TEXT_PIECE)]
    del text
    from sdax_hamilton import _core

    kept: list[Any] = []
    joins: dict[str, list[float]] = {"str.join": [], "_core.join_ascii": []}
    for _ in range(reps):
        for name, join in (("str.join", "".join), ("_core.join_ascii", _core.join_ascii)):
            joins[name].append(
                await lag_during(
                    lambda join=join: loop.run_in_executor(executor(), join, pieces), kept
                )
            )
            kept.clear()
    print(
        f"\nJoining the str's {len(pieces)} pieces, alone in a cache thread: str.join "
        f"{ms(joins['str.join'])} ms (the lock held), _core.join_ascii "
        f"{ms(joins['_core.join_ascii'])} ms (the copy without the lock)"
    )
    pieces.clear()

    module.BLOBS["bytes"] = os.urandom(SIZE)

    async def hamilton_on_loop() -> None:
        hamilton.execute(["blob"], inputs={"kind": "bytes", "salt": -1})

    sync_lag = await lag_during(hamilton_on_loop)
    print(
        f"\nHamilton's sync driver called on the loop, a miss storing the bytes: {sync_lag:.1f} ms"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--lag", action="store_true", help="only the loop-lag figures")
    parser.add_argument(
        "--against", metavar="FILE", help="also time another revision's cache_io.py in the cache"
    )
    arguments = parser.parse_args()
    asyncio.run(main(arguments.quick, arguments.lag, arguments.against))
