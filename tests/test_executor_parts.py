"""The executor's parts on their own, no event loop, no run: what an attempt's ending means
(``verdicts.py``: the rules of docs/lifecycle.md, "Cancellation" and "Failures"), the job
table, the attempt table, and the argument reading both call paths share. The driver tests
check that a run applies them.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sdax_hamilton._executor.attempts import AttemptState
from sdax_hamilton._executor.jobs import JobTable
from sdax_hamilton._executor.runtime import NodeRuntime, ReleaseRuntime
from sdax_hamilton._executor.verdicts import (
    Verdict,
    expired_note,
    failure_of,
    final_note,
    is_retryable,
    judge_raised,
    why_notes,
)

NOT_CANCELLED = (AttemptState.CALLED, AttemptState.RUNNING, AttemptState.TIMED_OUT)


@pytest.mark.parametrize("state", NOT_CANCELLED)
@pytest.mark.parametrize("exc", [ValueError("x"), asyncio.CancelledError(), KeyboardInterrupt()])
def test_an_attempt_the_core_did_not_cancel_failed(state: AttemptState, exc: BaseException) -> None:
    assert judge_raised(state, exc) is Verdict.FAILED


def test_a_cancellation_that_reached_the_attempt_is_the_drain_of_the_abort() -> None:
    for state in (AttemptState.CANCELLED, AttemptState.CANCELLED_TIMED_OUT):
        assert judge_raised(state, asyncio.CancelledError()) is Verdict.DRAINED
        assert judge_raised(state, OSError()) is Verdict.DRAINED_WITH_ERROR


def test_a_cancellation_that_missed_is_the_attempt_cancelling_itself() -> None:
    # It had ended before our cancellation could reach it: its CancelledError is its own.
    missed = AttemptState.CANCEL_MISSED
    assert judge_raised(missed, asyncio.CancelledError()) is Verdict.SELF_CANCELLED
    assert judge_raised(missed, OSError()) is Verdict.DRAINED_WITH_ERROR


def test_a_timed_out_attempt_fails_with_a_timeout_error() -> None:
    cancelled = asyncio.CancelledError()
    for state in (AttemptState.TIMED_OUT, AttemptState.CANCELLED_TIMED_OUT):
        assert type(failure_of(state, cancelled)) is TimeoutError
    error = OSError()  # what it raised instead of its cancellation stays what it is
    assert failure_of(AttemptState.TIMED_OUT, error) is error
    assert failure_of(AttemptState.RUNNING, cancelled) is cancelled


def test_retryable_sets_and_exception_groups() -> None:
    retryable = (ConnectionError, TimeoutError)
    assert is_retryable(ConnectionResetError(), retryable)
    assert not is_retryable(ValueError(), retryable)
    both = ExceptionGroup("g", [ConnectionError(), ExceptionGroup("h", [TimeoutError()])])
    assert is_retryable(both, retryable)
    assert not is_retryable(ExceptionGroup("g", [ConnectionError(), ValueError()]), retryable)
    # Only ExceptionGroup is flattened: a BaseExceptionGroup is tested as itself.
    base = BaseExceptionGroup("b", [KeyboardInterrupt()])
    assert not is_retryable(base, retryable)
    assert not is_retryable(asyncio.CancelledError(), retryable)


def test_notes_say_why_a_failure_is_final() -> None:
    assert final_note("node 'a'", None) == "sdax_hamilton: node 'a' failed before its first attempt"
    assert final_note("node 'a'", 1) == "sdax_hamilton: node 'a' failed after 1 attempt"
    assert final_note("release of 'a'", 3).endswith("failed after 3 attempts")
    notes = why_notes("node 'a'", 2, True, "raised KeyError", (None,))
    assert notes == [
        "sdax_hamilton: node 'a': attempt 2 was cut short by the run's timeout",
        "sdax_hamilton: node 'a': its retry_after hook raised KeyError; the retry was not taken",
    ]  # a clipped timeout already says there was no room
    (room,) = why_notes("node 'a'", 1, False, None, (1.5,))
    assert "its wait of 1.5 s would end past it" in room
    assert why_notes("node 'a'", 1, False, None, None) == []
    assert expired_note("node 'a'", 0).endswith("expired before it could start")
    assert expired_note("node 'a'", 2).endswith("expired before attempt 3 could start")


def _node(name: str, release: bool) -> NodeRuntime:
    return NodeRuntime(
        name=name,
        origin=f"tests.{name}",
        call=lambda: None,
        args=(),
        defaults={},
        input_checks=(),
        output_check=None,
        retryable=(ConnectionError,),
        output_type=object,
        release=ReleaseRuntime(f"tests.{name}_release", lambda _: None, (OSError,))
        if release
        else None,
    )


def test_the_job_table_decodes_every_job_id_once() -> None:
    table = JobTable([_node("conn", True), _node("query", False)])
    assert len(table) == 4 and table.forward_count == 2
    conn, query, conn_release, query_release = table
    assert (conn.id, conn.forward, conn.owner, conn.subject) == (0, True, 0, "node 'conn'")
    assert conn.retryable == (ConnectionError,) and conn.release is None
    assert (query.id, query.owner, query.name) == (1, 1, "query")
    assert (conn_release.id, conn_release.forward, conn_release.owner) == (2, False, 0)
    assert conn_release.subject == "release of 'conn'" and conn_release.node is conn.node
    assert conn_release.retryable == (OSError,) and conn_release.release is not None
    assert query_release.release is None  # not an owner: the core never starts it


def test_the_attempt_table_holds_several_live_attempts_of_a_job_and_grows() -> None:
    from sdax_hamilton._executor.attempts import Attempt, AttemptTable

    table = JobTable([_node("conn", True)])
    attempts = AttemptTable(len(table))
    first, second, third = (Attempt(table[0], number, None) for number in range(3))
    for attempt in (first, second, third):
        attempts.add(attempt)
    assert list(attempts.live_of(0)) == [third, second, first]
    attempts.end(second)  # one in the middle ends; the others stay live
    assert list(attempts.live_of(0)) == [third, first]
    attempts.end(third)
    attempts.end(first)
    assert list(attempts.live_of(0)) == [] and attempts.running == [None, None]
    attempts.grow(2)  # jobs a run adds while it goes on
    assert len(attempts.running) == len(attempts.sleeps) == 4
    assert list(attempts.all_live()) == []


def _runtime(name: str, call: Any, args: tuple[str, ...], **extra: Any) -> NodeRuntime:
    return NodeRuntime(
        name=name,
        origin=f"tests.{name}",
        call=call,
        args=tuple((arg, f"v_{arg}") for arg in args),
        defaults=extra.get("defaults", {}),
        input_checks=extra.get("checks", ()),
        output_check=None,
        retryable=(),
        output_type=object,
        release=None,
    )


def _plain(a: int, b: int) -> None: ...


def _with_default(a: int, b: int = 2) -> None: ...


def _keyword_only(*, b: int, a: int) -> None: ...


def _is_str(value: object) -> bool:
    return isinstance(value, str)


def _broken_check(value: object) -> bool:
    raise LookupError("the check itself failed")


@pytest.mark.parametrize(
    ("runtime", "expected"),
    [
        (_runtime("plain", _plain, ("a", "b")), {"a": 1, "b": 2}),  # passed positionally
        (_runtime("reordered", _keyword_only, ("a", "b")), {"a": 1, "b": 2}),
        (_runtime("defaults", _with_default, ("a",), defaults={"b": 7}), {"a": 1, "b": 7}),
        (_runtime("checked", _plain, ("a", "b"), checks=(("a", int),)), {"a": 1, "b": 2}),
        (
            _runtime("refused", _plain, ("a", "b"), checks=(("b", _is_str),)),
            TypeError("Invalid input for refused.b"),
        ),
        (_runtime("missing", _plain, ("a", "c")), KeyError("v_c")),
        (
            _runtime("broken", _plain, ("a", "b"), checks=(("a", _broken_check),)),
            LookupError("the check itself failed"),
        ),
    ],
    ids=lambda value: getattr(value, "name", None) or type(value).__name__,
)
def test_both_call_paths_read_arguments_in_one_place(
    runtime: NodeRuntime, expected: dict[str, Any] | BaseException
) -> None:
    # The driver's own STARTs read a node's first arguments with the carrier's reading
    # (Carrier.arguments, src/carry.rs), for every signature shape the carrier handles.
    from sdax_hamilton._executor.runtime import carrier_of

    carrier = carrier_of([runtime])
    values = {"v_a": 1, "v_b": 2}
    if isinstance(expected, BaseException):
        with pytest.raises(type(expected)) as info:
            carrier.arguments(0, values)
        assert info.value.args == expected.args
    else:
        assert carrier.arguments(0, values) == expected
    with pytest.raises(IndexError):
        carrier.arguments(1, values)


PARTS_SOURCE = """
import asyncio
from sdax_hamilton import execution

async def left() -> int:
    await asyncio.sleep(0)
    return 1

async def right() -> int:
    await asyncio.sleep(0)
    return 2

async def both(left: int, right: int) -> int:
    return left + right

@execution(timeout=30.0)
async def timed(left: int, right: int) -> int:
    await asyncio.sleep(0)
    return left * right

async def broken(left: int, right: int) -> int:
    raise ValueError("broken")
"""


async def test_a_run_makes_its_timers_and_its_failure_record_only_when_it_needs_them(
    make_module: Any,
) -> None:
    """Two nodes at once: the driver carries them out (its parts exist), yet a run whose
    attempts have no timeout makes no timers, and one where nothing fails no failure
    record; a timeout makes the timers, a failure one record the run and its parts share."""
    from sdax_hamilton import Driver, ExecutionError

    driver = Driver(make_module(PARTS_SOURCE))
    held = driver.prepare(["both"]).open()
    async with held as values:
        assert values == {"both": 3}
        run = held._run  # type: ignore[attr-defined]
        assert run._calls is not None  # the driver carried out the two nodes at once
        assert run._calls.timers is None
        assert run._calls.record is None and run._record is None

    held = driver.prepare(["timed"]).open()
    async with held as values:
        assert values == {"timed": 2}
        assert held._run._calls.timers is not None  # type: ignore[attr-defined]
        assert held._run._record is None  # type: ignore[attr-defined]

    held = driver.prepare(["broken"]).open()
    with pytest.raises(ExecutionError, match="broken"):
        async with held:
            pass  # pragma: no cover - the forward phase fails
    run = held._run  # type: ignore[attr-defined]
    assert run._record is not None and run._record is run._calls.record
