"""The tail with and without hedged attempts (docs/hedging.md, "Tail figures").

A simulated dependency answers in 1 ms for 98 % of calls and in 100 ms for 2 % (a seeded
draw per call). One node calls it; ``--runs`` executions of its plan (10,000 by default)
run at a steady concurrency (``--concurrency`` workers, each executing one run after the
other). Per configuration: p50, p99 and p99.9 of a run's latency (loop time from
``execute()`` to its result) and the extra calls hedging made (calls / runs - 1).

    python bench/tail.py [--runs N] [--concurrency C] [--seed S] [--json OUT]

Configurations, one run each, side by side: no hedging, ``hedge_after=0.005`` and
``hedge_after=Latency(95)`` (one extra call at most: ``hedges=1``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import types
from typing import Any

from sdax_hamilton import Driver, Latency, execution

FAST = 0.001
SLOW = 0.100
SLOW_SHARE = 0.02


class Dependency:
    """The simulated dependency: a seeded draw per call, counted."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.calls = 0

    async def call(self, key: int) -> int:
        self.calls += 1
        await asyncio.sleep(SLOW if self.random.random() < SLOW_SHARE else FAST)
        return key


def module_for(dependency: Dependency, hedge_after: float | Latency | None) -> types.ModuleType:
    """A real module with one node calling the dependency, hedged as asked."""
    module = types.ModuleType(f"bench_tail_{id(dependency)}")

    async def fetch(key: int) -> int:
        return await dependency.call(key)

    fetch.__module__ = module.__name__
    if hedge_after is not None:
        execution(hedge_after=hedge_after, hedges=1)(fetch)
    module.fetch = fetch  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    return module


def percentile(ordered: list[float], p: float) -> float:
    """Nearest rank."""
    rank = max(int(-(-p * len(ordered) // 100)), 1)
    return ordered[rank - 1]


async def measure(
    hedge_after: float | Latency | None, runs: int, concurrency: int, seed: int
) -> dict[str, Any]:
    dependency = Dependency(seed)
    plan = Driver(module_for(dependency, hedge_after)).prepare(["fetch"])
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    remaining = [runs]

    async def worker() -> None:
        while remaining[0] > 0:
            remaining[0] -= 1
            started = loop.time()
            await plan.execute(inputs={"key": remaining[0]})
            latencies.append(loop.time() - started)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    latencies.sort()
    return {
        "p50_ms": percentile(latencies, 50) * 1e3,
        "p99_ms": percentile(latencies, 99) * 1e3,
        "p99.9_ms": percentile(latencies, 99.9) * 1e3,
        "extra_calls_pct": (dependency.calls / runs - 1) * 100,
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seed", type=int, default=2013)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    configurations: list[tuple[str, float | Latency | None]] = [
        ("no hedging", None),
        ("hedge_after=0.005", 0.005),
        ("hedge_after=Latency(95)", Latency(95)),
    ]
    results = {}
    for name, hedge_after in configurations:
        results[name] = asyncio.run(measure(hedge_after, args.runs, args.concurrency, args.seed))
        print(f"measured {name}", file=sys.stderr)
    base = results["no hedging"]["p99_ms"]
    print(f"{args.runs:,} runs, concurrency {args.concurrency}, seed {args.seed}\n")
    print("| configuration | p50 ms | p99 ms | p99.9 ms | extra calls | p99 cut |")
    print("|---|---|---|---|---|---|")
    for name, row in results.items():
        print(
            f"| {name} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {row['p99.9_ms']:.2f} "
            f"| {row['extra_calls_pct']:.1f} % | {base / row['p99_ms']:.1f}x |"
        )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)


if __name__ == "__main__":
    main()
