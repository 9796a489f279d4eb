"""An outage under load: what reaches a failing dependency with retries alone, with a retry
budget, and with a circuit breaker (docs/resilience.md).

A stand-in dependency (an async function that takes 2 ms) is called by one node with
``retries=3``; runs start at a steady rate (200 per second by default), each its own
``execute()``. The dependency fails every call for 5 s, then heals. Three set-ups, one
after the other, each in a fresh module with fresh shared objects:

* ``retries``: ``@execution(retries=3, ...)`` alone;
* ``budget``: the same, with ``Driver(retry_budget=RetryBudget(ratio=0.2))``;
* ``breaker``: the same, with ``CircuitBreaker(min_calls=20, window=2.0, break_for=1.0)``.

Figures: calls reaching the dependency per first attempt during the outage (calls made
while it was down / runs started while it was down), and, with the breaker, the time from
healing to the breaker closing. ``--svg PATH`` draws calls per 100 ms over time for the
three.

The budget's bound (docs/resilience.md, "Worst cases"): the retries taken within any
trailing ``window`` are at most ``ratio`` * the first attempts within it + ``min_per_second``
* ``window``. An outage no longer than the window is inside one window, so its retries are
at most ``ratio`` * (its first attempts + those of the healthy seconds before it still in the
window) + the whole reserve ``min_per_second`` * ``window``: with the defaults, 200 runs/s
and 1 healthy second, (1000 + 0.2 * 1200 + 100) / 1000 = 1.34 calls per first attempt.
Only in a longer outage, once a window has passed, does it come down to the steady state,
1 + ``ratio`` + ``min_per_second`` / rate = 1.25: a fourth run, ``budget, long``, keeps the
dependency down ``--steady-down`` seconds (30) and measures the calls per first attempt
after the outage's first window.

    python bench/outage.py [--rate 200] [--down 5] [--steady-down 30] [--svg docs/outage.svg]
        [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

from sdax_hamilton import CircuitBreaker, Driver, RetryBudget

SOURCE = """
import asyncio
from sdax_hamilton import execution

DOWN = [False]
CALLS: list[float] = []


@execution(retries=3, initial_delay=0.05, backoff_factor=2.0, timeout=1.0, breaker=BREAKER)
async def dependency(i: int) -> int:
    loop = asyncio.get_running_loop()
    CALLS.append(loop.time())
    await asyncio.sleep(0.002)
    if DOWN[0]:
        raise ConnectionError("dependency down")
    return i
"""

SETUPS = ("retries", "budget", "breaker")


def _module(setup: str) -> types.ModuleType:
    name = f"outage_{setup}"
    module = types.ModuleType(name)
    sys.modules[name] = module
    module.BREAKER = (  # type: ignore[attr-defined]
        CircuitBreaker(failure_ratio=0.5, min_calls=20, window=2.0, break_for=1.0)
        if setup == "breaker"
        else None
    )
    exec(compile(textwrap.dedent(SOURCE), name, "exec"), module.__dict__)
    return module


async def _one(setup: str, rate: float, before: float, down: float, after: float) -> dict[str, Any]:
    module = _module(setup)
    budget = RetryBudget(ratio=0.2) if setup.startswith("budget") else None
    plan = Driver(module, retry_budget=budget).prepare(["dependency"])
    loop = asyncio.get_running_loop()
    start = loop.time()
    fell, healed = start + before, start + before + down
    end = healed + after
    runs: set[asyncio.Task[Any]] = set()
    started: list[float] = []
    closed_at: float | None = None
    i = 0
    while (now := loop.time()) < end:
        module.DOWN[0] = fell <= now < healed
        due = start + i / rate
        if due <= now:
            task = asyncio.ensure_future(_quietly(plan.execute(inputs={"i": i})))
            runs.add(task)
            task.add_done_callback(runs.discard)
            started.append(now)
            i += 1
            continue
        if setup == "breaker" and closed_at is None and now >= healed:
            if module.BREAKER.state == "closed":
                closed_at = now
        await asyncio.sleep(min(due - now, 0.005))
    await asyncio.gather(*runs)
    calls: list[float] = module.CALLS
    first = sum(1 for t in started if fell <= t < healed)
    during = sum(1 for t in calls if fell <= t < healed)
    bound = steady = steady_bound = None
    if budget is not None:
        ratio, reserve, window = budget.ratio, budget.min_per_second * budget.window, budget.window
        if down <= window:
            # One window holds the whole outage: its retries are at most ratio * the first
            # attempts of the window ending when it heals, plus the whole reserve.
            deposited = sum(1 for t in started if healed - window < t < healed)
            bound = (first + ratio * deposited + reserve) / first
        else:
            # Past the outage's first window: the steady state.
            from_ = fell + window
            firsts = sum(1 for t in started if from_ <= t < healed)
            steady = sum(1 for t in calls if from_ <= t < healed) / firsts
            steady_bound = 1 + ratio + budget.min_per_second / rate
    buckets = [0] * int((end - start) / 0.1 + 1)
    for t in calls:
        buckets[min(int((t - start) / 0.1), len(buckets) - 1)] += 1
    return {
        "setup": setup,
        "runs": len(started),
        "first_attempts_during_outage": first,
        "calls_during_outage": during,
        "calls_per_first_attempt": during / first if first else None,
        "healed_to_closed": None if closed_at is None else closed_at - healed,
        "down": down,
        "bound": bound,
        "steady_state": steady,
        "steady_state_bound": steady_bound,
        "calls_per_100ms": buckets,
        "outage": [before, before + down],
    }


async def _quietly(run: Any) -> None:
    try:
        await run
    except Exception:
        pass


def svg(results: list[dict[str, Any]], width: int = 720, height: int = 300) -> str:
    """Calls per 100 ms over time, one line per set-up, the outage shaded."""
    colours = {"retries": "#d62728", "budget": "#ff7f0e", "breaker": "#1f77b4"}
    longest = max(len(r["calls_per_100ms"]) for r in results)
    top = max(max(r["calls_per_100ms"]) for r in results) or 1
    left, bottom, right, up = 50, 30, 10, 10
    w, h = width - left - right, height - bottom - up

    def x(i: float) -> float:
        return left + w * i / max(longest - 1, 1)

    def y(v: float) -> float:
        return up + h * (1 - v / top)

    before, fell = results[0]["outage"]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect x="{x(before * 10):.1f}" y="{up}" width="{x(fell * 10) - x(before * 10):.1f}" '
        f'height="{h}" fill="#eeeeee"/>',
        f'<text x="{x(before * 10) + 4:.1f}" y="{up + 12}">dependency down</text>',
        f'<line x1="{left}" y1="{up + h}" x2="{left + w}" y2="{up + h}" stroke="black"/>',
        f'<line x1="{left}" y1="{up}" x2="{left}" y2="{up + h}" stroke="black"/>',
        f'<text x="{left - 6}" y="{up + 10}" text-anchor="end">{top}</text>',
        f'<text x="{left - 6}" y="{up + h}" text-anchor="end">0</text>',
        f'<text x="{left + w / 2}" y="{height - 6}" text-anchor="middle">'
        f"seconds ({(longest - 1) / 10:.0f} s); calls to the dependency per 100 ms</text>",
    ]
    for n, result in enumerate(results):
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(result["calls_per_100ms"]))
        colour = colours[result["setup"]]
        parts.append(f'<polyline fill="none" stroke="{colour}" points="{points}"/>')
        parts.append(
            f'<text x="{left + w - 150}" y="{up + 14 + 14 * n}" fill="{colour}">'
            f"{result['setup']}</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="runs started per second")
    parser.add_argument("--before", type=float, default=1.0, help="healthy seconds first")
    parser.add_argument("--down", type=float, default=5.0, help="seconds the dependency fails")
    parser.add_argument("--after", type=float, default=3.0, help="seconds after healing")
    parser.add_argument(
        "--steady-down",
        type=float,
        default=30.0,
        help="seconds the dependency fails in the budget's long run (0: no long run)",
    )
    parser.add_argument("--svg", type=Path, help="write calls per 100 ms as an SVG picture")
    parser.add_argument("--json", type=Path, help="write the figures as JSON")
    args = parser.parse_args()
    # Thousands of failures are the point here; their log lines are not.
    logging.getLogger("sdax_hamilton").setLevel(logging.CRITICAL)
    results = [
        asyncio.run(_one(setup, args.rate, args.before, args.down, args.after)) for setup in SETUPS
    ]
    long = None
    if args.steady_down > 0:
        long = asyncio.run(_one("budget", args.rate, args.before, args.steady_down, args.after))
        long["setup"] = "budget, long"
    print("| set-up | down | runs | first attempts while down | calls while down | "
          "calls per first attempt | budget's bound | healed -> closed |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in [*results, *([long] if long else [])]:
        ratio = r["calls_per_first_attempt"]
        closed = r["healed_to_closed"]
        bound = r["bound"]
        print(
            f"| {r['setup']} | {r['down']:g} s | {r['runs']} | "
            f"{r['first_attempts_during_outage']} | {r['calls_during_outage']} | "
            f"{'-' if ratio is None else f'{ratio:.2f}'} | "
            f"{'-' if bound is None else f'{bound:.2f}'} | "
            f"{'-' if closed is None else f'{closed:.2f} s'} |"
        )
    if long is not None:
        print()
        print(
            f"budget, long: after the outage's first window, "
            f"{long['steady_state']:.3f} calls per first attempt "
            f"(steady-state bound {long['steady_state_bound']:.3f})"
        )
        results.append(long)
    if args.svg is not None:
        args.svg.write_text(svg(results[: len(SETUPS)]), encoding="utf-8")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
