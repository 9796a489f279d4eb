"""What run timeouts, ``max_delay`` and ``retry_after`` cost (docs/lifecycle.md, "Deadlines
and server-directed waits").

Runs interleaved on the same prepared plans, medians of batches, µs per execute:

* ``plain``: ``execute()`` with no run timeout, policies without ``max_delay`` /
  ``retry_after`` (what every run did before these existed);
* ``timeout``: the same plan with ``execute(timeout=1e6)``: a deadline that never fires,
  so every START is checked against it (and clipped: the nodes have no timeout of their own);
* ``capped``: every node also declares ``max_delay`` and ``retry_after`` (nothing fails,
  so neither is ever used): the cost of carrying them.

Unused, these features must cost nothing: ``plain`` runs the same path as before except one
``is None`` test per run. Compare ``plain`` with PERFORMANCE.md (same machine, same shapes).

    python bench/deadlines.py [--quick] [--plain-only]

``--plain-only`` runs ``plain`` alone, so the same script can time a build from before these
features existed (check it out, ``maturin develop --release``, run, compare).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import textwrap
import time
import types
from collections.abc import Awaitable, Callable
from typing import Any

from sdax_hamilton import Driver


def chain(n: int, decorate: str) -> str:
    lines = [
        "from sdax_hamilton import execution",
        "",
        "def _hook(exc: BaseException) -> float | None:",
        "    return None",
        "",
    ]
    for i in range(n):
        param = f"n{i - 1}: int" if i else "x: int"
        arg = f"n{i - 1}" if i else "x"
        if decorate:
            lines.append(decorate)
        lines.append(f"async def n{i}({param}) -> int:\n    return {arg} + 1\n")
    return "\n".join(lines)


def load(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(textwrap.dedent(source), f"<{name}>", "exec"), module.__dict__)
    return module


async def batch(run: Callable[[], Awaitable[Any]], inner: int) -> float:
    """CPU seconds of this process per execute (the runs are CPU-bound: nothing waits), so
    other processes on a shared machine disturb the figure less than wall time would."""
    start = time.process_time()
    for _ in range(inner):
        await run()
    return (time.process_time() - start) / inner


async def main(quick: bool, plain_only: bool) -> None:
    n = 50 if quick else 200
    reps = 5 if quick else 21
    inner = 20 if quick else 100
    plain = Driver(load("bench_dl_plain", chain(n, "@execution(retries=2)"))).prepare([f"n{n - 1}"])
    capped = (
        plain
        if plain_only
        else Driver(
            load(
                "bench_dl_capped",
                chain(n, "@execution(retries=2, max_delay=5.0, retry_after=_hook)"),
            )
        ).prepare([f"n{n - 1}"])
    )
    runners: dict[str, Callable[[], Awaitable[Any]]] = {
        "plain": lambda: plain.execute(inputs={"x": 0}),
        "timeout": lambda: plain.execute(inputs={"x": 0}, timeout=1e6),
        "capped": lambda: capped.execute(inputs={"x": 0}),
    }
    if plain_only:  # also runs against a build from before these features (A/B)
        runners = {"plain": runners["plain"]}
    for run in runners.values():
        assert (await run()) == {f"n{n - 1}": n}
    samples: dict[str, list[float]] = {name: [] for name in runners}
    gc.freeze()
    for rep in range(reps):
        order = list(runners)
        order = order[rep % len(order) :] + order[: rep % len(order)]
        for name in order:
            gc.collect()
            samples[name].append(await batch(runners[name], inner))
    print(f"chain of {n} nodes, median of {reps} batches of {inner} executes (CPU time)")
    print("| runner | µs per execute | µs per node | vs plain |")
    print("|---|---|---|---|")
    base = statistics.median(samples["plain"])
    for name, values in samples.items():
        med = statistics.median(values)
        print(f"| {name} | {med * 1e6:.1f} | {med * 1e6 / n:.2f} | {med / base:.3f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--plain-only", action="store_true")
    args = parser.parse_args()
    asyncio.run(main(args.quick, args.plain_only))
