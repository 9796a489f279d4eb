"""Caller cancellation in every phase, once and repeatedly (docs/contract.md#open-algorithm,
#outcomes)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support.driver import (
    MODES,
    Journal,
    Mode,
    Node,
    Runner,
    clean_loop,
    execute,
    notes,
    opened,
    started,
    yield_a_few,
)

from sdax_hamilton._failures import ExecutionError, failures


class Conn:
    def __init__(self, name: str) -> None:
        self.name = name


async def test_cancel_during_an_inline_attempt_cancels_it_once_and_cleans_up() -> None:
    journal = Journal()
    inside = asyncio.Event()

    async def conn() -> Conn:
        inside.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            journal("conn cancelled")
            raise
        return Conn("never")

    async def close(acq: Any) -> None:
        journal("close empty" if not acq.has_value else "close value")

    with clean_loop():
        runner = Runner(lambda: execute([Node("conn", conn, release=close)], ["conn"]))
        await started(inside)
        runner.task.cancel()
        raised = await runner.outcome()
    assert runner.task.cancelled()
    assert isinstance(raised, asyncio.CancelledError)
    assert journal.entries == ["conn cancelled", "close empty"]
    assert failures(raised) == ()
    assert notes(raised) == []


async def test_repeated_cancels_during_the_forward_phase_cancel_attempts_once() -> None:
    journal = Journal()
    a_cancelled = asyncio.Event()
    drain = asyncio.Event()
    b_in = asyncio.Event()

    async def a() -> Conn:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            journal("a cancelled")
            a_cancelled.set()
            try:
                await drain.wait()  # a long drain: further caller cancels must not land here
            except asyncio.CancelledError:
                journal("a cancelled again")
                raise
            journal("a drained")
            raise
        return Conn("never")

    async def b() -> int:
        b_in.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            journal("b cancelled")
            raise
        return 0

    async def close(acq: Any) -> None:
        journal("close a")

    nodes = [Node("a", a, release=close), Node("b", b)]
    with clean_loop():
        runner = Runner(lambda: execute(nodes, ["a", "b"]))
        await started(b_in)
        runner.task.cancel()
        await started(a_cancelled)
        runner.task.cancel()
        await yield_a_few()
        runner.task.cancel()
        await yield_a_few()
        assert not runner.task.done()  # still draining, shielded
        assert "close a" not in journal.entries
        drain.set()
        raised = await runner.outcome()
    assert isinstance(raised, asyncio.CancelledError)
    assert journal.count("a cancelled") == 1
    assert journal.count("b cancelled") == 1
    assert "a cancelled again" not in journal.entries
    assert journal.entries[-2:] == ["a drained", "close a"]
    assert failures(raised) == ()


async def test_cancel_during_a_retry_wait_drops_the_wait_and_starts_no_attempt() -> None:
    loop = asyncio.get_running_loop()
    calls = 0
    failed_once = asyncio.Event()

    async def a() -> int:
        nonlocal calls
        calls += 1
        failed_once.set()
        raise ConnectionError

    with clean_loop():
        begin = loop.time()
        runner = Runner(lambda: execute([Node("a", a, retries=3, initial_delay=30.0)], ["a"]))
        await started(failed_once)
        await yield_a_few()
        runner.task.cancel()
        raised = await runner.outcome()
    assert loop.time() - begin < 10.0
    assert isinstance(raised, asyncio.CancelledError)
    assert calls == 1


async def test_cancel_of_an_attempt_with_a_timeout_is_not_a_timeout_and_not_retried() -> None:
    calls = 0
    inside = asyncio.Event()

    async def a() -> int:
        nonlocal calls
        calls += 1
        inside.set()
        await asyncio.Event().wait()
        return 0

    node = Node("a", a, timeout=30.0, retries=3)  # TimeoutError is retryable by default
    with clean_loop():
        runner = Runner(lambda: execute([node], ["a"]))
        await started(inside)
        runner.task.cancel()
        raised = await runner.outcome()
    assert type(raised) is asyncio.CancelledError
    assert calls == 1


async def test_cancel_racing_a_retryable_failure_starts_no_new_attempt() -> None:
    calls = 0
    gate = asyncio.Event()
    inside = asyncio.Event()

    async def a() -> int:
        nonlocal calls
        calls += 1
        inside.set()
        await gate.wait()
        raise ConnectionError

    node = Node("a", a, timeout=30.0, retries=3, initial_delay=0.0)
    with clean_loop():
        runner = Runner(lambda: execute([node], ["a"]))
        await started(inside)
        gate.set()  # the attempt fails in the same loop iteration as...
        runner.task.cancel()  # ...the caller's cancellation arrives
        raised = await runner.outcome()
    assert isinstance(raised, asyncio.CancelledError)
    assert calls == 1


async def test_cancel_racing_a_success_is_not_lost() -> None:
    gate = asyncio.Event()
    inside = asyncio.Event()
    body_ran = False

    async def a() -> int:
        inside.set()
        await gate.wait()
        return 1

    async def run() -> None:
        nonlocal body_ran
        async with opened([Node("a", a, timeout=30.0)], ["a"]):
            body_ran = True

    with clean_loop():
        runner = Runner(run)
        await started(inside)
        gate.set()
        runner.task.cancel()
        raised = await runner.outcome()
    assert isinstance(raised, asyncio.CancelledError)
    assert not body_ran


async def test_inline_node_swallowing_the_callers_cancel_still_ends_in_cancellation() -> None:
    records: list[Any] = []
    inside = asyncio.Event()
    body_ran = False

    async def conn() -> Conn:
        inside.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            pass
        return Conn("kept")

    async def close(acq: Any) -> None:
        records.append(acq)

    async def run() -> None:
        nonlocal body_ran
        async with opened([Node("conn", conn, release=close, output_type=Conn)], ["conn"]):
            body_ran = True

    with clean_loop():
        runner = Runner(run)
        await started(inside)
        runner.task.cancel()
        raised = await runner.outcome()
    assert isinstance(raised, asyncio.CancelledError)
    assert not body_ran
    (acq,) = records
    assert acq.is_valid and acq.value.name == "kept"


async def test_cancel_during_the_body_is_the_primary_and_releases_still_run() -> None:
    journal = Journal()
    in_body = asyncio.Event()

    async def conn() -> Conn:
        return Conn("c")

    async def close(acq: Any) -> None:
        journal("close")

    async def run() -> None:
        async with opened([Node("conn", conn, release=close)], ["conn"]):
            in_body.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError as exc:
                journal("body cancelled")
                body_cancel.append(exc)
                raise

    body_cancel: list[BaseException] = []
    with clean_loop():
        runner = Runner(run)
        await started(in_body)
        runner.task.cancel()
        raised = await runner.outcome()
    assert journal.entries == ["body cancelled", "close"]
    assert raised is body_cancel[0]
    assert failures(raised) == ()


async def test_repeated_cancels_during_cleanup_never_abandon_a_release() -> None:
    journal = Journal()
    releasing = asyncio.Event()
    gate = asyncio.Event()
    release_error = OSError("close failed")

    async def conn() -> Conn:
        return Conn("c")

    async def close(acq: Any) -> None:
        releasing.set()
        try:
            await gate.wait()
        except asyncio.CancelledError:
            journal("release cancelled")
            raise
        journal("release finished")
        raise release_error

    with clean_loop():
        runner = Runner(lambda: execute([Node("conn", conn, release=close)], ["conn"]))
        await started(releasing)
        for _ in range(3):
            runner.task.cancel()
            await yield_a_few()
        assert not runner.task.done()
        gate.set()
        raised = await runner.outcome()
    assert journal.entries == ["release finished"]
    assert isinstance(raised, asyncio.CancelledError)
    assert failures(raised) == (release_error,)
    assert "sdax_hamilton: release of 'conn' failed after 1 attempt" in notes(release_error)


async def test_cancel_during_cleanup_demotes_the_body_exception() -> None:
    releasing = asyncio.Event()
    gate = asyncio.Event()
    body_error = LookupError("body")
    release_error = OSError("close")

    async def conn() -> Conn:
        return Conn("c")

    async def close(acq: Any) -> None:
        releasing.set()
        await gate.wait()
        raise release_error

    async def run() -> None:
        async with opened([Node("conn", conn, release=close)], ["conn"]):
            raise body_error

    with clean_loop():
        runner = Runner(run)
        await started(releasing)
        runner.task.cancel()
        await yield_a_few()
        runner.task.cancel()  # absorbed: the primary already is a cancellation
        await yield_a_few()
        gate.set()
        raised = await runner.outcome()
    assert isinstance(raised, asyncio.CancelledError)
    assert failures(raised) == (body_error, release_error)
    assert failures(body_error) == ()


async def test_cancel_while_draining_after_a_node_failure_keeps_the_failure_secondary() -> None:
    journal = Journal()
    b_in = asyncio.Event()
    b_cancelled = asyncio.Event()
    drain = asyncio.Event()
    error = ValueError("a failed")

    async def a() -> int:
        await started(b_in)
        raise error

    async def b() -> int:
        b_in.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            b_cancelled.set()
            await drain.wait()
            journal("b drained")
            raise
        return 0

    nodes = [Node("a", a), Node("b", b)]
    with clean_loop():
        runner = Runner(lambda: execute(nodes, ["a", "b"]))
        await started(b_cancelled)
        runner.task.cancel()
        await yield_a_few()
        drain.set()
        raised = await runner.outcome()
    assert isinstance(raised, asyncio.CancelledError)
    assert failures(raised) == (error,)
    assert journal.entries == ["b drained"]


async def test_keyboard_interrupt_while_draining_a_cancel_becomes_the_primary() -> None:
    inside = asyncio.Event()
    interrupt = KeyboardInterrupt()

    async def a() -> int:
        inside.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise interrupt from None
        return 0

    async def b() -> int:
        await asyncio.Event().wait()
        return 0

    # A KeyboardInterrupt escaping a task would stop the loop, so the run is awaited by
    # this test's own task and a helper cancels it.
    me = asyncio.current_task()
    assert me is not None

    async def cancel_me() -> None:
        await started(inside)
        me.cancel()

    with clean_loop():
        helper = asyncio.create_task(cancel_me())
        with pytest.raises(KeyboardInterrupt) as info:
            await execute([Node("a", a), Node("b", b)], ["a", "b"])
        await helper
    assert me.uncancel() == 0
    assert info.value is interrupt
    (demoted,) = failures(interrupt)
    assert isinstance(demoted, asyncio.CancelledError)


@pytest.mark.parametrize("node_timeout", [None, 30.0])
@pytest.mark.parametrize("mode_name", MODES)
async def test_a_caller_timeout_around_a_run_becomes_timeout_error(
    node_timeout: float | None, mode_name: str
) -> None:
    mode = Mode(mode_name)
    closed = False

    async def conn() -> Conn:
        mode.seen()
        await asyncio.Event().wait()
        return Conn("never")

    async def close(acq: Any) -> None:
        nonlocal closed
        closed = True

    nodes, outputs = mode.nodes(Node("conn", conn, timeout=node_timeout, release=close))
    with clean_loop():
        with pytest.raises(TimeoutError) as info:
            async with asyncio.timeout(0.01):
                await execute(nodes, outputs)
        assert isinstance(info.value.__cause__, asyncio.CancelledError)  # the caller's scope
    mode.check()
    assert closed


@pytest.mark.parametrize("mode_name", MODES)
async def test_a_node_timeout_inside_a_longer_caller_timeout_stays_the_nodes(
    mode_name: str,
) -> None:
    mode = Mode(mode_name)

    async def a() -> int:
        mode.seen()
        await asyncio.Event().wait()
        return 0

    nodes, outputs = mode.nodes(Node("a", a, timeout=0.005))
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            async with asyncio.timeout(30.0):
                await execute(nodes, outputs)
    assert type(info.value.exceptions[0]) is TimeoutError
    mode.check()


async def test_many_concurrent_runs_cancelled_together_each_clean_up_once() -> None:
    count = 20
    closed: list[int] = []
    entered = 0
    all_in = asyncio.Event()

    async def conn(x: int) -> int:
        nonlocal entered
        entered += 1
        if entered == count:
            all_in.set()
        await asyncio.Event().wait()
        return x

    async def use(conn: int) -> int:
        return conn

    async def close(acq: Any) -> None:
        await asyncio.sleep(0)
        closed.append(1)

    nodes = [Node("conn", conn, ("x",), release=close), Node("use", use, ("conn",))]
    with clean_loop():
        runners = [
            Runner(lambda i=i: execute(nodes, ["use"], {"x": i}))  # type: ignore[misc]
            for i in range(count)
        ]
        await started(all_in)
        for runner in runners:
            runner.task.cancel()
        raised = [await runner.outcome() for runner in runners]
    assert all(isinstance(exc, asyncio.CancelledError) for exc in raised)
    assert len({id(exc) for exc in raised}) == count
    assert len(closed) == count


@pytest.mark.parametrize("mode_name", MODES)
async def test_caller_cancel_while_an_attempt_drains_its_timeout_wins(mode_name: str) -> None:
    mode = Mode(mode_name)
    calls = 0
    draining = asyncio.Event()
    gate = asyncio.Event()

    async def a() -> int:
        nonlocal calls
        mode.seen()
        calls += 1
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            draining.set()
            await gate.wait()
            raise
        return 0

    nodes, outputs = mode.nodes(Node("a", a, timeout=0.005, retries=3))
    with clean_loop():
        runner = Runner(lambda: execute(nodes, outputs))
        await started(draining)
        runner.task.cancel()
        await yield_a_few()
        gate.set()
        raised = await runner.outcome()
    assert type(raised) is asyncio.CancelledError
    assert runner.task.cancelled()
    assert calls == 1  # the timeout was not retried once the caller had cancelled
    mode.check(runner.task)


@pytest.mark.parametrize("mode_name", MODES)
async def test_a_timeout_never_fires_into_an_attempt_the_caller_cancelled(mode_name: str) -> None:
    mode = Mode(mode_name)
    journal = Journal()
    inside = asyncio.Event()

    async def a() -> int:
        mode.seen()
        inside.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            journal("cancelled")
            try:
                await asyncio.sleep(0.03)  # drains for longer than its 0.005 s timeout
            except asyncio.CancelledError:
                journal("cancelled again")
            raise
        return 0

    nodes, outputs = mode.nodes(Node("a", a, timeout=0.005, retries=3))
    with clean_loop():
        runner = Runner(lambda: execute(nodes, outputs))
        await started(inside)
        runner.task.cancel()
        raised = await runner.outcome()
    assert type(raised) is asyncio.CancelledError
    assert journal.entries == ["cancelled"]
    mode.check(runner.task)
