"""A fault campaign over hedged nodes (docs/hedging.md, docs/contract.md#hedging): seeded
scenarios of concurrent runs whose hedged node's calls succeed, fail, hang or drain slowly,
under per-call timeouts, retries, run deadlines and caller cancellations.

After each run: nothing downstream ran while a call of the hedged node was still running
(losers are drained first); a round never started more than ``1 + hedges`` calls; the node's
value is the winning call's (each call returns its own number, which the run report's
``won_by`` names); every call has ended once the run is over. Over the campaign, each
situation of interest is reached a minimum number of times (``MINIMUM_HITS``), on whatever
loop the suite runs (tests/support/loops.py).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from typing import Any

from sdax_hamilton import Driver, ExecutionError, RunEvent, RunReport

SCENARIOS = 40
MINIMUM_HITS = {
    "a hedge won": 5,
    "the first call won over a hedge": 3,
    "every call of a round failed": 3,
    "cancelled mid-round": 3,
    "a hedge clipped by the run's deadline": 3,
}

SOURCE = """
import asyncio
from sdax_hamilton import execution

SCRIPT: dict[int, list[tuple[str, float]]] = {{}}
CALLS: dict[int, int] = {{}}
RUNNING: dict[int, int] = {{}}
OVERLAPS: list[int] = []


@execution(hedge_after={after}, hedges={hedges}, timeout=0.03, retries={retries},
           initial_delay=0.001)
async def a(run: int) -> int:
    number = CALLS[run] = CALLS.get(run, 0) + 1
    steps = SCRIPT.get(run) or [("ok", 0.0)]
    kind, delay = steps.pop(0) if len(steps) > 1 else steps[0]
    RUNNING[run] = RUNNING.get(run, 0) + 1
    try:
        if kind == "ok":
            await asyncio.sleep(delay)
            return number
        if kind == "fail":
            await asyncio.sleep(delay)
            raise ConnectionError(f"call {{number}}")
        try:  # hang (until its timeout or the round's end), or drain slowly once cancelled
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            if kind == "drain":
                await asyncio.sleep(delay)
            raise
        return number
    finally:
        RUNNING[run] -= 1


def b(run: int) -> int:
    return 1000


def total(a: int, b: int, run: int) -> int:
    if RUNNING.get(run, 0):
        OVERLAPS.append(run)  # a call of ``a`` still running: a loser was not drained
    return a + b
"""

KINDS = (("ok", 5), ("fail", 3), ("hang", 2), ("drain", 2))


def _steps(rng: random.Random) -> list[tuple[str, float]]:
    kinds = [k for k, weight in KINDS for _ in range(weight)]
    return [(rng.choice(kinds), rng.uniform(0.0, 0.015)) for _ in range(8)]


def _hits(events: list[RunEvent], outcome: object, hits: Counter[str]) -> None:
    mine = [e for e in events if e.node == "a"]
    hedged = False  # a hedge started in the current round
    winner = next((e.attempt for e in mine if e.kind == "attempt_succeeded"), None)
    for event in mine:
        if event.kind == "hedge_started":
            hedged = True
        elif event.kind == "retry_scheduled":
            if hedged:
                hits["every call of a round failed"] += 1
            hedged = False
        elif event.kind == "attempt_started" and event.clipped and hedged:
            hits["a hedge clipped by the run's deadline"] += 1
        elif event.kind == "attempt_cancelled" and event.reason and winner is not None:
            loser = int(event.reason.rsplit(" ", 1)[1])
            assert loser == winner, (event, winner)
            hits[
                "a hedge won" if event.attempt < winner else "the first call won over a hedge"
            ] += 1
    if isinstance(outcome, ExecutionError) and hedged:
        if all(not isinstance(leaf, TimeoutError) for leaf in outcome.exceptions):
            hits["every call of a round failed"] += 1
    if isinstance(outcome, asyncio.CancelledError) and hedged and winner is None:
        if any(e.kind == "attempt_cancelled" and e.reason is None for e in mine):
            hits["cancelled mid-round"] += 1


def _check_rounds(events: list[RunEvent], hedges: int) -> None:
    """Never more than ``1 + hedges`` calls in one round (a retry starts a new one)."""
    calls = 0
    for event in events:
        if event.node != "a":
            continue
        if event.kind == "attempt_started":
            calls += 1
            assert calls <= 1 + hedges, events
        elif event.kind == "retry_scheduled":
            calls = 0


async def _scenario(seed: int, make_module: Any, hits: Counter[str]) -> None:
    rng = random.Random(seed)
    hedges = rng.choice((1, 1, 2, 3))
    module = make_module(
        SOURCE.format(
            after=rng.choice((0.0, 0.002, 0.005)),
            hedges=hedges,
            retries=rng.choice((0, 1, 2)),
        )
    )
    plan = Driver(module).prepare(["total"])
    runs = rng.randint(2, 6)
    reports = [RunReport() for _ in range(runs)]
    logs: list[list[RunEvent]] = [[] for _ in range(runs)]
    tasks = []
    for run in range(runs):
        module.SCRIPT[run] = _steps(rng)
        timeout = rng.choice((None, None, 0.01, 0.02, 0.05))
        observers = (logs[run].append, reports[run])
        tasks.append(
            asyncio.ensure_future(
                plan.execute(inputs={"run": run}, timeout=timeout, observer=observers)
            )
        )
    for task in tasks:
        if rng.random() < 0.3:
            asyncio.get_running_loop().call_later(rng.uniform(0.0, 0.03), task.cancel)
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert not module.OVERLAPS, (seed, module.OVERLAPS)
    assert not any(module.RUNNING.values()), (seed, module.RUNNING)  # every call ended
    for run, outcome in enumerate(outcomes):
        _check_rounds(logs[run], hedges)
        node = reports[run].nodes["a"]
        if isinstance(outcome, dict):
            value = outcome["total"] - 1000
            # The node's value is the winning call's own number (without a hedge: the
            # last attempt's).
            expected = node.won_by if node.hedges else node.attempts
            assert value == expected, (seed, run, value, node)
        else:
            assert isinstance(outcome, ExecutionError | asyncio.CancelledError), outcome
        _hits(logs[run], outcome, hits)


async def test_campaign(make_module: Any) -> None:
    hits: Counter[str] = Counter()
    for seed in range(SCENARIOS):
        await _scenario(seed, make_module, hits)
    print(f"hedge campaign hits: {dict(hits)}")
    missing = {k: (hits[k], n) for k, n in MINIMUM_HITS.items() if hits[k] < n}
    assert not missing, f"situations reached (got, wanted): {missing}; all hits: {dict(hits)}"
