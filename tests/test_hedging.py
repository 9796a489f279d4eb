"""Hedged attempts in runs (docs/contract.md#hedging, docs/hedging.md; the round's rules in
the core: core/tests/hedge.rs, tests/test_hedge_round.py).

Every call of a round is controlled by events the test sets (a call waits until the hedge
started, or until it is told to go on), so nothing here depends on how fast the machine is:
``hedge_after`` only decides when the next call may start, and the calls wait for each other.
A wait that would hang if the feature broke is bounded by ``asyncio.wait_for`` with a large
limit (a failure, never a timing assertion).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hamilton.lifecycle import NodeExecutionHook

from sdax_hamilton import (
    Driver,
    ExecutionError,
    Latency,
    RetryBudget,
    RunEvent,
    RunReport,
    execution,
    shutdown,
)
from sdax_hamilton.testing import instant_retries

LIMIT = 30.0  # seconds before a wait that should end counts as hung


def kinds(events: list[RunEvent], node: str = "fetch") -> list[tuple[str, int]]:
    return [(e.kind, e.attempt) for e in events if e.node == node]


async def run(plan: Any, events: list[RunEvent] | None = None, **kw: Any) -> Any:
    observers = (events.append,) if events is not None else None
    return await asyncio.wait_for(plan.execute(observer=observers, **kw), LIMIT)


# ------------------------------------------------------------------ declarations


@pytest.mark.parametrize(
    ("kwargs", "error", "fragment"),
    [
        ({"hedge_after": -0.1}, ValueError, "Invalid hedge_after: -0.1"),
        ({"hedge_after": float("inf")}, ValueError, "Invalid hedge_after: inf"),
        ({"hedge_after": float("nan")}, ValueError, "Invalid hedge_after: nan"),
        ({"hedge_after": True}, TypeError, "Invalid hedge_after: True"),
        ({"hedge_after": "0.1"}, TypeError, "Invalid hedge_after: '0.1'"),
        ({"hedge_after": 0.1, "hedges": 0}, ValueError, "Invalid hedges: 0"),
        ({"hedge_after": 0.1, "hedges": -2}, ValueError, "Invalid hedges: -2"),
        ({"hedge_after": 0.1, "hedges": True}, TypeError, "Invalid hedges: True"),
        ({"hedge_after": 0.1, "hedges": 2.0}, TypeError, "Invalid hedges: 2.0"),
        ({"hedges": 0}, ValueError, "hedges must be an integer of at least 1"),
    ],
)
def test_the_decorator_factory_checks_its_arguments(
    kwargs: dict[str, Any], error: type[Exception], fragment: str
) -> None:
    with pytest.raises(error, match=fragment.replace("(", r"\(").replace(".", r"\.")):
        execution(**kwargs)


def test_accepted_values_are_kept_on_the_declaration() -> None:
    def f() -> int:
        return 1

    for after in (0, 0.0, 0.25, 3, Latency(99.0, min_samples=5)):
        assert execution(hedge_after=after, hedges=3)(f) is f
        declaration = f.__sdax_declaration__  # type: ignore[attr-defined]
        assert declaration.hedge_after == after and declaration.hedges == 3
        del f.__sdax_declaration__  # type: ignore[attr-defined]


def test_shutdown_does_not_take_hedging() -> None:
    def owner() -> int:
        return 1

    with pytest.raises(TypeError):
        shutdown(of=owner, hedge_after=0.1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        shutdown(of=owner, hedges=2)  # type: ignore[call-arg]


def test_driver_refuses_hedging_an_owned_acquisition(make_module: Any) -> None:
    module = make_module(
        """
from sdax_hamilton import Acquisition, execution, shutdown

@execution(hedge_after=0.01)
def conn() -> int:
    return 1

@shutdown(of=conn)
def close(record: Acquisition[int]) -> None:
    pass
"""
    )
    with pytest.raises(ValueError, match=r"Node conn .* owned acquisition and cannot hedge"):
        Driver(module)


def test_driver_refuses_hedging_an_owned_acquisition_named_by_its_fields(
    make_module: Any,
) -> None:
    # Fields extracted from a resource call no user code of their own: a policy naming one
    # lands on the acquisition, which is refused.
    module = make_module(
        """
from hamilton.function_modifiers import extract_fields
from sdax_hamilton import Acquisition, execution, shutdown

@execution(hedge_after=0.01, target_="host")
@extract_fields({"host": str, "port": int})
def conn(dsn: str) -> dict:
    return {"host": dsn, "port": 1}

@shutdown(of=conn)
def close(acq: Acquisition[dict]) -> None:
    pass
"""
    )
    with pytest.raises(ValueError, match=r"Node conn .* owned acquisition and cannot hedge"):
        Driver(module)


def test_a_node_taking_the_resource_as_an_argument_may_hedge(make_module: Any) -> None:
    module = make_module(
        """
from sdax_hamilton import Acquisition, execution, shutdown

def conn() -> int:
    return 1

@shutdown(of=conn)
def close(record: Acquisition[int]) -> None:
    pass

@execution(hedge_after=0.01)
def uses(conn: int) -> int:
    return conn
"""
    )
    Driver(module)


# ------------------------------------------------------------------ rounds in runs

SLOW_FIRST = """
import asyncio
from sdax_hamilton import execution

STATE = {{"calls": 0, "drained": [], "downstream_saw": None}}
GO = asyncio.Event()

@execution(hedge_after={after}, hedges={hedges}, timeout={timeout})
async def fetch(key: str) -> str:
    number = STATE["calls"]
    STATE["calls"] += 1
    try:
        if number == 0:
            await asyncio.Event().wait()  # the slow call: never returns by itself
        await GO.wait()
    finally:
        STATE["drained"].append(number)
    return f"{{key}} from call {{number}}"

def downstream(fetch: str) -> str:
    STATE["downstream_saw"] = list(STATE["drained"])
    return fetch.upper()
"""


def slow_first(make_module: Any, after: float = 0.005, hedges: int = 1, timeout: Any = None) -> Any:
    return make_module(SLOW_FIRST.format(after=after, hedges=hedges, timeout=timeout))


async def test_a_hedge_wins_and_the_loser_is_drained_before_the_node_completes(
    make_module: Any,
) -> None:
    module = slow_first(make_module)
    module.GO.set()
    plan = Driver(module).prepare(["downstream"])
    events: list[RunEvent] = []
    report = RunReport()
    result = await asyncio.wait_for(
        plan.execute(inputs={"key": "k"}, observer=(events.append, report)), LIMIT
    )
    assert result == {"downstream": "K FROM CALL 1"}
    assert kinds(events) == [
        ("attempt_started", 1),
        ("hedge_started", 2),
        ("attempt_started", 2),
        ("attempt_cancelled", 1),
        ("attempt_succeeded", 2),
    ]
    cancelled = next(e for e in events if e.kind == "attempt_cancelled")
    assert cancelled.reason == "lost to attempt 2" and cancelled.error is None
    # The loser had drained before anything downstream ran.
    assert module.STATE["downstream_saw"] == [1, 0]
    node = report.nodes["fetch"]
    assert (node.hedges, node.won_by, node.attempts, node.outcome) == (1, 2, 2, "succeeded")
    assert report.nodes["downstream"].won_by is None  # not hedged


async def test_never_more_than_one_plus_hedges_calls(make_module: Any) -> None:
    module = make_module(
        """
import asyncio
from sdax_hamilton import execution

STARTED = []
THIRD = asyncio.Event()

@execution(hedge_after=0, hedges=2)
async def fetch() -> int:
    number = len(STARTED)
    STARTED.append(number)
    if number == 2:
        THIRD.set()
    await THIRD.wait()
    for _ in range(number * 5):
        await asyncio.sleep(0)  # call 0 is first to go on
    return number
"""
    )
    events: list[RunEvent] = []
    result = await run(Driver(module).prepare(["fetch"]), events)
    assert result == {"fetch": 0}
    assert module.STARTED == [0, 1, 2]
    assert [e.attempt for e in events if e.kind == "hedge_started"] == [2, 3]
    lost = [(e.attempt, e.reason) for e in events if e.kind == "attempt_cancelled"]
    assert sorted(lost) == [(2, "lost to attempt 1"), (3, "lost to attempt 1")]


FAILING = """
import asyncio
from sdax_hamilton import execution

STARTED = []
PAIR = [asyncio.Event() for _ in range(4)]

@execution(hedge_after=0.001, hedges=1, retries={retries}, initial_delay=0,
           retryable_exceptions=(LookupError,))
async def fetch() -> int:
    number = len(STARTED)
    STARTED.append(number)
    pair = PAIR[number // 2]
    if number % 2:
        pair.set()  # the hedge fails first, while call 0 still runs
        raise KeyError(f"call {{number + 1}}")
    await pair.wait()
    await asyncio.sleep(0)
    raise LookupError(f"call {{number + 1}}")
"""


async def test_an_all_failed_round_raises_the_first_calls_exception(make_module: Any) -> None:
    module = make_module(FAILING.format(retries=0))
    events: list[RunEvent] = []
    with pytest.raises(ExecutionError) as caught:
        await run(Driver(module).prepare(["fetch"]), events)
    (leaf,) = caught.value.exceptions
    assert type(leaf) is LookupError and str(leaf) == "call 1"
    assert any("hedged attempt 2 failed too, with KeyError" in n for n in leaf.__notes__)
    failed = [(e.attempt, type(e.error).__name__) for e in events if e.kind == "attempt_failed"]
    # The hedge's own failure ended nothing; the round's failure is call 0's exception.
    assert failed == [(2, "KeyError"), (1, "LookupError")]


async def test_a_retry_after_a_failed_round_starts_a_new_round(make_module: Any) -> None:
    module = make_module(FAILING.format(retries=1))
    events: list[RunEvent] = []
    report = RunReport()
    plan = Driver(module).prepare(["fetch"])
    with instant_retries(), pytest.raises(ExecutionError) as caught:
        await asyncio.wait_for(plan.execute(observer=(events.append, report)), LIMIT)
    (leaf,) = caught.value.exceptions
    assert str(leaf) == "call 3"  # the second round's first call
    assert module.STARTED == [0, 1, 2, 3]
    assert [e.attempt for e in events if e.kind == "hedge_started"] == [2, 4]
    assert [e.attempt for e in events if e.kind == "retry_scheduled"] == [1]
    assert report.nodes["fetch"].attempts == 4 and report.nodes["fetch"].hedges == 2


async def test_caller_cancellation_cancels_and_drains_every_call(make_module: Any) -> None:
    module = make_module(
        """
import asyncio
from sdax_hamilton import execution

STARTED = []
DRAINED = []
BOTH = asyncio.Event()

@execution(hedge_after=0.001, hedges=1)
async def fetch() -> int:
    number = len(STARTED)
    STARTED.append(number)
    if number == 1:
        BOTH.set()
    try:
        await asyncio.Event().wait()
    finally:
        await asyncio.sleep(0)  # a drain that takes a step
        DRAINED.append(number)
    return number
"""
    )
    events: list[RunEvent] = []
    task = asyncio.ensure_future(Driver(module).prepare(["fetch"]).execute(observer=events.append))
    await asyncio.wait_for(module.BOTH.wait(), LIMIT)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, LIMIT)
    assert sorted(module.DRAINED) == [0, 1]
    cancelled = sorted(e.attempt for e in events if e.kind == "attempt_cancelled")
    assert cancelled == [1, 2]
    assert all(e.reason is None for e in events if e.kind == "attempt_cancelled")
    finished = [e for e in events if e.kind == "run_finished"]
    assert finished and isinstance(finished[0].error, asyncio.CancelledError)


async def test_each_call_has_its_own_timeout(make_module: Any) -> None:
    module = make_module(
        """
import asyncio
from sdax_hamilton import execution

TIMED_OUT = asyncio.Event()
STARTED = []

@execution(hedge_after=0.05, hedges=1, timeout=0.1)
async def fetch() -> int:
    number = len(STARTED)
    STARTED.append(number)
    if number == 0:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            TIMED_OUT.set()
            raise
    await TIMED_OUT.wait()  # the hedge outlives the first call's timeout (by 50 ms)
    return number
"""
    )
    events: list[RunEvent] = []
    assert await run(Driver(module).prepare(["fetch"]), events) == {"fetch": 1}
    assert kinds(events) == [
        ("attempt_started", 1),
        ("hedge_started", 2),
        ("attempt_started", 2),
        ("attempt_timed_out", 1),
        ("attempt_failed", 1),
        ("attempt_succeeded", 2),
    ]
    failed = next(e for e in events if e.kind == "attempt_failed")
    assert isinstance(failed.error, TimeoutError)


async def test_the_run_deadline_clips_each_call(make_module: Any) -> None:
    module = slow_first(make_module, after=0.01, hedges=1, timeout=10.0)
    events: list[RunEvent] = []
    with pytest.raises(ExecutionError) as caught:
        await run(Driver(module).prepare(["fetch"]), events, inputs={"key": "k"}, timeout=0.1)
    assert isinstance(caught.value.exceptions[0], TimeoutError)
    started = [(e.attempt, e.clipped) for e in events if e.kind == "attempt_started"]
    assert started == [(1, True), (2, True)]
    assert sorted(module.STATE["drained"]) == [0, 1]
    timed_out = [e.attempt for e in events if e.kind == "attempt_timed_out"]
    assert sorted(timed_out) == [1, 2]


# ------------------------------------------------------------------ shared objects

GUARDED = """
import asyncio
from sdax_hamilton import Bulkhead, execution

BULKHEAD = Bulkhead({limit}, max_waiting=5)
STARTED = []
GO = asyncio.Event()

@execution(hedge_after=0.001, hedges=3, {options})
async def fetch() -> int:
    number = len(STARTED)
    STARTED.append(number)
    await GO.wait()
    return number
"""


def guarded(make_module: Any, options: str, limit: int = 1) -> Any:
    return make_module(GUARDED.format(limit=limit, options=options))


async def _hold_then_go(module: Any, ticks: int = 50) -> None:
    """Let hedges fall due many times, then let every call finish."""
    for _ in range(ticks):
        await asyncio.sleep(0.002)
    module.GO.set()


async def test_a_hedge_finding_no_free_permit_is_skipped(make_module: Any) -> None:
    module = guarded(make_module, "bulkhead=BULKHEAD", limit=1)
    events: list[RunEvent] = []
    plan = Driver(module).prepare(["fetch"])
    go = asyncio.ensure_future(_hold_then_go(module))
    assert await run(plan, events) == {"fetch": 0}
    await go
    assert module.STARTED == [0]
    assert kinds(events) == [("attempt_started", 1), ("attempt_succeeded", 1)]
    assert (module.BULKHEAD.in_use, module.BULKHEAD.waiting) == (0, 0)


async def test_each_hedge_takes_a_permit_of_its_own(make_module: Any) -> None:
    module = guarded(make_module, "bulkhead=BULKHEAD", limit=2)
    events: list[RunEvent] = []
    plan = Driver(module).prepare(["fetch"])
    go = asyncio.ensure_future(_hold_then_go(module))
    assert await run(plan, events) == {"fetch": 0}
    await go
    assert module.STARTED == [0, 1]  # two permits: call 0 and one hedge
    assert [e.attempt for e in events if e.kind == "hedge_started"] == [2]
    assert (module.BULKHEAD.in_use, module.BULKHEAD.waiting) == (0, 0)


async def test_an_open_circuit_stops_hedges(make_module: Any) -> None:
    module = make_module(
        """
import asyncio
from sdax_hamilton import CircuitBreaker, execution

BREAKER = CircuitBreaker(failure_ratio=1.0, min_calls=1, break_for=60.0)
STARTED = []
FAILED = asyncio.Event()

@execution(breaker=BREAKER, fallback=lambda exc: 0)
async def other() -> int:
    await asyncio.sleep(0)
    FAILED.set()
    raise ConnectionError("down")

@execution(hedge_after=0.001, hedges=3, breaker=BREAKER)
async def fetch() -> int:
    STARTED.append(len(STARTED))
    await FAILED.wait()
    for _ in range(20):
        await asyncio.sleep(0.002)  # hedges fall due while the circuit is open
    return 7
"""
    )
    events: list[RunEvent] = []
    result = await run(Driver(module).prepare(["fetch", "other"]), events)
    assert result == {"fetch": 7, "other": 0}
    assert module.BREAKER.state == "open"
    assert module.STARTED == [0]
    assert not [e for e in events if e.kind == "hedge_started"]


async def test_the_retry_budget_counts_each_hedge_as_a_retry(make_module: Any) -> None:
    module = guarded(make_module, "retries=0")
    # ratio 0 and min_per_second * window = 1: one retry in the window, then none.
    budget = RetryBudget(ratio=0.0, min_per_second=0.1, window=10.0)
    events: list[RunEvent] = []
    plan = Driver(module, retry_budget=budget).prepare(["fetch"])
    go = asyncio.ensure_future(_hold_then_go(module))
    assert await run(plan, events) == {"fetch": 0}
    await go
    assert module.STARTED == [0, 1]
    assert [e.attempt for e in events if e.kind == "hedge_started"] == [2]
    assert budget.available == pytest.approx(0.0)


# ------------------------------------------------------------------ latency


async def test_latency_follows_the_nodes_successes_across_runs(make_module: Any) -> None:
    module = make_module(
        """
import asyncio
from sdax_hamilton import Latency, execution

STARTED = []
SLOW = [False]

@execution(hedge_after=Latency(50.0, min_samples=3, initial=3600.0), hedges=1)
async def fetch() -> int:
    number = len(STARTED)
    STARTED.append(number)
    if SLOW[0] and number == 3:
        await asyncio.Event().wait()  # only a hedge lets this run end
    return number
"""
    )
    driver = Driver(module)
    plan = driver.prepare(["fetch"])
    for expected in range(3):  # ``initial`` (an hour) until three successes: no hedge
        assert await run(plan) == {"fetch": expected}
    module.SLOW[0] = True
    events: list[RunEvent] = []
    # Another plan of the same Driver shares the node's window.
    assert await run(driver.prepare(["fetch"]), events) == {"fetch": 4}
    assert [e.attempt for e in events if e.kind == "hedge_started"] == [2]
    # A new Driver starts with an empty window: ``initial`` again.
    fresh: list[RunEvent] = []
    module.SLOW[0] = False
    assert await run(Driver(module).prepare(["fetch"]), fresh) == {"fetch": 5}
    assert not [e for e in fresh if e.kind == "hedge_started"]


# ------------------------------------------------------------------ hooks, Hamilton


class Calls(NodeExecutionHook):
    def __init__(self) -> None:
        self.before: list[str] = []
        self.after: list[tuple[str, bool]] = []

    def run_before_node_execution(self, *, node_name: str, **kwargs: Any) -> None:
        self.before.append(node_name)

    def run_after_node_execution(self, *, node_name: str, success: bool, **kwargs: Any) -> None:
        self.after.append((node_name, success))


async def test_node_hooks_see_every_call(make_module: Any) -> None:
    module = slow_first(make_module)
    module.GO.set()
    hooks = Calls()
    plan = Driver(module, adapters=[hooks]).prepare(["fetch"])
    assert await run(plan, inputs={"key": "k"}) == {"fetch": "k from call 1"}
    assert hooks.before == ["fetch", "fetch"]
    assert sorted(hooks.after) == [("fetch", False), ("fetch", True)]


async def test_hedging_with_real_hamilton_decorators(make_module: Any) -> None:
    module = make_module(
        """
import asyncio
from hamilton.function_modifiers import parameterize, value
from sdax_hamilton import execution

STARTED = {}

@execution(hedge_after=0.001, hedges=1, target_=["a", "b"])
@parameterize(a={"base": value(1)}, b={"base": value(10)})
async def fetched(base: int) -> int:
    calls = STARTED.setdefault(base, [])
    number = len(calls)
    calls.append(number)
    if number == 0:
        await asyncio.Event().wait()
    return base + number

def total(a: int, b: int) -> int:
    return a + b
"""
    )
    events: list[RunEvent] = []
    assert await run(Driver(module).prepare(["total"]), events) == {"total": 13}
    for node in ("a", "b"):
        assert kinds(events, node)[-2:] == [("attempt_cancelled", 1), ("attempt_succeeded", 2)]


async def test_an_unhedged_node_is_untouched(make_module: Any) -> None:
    module = make_module(
        """
from sdax_hamilton import execution

@execution(retries=1)
async def fetch() -> int:
    return 1
"""
    )
    events: list[RunEvent] = []
    assert await run(Driver(module).prepare(["fetch"]), events) == {"fetch": 1}
    assert kinds(events) == [("attempt_started", 1), ("attempt_succeeded", 1)]


async def test_a_failed_rounds_error_keeps_no_call_or_task(make_module: Any) -> None:
    from sdax_hamilton._executor.hedging import Member

    module = make_module(FAILING.format(retries=0))
    with pytest.raises(ExecutionError) as caught:
        await run(Driver(module).prepare(["fetch"]))
    leaf = caught.value.exceptions[0]
    tb = leaf.__traceback__
    seen = 0
    while tb is not None:
        for value in tb.tb_frame.f_locals.values():
            assert not isinstance(value, asyncio.Task | Member), tb.tb_frame
            if isinstance(value, list):
                assert not any(isinstance(item, Member) for item in value), tb.tb_frame
        seen += 1
        tb = tb.tb_next
    assert seen


async def test_span_observer_ends_a_span_per_call_of_a_round(make_module: Any) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from sdax_hamilton.contrib.opentelemetry import SpanObserver

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    module = slow_first(make_module)
    module.GO.set()
    plan = Driver(module).prepare(["fetch"])
    observer = SpanObserver(provider.get_tracer("tests"))
    await asyncio.wait_for(plan.execute(inputs={"key": "k"}, observer=observer), LIMIT)
    calls = sorted(
        (dict(span.attributes or {})["sdax_hamilton.attempt"], span.status.status_code.name)
        for span in exporter.get_finished_spans()
        if span.name == "fetch"
    )
    assert [number for number, _ in calls] == [1, 2]  # both calls' spans ended


async def test_the_timeline_draws_each_call_and_the_hedge(make_module: Any) -> None:
    import xml.etree.ElementTree as ElementTree

    module = slow_first(make_module)
    module.GO.set()
    report = RunReport()
    plan = Driver(module).prepare(["downstream"])
    await asyncio.wait_for(plan.execute(inputs={"key": "k"}, observer=report), LIMIT)
    svg = report.to_svg()
    titles = [
        t.text or "" for t in ElementTree.fromstring(svg).iter("{http://www.w3.org/2000/svg}title")
    ]
    assert any(t.startswith("fetch: attempt 1 cancelled") for t in titles)
    assert any(t.startswith("fetch: attempt 2 succeeded") for t in titles)
    assert any(t.startswith("fetch: hedge started") for t in titles)
    trace = json.dumps(report.to_chrome_trace())
    assert "hedge started" in trace and trace.count('"outcome": "cancelled"') == 1
