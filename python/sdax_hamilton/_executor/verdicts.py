"""What an attempt's ending means: pure classification and the notes it is written with.

No event loop, no run: the rules of docs/lifecycle.md ("Cancellation", "Failures") that
read how an attempt ended, in one place, testable on their own
(tests/test_executor_parts.py). ``Outcomes`` reports what they decide to the core.
"""

from __future__ import annotations

import asyncio
import enum
from typing import Final

from .attempts import AttemptState

_CancelledError: Final = asyncio.CancelledError
_CANCELLED: Final = AttemptState.CANCELLED
_CANCEL_MISSED: Final = AttemptState.CANCEL_MISSED
_TIMED_OUT: Final = AttemptState.TIMED_OUT
_CANCELLED_TIMED_OUT: Final = AttemptState.CANCELLED_TIMED_OUT


class Verdict(enum.IntEnum):
    """What a raised exception means for the attempt that raised it."""

    FAILED = 0
    """A failure of the attempt: the core decides whether it is retried."""
    DRAINED = 1
    """The core cancelled it and it ended in that cancellation: the abort's drain."""
    DRAINED_WITH_ERROR = 2
    """The core cancelled it; it raised something else meanwhile: a diagnostic of the run."""
    SELF_CANCELLED = 3
    """Our cancellation missed it (it had ended) and it raised ``CancelledError``: it
    cancelled itself, which fails the run; never taken for the drain of the abort."""


def judge_raised(state: AttemptState, exc: BaseException) -> Verdict:
    """The verdict on an attempt in ``state`` that raised ``exc``."""
    if state < _CANCELLED:
        return Verdict.FAILED
    if isinstance(exc, _CancelledError):
        return Verdict.SELF_CANCELLED if state == _CANCEL_MISSED else Verdict.DRAINED
    return Verdict.DRAINED_WITH_ERROR


def failure_of(state: AttemptState, exc: BaseException) -> BaseException:
    """The failure an attempt's ``exc`` stands for: a ``CancelledError`` out of an attempt
    our timer cancelled is its ``TimeoutError``."""
    if (state == _TIMED_OUT or state == _CANCELLED_TIMED_OUT) and isinstance(exc, _CancelledError):
        return TimeoutError()
    return exc


def is_retryable(exc: BaseException, retryable: tuple[type[BaseException], ...]) -> bool:
    """``isinstance`` against the set; an ``ExceptionGroup`` only if every leaf is.

    Flattening descends ``ExceptionGroup`` only: any other ``BaseExceptionGroup`` is tested
    as itself (docs/api.md, "execution"). A ``CancelledError`` the attempt raised by itself,
    ``KeyboardInterrupt`` and ``SystemExit`` are never in a validated set.
    """
    if isinstance(exc, ExceptionGroup):
        stack: list[BaseException] = [exc]
        while stack:
            item = stack.pop()
            if isinstance(item, ExceptionGroup):
                stack.extend(item.exceptions)
            elif not isinstance(item, retryable):
                return False
        return True
    return isinstance(exc, retryable)


def plural(count: int) -> str:
    return f"{count} attempt" if count == 1 else f"{count} attempts"


def final_note(subject: str, attempts: int | None) -> str:
    """The note on a failure that is final (``attempts``: ``None`` before the first)."""
    if attempts is None:
        return f"sdax_hamilton: {subject} failed before its first attempt"
    return f"sdax_hamilton: {subject} failed after {plural(attempts)}"


def why_notes(
    subject: str,
    number: int,
    clipped: bool,
    problem: str | None,
    no_room: tuple[float | None] | None,
) -> list[str]:
    """The notes saying why a failure is final when the run's timeout or the ``retry_after``
    hook decided it: attempt ``number`` (1-based) was ``clipped`` by the run's timeout, the
    hook's ``problem``, the retry's wait that did not fit (``no_room``: ``(wait,)``, ``None``
    inside when the deadline had passed)."""
    notes: list[str] = []
    if clipped:
        notes.append(
            f"sdax_hamilton: {subject}: attempt {number} was cut short by the run's timeout"
        )
    if problem is not None:
        notes.append(
            f"sdax_hamilton: {subject}: its retry_after hook {problem}; the retry was not taken"
        )
    if no_room is not None:
        wait = no_room[0]
        if wait is not None:
            notes.append(
                f"sdax_hamilton: {subject}: the run's timeout left no room for a "
                f"retry (its wait of {wait:.3g} s would end past it)"
            )
        elif not clipped:  # a clipped timeout says it already
            notes.append(f"sdax_hamilton: {subject}: the run's timeout left no room for a retry")
    return notes


def expired_note(subject: str, attempt_number: int) -> str:
    """The note on the ``TimeoutError`` of a job whose attempt ``attempt_number`` (0-based)
    could not start before the run's deadline."""
    when = f"attempt {attempt_number + 1} could start" if attempt_number else "it could start"
    return f"sdax_hamilton: {subject}: the run's timeout expired before {when}"
