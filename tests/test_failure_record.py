"""The failure record on its own, without an event loop: which exception a run raises.

The rules are the ones docs/lifecycle.md ("Failures: primary and secondary",
"Cancellation") states for whole runs; tests/test_driver_failures.py checks them end to end.
"""

from __future__ import annotations

import asyncio

import pytest

from sdax_hamilton import ExecutionError, failures
from sdax_hamilton._executor.record import FailureRecord


def test_a_clean_record_has_no_outcome() -> None:
    record = FailureRecord()
    assert record.clean
    assert record.outcome() is None


def test_node_failures_alone_become_an_execution_error_in_order() -> None:
    record = FailureRecord()
    first, second = ValueError("a"), KeyError("b")
    record.failed(first)
    record.failed(second)
    assert not record.clean and record.primary is None
    outcome = record.outcome()
    assert isinstance(outcome, ExecutionError)
    assert list(outcome.exceptions) == [first, second]


def test_a_non_exception_failure_makes_a_base_exception_group() -> None:
    record = FailureRecord()
    own = asyncio.CancelledError()  # a node cancelling itself
    record.failed(own)
    outcome = record.outcome()
    assert type(outcome) is BaseExceptionGroup
    assert list(outcome.exceptions) == [own]


def test_the_first_caller_cancellation_is_primary_later_ones_are_absorbed() -> None:
    record = FailureRecord()
    first, later = asyncio.CancelledError(), asyncio.CancelledError()
    record.caller_cancelled(first, shutdown=False)
    record.caller_cancelled(later, shutdown=True)
    boom = ValueError("node")
    record.failed(boom)
    assert record.outcome() is first
    assert failures(first) == (boom,)
    assert record.secondary == [boom]


def test_a_cancellation_during_cleanup_demotes_the_body_exception() -> None:
    record = FailureRecord()
    body = RuntimeError("body")
    record.body_raised(body)
    cancel = asyncio.CancelledError()
    record.caller_cancelled(cancel, shutdown=True)
    assert record.primary is cancel
    assert record.outcome() is cancel
    assert failures(cancel) == (body,)


def test_a_cancellation_in_the_forward_phase_never_demotes_a_termination() -> None:
    for shutdown in (False, True):
        record = FailureRecord()
        stop = KeyboardInterrupt()
        record.failed(stop)
        cancel = asyncio.CancelledError()
        record.caller_cancelled(cancel, shutdown=shutdown)
        assert record.primary is stop
        assert record.secondary == [cancel]


@pytest.mark.parametrize("termination", [KeyboardInterrupt, SystemExit])
def test_a_termination_takes_over_the_primary_once(termination: type[BaseException]) -> None:
    record = FailureRecord()
    body = RuntimeError("body")
    record.body_raised(body)
    first, second = termination(), SystemExit(3)
    record.failed(first)
    record.terminate(second)
    assert record.primary is first
    assert record.secondary == [body, second]
    assert record.outcome() is first
    assert failures(first) == (body, second)


def test_outcome_attaches_each_secondary_once() -> None:
    record = FailureRecord()
    cancel = asyncio.CancelledError()
    record.caller_cancelled(cancel, shutdown=False)
    boom = ValueError("x")
    record.failed(boom)
    assert record.outcome() is cancel
    assert record.outcome() is cancel
    assert failures(cancel) == (boom,)
