"""The failure record (docs/contract.md#diagnostics, #outcomes) and the retryable test
(docs/contract.md#retry-loop), without a run."""

from __future__ import annotations

import asyncio

import pytest

from sdax_hamilton._executor import is_retryable
from sdax_hamilton._failures import (
    DIAGNOSTICS_NOTE,
    ExecutionError,
    RetryableException,
    attach_failures,
    failure_group,
    failures,
)


def test_failures_of_anything_without_diagnostics_is_empty() -> None:
    assert failures(ValueError("x")) == ()
    assert failures(None) == ()
    assert failures("not an exception") == ()
    assert failures(42) == ()
    assert failures(ValueError) == ()  # the class, not an instance


def test_attach_keeps_identity_order_and_adds_the_note_once() -> None:
    primary = RuntimeError("body")
    first, second = ValueError("a"), OSError("b")
    attach_failures(primary, [first, second])
    attach_failures(primary, [second, first])  # already there: nothing new
    assert failures(primary) == (first, second)
    assert failures(primary)[0] is first
    assert primary.__notes__.count(DIAGNOSTICS_NOTE) == 1
    third = KeyError("c")
    attach_failures(primary, [third])
    assert failures(primary) == (first, second, third)
    assert primary.__notes__.count(DIAGNOSTICS_NOTE) == 1


def test_attach_nothing_or_only_the_primary_adds_no_note() -> None:
    primary = ValueError("p")
    attach_failures(primary, [])
    attach_failures(primary, [primary])
    assert failures(primary) == ()
    assert not hasattr(primary, "__notes__")


def test_attach_deduplicates_within_one_call_and_keeps_originals_uncopied() -> None:
    primary = asyncio.CancelledError()
    item = ValueError("v")
    attach_failures(primary, [item, item])
    assert failures(primary) == (item,)
    assert failures(primary)[0] is item
    assert not hasattr(item, "__notes__")  # the secondary itself is not annotated here


def test_failure_group_is_an_execution_error_with_original_leaves() -> None:
    a, b = ValueError("a"), TimeoutError()
    group = failure_group([a, b, a])
    assert type(group) is ExecutionError
    assert isinstance(group, ExceptionGroup)
    assert group.exceptions == (a, b)
    assert group.exceptions[0] is a


def test_failure_group_with_a_base_exception_leaf_is_a_plain_base_group() -> None:
    cancelled = asyncio.CancelledError()
    other = ValueError("v")
    group = failure_group([other, cancelled])
    assert type(group) is BaseExceptionGroup
    assert not isinstance(group, ExecutionError)
    assert group.exceptions == (other, cancelled)


def test_execution_error_keeps_its_class_under_except_star_and_split() -> None:
    a, b = ValueError("a"), KeyError("b")
    group = ExecutionError("failed", [a, b])
    match, rest = group.split(ValueError)
    assert type(match) is ExecutionError and match.exceptions == (a,)
    assert type(rest) is ExecutionError and rest.exceptions == (b,)
    caught: list[BaseException] = []
    try:
        raise group
    except* KeyError as eg:
        caught.append(eg)
    except* ValueError as eg:
        caught.append(eg)
    assert [type(g) for g in caught] == [ExecutionError, ExecutionError]


def test_retryable_exception_is_an_ordinary_exception() -> None:
    assert issubclass(RetryableException, Exception)


RETRYABLE = (ConnectionError, TimeoutError)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (ConnectionError(), True),
        (ConnectionResetError(), True),  # subclasses count
        (OSError(), False),  # a superclass does not
        (TimeoutError(), True),
        (ValueError(), False),
        (asyncio.CancelledError(), False),
        (KeyboardInterrupt(), False),
        (SystemExit(), False),
        (ExceptionGroup("g", [ConnectionError(), TimeoutError()]), True),
        (ExceptionGroup("g", [ConnectionError(), ValueError()]), False),
        (ExceptionGroup("g", [ExceptionGroup("h", [ConnectionResetError()])]), True),
        (ExceptionGroup("g", [ExceptionGroup("h", [KeyError()]), TimeoutError()]), False),
        # a BaseExceptionGroup is not flattened: tested as itself
        (BaseExceptionGroup("g", [ConnectionError(), KeyboardInterrupt()]), False),
    ],
)
def test_retryable_test_follows_the_leaves_of_exception_groups(
    exc: BaseException, expected: bool
) -> None:
    assert is_retryable(exc, RETRYABLE) is expected


def test_base_exception_group_is_retryable_only_by_its_own_class() -> None:
    base = BaseExceptionGroup("g", [ValueError(), KeyboardInterrupt()])
    assert is_retryable(base, (BaseExceptionGroup,))
    # an ExceptionGroup is flattened, so its class in the set does not make it retryable
    assert not is_retryable(ExceptionGroup("g", [ValueError()]), (BaseExceptionGroup,))
    assert is_retryable(ExceptionGroup("g", [ValueError()]), (Exception,))
