"""A fault campaign over the shared objects (docs/resilience.md): seeded scenarios of
concurrent runs whose nodes share a small bulkhead and a circuit breaker, one with a
fallback, under failures, hangs, slow drains, run deadlines and caller cancellations.

After each scenario: nothing is left in the bulkhead (``in_use == 0``, ``waiting == 0``);
never more calls ran at once (draining ones included) than it allows; each run's result is
what its nodes' values (or the fallback's) make. Over the campaign, each situation of
interest is reached a minimum number of times (``MINIMUM_HITS``), on whatever loop the
suite runs (tests/support/loops.py).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from typing import Any

from sdax_hamilton import Driver, ExecutionError, RunEvent

SCENARIOS = 40
MINIMUM_HITS = {
    "waiter cancelled": 3,
    "permit freed by a timed-out attempt that drains": 3,
    "breaker opened mid-run": 2,
    "fallback used after retries": 3,
    "bulkhead rejected": 3,
}

SOURCE = """
import asyncio
from sdax_hamilton import Bulkhead, CircuitBreaker, execution

BULKHEAD = Bulkhead({limit}, max_waiting={waiting})
BREAKER = CircuitBreaker(min_calls={min_calls}, failure_ratio=0.5, window=5.0, break_for={brk})
SCRIPT: dict[tuple[int, str], list[tuple[str, float]]] = {{}}
RUNNING = [0]
PEAK = [0]
FALLBACKS: list[str] = []


async def body(node: str, run: int) -> int:
    steps = SCRIPT.get((run, node)) or [("ok", 0.0)]
    kind, delay = steps.pop(0) if len(steps) > 1 else steps[0]
    RUNNING[0] += 1
    PEAK[0] = max(PEAK[0], RUNNING[0])
    try:
        if kind == "ok":
            await asyncio.sleep(delay)
            return 1
        if kind == "fail":
            await asyncio.sleep(delay)
            raise ConnectionError(node)
        try:  # hang (until its timeout or the run's end), or drain slowly once cancelled
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            if kind == "drain":
                await asyncio.sleep(delay)
            raise
        return 1
    finally:
        RUNNING[0] -= 1


def fallback(exc: BaseException) -> int:
    FALLBACKS.append(type(exc).__name__)
    return 0


@execution(bulkhead=BULKHEAD, breaker=BREAKER, timeout=0.03, retries=2, initial_delay=0.002,
           fallback=fallback)
async def a(run: int) -> int:
    return await body("a", run)


@execution(bulkhead=BULKHEAD, breaker=BREAKER, timeout=0.03, retries=1, initial_delay=0.002)
async def b(run: int) -> int:
    return await body("b", run)


def total(a: int, b: int) -> int:
    return a + b
"""

KINDS = (("ok", 4), ("fail", 3), ("hang", 2), ("drain", 2))


def _steps(rng: random.Random) -> list[tuple[str, float]]:
    kinds = [k for k, weight in KINDS for _ in range(weight)]
    return [(rng.choice(kinds), rng.uniform(0.0, 0.02)) for _ in range(3)]


def _hits(events: list[RunEvent], hits: Counter[str]) -> None:
    waiting: set[tuple[str, int]] = set()
    admitted_closed = False
    for event in events:
        key = (event.node, event.attempt)
        if event.kind == "bulkhead_waiting":
            waiting.add(key)
        elif event.kind == "attempt_started":
            waiting.discard(key)
            admitted_closed |= event.breaker_state == "closed"
        elif event.kind == "attempt_cancelled" and key in waiting:
            hits["waiter cancelled"] += 1
        elif event.kind == "circuit_rejected" and admitted_closed:
            hits["breaker opened mid-run"] += 1
            admitted_closed = False
        elif event.kind == "fallback_used" and event.attempt > 1:
            hits["fallback used after retries"] += 1
        elif event.kind == "bulkhead_rejected":
            hits["bulkhead rejected"] += 1


async def _scenario(seed: int, make_module: Any, hits: Counter[str]) -> None:
    rng = random.Random(seed)
    limit = rng.choice((1, 2))
    module = make_module(
        SOURCE.format(
            limit=limit,
            waiting=rng.choice((0, 1, 3, 5, 5)),
            min_calls=rng.choice((2, 4)),
            brk=rng.choice((0.01, 0.05)),
        )
    )
    plan = Driver(module).prepare(["total"])
    runs = rng.randint(2, 6)
    logs: list[list[RunEvent]] = [[] for _ in range(runs)]

    def watcher(run: int) -> Any:
        def observe(event: RunEvent) -> None:
            logs[run].append(event)
            if event.kind == "attempt_timed_out" and module.BULKHEAD.waiting:
                hits["permit freed by a timed-out attempt that drains"] += 1

        return observe

    tasks = []
    for run in range(runs):
        module.SCRIPT[(run, "a")] = _steps(rng)
        module.SCRIPT[(run, "b")] = _steps(rng)
        timeout = rng.choice((None, None, 0.05, 0.2))
        tasks.append(
            asyncio.ensure_future(
                plan.execute(inputs={"run": run}, timeout=timeout, observer=watcher(run))
            )
        )
    for task in tasks:
        if rng.random() < 0.25:
            asyncio.get_running_loop().call_later(rng.uniform(0.0, 0.05), task.cancel)
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, dict):
            assert outcome["total"] in (1, 2)  # b's 1, and a's 1 or its fallback's 0
        else:
            assert isinstance(outcome, ExecutionError | asyncio.CancelledError), outcome
    assert (module.BULKHEAD.in_use, module.BULKHEAD.waiting) == (0, 0), seed
    assert module.PEAK[0] <= limit, seed  # draining calls keep their permit
    for log in logs:
        _hits(log, hits)
        used = [e for e in log if e.kind == "fallback_used"]
        assert len(used) <= 1  # called once at most, for node a only
        assert all(e.node == "a" for e in used)


async def test_campaign(make_module: Any) -> None:
    hits: Counter[str] = Counter()
    for seed in range(SCENARIOS):
        await _scenario(seed, make_module, hits)
    print(f"resilience campaign hits: {dict(hits)}")
    missing = {k: (hits[k], n) for k, n in MINIMUM_HITS.items() if hits[k] < n}
    assert not missing, f"situations reached (got, wanted): {missing}; all hits: {dict(hits)}"


# ------------------------------------------------------------------ carried by the core
#
# Runs without observers nor a run timeout have their lone first attempts carried out by
# the core's ``Run`` (src/carry.rs): a guarded one there when admitted at once, by the
# driver otherwise. A chain, so that first attempts are lone: ``a`` async (suspends: handed
# back admitted), ``b`` a plain function (over inside the core, which gives its permit
# back and records its outcome), concurrent runs sharing the bulkhead and the breaker.

CARRIED_SOURCE = """
import asyncio
from sdax_hamilton import Bulkhead, CircuitBreaker, execution

BULKHEAD = Bulkhead({limit}, max_waiting={waiting})
BREAKER = CircuitBreaker(min_calls={min_calls}, failure_ratio=0.5, window=5.0, break_for={brk})
SCRIPT: dict[tuple[int, str], list[str]] = {{}}
DRIVER = [False]  # set while the driver's own START calls a function
CARRIED_DONE = [0]
RUNNING = [0]
PEAK = [0]


def _next(run: int, node: str) -> str:
    steps = SCRIPT.get((run, node)) or ["ok"]
    return steps.pop(0) if len(steps) > 1 else steps[0]


@execution(bulkhead=BULKHEAD, breaker=BREAKER, retries=2, initial_delay=0.002,
           fallback=lambda exc: 0)
async def a(run: int) -> int:
    kind = _next(run, "a")
    RUNNING[0] += 1
    PEAK[0] = max(PEAK[0], RUNNING[0])
    try:
        await asyncio.sleep(0.002 if kind == "slow" else 0)
        if kind == "fail":
            raise ConnectionError("a")
        return 1
    finally:
        RUNNING[0] -= 1


@execution(bulkhead=BULKHEAD, breaker=BREAKER, retries=1, initial_delay=0.002)
def b(a: int, run: int) -> int:
    if RUNNING[0] + 1 > PEAK[0]:
        PEAK[0] = RUNNING[0] + 1
    if _next(run, "b") == "fail":
        raise ConnectionError("b")
    if not DRIVER[0]:
        CARRIED_DONE[0] += 1
    return a + 1
"""

CARRIED_MINIMUM = {"carried and over": 20, "handed back admitted": 20, "left to the driver": 10}


async def _carried_scenario(
    seed: int, make_module: Any, counts: Counter[str], monkeypatch: Any
) -> None:
    rng = random.Random(seed)
    limit = rng.choice((1, 2))
    module = make_module(
        CARRIED_SOURCE.format(
            limit=limit,
            waiting=rng.choice((0, 1, 3, 5)),
            min_calls=rng.choice((2, 4)),
            brk=rng.choice((0.005, 0.02)),
        )
    )
    from sdax_hamilton._executor.calls import Calls
    from sdax_hamilton._executor.guards import Guards

    original_start, original_carried = Calls._start, Guards.carried

    def start(calls: Any, job: Any, attempt: int, timeout: Any) -> None:
        if job.guarded and not attempt:
            counts["left to the driver"] += 1
        module.DRIVER[0] = True
        try:
            original_start(calls, job, attempt, timeout)
        finally:
            module.DRIVER[0] = False

    def carried(guards: Any, attempt: Any) -> None:
        counts["handed back admitted"] += 1
        original_carried(guards, attempt)

    monkeypatch.setattr(Calls, "_start", start)
    monkeypatch.setattr(Guards, "carried", carried)
    plan = Driver(module).prepare(["b"])
    runs = rng.randint(2, 8)
    kinds = ["ok", "ok", "ok", "slow", "fail"]
    tasks = []
    for run in range(runs):
        module.SCRIPT[(run, "a")] = [rng.choice(kinds) for _ in range(3)]
        module.SCRIPT[(run, "b")] = [rng.choice(("ok", "ok", "fail")) for _ in range(2)]
        tasks.append(asyncio.ensure_future(plan.execute(inputs={"run": run})))
        if rng.random() < 0.5:
            await asyncio.sleep(rng.uniform(0.0, 0.003))
    for task in tasks:
        if rng.random() < 0.2:
            asyncio.get_running_loop().call_later(rng.uniform(0.0, 0.005), task.cancel)
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, dict):
            assert outcome["b"] in (1, 2)  # a's 1 or its fallback's 0, plus 1
        else:
            assert isinstance(outcome, ExecutionError | asyncio.CancelledError), outcome
    assert (module.BULKHEAD.in_use, module.BULKHEAD.waiting) == (0, 0), seed
    assert module.PEAK[0] <= limit, seed
    counts["carried and over"] += module.CARRIED_DONE[0]
    monkeypatch.undo()


async def test_campaign_carried_by_the_core(make_module: Any, monkeypatch: Any) -> None:
    counts: Counter[str] = Counter()
    for seed in range(SCENARIOS):
        await _carried_scenario(seed, make_module, counts, monkeypatch)
    print(f"carried campaign counts: {dict(counts)}")
    missing = {k: (counts[k], n) for k, n in CARRIED_MINIMUM.items() if counts[k] < n}
    assert not missing, f"situations reached (got, wanted): {missing}; all: {dict(counts)}"
