"""The run's timers: each attempt's timeout and each retry wait.

A timer is checked when it fires: a wait lasts its delay by the loop's clock and, when the
loop keeps a clock of its own that runs beside the monotonic one (uvloop), by the monotonic
clock too; one that fires early is re-armed for the rest (docs/internals.md, "Timers are
checked when they fire"). Every inline attempt (awaited in the phase's task itself) is
served by one timer per run. What a timeout does when its time is up (cancel, report) is
the caller's (``Calls._time_out``, ``Cancels.time_out``), handed in as ``time_out``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any, Final

from .attempts import Attempt, AttemptState, AttemptTable, EventKind

TimeOut = Callable[[Attempt, "asyncio.Task[Any]"], None]
"""Ends an attempt whose time is up: cancel what runs it (the task given) and report it."""

_monotonic: Final = time.monotonic
_MONOTONIC_LOOP_TIME: Final = asyncio.BaseEventLoop.time
# The due time of a loop whose clock is the only one that counts (``_clocks_differ``).
_NO_DUE: Final = -math.inf
_ELAPSED: Final = EventKind.ELAPSED
_CALLED: Final = AttemptState.CALLED
_RUNNING: Final = AttemptState.RUNNING
_TIMED_OUT: Final = AttemptState.TIMED_OUT


class Timers:
    """One run's timers on its loop; retry waits end as ``ELAPSED`` on ``table``'s queue."""

    __slots__ = ("_inline_timer", "_inline_when", "_loop", "_table", "_two_clocks", "inline")

    _inline_when: float  # the inline timer's due time, set with the timer

    def __init__(self, loop: asyncio.AbstractEventLoop, table: AttemptTable) -> None:
        self._loop = loop
        self._table = table
        self._two_clocks: bool | None = None  # see ``_clocks_differ``
        # The inline attempt now awaited, and the one timer serving every inline timeout.
        self.inline: Attempt | None = None
        self._inline_timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------------------ retry waits

    def sleep(self, job: int, delay: float) -> None:
        """SLEEP: ``job``'s retry wait of ``delay`` seconds begins."""
        loop = self._loop
        deadline = loop.time() + delay
        due = _monotonic() + delay if self._clocks_differ() else _NO_DUE
        table = self._table
        table.sleeping += 1
        table.sleeps[job] = loop.call_later(delay, self._sleep_over, job, deadline, due)

    def stop_sleep(self, job: int) -> None:
        """STOP_SLEEP: ``job``'s retry wait, if armed, is over without ending."""
        table = self._table
        handle = table.sleeps[job]
        if handle is not None:
            table.sleeps[job] = None
            table.sleeping -= 1
            handle.cancel()

    def _sleep_over(self, job: int, deadline: float, due: float) -> None:
        """The wait's timer fired: report it over, or re-arm it if it fired early."""
        rest = max(deadline - self._loop.time(), due - _monotonic())
        if rest > 0.0:
            self._table.sleeps[job] = self._loop.call_later(
                rest, self._sleep_over, job, deadline, due
            )
            return
        self._table.post((_ELAPSED, job, None))

    # ------------------------------------------------------------------ attempt timeouts

    def arm(self, attempt: Attempt, timeout: float, time_out: TimeOut) -> None:
        """The timeout of an attempt awaited in a task of its own (``attempt.task``)."""
        attempt.timer = self._loop.call_at(
            self._set_deadline(attempt, timeout), self._on_timeout, attempt, time_out
        )

    def _on_timeout(self, attempt: Attempt, time_out: TimeOut) -> None:
        attempt.timer = None
        if attempt.state >= _TIMED_OUT:
            return
        task = attempt.task
        if task is None or task.done():
            return
        if attempt.state == _CALLED:  # pragma: no cover - the task's first step is queued
            attempt.timer = self._loop.call_soon(self._on_timeout, attempt, time_out)
            return
        rest = max(attempt.deadline - self._loop.time(), attempt.due - _monotonic())
        if rest > 0.0:  # fired early
            attempt.timer = self._loop.call_later(rest, self._on_timeout, attempt, time_out)
            return
        time_out(attempt, task)

    def arm_inline(
        self, attempt: Attempt, timeout: float, task: asyncio.Task[Any], time_out: TimeOut
    ) -> None:
        """The timeout of ``attempt``, awaited inline in the phase's ``task``: one timer per
        run serves every inline attempt, armed for the earliest pending deadline, re-armed
        when it fires early for a later one, never cancelled per attempt (a long inline
        chain would otherwise pile cancelled timer handles into the loop's heap without the
        loop ever running to clean them)."""
        deadline = self._set_deadline(attempt, timeout)
        self.inline = attempt
        timer = self._inline_timer
        if timer is None or self._inline_when > deadline:
            if timer is not None:
                timer.cancel()
            self._inline_when = deadline
            self._inline_timer = self._loop.call_at(deadline, self._inline_tick, task, time_out)

    def stop_inline(self) -> None:
        """The phase's task ends: its inline timer goes with it."""
        timer = self._inline_timer
        if timer is not None:
            self._inline_timer = None
            timer.cancel()

    def _inline_tick(self, task: asyncio.Task[Any], time_out: TimeOut) -> None:
        self._inline_timer = None
        attempt = self.inline
        if attempt is None:
            return  # armed for an attempt that has finished; the next one re-arms
        # Armed for an earlier attempt's deadline, or fired early.
        loop = self._loop
        now = loop.time()
        rest = max(attempt.deadline - now, attempt.due - _monotonic())
        if rest > 0.0:
            self._inline_when = now + rest
            self._inline_timer = loop.call_later(rest, self._inline_tick, task, time_out)
            return
        if attempt.state != _RUNNING:
            return
        if task.cancelling() > attempt.baseline:
            return  # a cancellation (the caller's, passed on) is already on its way in
        time_out(attempt, task)

    def _set_deadline(self, attempt: Attempt, timeout: float) -> float:
        """When the attempt's time is up, by the loop's clock (returned) and the monotonic
        clock: ``timeout`` from now, or from before the call when the core carried it out
        (``Attempt.started``)."""
        started = attempt.started
        if started is None:
            deadline = attempt.deadline = self._loop.time() + timeout
            attempt.due = _monotonic() + timeout if self._clocks_differ() else _NO_DUE
        else:
            deadline = attempt.deadline = started[0] + timeout
            attempt.due = started[1] + timeout if self._clocks_differ() else _NO_DUE
        return deadline

    def _clocks_differ(self) -> bool:
        """Whether timers are checked against the monotonic clock as well as the loop's:
        asyncio's loops read time.monotonic(), others (uvloop) a clock of their own, and a
        loop keeping virtual time (a test loop) counts alone. Decided at the first timer."""
        differ = self._two_clocks
        if differ is None:
            loop = self._loop
            differ = self._two_clocks = (
                type(loop).time is not _MONOTONIC_LOOP_TIME
                and abs(loop.time() - _monotonic()) < 1.0
            )
        return differ
