"""The caller's side of a phase: its wait for the phase's task, and the cancellations that
land on that wait.

The caller's task awaits a future the coordinator resolves when its phase is over
(``coordinate``'s ``finally``), never the phase's task itself: its cancellations land here.
Each is recorded in the run's failure record; in the forward phase the first one aborts it
(passed on to the phase's task once, ``request_abort``), during cleanup none is. The run
reaches here only when its phase suspended (``RunContext._start_phase`` returned False), so
a run whose phase never suspends runs none of this. docs/internals.md, "How the driver
carries out STARTs", gives the reasons.
"""

from __future__ import annotations

import asyncio
from typing import Final

from .coordinator import PhaseOwner, Stage

_CancelledError: Final = asyncio.CancelledError
_STARTING: Final = Stage.STARTING
_FORWARD: Final = Stage.FORWARD
_ABORTING: Final = Stage.ABORTING
_CLOSING: Final = Stage.CLOSING
_DONE: Final = Stage.DONE


async def wait_phase(ctx: PhaseOwner, until: Stage) -> None:
    """Wait for the phase's task until the run reaches ``until``."""
    loop = ctx._loop
    task = ctx._phase_task
    assert task is not None
    try:
        if ctx._stage >= until:
            # An eager start ran the whole phase while the caller had a cancellation
            # pending: the caller never waited, so it was not delivered. Take it now,
            # as a wait would have, so it stays the caller's primary.
            await _take_pending_cancellation(ctx)
        while ctx._stage < until:
            done = ctx._phase_done = loop.create_future()
            try:
                await done
            except _CancelledError as exc:
                caller_cancelled(ctx, exc)
                if task.done() and ctx._stage < until:
                    _never_ran(ctx, until)
    except BaseException:
        # Not a cancellation: a KeyboardInterrupt raised into this task by a signal
        # handler, say. Nobody waits for the forward phase any more: abort it.
        request_abort(ctx)
        raise


async def _take_pending_cancellation(ctx: PhaseOwner) -> None:
    """Yield once: a cancellation pending for the caller is delivered, and recorded."""
    try:
        await asyncio.sleep(0)
    except _CancelledError as exc:
        caller_cancelled(ctx, exc)


def _never_ran(ctx: PhaseOwner, until: Stage) -> None:
    """The phase's task was cancelled before its first step, by someone else (we never
    do; a loop being torn down cancels every task): nothing of the phase ran. The run is
    at ``until``."""
    if until is _DONE and ctx._stage >= _CLOSING:
        ctx._internal = RuntimeError(
            "sdax_hamilton internal error: the shutdown task was cancelled before it began"
        )
    else:
        ctx._failures().caller_cancelled(_CancelledError(), False)
    ctx._stage = until
    done = ctx._phase_done
    if done is not None and not done.done():
        done.set_result(None)


def caller_cancelled(ctx: PhaseOwner, exc: BaseException) -> None:
    """The caller's task was cancelled while waiting for a phase."""
    shutdown = ctx._stage >= _CLOSING
    ctx._failures().caller_cancelled(exc, shutdown)
    if not shutdown:  # cleanup is never abandoned
        request_abort(ctx)


def request_abort(ctx: PhaseOwner) -> None:
    """Abort the forward phase, once: pass one cancellation on to the forward task."""
    stage = ctx._stage
    if stage is not _STARTING and stage is not _FORWARD:
        return  # aborted already, or the forward phase is over
    ctx._stage = _ABORTING
    task = ctx._phase_task
    if stage is _STARTING or task is None or task.done():
        return  # not begun: the coordinator sees the request and starts nothing
    calls = ctx._calls
    attempt = calls.timers.inline if calls is not None and calls.timers is not None else None
    if attempt is not None and attempt.timed_out:
        return  # already cancelled once, by its timeout: aborted once it has drained
    task.cancel()  # lands on the coordinator's wait or in the attempt awaited inline
