"""Regressions the fault campaign found and the driver now handles (docs/contract.md#forward-phase,
#open-algorithm, #diagnostics).

* ``selfcancel-drained``: a node's own ``CancelledError``, queued in the same batch of events
  as the failure or caller cancellation that aborted the run, is still reported.
* ``inline-repeated-cancel``: an attempt awaited inline is cancelled once, whatever the caller
  receives afterwards; releases never see the caller's cancellations.
* ``broken-notes-primary``: a primary whose ``__notes__`` is not a list is re-raised as the
  same object, its diagnostics attached.
"""

from __future__ import annotations

import asyncio
import contextvars
from dataclasses import dataclass
from typing import Any

import pytest
from support.driver import (
    Journal,
    Node,
    Runner,
    clean_loop,
    coordinator_of,
    execute,
    notes,
    opened,
    prepare,
    running_task,
    started,
    yield_a_few,
)

from sdax_hamilton._driver import open_run
from sdax_hamilton._failures import (
    DIAGNOSTICS_NOTE,
    ExecutionError,
    attach_failures,
    failures,
)
from sdax_hamilton._observe import RunEvent

# --------------------------------------------------------------------- selfcancel-drained


async def test_own_cancel_queued_with_a_failure_that_aborts_the_run_is_reported() -> None:
    gate = asyncio.Event()
    error = ValueError("a failed")
    own = asyncio.CancelledError("b cancelled itself")

    async def a() -> int:
        await gate.wait()
        raise error

    async def b() -> int:
        await gate.wait()
        raise own

    async def release_gate() -> None:
        await yield_a_few()
        gate.set()  # both end in the same loop iteration: one batch of events

    with clean_loop():
        opener = asyncio.create_task(release_gate())
        with pytest.raises(BaseExceptionGroup) as info:
            await execute([Node("a", a), Node("b", b)], ["a", "b"])
        await opener
    group = info.value
    assert not isinstance(group, ExceptionGroup)  # a leaf is a BaseException
    assert group.exceptions == (error, own)
    assert "sdax_hamilton: node 'b' failed after 1 attempt" in notes(own)


async def test_sync_own_cancel_queued_with_a_failure_is_reported_and_observed() -> None:
    error = ValueError("a failed")
    own = asyncio.CancelledError("b cancelled itself")
    events: list[RunEvent] = []

    def a() -> int:
        raise error

    def b() -> int:
        raise own

    plan, runtimes = prepare([Node("a", a), Node("b", b)], ["a", "b"])
    with clean_loop():
        with pytest.raises(BaseExceptionGroup) as info:
            async with open_run(plan, runtimes, {}, ["a", "b"], observer=events.append):
                pass
    assert info.value.exceptions == (error, own)
    failed = [(e.node, e.error) for e in events if e.kind == "attempt_failed"]
    assert failed == [("a", error), ("b", own)]
    assert not [e for e in events if e.kind == "attempt_cancelled"]


async def test_own_cancel_queued_with_the_callers_cancel_is_a_secondary_failure() -> None:
    gate = asyncio.Event()
    b_in = asyncio.Event()
    own = asyncio.CancelledError("b cancelled itself")
    journal = Journal()

    async def a() -> int:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            journal("a cancelled")
            raise
        return 0

    async def b() -> int:
        b_in.set()
        await gate.wait()
        raise own

    with clean_loop():
        runner = Runner(lambda: execute([Node("a", a), Node("b", b)], ["a", "b"]))
        await started(b_in)
        runner.task.cancel()  # reaches the run's coordinator first...
        gate.set()  # ...while b ends by cancelling itself in the same batch
        raised = await runner.outcome()
    assert type(raised) is asyncio.CancelledError and raised is not own
    assert runner.task.cancelled()
    assert failures(raised) == (own,)
    assert journal.entries == ["a cancelled"]


async def test_a_cancellation_we_delivered_is_still_the_drain_not_a_failure() -> None:
    b_in = asyncio.Event()
    error = ValueError("a failed")

    async def a() -> int:
        await started(b_in)
        raise error

    async def b() -> int:
        b_in.set()
        await asyncio.Event().wait()  # cancelled by the abort: its CancelledError is ours
        return 0

    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await execute([Node("a", a), Node("b", b)], ["a", "b"])
    assert info.value.exceptions == (error,)


# --------------------------------------------------------------------- inline-repeated-cancel


async def test_an_inline_attempt_is_cancelled_once_however_often_the_caller_is() -> None:
    journal = Journal()
    inside = asyncio.Event()
    cancelled = asyncio.Event()
    drain = asyncio.Event()
    ran_in: list[asyncio.Task[Any] | None] = []

    async def conn() -> int:
        ran_in.append(running_task())
        inside.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            journal("cancelled")
            cancelled.set()
            while not drain.is_set():  # a long drain, counting what else arrives
                try:
                    await drain.wait()
                except asyncio.CancelledError:
                    journal("cancelled again")
            raise
        return 0

    async def close(acquired: Any) -> None:
        journal("close")

    with clean_loop():
        runner = Runner(lambda: execute([Node("conn", conn, release=close)], ["conn"]))
        await started(inside)
        first = runner.task
        for _ in range(3):
            runner.task.cancel()
            await yield_a_few()
        await started(cancelled)
        assert not runner.task.done()  # shielded: still waiting for the drain
        drain.set()
        raised = await runner.outcome()
    assert type(raised) is asyncio.CancelledError
    assert runner.task.cancelled()
    assert journal.entries == ["cancelled", "close"]
    (task,) = ran_in
    assert task is not first and coordinator_of(task) == "RunContext._coordinate"


async def test_a_caller_cancel_while_an_inline_attempt_drains_its_timeout_is_not_delivered() -> (
    None
):
    journal = Journal()
    draining = asyncio.Event()
    drain = asyncio.Event()
    calls = 0

    async def a() -> int:
        nonlocal calls
        calls += 1
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            journal("timed out")
            draining.set()
            while not drain.is_set():
                try:
                    await drain.wait()
                except asyncio.CancelledError:
                    journal("cancelled again")
            raise
        return 0

    # Lone, so awaited inline; the timeout is retryable, so only the caller stops a retry.
    node = Node("a", a, timeout=0.005, retries=3, initial_delay=0.0)
    with clean_loop():
        runner = Runner(lambda: execute([node], ["a"]))
        await started(draining)
        runner.task.cancel()
        await yield_a_few()
        runner.task.cancel()
        await yield_a_few()
        drain.set()
        raised = await runner.outcome()
    assert type(raised) is asyncio.CancelledError
    assert failures(raised) == ()
    assert journal.entries == ["timed out"]
    assert calls == 1


async def test_a_caller_cancel_during_an_inline_attempt_keeps_its_timeout_from_firing() -> None:
    journal = Journal()
    inside = asyncio.Event()
    draining = asyncio.Event()
    drain = asyncio.Event()

    async def a() -> int:
        inside.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            journal("cancelled")
            draining.set()
            try:
                await drain.wait()
            except asyncio.CancelledError:
                journal("cancelled again")
            raise
        return 0

    with clean_loop():
        runner = Runner(lambda: execute([Node("a", a, timeout=0.005, retries=2)], ["a"]))
        await started(inside)
        runner.task.cancel()
        await started(draining)
        runner.task.cancel()
        # It drains past its 0.005 s timeout: a timer started after the attempt and ending
        # later fires after the attempt's timer would have.
        await asyncio.sleep(0.03)
        drain.set()
        raised = await runner.outcome()
    assert type(raised) is asyncio.CancelledError
    assert journal.entries == ["cancelled"]


@pytest.mark.parametrize("sync_release", [False, True])
async def test_releases_never_run_in_the_callers_task_nor_see_its_cancellations(
    sync_release: bool,
) -> None:
    journal = Journal()
    releasing = asyncio.Event()
    gate = asyncio.Event()
    ran_in: list[asyncio.Task[Any] | None] = []

    async def conn() -> int:
        return 1

    async def slow_close(acquired: Any) -> None:
        ran_in.append(asyncio.current_task())
        releasing.set()
        try:
            await gate.wait()
        except asyncio.CancelledError:
            journal("release cancelled")
            raise
        journal("released")

    def sync_close(acquired: Any) -> None:
        ran_in.append(asyncio.current_task())
        journal("released")

    async def other() -> int:
        return 2

    async def other_close(acquired: Any) -> None:
        releasing.set()
        await gate.wait()
        journal("other released")

    nodes = [
        Node("conn", conn, release=sync_close if sync_release else slow_close),
        Node("other", other, release=other_close),
    ]
    with clean_loop():
        runner = Runner(lambda: execute(nodes, ["conn", "other"]))
        await started(releasing)
        for _ in range(3):
            runner.task.cancel()
            await yield_a_few()
        gate.set()
        raised = await runner.outcome()
    assert type(raised) is asyncio.CancelledError
    assert "release cancelled" not in journal.entries
    assert sorted(journal.entries) == ["other released", "released"]
    assert ran_in and all(task is not None and task is not runner.task for task in ran_in)


async def test_the_forward_task_leaves_the_callers_cancel_count_alone() -> None:
    me = asyncio.current_task()
    assert me is not None

    async def a() -> int:
        await asyncio.sleep(0)
        return 1

    async def b(a: int) -> int:
        await asyncio.sleep(0)
        return a + 1

    with clean_loop():
        result = await execute([Node("a", a, timeout=5.0), Node("b", b, ("a",))], ["b"])
    assert result == {"b": 2}
    assert me.cancelling() == 0


VAR: contextvars.ContextVar[str] = contextvars.ContextVar("sdax_regression_var", default="unset")


async def test_nodes_see_the_callers_context_and_their_changes_do_not_leak_back() -> None:
    seen: list[str] = []

    async def a() -> int:
        seen.append(VAR.get())
        VAR.set("set by a")
        return 1

    def b(a: int) -> int:
        seen.append(VAR.get())
        VAR.set("set by b")
        return a

    async def close(acquired: Any) -> None:
        seen.append(VAR.get())
        VAR.set("set by the release")

    token = VAR.set("caller")
    try:
        with clean_loop():
            async with opened([Node("a", a, release=close), Node("b", b, ("a",))], ["b"]) as out:
                assert VAR.get() == "caller"
                assert out == {"b": 1}
        assert VAR.get() == "caller"
    finally:
        VAR.reset(token)
    assert seen[0] == "caller"
    assert seen[2] == "caller"  # the release: a copy of the caller's context at cleanup


# --------------------------------------------------------------------- broken-notes-primary


@pytest.mark.parametrize("broken_notes", [("kept",), "kept"])
async def test_a_body_exception_with_broken_notes_is_reraised_with_its_failures(
    broken_notes: Any,
) -> None:
    release_error = OSError("close failed")
    body_error = LookupError("body")
    body_error.__notes__ = broken_notes

    async def conn() -> int:
        return 1

    async def close(acquired: Any) -> None:
        raise release_error

    with clean_loop():
        with pytest.raises(LookupError) as info:
            async with opened([Node("conn", conn, release=close)], ["conn"]):
                raise body_error
    assert info.value is body_error
    assert failures(body_error) == (release_error,)
    assert body_error.__notes__ is broken_notes  # left alone: the note was skipped


async def test_a_node_interrupt_with_broken_notes_stays_the_primary() -> None:
    interrupt = KeyboardInterrupt()
    interrupt.__notes__ = ("kept",)  # type: ignore[assignment]
    error = ValueError("b failed")

    def a() -> int:
        raise interrupt

    def b() -> int:
        raise error

    with clean_loop():
        with pytest.raises(KeyboardInterrupt) as info:
            await execute([Node("a", a), Node("b", b)], ["a", "b"])
    assert info.value is interrupt
    assert failures(interrupt) == (error,)


def test_attaching_never_raises_and_failures_still_returns_the_items() -> None:
    @dataclass(frozen=True)
    class Frozen(Exception):
        code: int = 1

    class BrokenNotes(Exception):
        @property
        def __notes__(self) -> list[str]:  # type: ignore[override]
            raise RuntimeError("broken")

    item = OSError("diagnostic")
    for primary in (Frozen(), BrokenNotes()):
        attach_failures(primary, [item])
        assert failures(primary) == (item,)
    working = ValueError()
    attach_failures(working, [item])
    assert failures(working) == (item,) and notes(working) == [DIAGNOSTICS_NOTE]
