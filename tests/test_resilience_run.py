"""Bulkheads, circuit breakers, retry budgets and fallbacks at work in runs
(docs/resilience.md; the objects themselves: tests/test_resilience_objects.py, the core's
rules: core/tests/shared_rules.rs, core/tests/shared_run.rs).

Real modules, real timers, concurrent runs. Waits are driven by events the test controls
(a holder keeps its permit until released); timing bounds are generous.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from support import loops as loop_support

from sdax_hamilton import (
    Bulkhead,
    BulkheadFull,
    CircuitBreaker,
    CircuitOpen,
    Driver,
    ExecutionError,
    RetryBudget,
    RunEvent,
    RunReport,
    execution,
    shutdown,
)

# ------------------------------------------------------------------ declarations


def test_execution_refuses_objects_of_the_wrong_kind() -> None:
    with pytest.raises(TypeError, match="Invalid bulkhead: int"):
        execution(bulkhead=2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Invalid breaker: Bulkhead"):
        execution(breaker=Bulkhead(1))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Invalid bulkhead: CircuitBreaker"):
        execution(bulkhead=CircuitBreaker())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Invalid fallback: int"):
        execution(fallback=3)  # type: ignore[arg-type]


def test_execution_takes_them_and_returns_the_function_itself() -> None:
    def f(x: int) -> int:
        return x

    bulkhead, breaker = Bulkhead(2), CircuitBreaker()
    assert execution(bulkhead=bulkhead, breaker=breaker, fallback=lambda exc: 0)(f) is f
    declaration = f.__sdax_declaration__  # type: ignore[attr-defined]
    assert declaration.bulkhead is bulkhead and declaration.breaker is breaker


def test_shutdown_takes_none_of_them() -> None:
    def owner() -> int:
        return 1

    for name, value in (("bulkhead", Bulkhead(1)), ("breaker", CircuitBreaker())):
        with pytest.raises(TypeError):
            shutdown(of=owner, **{name: value})
    with pytest.raises(TypeError):
        shutdown(of=owner, fallback=lambda exc: None)  # type: ignore[call-arg]


def test_driver_retry_budget_must_be_a_retry_budget(make_module: Any) -> None:
    module = make_module("def a() -> int:\n    return 1\n")
    with pytest.raises(TypeError, match="Invalid retry_budget: float"):
        Driver(module, retry_budget=0.2)  # type: ignore[arg-type]
    budget = RetryBudget()
    Driver(module, retry_budget=budget)
    Driver(module, retry_budget=budget)  # one budget, several Drivers


def test_fallback_refused_on_an_owned_acquisition(make_module: Any) -> None:
    module = make_module(
        """
from sdax_hamilton import Acquisition, execution, shutdown

@execution(fallback=lambda exc: 0)
def conn() -> int:
    return 1

@shutdown(of=conn)
def close(record: Acquisition[int]) -> None:
    pass

@execution(fallback=lambda exc: 0)
def uses(conn: int) -> int:
    return conn
"""
    )
    with pytest.raises(ValueError, match=r"Node conn .* owned acquisition and cannot have a"):
        Driver(module)


def test_fallback_allowed_on_a_node_taking_the_resource(make_module: Any) -> None:
    module = make_module(
        """
from sdax_hamilton import Acquisition, execution, shutdown

def conn() -> int:
    return 1

@shutdown(of=conn)
def close(record: Acquisition[int]) -> None:
    pass

@execution(fallback=lambda exc: 0)
def uses(conn: int) -> int:
    return conn
"""
    )
    Driver(module)


# ------------------------------------------------------------------ bulkheads

HELD = """
import asyncio
from sdax_hamilton import Bulkhead, BulkheadFull, execution

BULKHEAD = Bulkhead({limit}, max_waiting={waiting}, name="db")
GATE = asyncio.Event()
RUNNING = [0]
PEAK = [0]
ORDER: list[int] = []

@execution(bulkhead=BULKHEAD{extra})
async def query(i: int) -> int:
    ORDER.append(i)
    RUNNING[0] += 1
    PEAK[0] = max(PEAK[0], RUNNING[0])
    try:
        await GATE.wait()
    finally:
        RUNNING[0] -= 1
    return i

@execution(bulkhead=BULKHEAD)
async def other(query: int) -> int:
    RUNNING[0] += 1
    PEAK[0] = max(PEAK[0], RUNNING[0])
    try:
        await asyncio.sleep(0)
    finally:
        RUNNING[0] -= 1
    return query
"""


def held(make_module: Any, limit: int = 1, waiting: int = 10, extra: str = "") -> Any:
    return make_module(HELD.format(limit=limit, waiting=waiting, extra=extra))


async def until(predicate: Any, limit: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + limit
    while not predicate():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.001)


async def test_bulkhead_limits_calls_across_runs_and_nodes_in_fifo_order(make_module: Any) -> None:
    module = held(make_module, limit=2)
    plan = Driver(module).prepare(["other"])
    runs = [asyncio.create_task(plan.execute(inputs={"i": i})) for i in range(6)]
    await until(lambda: module.BULKHEAD.waiting == 4)
    assert module.BULKHEAD.in_use == 2
    assert module.ORDER == [0, 1]
    module.GATE.set()
    results = await asyncio.gather(*runs)
    assert [r["other"] for r in results] == list(range(6))
    assert module.PEAK[0] <= 2
    assert module.ORDER == list(range(6))  # first in, first out
    assert (module.BULKHEAD.in_use, module.BULKHEAD.waiting) == (0, 0)


async def test_bulkhead_full_fails_at_once_without_a_call(make_module: Any) -> None:
    module = held(make_module, limit=1, waiting=0)
    plan = Driver(module).prepare(["query"])
    holder = asyncio.create_task(plan.execute(inputs={"i": 0}))
    await until(lambda: module.BULKHEAD.in_use == 1)
    events: list[RunEvent] = []
    report = RunReport()
    with pytest.raises(ExecutionError) as caught:
        await plan.execute(inputs={"i": 1}, observer=[events.append, report])
    (leaf,) = caught.value.exceptions
    assert isinstance(leaf, BulkheadFull) and leaf.bulkhead is module.BULKHEAD
    assert module.ORDER == [0]  # never called
    kinds = [e.kind for e in events if e.node == "query"]
    assert kinds == ["bulkhead_rejected", "attempt_started", "attempt_failed"]
    assert report.nodes["query"].rejections == 1
    module.GATE.set()
    await holder
    assert (module.BULKHEAD.in_use, module.BULKHEAD.waiting) == (0, 0)


async def test_bulkhead_full_is_retried_when_listed(make_module: Any) -> None:
    module = held(
        make_module,
        limit=1,
        waiting=0,
        extra=", retries=50, initial_delay=0.01, backoff_factor=1.0, "
        "retryable_exceptions=(BulkheadFull,)",
    )
    plan = Driver(module).prepare(["query"])
    holder = asyncio.create_task(plan.execute(inputs={"i": 0}))
    await until(lambda: module.BULKHEAD.in_use == 1)
    second = asyncio.create_task(plan.execute(inputs={"i": 1}))
    await asyncio.sleep(0.05)
    module.GATE.set()
    assert (await holder)["query"] == 0
    assert (await second)["query"] == 1
    assert (module.BULKHEAD.in_use, module.BULKHEAD.waiting) == (0, 0)


async def test_the_wait_is_not_part_of_the_attempt_timeout(make_module: Any) -> None:
    module = make_module(
        """
import asyncio
from sdax_hamilton import Bulkhead, execution

BULKHEAD = Bulkhead(1, max_waiting=5)

@execution(bulkhead=BULKHEAD, timeout=0.5)
async def query(i: int) -> int:
    await asyncio.sleep(0.3)
    return i
"""
    )
    plan = Driver(module).prepare(["query"])
    holder = asyncio.create_task(plan.execute(inputs={"i": 0}))
    await until(lambda: module.BULKHEAD.in_use == 1)
    report = RunReport()
    # 0.3 s waiting + 0.3 s running: more than the attempt timeout, which the wait is not
    # part of.
    assert (await plan.execute(inputs={"i": 1}, observer=report))["query"] == 1
    await holder
    assert report.nodes["query"].bulkhead_wait >= 0.2
    assert report.nodes["query"].timeouts == 0
    assert (module.BULKHEAD.in_use, module.BULKHEAD.waiting) == (0, 0)


async def test_the_wait_is_part_of_the_run_deadline(make_module: Any) -> None:
    module = held(make_module, limit=1)
    plan = Driver(module).prepare(["query"])
    holder = asyncio.create_task(plan.execute(inputs={"i": 0}))
    await until(lambda: module.BULKHEAD.in_use == 1)
    with pytest.raises(ExecutionError) as caught:
        await plan.execute(inputs={"i": 1}, timeout=0.1)
    (leaf,) = caught.value.exceptions
    assert isinstance(leaf, TimeoutError)
    assert module.ORDER == [0]
    assert module.BULKHEAD.waiting == 0
    module.GATE.set()
    await holder
    assert (module.BULKHEAD.in_use, module.BULKHEAD.waiting) == (0, 0)


async def test_caller_cancellation_removes_the_waiter(make_module: Any) -> None:
    module = held(make_module, limit=1)
    plan = Driver(module).prepare(["query"])
    holder = asyncio.create_task(plan.execute(inputs={"i": 0}))
    await until(lambda: module.BULKHEAD.in_use == 1)
    waiter = asyncio.create_task(plan.execute(inputs={"i": 1}))
    await until(lambda: module.BULKHEAD.waiting == 1)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert module.BULKHEAD.waiting == 0
    module.GATE.set()
    await holder
    assert module.ORDER == [0]
    assert (module.BULKHEAD.in_use, module.BULKHEAD.waiting) == (0, 0)


async def test_another_node_failing_removes_the_waiter(make_module: Any) -> None:
    module = make_module(
        HELD.format(limit=1, waiting=10, extra="")
        + """
async def fails(i: int) -> int:
    await asyncio.sleep(0.05)
    raise ValueError("boom")

def both(query: int, fails: int) -> int:
    return query + fails
"""
    )
    driver = Driver(module)
    holder = asyncio.create_task(driver.prepare(["query"]).execute(inputs={"i": 0}))
    await until(lambda: module.BULKHEAD.in_use == 1)
    with pytest.raises(ExecutionError) as caught:
        await driver.prepare(["both"]).execute(inputs={"i": 1})
    (leaf,) = caught.value.exceptions
    assert isinstance(leaf, ValueError)
    assert module.BULKHEAD.waiting == 0
    module.GATE.set()
    await holder
    assert module.ORDER == [0]
    assert (module.BULKHEAD.in_use, module.BULKHEAD.waiting) == (0, 0)


async def test_a_timed_out_attempt_holds_its_permit_until_it_has_drained(make_module: Any) -> None:
    module = make_module(
        """
import asyncio
from sdax_hamilton import Bulkhead, execution

BULKHEAD = Bulkhead(1, max_waiting=5)
LOG: list[str] = []

@execution(bulkhead=BULKHEAD, timeout=0.05)
async def slow(i: int) -> int:
    LOG.append(f"start {i}")
    try:
        await asyncio.sleep(10 if i == 0 else 0)
    except asyncio.CancelledError:
        await asyncio.sleep(0.2)  # unwinding takes a while
        LOG.append(f"drained {i}")
        raise
    return i
"""
    )
    plan = Driver(module).prepare(["slow"])
    first = asyncio.create_task(plan.execute(inputs={"i": 0}))
    await until(lambda: module.BULKHEAD.in_use == 1)
    second = asyncio.create_task(plan.execute(inputs={"i": 1}))
    with pytest.raises(ExecutionError):
        await first
    assert (await second)["slow"] == 1
    assert module.LOG == ["start 0", "drained 0", "start 1"]
    assert (module.BULKHEAD.in_use, module.BULKHEAD.waiting) == (0, 0)


# ------------------------------------------------------------------ breakers

BREAKER = """
import asyncio
from sdax_hamilton import Bulkhead, CircuitBreaker, CircuitOpen, execution

BREAKER = CircuitBreaker(min_calls=2, failure_ratio=0.5, window=30.0, break_for=0.2{name})
BULKHEAD = Bulkhead(1)
FAIL = [True]
CALLS = [0]
ERROR = {error}

@execution(breaker=BREAKER, bulkhead=BULKHEAD{extra})
async def fetch(i: int) -> int:
    CALLS[0] += 1
    await asyncio.sleep(0)
    if FAIL[0]:
        raise ERROR("down")
    return i
"""


def breaker_module(
    make_module: Any, error: str = "ConnectionError", extra: str = "", name: str = ""
) -> Any:
    return make_module(BREAKER.format(error=error, extra=extra, name=name))


async def test_breaker_opens_fails_fast_then_closes_after_a_probe(
    make_module: Any, caplog: pytest.LogCaptureFixture
) -> None:
    module = breaker_module(make_module)
    plan = Driver(module).prepare(["fetch"])
    caplog.set_level(logging.INFO, logger="sdax_hamilton")
    for i in range(2):
        with pytest.raises(ExecutionError) as caught:
            await plan.execute(inputs={"i": i})
        assert isinstance(caught.value.exceptions[0], ConnectionError)
    assert module.BREAKER.state == "open"
    assert any(
        r.levelno == logging.WARNING and "circuit breaker of 'fetch' opened" in r.getMessage()
        for r in caplog.records
    )
    events: list[RunEvent] = []
    with pytest.raises(ExecutionError) as caught:
        await plan.execute(inputs={"i": 2}, observer=events.append)
    (leaf,) = caught.value.exceptions
    assert isinstance(leaf, CircuitOpen) and leaf.breaker is module.BREAKER
    assert 0.0 < leaf.retry_after <= 0.2
    assert module.CALLS[0] == 2  # no call
    assert module.BULKHEAD.in_use == 0  # checked before the bulkhead: no permit taken
    assert "circuit_rejected" in [e.kind for e in events]
    await asyncio.sleep(0.25)
    module.FAIL[0] = False
    assert (await plan.execute(inputs={"i": 3}))["fetch"] == 3
    assert module.BREAKER.state == "closed"
    assert any(
        r.levelno == logging.INFO and "circuit breaker of 'fetch' closed" in r.getMessage()
        for r in caplog.records
    )


async def test_breaker_logs_its_name(make_module: Any, caplog: pytest.LogCaptureFixture) -> None:
    module = breaker_module(make_module, name=', name="payments"')
    plan = Driver(module).prepare(["fetch"])
    caplog.set_level(logging.WARNING, logger="sdax_hamilton")
    for i in range(2):
        with pytest.raises(ExecutionError):
            await plan.execute(inputs={"i": i})
    assert any("circuit breaker 'payments' opened" in r.getMessage() for r in caplog.records)


async def test_breaker_ignores_exceptions_its_node_does_not_retry(make_module: Any) -> None:
    module = breaker_module(make_module, error="ValueError")
    plan = Driver(module).prepare(["fetch"])
    for i in range(5):
        with pytest.raises(ExecutionError):
            await plan.execute(inputs={"i": i})
    assert module.BREAKER.state == "closed"
    assert module.BREAKER._core.outcomes(time.monotonic()) == (0, 0)


async def test_breaker_records_timeouts(make_module: Any) -> None:
    module = make_module(
        """
import asyncio
from sdax_hamilton import CircuitBreaker, execution

BREAKER = CircuitBreaker(min_calls=2, failure_ratio=0.5, break_for=10.0)

@execution(breaker=BREAKER, timeout=0.01)
async def slow() -> int:
    await asyncio.sleep(1)
    return 1
"""
    )
    plan = Driver(module).prepare(["slow"])
    for _ in range(2):
        with pytest.raises(ExecutionError):
            await plan.execute()
    assert module.BREAKER.state == "open"


async def test_circuit_open_is_retried_when_listed_with_its_retry_after(make_module: Any) -> None:
    module = breaker_module(
        make_module,
        extra=", retries=3, initial_delay=0.0, "
        "retryable_exceptions=(ConnectionError, CircuitOpen), "
        "retry_after=lambda exc: getattr(exc, 'retry_after', None)",
    )
    plan = Driver(module).prepare(["fetch"])

    # Two failures open it; the third attempt is rejected, waits retry_after, then a probe
    # goes through and succeeds.
    async def heal() -> None:
        await until(lambda: module.BREAKER.state == "open")
        module.FAIL[0] = False

    healer = asyncio.create_task(heal())
    events: list[RunEvent] = []
    assert (await plan.execute(inputs={"i": 7}, observer=events.append))["fetch"] == 7
    await healer
    assert module.BREAKER.state == "closed"
    assert module.CALLS[0] == 3  # the rejected attempt made no call
    assert [e.kind for e in events if e.kind.endswith("_rejected")] == ["circuit_rejected"]


# ------------------------------------------------------------------ retry budgets

BUDGETED = """
from sdax_hamilton import Acquisition, execution, shutdown

CALLS = [0]
RELEASES = [0]

@execution(retries=3, initial_delay=0.0)
def flaky() -> int:
    CALLS[0] += 1
    raise ConnectionError("down")

def conn() -> int:
    return 1

@shutdown(of=conn, retries=2, initial_delay=0.0)
def close(record: Acquisition[int]) -> None:
    RELEASES[0] += 1
    if RELEASES[0] < 3:
        raise ConnectionError("still closing")

def uses(conn: int) -> int:
    return conn
"""


async def test_a_refused_retry_fails_the_node_with_its_last_exception(make_module: Any) -> None:
    module = make_module(BUDGETED)
    budget = RetryBudget(ratio=0.0, min_per_second=0.0)
    plan = Driver(module, retry_budget=budget).prepare(["flaky"])
    events: list[RunEvent] = []
    report = RunReport()
    with pytest.raises(ExecutionError) as caught:
        await plan.execute(observer=[events.append, report])
    (leaf,) = caught.value.exceptions
    assert isinstance(leaf, ConnectionError)
    assert module.CALLS[0] == 1
    assert any("the retry budget was exhausted" in note for note in leaf.__notes__)
    skipped = [e for e in events if e.kind == "retry_skipped"]
    assert [(e.node, e.reason) for e in skipped] == [("flaky", "budget")]
    assert report.nodes["flaky"].retry_skipped
    assert budget._core.counts(time.monotonic()) == (1, 0)


async def test_first_attempts_deposit_and_retries_take(make_module: Any) -> None:
    module = make_module(BUDGETED)
    # No floor: each first attempt allows half a retry.
    budget = RetryBudget(ratio=0.5, min_per_second=0.0)
    plan = Driver(module, retry_budget=budget).prepare(["flaky"])
    with pytest.raises(ExecutionError):
        await plan.execute()  # 1 first attempt: 0.5 retries, none taken
    assert module.CALLS[0] == 1
    with pytest.raises(ExecutionError):
        await plan.execute()  # 2 first attempts: 1 retry
    assert module.CALLS[0] == 3
    assert budget._core.counts(time.monotonic()) == (2, 1)


async def test_releases_are_never_budgeted(make_module: Any) -> None:
    module = make_module(BUDGETED)
    budget = RetryBudget(ratio=0.0, min_per_second=0.0)
    plan = Driver(module, retry_budget=budget).prepare(["uses"])
    assert (await plan.execute())["uses"] == 1
    assert module.RELEASES[0] == 3


async def test_deadline_skips_say_so(make_module: Any) -> None:
    module = make_module(
        """
from sdax_hamilton import execution

@execution(retries=3, initial_delay=10.0, backoff_factor=1.0)
def flaky() -> int:
    raise ConnectionError("down")
"""
    )
    events: list[RunEvent] = []
    with pytest.raises(ExecutionError):
        await Driver(module).prepare(["flaky"]).execute(timeout=1.0, observer=events.append)
    assert [e.reason for e in events if e.kind == "retry_skipped"] == ["deadline"]


# ------------------------------------------------------------------ fallbacks

FALLBACK = """
import asyncio
from sdax_hamilton import CircuitBreaker, execution

SEEN: list[BaseException] = []

def plain(exc: BaseException) -> int:
    SEEN.append(exc)
    return -1

async def later(exc: BaseException) -> int:
    SEEN.append(exc)
    await asyncio.sleep(0)
    return -2

def wrong(exc: BaseException) -> int:
    return "not an int"

def raises(exc: BaseException) -> int:
    raise LookupError("no fallback value")

@execution(retries=2, initial_delay=0.0, fallback={fallback})
def enrich(x: int) -> int:
    raise ConnectionError("down")

def total(x: int, enrich: int) -> int:
    return x + enrich
"""


@pytest.mark.parametrize(("fallback", "value"), [("plain", -1), ("later", -2)])
async def test_fallback_value_is_used_after_retries(
    make_module: Any, caplog: pytest.LogCaptureFixture, fallback: str, value: int
) -> None:
    module = make_module(FALLBACK.format(fallback=fallback))
    events: list[RunEvent] = []
    report = RunReport()
    caplog.set_level(logging.WARNING, logger="sdax_hamilton")
    result = (
        await Driver(module)
        .prepare(["total"])
        .execute(inputs={"x": 10}, observer=[events.append, report])
    )
    assert result == {"total": 10 + value}
    (original,) = module.SEEN
    assert isinstance(original, ConnectionError)
    used = [e for e in events if e.kind == "fallback_used"]
    assert len(used) == 1 and used[0].node == "enrich" and used[0].error is original
    assert report.nodes["enrich"].fallback and report.nodes["enrich"].attempts == 3
    assert any(
        r.levelno == logging.WARNING and "node 'enrich' failed for good" in r.getMessage()
        for r in caplog.records
    )


async def test_a_fallback_value_failing_the_check_fails_the_node(make_module: Any) -> None:
    module = make_module(FALLBACK.format(fallback="wrong"))
    with pytest.raises(ExecutionError) as caught:
        await Driver(module).prepare(["total"]).execute(inputs={"x": 1})
    (leaf,) = caught.value.exceptions
    assert isinstance(leaf, TypeError) and "Invalid output from enrich" in str(leaf)
    assert isinstance(leaf.__cause__, ConnectionError)


async def test_a_raising_fallback_fails_the_node_with_its_error(make_module: Any) -> None:
    module = make_module(FALLBACK.format(fallback="raises"))
    with pytest.raises(ExecutionError) as caught:
        await Driver(module).prepare(["total"]).execute(inputs={"x": 1})
    (leaf,) = caught.value.exceptions
    assert isinstance(leaf, LookupError)
    assert isinstance(leaf.__cause__, ConnectionError)


async def test_no_fallback_while_the_run_is_stopping(make_module: Any) -> None:
    module = make_module(
        """
import asyncio
from sdax_hamilton import execution

CALLED: list[BaseException] = []

@execution(fallback=CALLED.append)
async def enrich(x: int) -> int:
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        raise RuntimeError("turned the cancellation into an error")
    return x

async def fails(x: int) -> int:
    await asyncio.sleep(0.02)
    raise ValueError("boom")

def total(enrich: int, fails: int) -> int:
    return enrich + fails
"""
    )
    with pytest.raises(ExecutionError):
        await Driver(module).prepare(["total"]).execute(inputs={"x": 1})
    assert module.CALLED == []


async def test_fallback_for_circuit_open(make_module: Any) -> None:
    module = make_module(
        """
from sdax_hamilton import CircuitBreaker, execution

BREAKER = CircuitBreaker(min_calls=1, failure_ratio=1.0, break_for=60.0)
SEEN: list[BaseException] = []

def remember(exc: BaseException) -> int:
    SEEN.append(exc)
    return 0

@execution(breaker=BREAKER, fallback=remember)
def enrich(x: int) -> int:
    raise ConnectionError("down")
"""
    )
    plan = Driver(module).prepare(["enrich"])
    assert await plan.execute(inputs={"x": 1}) == {"enrich": 0}
    assert await plan.execute(inputs={"x": 1}) == {"enrich": 0}
    first, second = module.SEEN
    assert isinstance(first, ConnectionError) and isinstance(second, CircuitOpen)


# ------------------------------------------------------------------ observability


async def test_hamilton_node_hooks_see_a_rejected_attempt_fail(make_module: Any) -> None:
    from hamilton.lifecycle import NodeExecutionHook

    class Hooks(NodeExecutionHook):
        def __init__(self) -> None:
            self.seen: list[tuple[Any, ...]] = []

        def run_before_node_execution(self, *, node_name: str, **kwargs: Any) -> None:
            self.seen.append(("before", node_name))

        def run_after_node_execution(
            self, *, node_name: str, success: bool, error: BaseException | None, **kwargs: Any
        ) -> None:
            self.seen.append(("after", node_name, success, error))

    module = held(make_module, limit=1, waiting=0)
    hooks = Hooks()
    plan = Driver(module, adapters=[hooks]).prepare(["query"])
    holder = asyncio.create_task(plan.execute(inputs={"i": 0}))
    await until(lambda: module.BULKHEAD.in_use == 1)
    with pytest.raises(ExecutionError) as caught:
        await plan.execute(inputs={"i": 1})
    (leaf,) = caught.value.exceptions
    module.GATE.set()
    await holder
    rejected = [s for s in hooks.seen if s[0] == "after" and s[2] is False]
    assert rejected == [("after", "query", False, leaf)]
    assert isinstance(leaf, BulkheadFull)
    assert module.ORDER == [0]


async def test_attempt_spans_carry_the_bulkhead_wait_and_the_breaker_state(
    make_module: Any,
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from sdax_hamilton.contrib.opentelemetry import SpanObserver

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    module = make_module(
        """
import asyncio
from sdax_hamilton import Bulkhead, CircuitBreaker, execution

BULKHEAD = Bulkhead(1, max_waiting=5)
BREAKER = CircuitBreaker()

@execution(bulkhead=BULKHEAD, breaker=BREAKER)
async def query(i: int) -> int:
    await asyncio.sleep(0.1)
    return i
"""
    )
    plan = Driver(module).prepare(["query"])
    events: list[RunEvent] = []
    observer = SpanObserver(provider.get_tracer("tests"))
    first = asyncio.create_task(plan.execute(inputs={"i": 0}, observer=observer))
    await until(lambda: module.BULKHEAD.in_use == 1)
    await plan.execute(inputs={"i": 1}, observer=[observer, events.append])
    await first
    started = [e for e in events if e.kind == "attempt_started"]
    assert started[0].breaker_state == "closed"
    assert started[0].bulkhead_wait is not None and started[0].bulkhead_wait > 0.05
    assert [e.kind for e in events].index("bulkhead_waiting") < [e.kind for e in events].index(
        "attempt_started"
    )
    spans = [s for s in exporter.get_finished_spans() if s.name == "query"]
    waits = sorted(s.attributes["sdax_hamilton.bulkhead_wait"] for s in spans)  # type: ignore[index]
    assert waits[0] == 0.0 and waits[1] > 0.05
    assert {s.attributes["sdax_hamilton.breaker_state"] for s in spans} == {"closed"}  # type: ignore[index]


def _count_driver_starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the jobs whose STARTs the driver carries out (``Calls._start``), as
    opposed to those the core's ``Run`` carries out inline (src/carry.rs)."""
    from sdax_hamilton._executor.calls import Calls
    from sdax_hamilton._executor.jobs import Job

    started: list[str] = []
    original = Calls._start

    def counting(calls: Calls, job: Job, attempt: int, timeout: Any) -> None:
        started.append(job.name)
        original(calls, job, attempt, timeout)

    monkeypatch.setattr(Calls, "_start", counting)
    return started


async def test_guarded_nodes_admitted_at_once_are_carried_by_the_core(
    make_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = _count_driver_starts(monkeypatch)
    module = make_module(
        """
from sdax_hamilton import Bulkhead, CircuitBreaker, execution

BULKHEAD = Bulkhead(1)
BREAKER = CircuitBreaker(min_calls=5)

def a(x: int) -> int:
    return x + 1

@execution(bulkhead=BULKHEAD, breaker=BREAKER)
def b(a: int) -> int:
    return a + 1

@execution(fallback=lambda exc: 0, breaker=BREAKER)
async def c(b: int) -> int:
    return b + 1
"""
    )
    plan = Driver(module).prepare(["c"])
    assert await plan.execute(inputs={"x": 1}) == {"c": 4}
    assert await plan.execute(inputs={"x": 2}) == {"c": 5}
    # The permit free and the breaker closed: every attempt was admitted, called and
    # ended by the core; the permits are back and the successes recorded.
    assert started == []
    assert (module.BULKHEAD.in_use, module.BULKHEAD.waiting) == (0, 0)
    assert module.BREAKER._core.outcomes(time.monotonic()) == (4, 0)


async def test_a_guarded_attempt_not_admitted_at_once_is_the_driver_s(
    make_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = _count_driver_starts(monkeypatch)
    module = make_module(
        """
from sdax_hamilton import Bulkhead, CircuitBreaker, execution

BULKHEAD = Bulkhead(1, max_waiting=1)
BREAKER = CircuitBreaker(min_calls=1, break_for=60.0)
FAIL = [False]

@execution(bulkhead=BULKHEAD, breaker=BREAKER)
def b(x: int) -> int:
    if FAIL[0]:
        raise ConnectionError("down")
    return x + 1
"""
    )
    plan = Driver(module).prepare(["b"])
    # Someone holds the permit: the attempt waits for it in the driver, which admits it
    # once the permit comes back.
    assert module.BULKHEAD._core.try_acquire() == "granted"
    run = asyncio.ensure_future(plan.execute(inputs={"x": 1}))
    while module.BULKHEAD.waiting != 1:
        await asyncio.sleep(0)
    assert started == ["b"]
    from sdax_hamilton._executor import permits

    permits.give_back(module.BULKHEAD)  # to the waiter, woken
    assert await run == {"b": 2}
    # A carried attempt that fails is handed back admitted: the driver gives its permit
    # back and records the failure, which opens the breaker (min_calls=1).
    started.clear()
    module.FAIL[0] = True
    with pytest.raises(ExecutionError) as caught:
        await plan.execute(inputs={"x": 1})
    assert isinstance(caught.value.exceptions[0], ConnectionError)
    assert started == []
    assert module.BREAKER.state == "open"
    # Open: the core takes nothing and the driver rejects the attempt.
    with pytest.raises(ExecutionError) as caught:
        await plan.execute(inputs={"x": 1})
    assert isinstance(caught.value.exceptions[0], CircuitOpen)
    assert started == ["b"]
    assert (module.BULKHEAD.in_use, module.BULKHEAD.waiting) == (0, 0)


PARALLEL = """
import asyncio
from sdax_hamilton import Bulkhead, CircuitBreaker, execution

BULKHEAD = Bulkhead({limit}, max_waiting=8)
BREAKER = CircuitBreaker(failure_ratio=0.5, min_calls=4, break_for=60.0, name="db")
FAIL = [False]
IN_USE: list[int] = []

def src(x: int) -> int:
    return x

{nodes}
def join({names}) -> int:
    return {total}
"""

PARALLEL_NODE = """
@execution(bulkhead=BULKHEAD, breaker=BREAKER)
async def w{i}(src: int) -> int:
    IN_USE.append(BULKHEAD.in_use)
    await asyncio.sleep(0)
    if FAIL[0]:
        raise ConnectionError("down")
    return src + {i}
"""


def parallel(make_module: Any, limit: int) -> Any:
    names = [f"w{i}" for i in range(4)]
    return make_module(
        PARALLEL.format(
            limit=limit,
            nodes="".join(PARALLEL_NODE.format(i=i) for i in range(4)),
            names=", ".join(f"{n}: int" for n in names),
            total=" + ".join(names),
        )
    )


async def test_parallel_attempts_admitted_at_once_by_the_driver(
    make_module: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Four attempts started together are not lone: the driver admits each (a permit free,
    # the breaker closed: at once, in one call into the core) and ends each when it is over.
    started = _count_driver_starts(monkeypatch)
    module = parallel(make_module, limit=4)
    plan = Driver(module).prepare(["join"])
    assert await plan.execute(inputs={"x": 1}) == {"join": 10}
    assert sorted(started) == ["w0", "w1", "w2", "w3"]
    assert module.IN_USE == [4, 4, 4, 4]  # every permit taken before any body ran
    assert (module.BULKHEAD.in_use, module.BULKHEAD.waiting) == (0, 0)
    assert module.BREAKER._core.outcomes(time.monotonic()) == (4, 0)
    # Their failures reach the breaker through the same path. A failing run records at
    # least its first failure (the attempts its failure cancels are not recorded): by the
    # fourth, failures are half the outcomes and the breaker opens, logged once.
    module.FAIL[0] = True
    with caplog.at_level(logging.INFO, logger="sdax_hamilton"):
        for _ in range(4):
            with pytest.raises(ExecutionError) as caught:
                await plan.execute(inputs={"x": 1})
            assert isinstance(caught.value.exceptions[0], ConnectionError)
            if module.BREAKER.state == "open":
                break
    assert module.BREAKER.state == "open"
    opened = [r for r in caplog.records if "circuit breaker 'db' opened" in r.getMessage()]
    assert len(opened) == 1 and opened[0].levelno == logging.WARNING
    assert (module.BULKHEAD.in_use, module.BULKHEAD.waiting) == (0, 0)


async def test_parallel_attempts_past_the_limit_wait_in_fifo_order(make_module: Any) -> None:
    # Two permits for four parallel attempts: two admitted at once, two queued in the order
    # they asked, each called when a permit given back (by an attempt admitted at once)
    # comes to it.
    module = parallel(make_module, limit=2)
    plan = Driver(module).prepare(["join"])
    events: list[RunEvent] = []
    assert await plan.execute(inputs={"x": 1}, observer=events.append) == {"join": 10}
    assert max(module.IN_USE) == 2
    waiting = [e.node for e in events if e.kind == "bulkhead_waiting"]
    started = [e.node for e in events if e.kind == "attempt_started" and e.node[0] == "w"]
    assert len(waiting) == 2
    assert started[2:] == waiting  # first in, first out
    assert (module.BULKHEAD.in_use, module.BULKHEAD.waiting) == (0, 0)
    assert module.BREAKER._core.outcomes(time.monotonic()) == (4, 0)


async def test_a_carried_success_that_opens_the_breaker_is_logged(
    make_module: Any, caplog: pytest.LogCaptureFixture
) -> None:
    module = make_module(
        """
from sdax_hamilton import CircuitBreaker, execution

BREAKER = CircuitBreaker(failure_ratio=0.5, min_calls=2, name="db")
FAIL = [True]

@execution(breaker=BREAKER)
def b(x: int) -> int:
    if FAIL[0]:
        raise ConnectionError("down")
    return x + 1
"""
    )
    plan = Driver(module).prepare(["b"])
    with pytest.raises(ExecutionError):
        await plan.execute(inputs={"x": 1})
    assert module.BREAKER.state == "closed"  # one outcome of the two it needs
    module.FAIL[0] = False
    with caplog.at_level(logging.INFO, logger="sdax_hamilton"):
        # A success carried by the core: one failure in two is the ratio, and it opens.
        assert await plan.execute(inputs={"x": 1}) == {"b": 2}
    assert module.BREAKER.state == "open"
    opened = [r for r in caplog.records if "circuit breaker 'db' opened" in r.getMessage()]
    assert len(opened) == 1 and opened[0].levelno == logging.WARNING


def test_a_permit_given_back_by_a_carried_call_wakes_a_waiter_on_another_thread(
    make_module: Any,
) -> None:
    import threading

    module = make_module(
        """
import threading
import time
from sdax_hamilton import Bulkhead, execution

BULKHEAD = Bulkhead(1, max_waiting=1)
HOLDING = threading.Event()

@execution(bulkhead=BULKHEAD)
def query(i: int) -> int:
    # A plain function: the core's Run calls it and gives its permit back itself.
    if i == 0:
        HOLDING.set()
        deadline = time.monotonic() + 5
        while BULKHEAD.waiting != 1 and time.monotonic() < deadline:
            time.sleep(0.001)
    return i
"""
    )
    plan = Driver(module).prepare(["query"])
    results: dict[int, Any] = {}

    def run(i: int) -> None:
        results[i] = loop_support.run(plan.execute(inputs={"i": i}))

    holder = threading.Thread(target=run, args=(0,))
    holder.start()
    assert module.HOLDING.wait(5)
    waiter = threading.Thread(target=run, args=(1,))
    waiter.start()
    holder.join(10)
    waiter.join(10)
    assert results == {0: {"query": 0}, 1: {"query": 1}}
    assert (module.BULKHEAD.in_use, module.BULKHEAD.waiting) == (0, 0)


def test_a_permit_released_on_one_loop_wakes_a_waiter_on_another_thread(make_module: Any) -> None:
    import threading

    module = make_module(
        """
import asyncio
import threading
from sdax_hamilton import Bulkhead, execution

BULKHEAD = Bulkhead(1, max_waiting=1)
HOLDING = threading.Event()
RELEASE = threading.Event()
ORDER: list[int] = []

@execution(bulkhead=BULKHEAD)
async def query(i: int) -> int:
    ORDER.append(i)
    if i == 0:
        HOLDING.set()
        while not RELEASE.is_set():
            await asyncio.sleep(0.001)
    return i
"""
    )
    plan = Driver(module).prepare(["query"])
    results: dict[int, Any] = {}

    def run(i: int) -> None:
        results[i] = loop_support.run(plan.execute(inputs={"i": i}))

    holder = threading.Thread(target=run, args=(0,))
    holder.start()
    assert module.HOLDING.wait(5)
    waiter = threading.Thread(target=run, args=(1,))
    waiter.start()
    deadline = time.monotonic() + 5
    while module.BULKHEAD.waiting != 1:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    module.RELEASE.set()
    holder.join(5)
    waiter.join(5)
    assert results == {0: {"query": 0}, 1: {"query": 1}}
    assert module.ORDER == [0, 1]
    assert (module.BULKHEAD.in_use, module.BULKHEAD.waiting) == (0, 0)


async def test_a_cache_hit_takes_no_permit(tmp_path: Any) -> None:
    import importlib.util
    import sys
    import textwrap

    path = tmp_path / "sdax_guarded_cache_graph.py"
    path.write_text(
        textwrap.dedent(
            """
            from sdax_hamilton import Bulkhead, execution

            BULKHEAD = Bulkhead(1)
            CALLS = []

            @execution(bulkhead=BULKHEAD)
            def value(x: int) -> int:
                CALLS.append(x)
                return x * 2
            """
        )
    )
    spec = importlib.util.spec_from_file_location("sdax_guarded_cache_graph", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sdax_guarded_cache_graph"] = module
    try:
        spec.loader.exec_module(module)
        plan = Driver(module, cache=tmp_path / "cache").prepare(["value"])
        assert await plan.execute(inputs={"x": 3}) == {"value": 6}  # a miss: called
        assert module.BULKHEAD._core.try_acquire() == "granted"  # someone holds the permit
        try:
            assert await plan.execute(inputs={"x": 3}) == {"value": 6}  # a hit: no permit
            with pytest.raises(ExecutionError) as caught:
                await plan.execute(inputs={"x": 4})  # a miss: the call needs the permit
            assert isinstance(caught.value.exceptions[0], BulkheadFull)
        finally:
            module.BULKHEAD._core.release()
        assert module.CALLS == [3]
        assert (module.BULKHEAD.in_use, module.BULKHEAD.waiting) == (0, 0)
    finally:
        sys.modules.pop("sdax_guarded_cache_graph", None)
