"""Soak: long sequential runs and many concurrently open plans, with memory checkpoints.

Not part of CI. Phases (each optional):

* ``executes``: N sequential ``execute()`` of a resources graph (connection -> transaction
  -> query, both acquisitions released by ``@shutdown``), RSS and traced memory sampled at
  checkpoints after a warm-up; growth after warm-up is what matters.
* ``failing``: N sequential executes whose query fails (ExecutionError), plus N whose caller
  is cancelled mid-forward: the failure and cancellation paths keep nothing either.
* ``concurrent``: rounds of K ``open()`` contexts alive at once (every resource held in
  its body), then all bodies exit; per-context memory while open, and memory after each
  round back at the baseline.

    python bench/soak.py                      # full: 1,000,000 executes, 10,000 open, 3 rounds
    python bench/soak.py --quick              # ~30 s: 100,000 / 2,000
    python bench/soak.py --executes 200000 --failing 50000 --concurrent 10000 --rounds 5

Exit status 1 when memory grows beyond ``--max-growth-mb`` after warm-up in any phase (RSS;
traced allocations and live objects when tracing is on). The first concurrent round is the
warm-up: growth is measured from its end.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import sys
import time
import tracemalloc
import types
from collections.abc import Callable
from typing import Any

from sdax_hamilton import Driver, ExecutionError

SOURCE = """
import asyncio
from sdax_hamilton import Acquisition, execution, shutdown

class Connection:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.open = True

class Transaction:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.open = True

async def connection(dsn: str) -> Connection:
    return Connection(dsn)

@execution(timeout=30.0)
async def transaction(connection: Connection) -> Transaction:
    return Transaction(connection)

@execution(timeout=30.0, retries=2, initial_delay=0.0)
async def query(transaction: Transaction, fail: bool) -> int:
    assert transaction.open and transaction.connection.open
    if fail:
        raise ValueError("query failed")
    if HOLD is not None:
        await HOLD.wait()
    return 1

def total(query: int) -> int:
    return query + 1

@shutdown(of=transaction, timeout=30.0)
async def end_transaction(acquired: Acquisition[Transaction]) -> None:
    if acquired.is_valid:
        acquired.value.open = False
    STATS["released"] += 1

@shutdown(of=connection, timeout=30.0, retries=1, initial_delay=0.0)
def close_connection(acquired: Acquisition[Connection]) -> None:
    if acquired.is_valid:
        acquired.value.open = False
    STATS["released"] += 1
"""


def load() -> types.ModuleType:
    module = types.ModuleType("sdax_soak_graph")
    module.__dict__.update(STATS={"released": 0}, HOLD=None)
    sys.modules[module.__name__] = module
    exec(compile(SOURCE, "<sdax_soak_graph>", "exec"), module.__dict__)
    return module


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def snapshot(label: str, done: int, started: float) -> dict[str, Any]:
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] / 2**20 if tracemalloc.is_tracing() else None
    point = {
        "label": label,
        "done": done,
        "seconds": round(time.perf_counter() - started, 2),
        "rss_mb": round(rss_mb(), 2),
        "traced_mb": None if traced is None else round(traced, 3),
        "gc_objects": len(gc.get_objects()),
    }
    print(json.dumps(point), file=sys.stderr, flush=True)
    return point


def growth(points: list[dict[str, Any]]) -> dict[str, float]:
    """Growth from the first checkpoint after warm-up to the last one."""
    first, last = points[1], points[-1]
    result = {
        "rss_mb": round(last["rss_mb"] - first["rss_mb"], 2),
        "gc_objects": last["gc_objects"] - first["gc_objects"],
    }
    if first["traced_mb"] is not None:
        result["traced_mb"] = round(last["traced_mb"] - first["traced_mb"], 3)
    return result


async def sequential(
    label: str, count: int, one: Callable[[], Any], checkpoints: int = 10
) -> dict[str, Any]:
    warmup = max(1, min(10_000, count // 20))
    for _ in range(warmup):
        await one()
    started = time.perf_counter()
    points = [snapshot(f"{label}: after warm-up", 0, started)]
    step = max(1, count // checkpoints)
    done = 0
    while done < count:
        for _ in range(min(step, count - done)):
            await one()
        done += min(step, count - done)
        points.append(snapshot(label, done, started))
    elapsed = points[-1]["seconds"]
    return {
        "phase": label,
        "runs": count,
        "us_per_run": round(elapsed / count * 1e6, 1),
        "growth": growth(points),
        "points": points,
    }


async def phase_executes(
    args: argparse.Namespace, plan: Any, stats: dict[str, int]
) -> dict[str, Any]:
    """Sequential successful executes; every run releases both resources."""

    async def ok() -> None:
        result = await plan.execute(inputs={"dsn": "db", "fail": False})
        assert result == {"total": 2}

    before = stats["released"]
    phase = await sequential("executes", args.executes, ok)
    assert stats["released"] - before == 2 * (
        args.executes + max(1, min(10_000, args.executes // 20))
    )
    return phase


async def phase_failing(args: argparse.Namespace, plan: Any, module: Any) -> list[dict[str, Any]]:
    """Sequential failing executes, then executes cancelled by their caller."""

    async def failing() -> None:
        try:
            await plan.execute(inputs={"dsn": "db", "fail": True})
        except ExecutionError:
            return
        raise AssertionError("expected ExecutionError")

    phases = [await sequential("failing executes", args.failing, failing)]

    module.__dict__["HOLD"] = asyncio.Event()

    async def cancelled() -> None:
        task = asyncio.ensure_future(plan.execute(inputs={"dsn": "db", "fail": False}))
        for _ in range(3):  # let it reach the query, which waits on HOLD
            await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return
        raise AssertionError("expected CancelledError")

    phases.append(await sequential("cancelled executes", args.failing, cancelled))
    module.__dict__["HOLD"] = None
    return phases


async def phase_concurrent(
    args: argparse.Namespace, held: Any, stats: dict[str, int]
) -> dict[str, Any]:
    """Rounds of many open() contexts alive at once, memory per context."""
    # per-context figures need allocation tracing (RSS moves in allocator arenas)
    traced_here = not tracemalloc.is_tracing()
    if traced_here:
        tracemalloc.start()
    started = time.perf_counter()
    points = [snapshot("concurrent: baseline", 0, started)]
    per_context: list[float] = []
    for round_number in range(args.rounds):
        release = asyncio.Event()
        entered = 0
        all_entered = asyncio.Event()

        async def hold(release: asyncio.Event, all_entered: asyncio.Event) -> None:
            nonlocal entered
            async with held.open(inputs={"dsn": "db", "fail": False}) as values:
                assert values["connection"].open and values["transaction"].open
                entered += 1
                if entered == args.concurrent:
                    all_entered.set()
                await release.wait()

        before_open = rss_mb()
        traced_before = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else 0
        released_before = stats["released"]
        tasks = [asyncio.ensure_future(hold(release, all_entered)) for _ in range(args.concurrent)]
        await all_entered.wait()
        gc.collect()
        open_rss = rss_mb() - before_open
        open_traced = (
            (tracemalloc.get_traced_memory()[0] - traced_before) / args.concurrent / 1024
            if tracemalloc.is_tracing()
            else None
        )
        per_context.append(round(open_traced or 0.0, 2))
        print(
            json.dumps(
                {
                    "round": round_number,
                    "open_contexts": args.concurrent,
                    "rss_kb_per_open_context": round(open_rss * 1024 / args.concurrent, 2),
                    "traced_kb_per_open_context": per_context[-1],
                }
            ),
            file=sys.stderr,
            flush=True,
        )
        release.set()
        await asyncio.wait(tasks)  # not gather: its future keeps the tasks referenced
        for task in tasks:
            task.result()
        assert stats["released"] - released_before == 2 * args.concurrent
        del tasks
        points.append(
            snapshot(f"concurrent: after round {round_number}", round_number + 1, started)
        )
    if traced_here:
        tracemalloc.stop()
    return {
        "phase": "concurrent open",
        "contexts": args.concurrent,
        "rounds": args.rounds,
        "traced_kb_per_open_context": per_context,
        "growth": growth(points) if len(points) > 2 else {},
        "points": points,
    }


async def main(args: argparse.Namespace) -> int:
    # the failing phases log an ERROR per run: keep the records, drop the output
    logger = logging.getLogger("sdax_hamilton")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
    module = load()
    stats = module.STATS
    plan = Driver(module).prepare(["total"])
    held = Driver(module).prepare(["query", "connection", "transaction"])
    report: dict[str, Any] = {"python": sys.version.split()[0], "phases": []}
    if args.tracemalloc:
        tracemalloc.start()

    if args.executes:
        report["phases"].append(await phase_executes(args, plan, stats))
    if args.failing:
        report["phases"].extend(await phase_failing(args, plan, module))
    if args.concurrent:
        report["phases"].append(await phase_concurrent(args, held, stats))

    def grew(phase: dict[str, Any]) -> bool:
        # with allocation tracing on, RSS also holds tracemalloc's own tables: judge by the
        # traced Python allocations and the number of live objects instead
        change = phase.get("growth", {})
        if change.get("traced_mb") is not None:
            return bool(change["traced_mb"] > args.max_growth_mb or change["gc_objects"] > 1000)
        return bool(change.get("rss_mb", 0) > args.max_growth_mb)

    failed = [phase["phase"] for phase in report["phases"] if grew(phase)]
    report["verdict"] = "memory flat" if not failed else f"memory grew in {failed}"
    print(json.dumps({k: v for k, v in report.items()}, indent=1))
    return 1 if failed else 0


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executes", type=int, default=1_000_000)
    parser.add_argument("--failing", type=int, default=100_000)
    parser.add_argument("--concurrent", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tracemalloc", action="store_true", help="also trace allocations")
    parser.add_argument("--max-growth-mb", type=float, default=8.0)
    parser.add_argument("--quick", action="store_true", help="100,000 / 20,000 / 2,000")
    args = parser.parse_args(argv)
    if args.quick:
        args.executes, args.failing, args.concurrent = 100_000, 20_000, 2_000
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse(sys.argv[1:]))))
