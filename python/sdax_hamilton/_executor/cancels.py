"""Cancelling attempts: the core's CANCEL of a job, a timeout's, and the salvage's stop.

Each live attempt of a cancelled job is cancelled once, and its state says whether the
cancellation reached it (``AttemptState``): one whose outcome is already queued keeps it
(``CANCEL_MISSED``), one draining its own timeout is marked so, one waiting for a bulkhead's
permit leaves the queue, and a task cancelled before its first step reports itself
unstarted (its awaitable is never awaited). Made when a run first cancels an attempt or
an attempt's timer fires (``Calls.cancels``): a run that does neither never makes one.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, Protocol, cast

from .attempts import (
    CANCEL_MISSED,
    CANCELLED,
    CANCELLED_TIMED_OUT,
    RUNNING,
    TIMED_OUT,
    UNSTARTED,
    Attempt,
)
from .cache import CacheRun
from .calls_seen import CallsSeen
from .guards import Guards
from .jobs import Job
from .runtime import TIMEOUT_MESSAGE


class RunCalls(CallsSeen, Protocol):
    """What cancelling uses of the run's ``calls.Calls``, which holds it (a protocol:
    ``calls`` imports this module)."""

    @property
    def cache(self) -> CacheRun | None: ...
    @property
    def guards_made(self) -> Guards | None: ...
    def was_clipped(self, job: Job, attempt_number: int) -> bool: ...


class Cancels:
    """The run's cancellations of attempts (made with the first, ``Calls.cancels``)."""

    __slots__ = ("_calls", "_table")

    def __init__(self, calls: RunCalls) -> None:
        # A proxy: the run's ``Calls`` holds this part, which must not hold it back (a run
        # leaves no reference cycle, tests/test_driver_memory.py).
        self._calls: RunCalls = cast("RunCalls", weakref.proxy(calls))
        self._table = calls.table

    def job(self, job: int) -> None:
        """CANCEL: cancel each live attempt of ``job`` once, noting whether it reached it."""
        for attempt in self._table.live_of(job):
            self.attempt(attempt)
        cache = self._calls.cache
        if cache is not None:
            cache.cancel(job)  # a store in progress: the job drains when it is over

    def attempt(self, attempt: Attempt) -> None:
        """Cancel ``attempt`` once (a CANCEL, or the salvage stopping everything)."""
        if attempt.state >= CANCELLED:
            return
        if attempt.state == TIMED_OUT:
            # Already cancelled once, by its timeout: it is draining.
            attempt.state = CANCELLED_TIMED_OUT
            return
        task = attempt.task
        if task is None and attempt.aw is None:
            guards = self._calls.guards_made
            if guards is not None and guards.waiting(attempt):
                guards.cancel_waiting(attempt)  # waiting for a permit: it leaves
                return
        if task is None:
            # Not launched yet (``launch`` reports it unstarted), or a sync call whose
            # outcome is queued (its own). Inline attempts are marked by the coordinator
            # before the core's CANCEL arrives.
            attempt.state = CANCEL_MISSED
            return
        began = attempt.state == RUNNING
        # False when the task has already finished: its outcome is queued and is its own.
        attempt.state = CANCELLED if task.cancel() else CANCEL_MISSED
        if not began:
            # The task never ran a step: its awaitable will never be awaited.
            task.add_done_callback(lambda _task: self._unstarted_done(attempt))

    def _unstarted_done(self, attempt: Attempt) -> None:
        self._table.live -= 1
        self._table.post((UNSTARTED, attempt, None))

    def time_out(self, attempt: Attempt, task: asyncio.Task[Any]) -> None:
        """The attempt's time is up: cancel what runs it (inline: the phase's task)."""
        attempt.state = TIMED_OUT
        task.cancel(TIMEOUT_MESSAGE)
        calls = self._calls
        calls.report().attempt_timed_out(
            attempt.id,
            attempt.number + 1,
            attempt.timeout,
            calls.was_clipped(attempt.job, attempt.number),
        )
