"""A fault campaign over fan-out (docs/fanout.md): seeded scenarios of a ``Parallelizable``
source (sync generator, async generator or list; finite or endless) whose branches acquire a
resource each (released by a ``@shutdown``) from an outer pool, with items that fail, fail
once and are retried, or hang; sources that raise; and caller cancellations mid fan-out.

After each scenario: a run that nothing stopped returns every item's result in item order;
never more branches ran at once than ``max_concurrency``; every session opened was released
exactly once, and the pool after all of them; a generator stopped early was closed before
the run returned. Over the campaign, each situation of interest is reached a minimum number
of times (``MINIMUM_HITS``), on whatever loop the suite runs (tests/support/loops.py).
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from typing import Any

from support.modules import fanout_pool

from sdax_hamilton import Driver, ExecutionError, RunEvent

SCENARIOS = 60
MINIMUM_HITS = {
    "item failing": 5,
    "cancellation mid-fan-out": 5,
    "source failing": 4,
    "acquisition in a branch released after an early stop": 8,
    "item retried": 5,
    "endless source stopped": 3,
}

HEADER = (
    """
import asyncio
from hamilton.htypes import Collect, Parallelizable
from sdax_hamilton import Acquisition, execution, shutdown

PLAN = {plan!r}
FAIL_SOURCE = {fail_source}
LOG = []
STARTED = {{}}
TRIES = {{}}
"""
    + fanout_pool(sync_release=True)  # braces-free: HEADER is formatted as a whole
    + """
async def session(items: int, pool: Pool) -> int:
    LOG.append(f"open {{items}}")
    return items

@shutdown(of=session)
async def close_session(acquired: Acquisition[int]) -> None:
    await asyncio.sleep(0)
    LOG.append(f"close {{acquired.value}}")

@execution(retries=1, initial_delay=0.0, retryable_exceptions=(ConnectionError,))
async def step(session: int) -> int:
    kind = PLAN.get(session, "ok")
    STARTED.setdefault(session, asyncio.Event()).set()
    await asyncio.sleep(0)
    if kind == "fail":
        raise ValueError(f"item {{session}} failed")
    if kind == "flaky":
        TRIES[session] = TRIES.get(session, 0) + 1
        if TRIES[session] == 1:
            raise ConnectionError(f"item {{session}} flaked")
    if kind == "hang":
        await asyncio.Event().wait()
    return session * 10

def results(step: Collect[int]) -> list[int]:
    return list(step)
"""
)

SYNC_SOURCE = """
@execution(max_concurrency={limit})
def items(n: int) -> Parallelizable[int]:
    try:
        i = 0
        while n < 0 or i < n:
            if i == FAIL_SOURCE:
                raise OSError("source broke")
            LOG.append(f"draw {{i}}")
            yield i
            i += 1
    finally:
        LOG.append("source closed")
"""

ASYNC_SOURCE = """
@execution(max_concurrency={limit})
async def items(n: int) -> Parallelizable[int]:
    try:
        i = 0
        while n < 0 or i < n:
            await asyncio.sleep(0)
            if i == FAIL_SOURCE:
                raise OSError("source broke")
            LOG.append(f"draw {{i}}")
            yield i
            i += 1
    finally:
        LOG.append("source closed")
"""

LIST_SOURCE = """
@execution(max_concurrency={limit})
def items(n: int) -> Parallelizable[int]:
    if FAIL_SOURCE >= 0:
        raise OSError("source broke")
    LOG.append("source closed")  # nothing to close: a list
    return list(range(n))
"""


def _draw(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(["sync", "async", "list"])
    limit = rng.choice([None, 1, 2, 3])
    n = rng.randint(0, 8)
    plan: dict[int, str] = {}
    for i in range(max(n, 12)):
        roll = rng.random()
        if roll < 0.08:
            plan[i] = "fail"
        elif roll < 0.2:
            plan[i] = "flaky"
    fail_source = rng.randint(0, 6) if kind != "list" and rng.random() < 0.15 else -1
    if kind == "list" and rng.random() < 0.1:
        fail_source = 0
    cancel_at = rng.randint(0, 4) if rng.random() < 0.25 else None
    if cancel_at is not None:
        plan[cancel_at] = "hang"
    endless = kind != "list" and limit is not None and rng.random() < 0.2
    if endless:
        n = -1
        if cancel_at is None and fail_source < 0 and "fail" not in plan.values():
            plan[rng.randint(0, 6)] = "fail"
    return {
        "kind": kind,
        "limit": limit,
        "n": n,
        "plan": plan,
        "fail_source": fail_source,
        "cancel_at": cancel_at,
    }


def _branches_at_once(events: list[RunEvent]) -> int:
    running = peak = 0
    for event in events:
        if event.kind == "attempt_started" and event.node.startswith("session["):
            running += 1
            peak = max(peak, running)
        elif event.kind == "attempt_succeeded" and event.node.startswith("step["):
            running -= 1
    return peak


async def _scenario(seed: int, make_module: Any, hits: Counter[str]) -> None:
    rng = random.Random(seed)
    case = _draw(rng)
    source = {"sync": SYNC_SOURCE, "async": ASYNC_SOURCE, "list": LIST_SOURCE}[case["kind"]]
    mod = make_module(
        HEADER.format(plan=case["plan"], fail_source=case["fail_source"])
        + source.format(limit=case["limit"])
    )
    events: list[RunEvent] = []
    plan = Driver(mod).prepare(["results"])
    task = asyncio.ensure_future(plan.execute(inputs={"n": case["n"]}, observer=events.append))
    cancelled = False
    if case["cancel_at"] is not None:
        started = mod.STARTED.setdefault(case["cancel_at"], asyncio.Event())
        waiter = asyncio.ensure_future(started.wait())
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if not task.done():
            task.cancel()
            cancelled = True
    outcome: Any
    try:
        outcome = await task
    except (ExecutionError, asyncio.CancelledError) as exc:
        outcome = exc
    where = f"seed {seed}: {case}"
    stopped = not isinstance(outcome, dict)
    log = mod.LOG
    if not stopped:
        assert outcome == {"results": [i * 10 for i in range(case["n"])]}, where
    if cancelled:
        assert isinstance(outcome, asyncio.CancelledError), where
        hits["cancellation mid-fan-out"] += 1
    if case["limit"] is not None:
        assert _branches_at_once(events) <= case["limit"], where
    opened = sorted(int(e.split()[1]) for e in log if e.startswith("open ") and e != "open pool")
    closed = sorted(int(e.split()[1]) for e in log if e.startswith("close ") and e != "close pool")
    assert opened == closed, where
    if "open pool" in log:
        assert log[-1] == "close pool", where
    if case["kind"] != "list" and any(e.startswith("draw") for e in log):
        assert "source closed" in log, where
    if isinstance(outcome, ExecutionError):
        errors = outcome.exceptions
        notes = [note for error in errors for note in getattr(error, "__notes__", [])]
        if any(isinstance(error, OSError) for error in errors):
            hits["source failing"] += 1
        if any("node 'step[" in note for note in notes):
            hits["item failing"] += 1
    if stopped and opened:
        hits["acquisition in a branch released after an early stop"] += 1
    if stopped and case["n"] < 0:
        hits["endless source stopped"] += 1
    if any(e.kind == "retry_scheduled" and e.node.startswith("step[") for e in events):
        hits["item retried"] += 1


async def test_campaign(make_module: Any) -> None:
    hits: Counter[str] = Counter()
    for seed in range(SCENARIOS):
        await _scenario(seed, make_module, hits)
    print(f"fan-out campaign hits: {dict(hits)}")
    missing = {k: (hits[k], n) for k, n in MINIMUM_HITS.items() if hits[k] < n}
    assert not missing, f"situations reached (got, wanted): {missing}; all hits: {dict(hits)}"
