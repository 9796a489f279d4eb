"""Run events (docs/contract.md#run-events): which ``RunEvent``s a run emits, in which order.

Driver-level tests build plans with ``tests/support/driver.py`` (no Hamilton); the last ones go
through ``Driver``/``PreparedPlan`` to check that ``execute``/``open`` pass observers on.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from support.driver import MODES, Mode, Node, clean_loop, prepare, started

from sdax_hamilton import Driver, ExecutionError, RunEvent
from sdax_hamilton._executor import open_run
from sdax_hamilton._observe import Observer


class Recorder:
    """An observer keeping every event."""

    def __init__(self) -> None:
        self.events: list[RunEvent] = []

    def __call__(self, event: RunEvent) -> None:
        self.events.append(event)

    def steps(self) -> list[tuple[str, str, int]]:
        return [(e.kind, e.node, e.attempt) for e in self.events]

    def of(self, node: str) -> list[tuple[str, int]]:
        return [(e.kind, e.attempt) for e in self.events if e.node == node]

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    def first(self, kind: str, node: str = "") -> RunEvent:
        return next(e for e in self.events if e.kind == kind and (not node or e.node == node))


def observed(
    nodes: Sequence[Node],
    outputs: Sequence[str],
    observer: object,
    values: dict[str, Any] | None = None,
) -> contextlib.AbstractAsyncContextManager[dict[str, Any]]:
    plan, runtimes = prepare(nodes, outputs)
    return open_run(plan, runtimes, dict(values or {}), outputs, observer=observer)


async def run(
    nodes: Sequence[Node], outputs: Sequence[str], observer: object, **values: Any
) -> dict[str, Any]:
    async with observed(nodes, outputs, observer, values) as result:
        return result


def value(result: Any) -> Any:
    async def call(**_: Any) -> Any:
        return result

    return call


def failing(*errors: BaseException, then: Any = "ok") -> Any:
    """An async callable raising ``errors`` in turn, then returning ``then``."""
    calls = itertools.count()

    async def call(**_: Any) -> Any:
        index = next(calls)
        if index < len(errors):
            raise errors[index]
        return then

    return call


# --------------------------------------------------------------------- forward phase


async def test_a_chain_emits_start_and_success_per_node_in_causal_order() -> None:
    recorder = Recorder()
    nodes = [Node("a", value(1)), Node("b", value(2), inputs=("a",))]
    with clean_loop():
        assert await run(nodes, ["b"], recorder) == {"b": 2}
    assert recorder.steps() == [
        ("run_started", "", 0),
        ("attempt_started", "a", 1),
        ("attempt_succeeded", "a", 1),
        ("attempt_started", "b", 1),
        ("attempt_succeeded", "b", 1),
        ("shutdown_started", "", 0),
        ("run_finished", "", 0),
    ]
    events = recorder.events
    assert events[0].nodes == ("a", "b")
    assert all(e.nodes == () for e in events[1:])
    assert all(e.error is None and e.delay is None for e in events)
    assert len({e.run for e in events}) == 1 and uuid.UUID(events[0].run).version == 4
    times = [e.time for e in events]
    assert times == sorted(times)
    loop_now = asyncio.get_running_loop().time()
    assert loop_now - 5.0 < times[0] <= loop_now  # the event loop's clock


async def test_sync_nodes_are_observed_like_async_ones() -> None:
    recorder = Recorder()
    nodes = [Node("a", lambda: 1), Node("b", lambda a: a + 1, inputs=("a",))]
    assert await run(nodes, ["b"], recorder) == {"b": 2}
    assert recorder.of("a") == [("attempt_started", 1), ("attempt_succeeded", 1)]
    assert recorder.of("b") == [("attempt_started", 1), ("attempt_succeeded", 1)]


async def test_retries_emit_failure_then_schedule_then_the_next_attempt() -> None:
    recorder = Recorder()
    first, second = ConnectionResetError("one"), TimeoutError("two")
    node = Node("a", failing(first, second), retries=3, initial_delay=0.002)
    with clean_loop():
        assert await run([node], ["a"], recorder) == {"a": "ok"}
    assert recorder.of("a") == [
        ("attempt_started", 1),
        ("attempt_failed", 1),
        ("retry_scheduled", 1),
        ("attempt_started", 2),
        ("attempt_failed", 2),
        ("retry_scheduled", 2),
        ("attempt_started", 3),
        ("attempt_succeeded", 3),
    ]
    failed = [e for e in recorder.events if e.kind == "attempt_failed"]
    assert [e.error for e in failed] == [first, second]  # the original objects
    scheduled = [e for e in recorder.events if e.kind == "retry_scheduled"]
    policy = node.policy()
    for event in scheduled:
        assert event.error is None
        assert event.delay is not None
        low, high = policy.delay_bounds(event.attempt - 1)
        assert low <= event.delay <= high
    # The next attempt starts no earlier than the announced delay (timers may fire a hair
    # early; generous upper slack for a busy machine).
    starts = [e.time for e in recorder.events if e.kind == "attempt_started"]
    for event, start in zip(scheduled, starts[1:], strict=True):
        assert event.delay is not None
        assert event.delay - 0.002 <= start - event.time <= event.delay + 1.0


async def test_a_final_failure_is_the_leaf_and_the_run_error_is_what_is_raised() -> None:
    recorder = Recorder()
    error = ValueError("not retryable")
    nodes = [Node("a", failing(error), retries=3), Node("b", value(2), inputs=("a",))]
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await run(nodes, ["b"], recorder)
    assert recorder.steps() == [
        ("run_started", "", 0),
        ("attempt_started", "a", 1),
        ("attempt_failed", "a", 1),
        ("shutdown_started", "", 0),
        ("run_finished", "", 0),
    ]
    assert recorder.first("attempt_failed").error is error
    assert info.value.exceptions == (error,)
    assert recorder.first("run_finished").error is info.value


async def test_an_invalid_output_is_an_attempt_failure_with_the_type_error() -> None:
    recorder = Recorder()
    node = Node("a", value("text"), output_check=lambda v: isinstance(v, int), retries=2)
    with pytest.raises(ExecutionError) as info:
        await run([node], ["a"], recorder)
    assert recorder.of("a") == [("attempt_started", 1), ("attempt_failed", 1)]
    [leaf] = info.value.exceptions
    assert recorder.first("attempt_failed").error is leaf
    assert isinstance(leaf, TypeError)


@pytest.mark.parametrize("mode_name", MODES)
async def test_a_timeout_is_announced_then_the_drained_attempt_fails(mode_name: str) -> None:
    mode = Mode(mode_name)
    recorder = Recorder()
    attempts = itertools.count(1)

    async def slow() -> str:
        mode.seen()
        if next(attempts) == 1:
            await asyncio.Event().wait()
        mode.finish.set()
        return "late"

    nodes, outputs = mode.nodes(Node("a", slow, timeout=0.02, retries=1, initial_delay=0))
    with clean_loop():
        result = await run(nodes, outputs, recorder)
    assert result["a"] == "late"
    mode.check()
    assert recorder.of("a") == [
        ("attempt_started", 1),
        ("attempt_timed_out", 1),
        ("attempt_failed", 1),
        ("retry_scheduled", 1),
        ("attempt_started", 2),
        ("attempt_succeeded", 2),
    ]
    failure = recorder.first("attempt_failed", "a")
    assert type(failure.error) is TimeoutError
    timed_out = recorder.first("attempt_timed_out", "a")
    assert timed_out.error is None
    assert timed_out.time - recorder.first("attempt_started", "a").time >= 0.02 - 0.002


async def test_a_failure_cancels_running_attempts_and_drops_retry_waits() -> None:
    recorder = Recorder()
    waiting_started = asyncio.Event()
    error = ValueError("boom")

    async def running() -> str:
        await asyncio.Event().wait()
        return "never"

    async def waits() -> str:
        waiting_started.set()
        raise ConnectionError("retry me much later")

    async def fails() -> str:
        await started(waiting_started)
        await asyncio.sleep(0)  # let `waiting` fail and schedule its retry first
        raise error

    nodes = [
        Node("running", running),
        Node("waiting", waits, retries=1, initial_delay=60.0),
        Node("fails", fails),
    ]
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await run(nodes, ["running", "waiting", "fails"], recorder)
    assert info.value.exceptions == (error,)
    assert recorder.of("running") == [("attempt_started", 1), ("attempt_cancelled", 1)]
    assert recorder.of("waiting") == [
        ("attempt_started", 1),
        ("attempt_failed", 1),
        ("retry_scheduled", 1),
        ("retry_cancelled", 1),
    ]
    kinds = recorder.steps()
    failure = kinds.index(("attempt_failed", "fails", 1))
    assert failure < kinds.index(("attempt_cancelled", "running", 1))
    assert failure < kinds.index(("retry_cancelled", "waiting", 1))
    assert recorder.first("attempt_cancelled", "running").error is None


async def test_a_cancelled_attempt_that_raises_something_else_reports_it() -> None:
    recorder = Recorder()
    go = asyncio.Event()
    other = OSError("while unwinding")

    async def stubborn() -> str:
        try:
            go.set()
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise other from None
        return "never"

    async def fails() -> str:
        await started(go)
        raise ValueError("boom")

    with pytest.raises(ExecutionError) as info:
        await run([Node("s", stubborn), Node("f", fails)], ["s", "f"], recorder)
    assert recorder.first("attempt_cancelled", "s").error is other
    assert other in info.value.exceptions


async def test_an_attempt_cancelled_before_its_first_step_ends_as_cancelled() -> None:
    recorder = Recorder()
    ran: list[str] = []

    def fails_at_once() -> str:
        raise ValueError("sync failure")

    async def never_runs() -> str:
        ran.append("b")
        return "b"

    with clean_loop():
        with pytest.raises(ExecutionError):
            await run([Node("a", fails_at_once), Node("b", never_runs)], ["a", "b"], recorder)
    assert ran == []
    assert recorder.of("b") == [("attempt_started", 1), ("attempt_cancelled", 1)]


async def test_rejected_inputs_are_reported_without_an_attempt() -> None:
    recorder = Recorder()
    called: list[int] = []

    def b(a: Any) -> int:
        called.append(1)
        return 0

    nodes = [
        Node("a", value("not an int")),
        Node("b", b, inputs=("a",), input_checks=(("a", lambda v: isinstance(v, int)),)),
    ]
    with pytest.raises(ExecutionError) as info:
        await run(nodes, ["b"], recorder)
    assert called == []
    assert recorder.of("b") == [("input_rejected", 0)]
    [leaf] = info.value.exceptions
    assert recorder.first("input_rejected").error is leaf


async def test_caller_cancellation_is_the_run_error() -> None:
    recorder = Recorder()
    inside = asyncio.Event()

    async def hangs() -> str:
        inside.set()
        await asyncio.Event().wait()
        return "never"

    released: list[str] = []
    node = Node("a", hangs, release=lambda acquired: released.append("a"))
    task = asyncio.create_task(run([node], ["a"], recorder))
    await started(inside)
    task.cancel()
    with pytest.raises(asyncio.CancelledError) as info:
        await task
    assert released == ["a"]
    assert recorder.kinds() == [
        "run_started",
        "attempt_started",
        "attempt_cancelled",
        "shutdown_started",
        "release_started",
        "release_succeeded",
        "run_finished",
    ]
    assert recorder.first("run_finished").error is info.value


# --------------------------------------------------------------------- releases


async def test_releases_are_observed_after_shutdown_starts_in_dependency_order() -> None:
    recorder = Recorder()
    order: list[str] = []

    async def release(acquired: Any) -> None:
        order.append(acquired.raw_value)

    nodes = [
        Node("conn", value("conn"), release=release),
        Node("tx", value("tx"), inputs=("conn",), release=release),
        Node("query", value(3), inputs=("tx",)),
    ]
    with clean_loop():
        assert await run(nodes, ["query"], recorder) == {"query": 3}
    assert order == ["tx", "conn"]
    steps = recorder.steps()
    assert steps[-6:] == [
        ("shutdown_started", "", 0),
        ("release_started", "tx", 1),
        ("release_succeeded", "tx", 1),
        ("release_started", "conn", 1),
        ("release_succeeded", "conn", 1),
        ("run_finished", "", 0),
    ]


async def test_release_retries_and_timeouts_have_their_own_kinds() -> None:
    recorder = Recorder()
    attempts = itertools.count(1)

    async def release(acquired: Any) -> None:
        number = next(attempts)
        if number == 1:
            await asyncio.Event().wait()  # times out
        if number == 2:
            raise ConnectionAbortedError("lost")

    node = Node(
        "r",
        value("resource"),
        release=release,
        release_timeout=0.02,
        release_retries=2,
        release_initial_delay=0.001,
    )
    with clean_loop():
        assert await run([node], ["r"], recorder) == {"r": "resource"}
    releases = [(k, a) for k, a in recorder.of("r") if k.startswith("release_")]
    assert releases == [
        ("release_started", 1),
        ("release_timed_out", 1),
        ("release_failed", 1),
        ("release_retry_scheduled", 1),
        ("release_started", 2),
        ("release_failed", 2),
        ("release_retry_scheduled", 2),
        ("release_started", 3),
        ("release_succeeded", 3),
    ]
    failures = [e.error for e in recorder.events if e.kind == "release_failed"]
    assert type(failures[0]) is TimeoutError and type(failures[1]) is ConnectionAbortedError
    assert all(
        e.delay is not None and 0.0005 <= e.delay <= 0.004
        for e in recorder.events
        if e.kind == "release_retry_scheduled"
    )
    assert "retry_scheduled" not in recorder.kinds()  # forward kinds stay forward


async def test_a_release_returning_a_value_fails_with_the_reported_type_error() -> None:
    recorder = Recorder()
    node = Node("r", value("resource"), release=lambda acquired: "oops")
    with pytest.raises(ExecutionError) as info:
        await run([node], ["r"], recorder)
    [leaf] = info.value.exceptions
    assert recorder.first("release_failed").error is leaf
    assert recorder.first("run_finished").error is info.value


async def test_open_emits_shutdown_only_after_the_body() -> None:
    recorder = Recorder()
    node = Node("r", value("resource"), release=lambda acquired: None)
    async with observed([node], ["r"], recorder) as result:
        assert result == {"r": "resource"}
        seen_in_body = recorder.kinds()
    assert seen_in_body == ["run_started", "attempt_started", "attempt_succeeded"]
    assert recorder.kinds()[3:] == [
        "shutdown_started",
        "release_started",
        "release_succeeded",
        "run_finished",
    ]


async def test_a_body_exception_is_the_run_error() -> None:
    recorder = Recorder()
    error = LookupError("body")
    with pytest.raises(LookupError):
        async with observed([Node("a", value(1))], ["a"], recorder):
            raise error
    assert recorder.first("run_finished").error is error


# --------------------------------------------------------------------- observer arguments


async def test_a_sequence_of_observers_each_sees_every_event_in_order() -> None:
    first, second = Recorder(), Recorder()
    nodes = [Node("a", value(1))]
    await run(nodes, ["a"], [first, second])
    assert first.events == second.events
    assert [e is f for e, f in zip(first.events, second.events, strict=True)] == [True] * len(
        first.events
    )
    await run(nodes, ["a"], (first,))
    assert len(first.events) == 2 * len(second.events)


async def test_an_empty_sequence_means_no_observer() -> None:
    assert await run([Node("a", value(1))], ["a"], []) == {"a": 1}


async def test_any_sequence_of_observers_is_accepted() -> None:
    recorder = Recorder()

    class Observers(Sequence[Observer]):
        def __init__(self, *items: Observer) -> None:
            self.items = items

        def __getitem__(self, index: Any) -> Any:
            return self.items[index]

        def __len__(self) -> int:
            return len(self.items)

    assert await run([Node("a", value(1))], ["a"], Observers(recorder)) == {"a": 1}
    assert recorder.kinds()[0] == "run_started"


@pytest.mark.parametrize(
    "bad", ["print", b"print", 5, [print, "print"], {"observer": print}, {print}, (None,)]
)
def test_an_observer_must_be_a_callable_or_a_sequence_of_them(bad: object) -> None:
    with pytest.raises(TypeError, match="observer must be a callable"):
        observed([Node("a", value(1))], ["a"], bad)


async def test_concurrent_runs_sharing_an_observer_have_distinct_run_ids() -> None:
    recorder = Recorder()
    gate = asyncio.Event()

    async def a() -> int:
        await gate.wait()
        return 1

    first = asyncio.create_task(run([Node("a", a)], ["a"], recorder))
    second = asyncio.create_task(run([Node("a", a)], ["a"], recorder))
    await asyncio.sleep(0)
    gate.set()
    assert await first == await second == {"a": 1}
    runs = sorted({e.run for e in recorder.events})
    assert len(runs) == 2
    for run_id in runs:
        kinds = [e.kind for e in recorder.events if e.run == run_id]
        assert kinds == [
            "run_started",
            "attempt_started",
            "attempt_succeeded",
            "shutdown_started",
            "run_finished",
        ]


# --------------------------------------------------------------------- observers that raise


class Raising:
    """Raises ``error`` on events of ``kind`` (every event when ``kind`` is None)."""

    def __init__(self, error: BaseException, kind: str | None = None) -> None:
        self.error = error
        self.kind = kind
        self.calls = 0

    def __call__(self, event: RunEvent) -> None:
        self.calls += 1
        if self.kind is None or event.kind == self.kind:
            raise self.error


async def test_an_observer_exception_is_logged_and_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    released: list[str] = []
    error = RuntimeError("observer bug")
    broken = Raising(error)
    recorder = Recorder()
    nodes = [
        Node("a", failing(ConnectionError(), then=1), retries=1, initial_delay=0),
        Node("b", value(2), inputs=("a",), release=lambda acquired: released.append("b")),
    ]
    with caplog.at_level(logging.ERROR, logger="sdax_hamilton"), clean_loop():
        assert await run(nodes, ["b"], [broken, recorder]) == {"b": 2}
    assert released == ["b"]
    assert broken.calls == len(recorder.events) == 12  # the next observer still saw all
    # one misuse, one record with its traceback, then one line counting the rest
    records = [r for r in caplog.records if "observer" in r.getMessage()]
    assert len(records) == 2
    first, rest = records
    for record in records:
        assert record.name == "sdax_hamilton" and record.levelno == logging.ERROR
        assert "Raising" in record.getMessage() and "observer bug" not in record.getMessage()
        assert record.run_id == recorder.events[0].run  # type: ignore[attr-defined]
    assert first.exc_info is not None and first.exc_info[1] is error
    assert "RuntimeError on the run_started event" in first.getMessage()
    assert rest.exc_info is None
    assert f"raised {broken.calls - 1} more times in this run" in rest.getMessage()


async def test_an_observer_exception_does_not_change_a_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    error = ValueError("node")
    with caplog.at_level(logging.CRITICAL, logger="sdax_hamilton"):
        with pytest.raises(ExecutionError) as info:
            await run([Node("a", failing(error))], ["a"], Raising(RuntimeError()))
    assert info.value.exceptions == (error,)


async def test_an_observer_cancelled_error_is_ignored_too(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.CRITICAL, logger="sdax_hamilton"):
        assert await run([Node("a", value(1))], ["a"], Raising(asyncio.CancelledError())) == {
            "a": 1
        }
    assert asyncio.current_task() is not None
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


async def test_keyboard_interrupt_from_an_observer_stops_the_run_after_cleanup(
    caplog: pytest.LogCaptureFixture,
) -> None:
    interrupt = KeyboardInterrupt()
    ran: list[str] = []
    released: list[str] = []

    def node(name: str) -> Any:
        async def call(**_: Any) -> str:
            ran.append(name)
            return name

        return call

    class StopAtB:
        def __init__(self) -> None:
            self.events: list[RunEvent] = []

        def __call__(self, event: RunEvent) -> None:
            self.events.append(event)
            if event.kind == "attempt_started" and event.node == "b":
                raise interrupt

    observer = StopAtB()
    nodes = [
        Node("a", node("a"), release=lambda acquired: released.append("a")),
        Node("b", node("b"), inputs=("a",)),
        Node("c", node("c"), inputs=("b",)),
    ]
    with caplog.at_level(logging.CRITICAL, logger="sdax_hamilton"), clean_loop():
        with pytest.raises(KeyboardInterrupt) as info:
            await run(nodes, ["c"], observer)
    assert info.value is interrupt
    assert ran == ["a"]  # b was called (its coroutine created) but never stepped
    assert released == ["a"]
    steps = [(e.kind, e.node) for e in observer.events]
    assert ("attempt_cancelled", "b") in steps
    assert ("attempt_started", "c") not in steps
    assert observer.events[-1].kind == "run_finished"
    assert observer.events[-1].error is interrupt


async def test_keyboard_interrupt_at_run_start_runs_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran: list[str] = []

    def a() -> int:
        ran.append("a")
        return 1

    observer = Raising(SystemExit(3), "run_started")
    with caplog.at_level(logging.CRITICAL, logger="sdax_hamilton"), clean_loop():
        with pytest.raises(SystemExit) as info:
            await run([Node("a", a)], ["a"], observer)
    assert info.value is observer.error
    assert ran == []
    assert observer.calls == 2  # run_started, run_finished


async def test_keyboard_interrupt_at_run_finish_replaces_the_result(
    caplog: pytest.LogCaptureFixture,
) -> None:
    observer = Raising(KeyboardInterrupt(), "run_finished")
    released: list[str] = []
    node = Node("a", value(1), release=lambda acquired: released.append("a"))
    with caplog.at_level(logging.CRITICAL, logger="sdax_hamilton"):
        with pytest.raises(KeyboardInterrupt) as info:
            await run([node], ["a"], observer)
    assert info.value is observer.error
    assert released == ["a"]


async def test_keyboard_interrupt_during_shutdown_lets_every_release_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    released: list[str] = []
    observer = Raising(KeyboardInterrupt(), "release_started")
    nodes = [
        Node("a", value(1), release=lambda acquired: released.append("a")),
        Node("b", value(2), inputs=("a",), release=lambda acquired: released.append("b")),
    ]
    with caplog.at_level(logging.CRITICAL, logger="sdax_hamilton"), clean_loop():
        with pytest.raises(KeyboardInterrupt) as info:
            await run(nodes, ["b"], observer)
    assert info.value is observer.error
    assert released == ["b", "a"]


# --------------------------------------------------------------------- through PreparedPlan


GRAPH = """
from sdax_hamilton import Acquisition, execution, shutdown

class Resource:
    pass

async def resource() -> Resource:
    return Resource()

@shutdown(of=resource)
async def release(acquired: Acquisition[Resource]) -> None:
    pass

@execution(retries=1, initial_delay=0)
async def total(resource: Resource, flaky: list[int]) -> int:
    flaky.append(1)
    if len(flaky) == 1:
        raise ConnectionError("once")
    return len(flaky)
"""


async def test_execute_and_open_pass_the_observer_on(make_module: Any) -> None:
    plan = Driver(make_module(GRAPH)).prepare(["total"])
    recorder = Recorder()
    assert await plan.execute(inputs={"flaky": []}, observer=recorder) == {"total": 2}
    assert recorder.steps() == [
        ("run_started", "", 0),
        ("attempt_started", "resource", 1),
        ("attempt_succeeded", "resource", 1),
        ("attempt_started", "total", 1),
        ("attempt_failed", "total", 1),
        ("retry_scheduled", "total", 1),
        ("attempt_started", "total", 2),
        ("attempt_succeeded", "total", 2),
        ("shutdown_started", "", 0),
        ("release_started", "resource", 1),
        ("release_succeeded", "resource", 1),
        ("run_finished", "", 0),
    ]
    assert recorder.events[0].nodes == ("resource", "total")

    opened = Driver(make_module(GRAPH)).prepare(["resource", "total"])
    first, second = Recorder(), Recorder()
    observers: list[Observer] = [first, second]
    async with opened.open(inputs={"flaky": []}, observer=observers) as values:
        assert values["total"] == 2
        assert first.kinds()[-1] == "attempt_succeeded"
    assert first.kinds() == second.kinds() == [k for k, _, _ in recorder.steps()]


async def test_an_invalid_observer_is_refused_before_anything_runs(make_module: Any) -> None:
    plan = Driver(make_module(GRAPH)).prepare(["total"])
    flaky: list[int] = []
    with pytest.raises(TypeError, match="observer"):
        await plan.execute(inputs={"flaky": flaky}, observer="nope")  # type: ignore[arg-type]
    assert flaky == []


# --------------------------------------------------------------------- pending cancellation


@pytest.mark.parametrize("swallows", [False, True])
async def test_a_cancellation_pending_when_the_run_starts_is_the_callers(swallows: bool) -> None:
    """The lone node would be awaited inline in the caller's task; a cancellation already
    requested of that task must not be taken for the node's own (nor lost when the node
    swallows it): the run cancels the node, releases, and raises the caller's cancellation."""
    recorder = Recorder()
    released: list[str] = []

    async def lone() -> str:
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            if not swallows:
                raise
        return "value"

    node = Node("a", lone, release=lambda acquired: released.append("a"))

    async def caller() -> dict[str, Any]:
        task = asyncio.current_task()
        assert task is not None
        task.cancel("pending at entry")
        return await run([node], ["a"], recorder)

    with clean_loop():
        with pytest.raises(asyncio.CancelledError) as info:
            await asyncio.create_task(caller())
    assert info.value.args == ("pending at entry",)
    assert recorder.first("run_finished").error is info.value
    kinds = recorder.of("a")
    assert ("attempt_succeeded", 1) not in kinds and ("attempt_failed", 1) not in kinds
    if kinds:  # the attempt may have begun before the cancellation reached the run
        assert kinds[:2] == [("attempt_started", 1), ("attempt_cancelled", 1)]
    assert released == (["a"] if kinds else [])
