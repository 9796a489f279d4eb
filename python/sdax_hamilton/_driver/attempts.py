"""Attempt mechanics: carrying out the core's commands as calls, tasks and timers.

A START becomes a call of the node's (or release's) function. An awaitable result is either
awaited inline in the forward task (a lone forward attempt: nothing else is running or
waiting) or in a task of its own; a timeout is a timer that cancels it. How each attempt
ended goes to ``OutcomeHandling`` (``outcomes.py``). docs/internals.md, "How the driver
carries out STARTs", gives the reasons.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import math
import time
import types
from collections.abc import Generator
from typing import Any, Final

from .. import _core
from .._declarations import Acquisition
from .runtime import TIMEOUT_MESSAGE, NodeRuntime, ReleaseRuntime
from .state import BAD_INPUT, ELAPSED, RAISED, RETURNED, UNSTARTED, RunState

_START: Final = _core.START
_SLEEP: Final = _core.SLEEP
_CANCEL: Final = _core.CANCEL
_STOP_SLEEP: Final = _core.STOP_SLEEP
_START_CLIPPED: Final = _core.START_CLIPPED
_EXPIRE: Final = _core.EXPIRE
_NO_ROOM: Final = _core.NO_ROOM
_BAD_HINT: Final = _core.BAD_HINT
_CARRIED: Final = _core.CARRIED
_CARRIED_RAISED: Final = _core.CARRIED_RAISED
_CARRIED_RETURNED: Final = _core.CARRIED_RETURNED
_CARRIED_SUSPENDED: Final = _core.CARRIED_SUSPENDED
_CARRIED_REJECTED: Final = _core.CARRIED_REJECTED
_CoroutineType: Final = types.CoroutineType
_monotonic: Final = time.monotonic
_MONOTONIC_LOOP_TIME: Final = asyncio.BaseEventLoop.time

# The due time of a loop whose clock is the only one that counts (``_clocks_differ``).
_NO_DUE: Final = -math.inf


class AttemptState(enum.IntEnum):
    """Where one attempt stands, from our side (the core knows the job's state).

    ``CANCELLED`` and later: the core CANCELled it. The three ways that can end differ in
    whether our cancellation reached the attempt, which decides whether a
    ``CancelledError`` out of it is the drain of the abort or a failure of its own.
    """

    CALLED = 0
    """The function was called; its awaitable (if any) has not been awaited yet."""
    RUNNING = 1
    """Its awaitable is being awaited (in a task of its own, or inline)."""
    TIMED_OUT = 2
    """Our timer cancelled it; it is draining. Its failure is a ``TimeoutError``."""
    CANCELLED = 3
    """CANCELled by the core, and that cancellation reached it (or it never began)."""
    CANCELLED_TIMED_OUT = 4
    """CANCELled by the core while draining its timeout (it was not cancelled twice)."""
    CANCEL_MISSED = 5
    """CANCELled by the core after it had already finished: its outcome is its own."""


_CALLED: Final = AttemptState.CALLED
_RUNNING: Final = AttemptState.RUNNING
_TIMED_OUT: Final = AttemptState.TIMED_OUT
_CANCELLED: Final = AttemptState.CANCELLED
_CANCELLED_TIMED_OUT: Final = AttemptState.CANCELLED_TIMED_OUT
_CANCEL_MISSED: Final = AttemptState.CANCEL_MISSED


class Attempt:
    """One carried-out START command (a call of a node or of a release)."""

    baseline: int
    deadline: float
    due: float

    __slots__ = (
        "aw",
        "baseline",
        "deadline",
        "due",
        "job",
        "number",
        "started",
        "state",
        "task",
        "timeout",
        "timer",
    )

    def __init__(self, job: int, number: int, timeout: float | None) -> None:
        self.job = job
        self.number = number  # 0-based attempt number
        self.timeout = timeout
        self.state = _CALLED
        self.aw: Any = None  # the awaitable the call returned
        self.task: asyncio.Task[None] | None = None  # its own task, when not inline
        self.timer: asyncio.Handle | None = None  # its own timeout, when not inline
        # Carried out by the core (``_carried``) with a timeout: ``(loop time, monotonic
        # time)`` before the call, where its timer counts from; else from being awaited.
        self.started: tuple[float, float] | None = None
        # Set where they are first needed (not every attempt needs them):
        # ``baseline``: inline, the phase task's cancelling() count when the attempt began;
        # ``deadline``, ``due``: with a timeout, when it expires by the loop's clock and by
        # the monotonic clock.

    @property
    def cancelled(self) -> bool:
        """The core CANCELled this attempt."""
        return self.state >= _CANCELLED

    @property
    def timed_out(self) -> bool:
        """Our timer cancelled this attempt."""
        return self.state == _TIMED_OUT or self.state == _CANCELLED_TIMED_OUT


@types.coroutine
def _resume(coroutine: Any, yielded: Any) -> Generator[Any, Any, Any]:
    """Go on awaiting ``coroutine``, whose first step ran in the core's ``Run`` and yielded
    ``yielded`` (a future it waits for, or ``None`` for a bare yield): hand that to the task,
    as the coroutine's own ``await`` would have, then delegate to the coroutine."""
    try:
        yield yielded
    except GeneratorExit:
        coroutine.close()
        raise
    except BaseException as exc:  # thrown in by the task (a cancellation): pass it on
        try:
            yielded = coroutine.throw(exc)
        except StopIteration as stop:
            return stop.value
        return (yield from _resume(coroutine, yielded))
    return (yield from coroutine)


class AttemptMechanics(RunState):
    """Carrying out commands: calls, attempt tasks, inline attempts, timers."""

    __slots__ = ()

    # Outcomes, handled by the subclass (``outcomes.py``).
    def _returned(self, attempt: Attempt, value: Any) -> None:
        raise NotImplementedError

    def _raised(self, attempt: Attempt, exc: BaseException) -> None:
        raise NotImplementedError

    def _expired(self, job: int, attempt_number: int) -> None:
        raise NotImplementedError

    def _execute(self, commands: list[_core.Command]) -> None:
        if not self._tables:
            self._make_tables()
        for op, job, attempt, arg in commands:
            if op == _START:
                self._start(job, attempt, arg)
            elif op == _CARRIED:
                self._carried(job, attempt, arg)
            elif op == _SLEEP:
                delay = arg or 0.0
                loop = self._loop
                deadline = loop.time() + delay
                due = _monotonic() + delay if self._clocks_differ() else _NO_DUE
                self._sleeping += 1
                self._sleeps[job] = loop.call_later(delay, self._sleep_over, job, deadline, due)
            elif op == _CANCEL:
                self._cancel(job)
            elif op == _STOP_SLEEP:
                handle = self._sleeps[job]
                if handle is not None:
                    self._sleeps[job] = None
                    self._sleeping -= 1
                    handle.cancel()
                self._report().retry_cancelled(job, self._run.attempts(job))
            elif op == _START_CLIPPED:
                clipped = self._clipped
                assert clipped is not None  # only a run with a deadline is clipped
                clipped[job] = attempt
                self._start(job, attempt, arg)
            elif op == _EXPIRE:
                self._expired(job, attempt)
            elif op == _NO_ROOM or op == _BAD_HINT:
                pass  # why a failure is final: read by ``_fail`` for its note
            else:  # pragma: no cover - contract violation by the core
                raise RuntimeError(f"sdax_hamilton internal error: unknown command {op!r}")

    def _sleep_over(self, job: int, deadline: float, due: float) -> None:
        """The retry wait's timer fired: report it over, or re-arm it if it fired early.

        A wait lasts at least its delay by the loop's clock and by the monotonic clock:
        uvloop's timers fire up to a millisecond early against ``loop.time()`` (libuv's
        clock has millisecond resolution and is read once per iteration), asyncio's by up
        to the clock's resolution. ``due`` is the monotonic deadline, ``_NO_DUE`` when the
        loop's clock is the only one that counts (``_clocks_differ()`` false).
        """
        rest = max(deadline - self._loop.time(), due - _monotonic())
        if rest > 0.0:
            self._sleeps[job] = self._loop.call_later(rest, self._sleep_over, job, deadline, due)
            return
        self._post((ELAPSED, job, None))

    def _start(self, job: int, attempt_number: int, timeout: float | None) -> None:
        """Call the job's function now. An awaitable result joins ``_fresh``: the
        coordinator awaits it inline or launches it in a task of its own."""
        attempt = Attempt(job, attempt_number, timeout)
        self._running[job] = attempt
        if job < self._n:
            node = self._nodes[job]
            # Arguments are read and checked once; retries reuse them.
            kwargs = self._kwargs[job] if attempt_number else self._first_kwargs(node, attempt)
            if kwargs is None:
                return  # bad input, reported
            if self._watch:
                self._report().attempt_started(
                    job, attempt_number + 1, self._was_clipped(job, attempt_number)
                )
            try:
                result = node.call(**kwargs)
            except BaseException as exc:
                self._post((RAISED, attempt, exc))
                return
        else:
            release, record = self._release_call(job)
            if self._watch:
                self._report().attempt_started(job, attempt_number + 1)
            try:
                result = release.call(record)
            except BaseException as exc:
                self._post((RAISED, attempt, exc))
                return
        try:
            awaitable = type(result) is _CoroutineType or inspect.isawaitable(result)
        except BaseException as exc:  # user code asked (a ``__class__`` property)
            self._returned_unreadable(attempt, result, exc)
            return
        if awaitable:
            attempt.aw = result
            self._fresh.append(attempt)
        else:
            self._post((RETURNED, attempt, result))

    def _returned_unreadable(self, attempt: Attempt, result: Any, exc: BaseException) -> None:
        """Asking whether ``result`` is awaitable raised ``exc``: the attempt failed with it;
        an owner's release still gets the value it returned."""
        job = attempt.job
        if job < self._n:
            node = self._nodes[job]
            if node.release is not None:
                self._acquisitions[job] = Acquisition(result, node.output_type)
        self._post((RAISED, attempt, exc))

    def _carried(self, job: int, how: int, arg: tuple[Any, Any, float | None, Any]) -> None:
        """Go on with the first attempt of ``job``, carried out by the core's ``Run`` up to
        where the driver is needed (src/carry.rs): ``how`` it ended, and ``arg``:
        ``(payload, extra, timeout, started)``. ``extra``: a node's arguments; for a release
        whose coroutine was stepped, the phase task's cancellation count before the call
        (``None`` otherwise). ``started``: the clocks before the call, with a timeout."""
        payload, extra, timeout, started = arg
        attempt = Attempt(job, 0, timeout)
        self._running[job] = attempt
        if how == _CARRIED_REJECTED:  # an input check raised: nothing was called
            self._post((BAD_INPUT, attempt, payload))
            return
        if job < self._n:
            self._kwargs[job] = extra  # read by its retries
            if self._nodes[job].release is not None and self._acquisitions[job] is None:
                self._acquisitions[job] = Acquisition()
        elif extra is not None and self._task.cancelling() > extra:
            # The release's coroutine cancelled its own task, as ``_inline`` records it:
            # never the caller, whose cancellations land on its own wait.
            self._failures().caller_cancelled(asyncio.CancelledError(), True)
        if how == _CARRIED_RAISED:
            self._post((RAISED, attempt, payload))
        elif how == _CARRIED_RETURNED:
            self._post((RETURNED, attempt, payload))
        else:  # awaited like any awaitable a call returned (a lone one: inline)
            attempt.aw = _resume(*payload) if how == _CARRIED_SUSPENDED else payload
            attempt.started = started  # its timer counts from the call
            self._fresh.append(attempt)

    def _first_kwargs(self, node: NodeRuntime, attempt: Attempt) -> dict[str, Any] | None:
        """The first attempt's arguments, read and checked; ``None`` after reporting bad
        input. An owner gets its acquisition record here, once."""
        job = attempt.job
        try:
            kwargs = dict(node.defaults) if node.defaults else {}
            values = self._values
            for keyword, key in node.args:
                kwargs[keyword] = values[key]
            for keyword, check in node.input_checks:
                if not check(kwargs[keyword]):
                    raise TypeError(f"Invalid input for {node.name}.{keyword}")
        except BaseException as exc:  # a KeyboardInterrupt from a check stops the run
            self._post((BAD_INPUT, attempt, exc))
            return None
        self._kwargs[job] = kwargs
        if node.release is not None:
            self._acquisitions[job] = Acquisition()
        return kwargs

    def _release_call(self, job: int) -> tuple[ReleaseRuntime, Acquisition[Any]]:
        """The release of release job ``job`` and the acquisition record it receives."""
        owner = self._nodes[job - self._n]
        release = owner.release
        if release is None:  # pragma: no cover - contract violation by the core
            raise RuntimeError(f"sdax_hamilton internal error: no release for {owner.name!r}")
        record = self._acquisitions[job - self._n]
        return release, Acquisition() if record is None else record

    def _was_clipped(self, job: int, attempt_number: int) -> bool:
        """Whether that forward attempt's START was clipped to the run's deadline."""
        clipped = self._clipped
        return clipped is not None and job < self._n and clipped[job] == attempt_number

    def _cancel(self, job: int) -> None:
        """CANCEL: cancel the running attempt of ``job`` once, noting whether it reached it."""
        attempt = self._running[job]
        if attempt is None or attempt.state >= _CANCELLED:
            return
        if attempt.state == _TIMED_OUT:
            # Already cancelled once, by its timeout: it is draining.
            attempt.state = _CANCELLED_TIMED_OUT
            return
        task = attempt.task
        if task is None:
            # Not launched yet (``_launch`` reports it unstarted), or a sync call whose
            # outcome is queued (its own). Inline attempts are marked by ``_inline``
            # before the core's CANCEL arrives.
            attempt.state = _CANCEL_MISSED
            return
        began = attempt.state == _RUNNING
        # False when the task has already finished: its outcome is queued and is its own.
        attempt.state = _CANCELLED if task.cancel() else _CANCEL_MISSED
        if not began:
            # The task never ran a step: its awaitable will never be awaited.
            task.add_done_callback(lambda _task: self._unstarted_done(attempt))

    def _unstarted_done(self, attempt: Attempt) -> None:
        self._live -= 1
        self._post((UNSTARTED, attempt, None))

    def _launch(self) -> None:
        """Give every fresh awaitable a task of its own (and its timeout a timer)."""
        loop = self._loop
        for attempt in self._fresh:
            if attempt.state >= _CANCELLED:
                self._post((UNSTARTED, attempt, None))
                continue
            self._live += 1  # before create_task: an eager task factory may finish it at once
            attempt.task = loop.create_task(self._attempt_task(attempt))
            timeout = attempt.timeout
            if timeout is not None:
                attempt.timer = loop.call_at(
                    self._set_deadline(attempt, timeout), self._on_timeout, attempt
                )
        self._fresh.clear()

    async def _attempt_task(self, attempt: Attempt) -> None:
        attempt.state = _RUNNING
        try:
            value = await attempt.aw
        except BaseException as exc:  # never let anything (KeyboardInterrupt!) escape a task
            self._live -= 1
            self._post((RAISED, attempt, exc))
        else:
            self._live -= 1
            self._post((RETURNED, attempt, value))

    async def _inline(self, attempt: Attempt) -> None:
        """Await a lone attempt in the coordinator itself, the phase's task (a release
        only when no other release is running or waiting for its retry).

        Cancellations of the forward task are told apart by count (the ``asyncio.timeout``
        technique): our timeout cancels the task once and takes its request back with
        ``uncancel()``; the caller's first cancellation is passed on once (``cancel()``),
        so a rise of ``cancelling()`` while the abort is requested means it reached the
        attempt. A rise not of our making is the attempt cancelling its own task.
        """
        attempt.state = _RUNNING
        task = self._task
        before = attempt.baseline = task.cancelling()
        timeout = attempt.timeout
        if timeout is not None:
            self._arm_inline_timer(attempt, timeout)
        raised = False
        try:
            payload = await attempt.aw
        except BaseException as exc:
            raised = True
            payload = exc
        self._inline_attempt = None
        timed_out = attempt.state is _TIMED_OUT  # identity: cheaper than ==, same meaning
        if timed_out:
            task.uncancel()
        if self._shutting:
            if not timed_out and task.cancelling() > before:
                # Someone cancelled the shutdown task (never the caller: its cancellations
                # land on its own wait): recorded as a cancellation during cleanup.
                self._failures().caller_cancelled(asyncio.CancelledError(), True)
        elif self._abort_requested:
            # The caller cancelled meanwhile (its own CancelledError is the primary already).
            # The cancellation we passed on reached this attempt, unless it was held back
            # because the attempt was draining its timeout. Marked before the core's CANCEL.
            if timed_out:
                attempt.state = _CANCELLED_TIMED_OUT
            else:
                attempt.state = _CANCELLED if task.cancelling() > before else _CANCEL_MISSED
            self._execute(self._run.cancel())
        # Nothing else is running, so no event can have been queued meanwhile: report now.
        if self._deadline is not None:
            self._run.clock(self._loop.time())
        try:
            if raised:
                self._raised(attempt, payload)
            else:
                self._returned(attempt, payload)
        finally:
            # An exception's traceback holds this frame: no cycle through its locals.
            payload = None

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
        """Whether timers are checked against the monotonic clock as well as the loop's.

        asyncio's own loops read time.monotonic(); others (uvloop) have a clock of their
        own, so timers are checked against both (``_sleep_over``). A loop keeping virtual
        time (a test loop) has only its own clock. Decided when a run first arms a timer.
        """
        differ = self._two_clocks
        if differ is None:
            loop = self._loop
            differ = self._two_clocks = (
                type(loop).time is not _MONOTONIC_LOOP_TIME
                and abs(loop.time() - _monotonic()) < 1.0
            )
        return differ

    def _arm_inline_timer(self, attempt: Attempt, timeout: float) -> None:
        """One timer per run serves every inline attempt: armed for the earliest pending
        deadline, re-armed when it fires early for a later one, never cancelled per attempt
        (a long inline chain would otherwise pile cancelled timer handles into the loop's
        heap without the loop ever running to clean them)."""
        loop = self._loop
        deadline = self._set_deadline(attempt, timeout)
        self._inline_attempt = attempt
        timer = self._inline_timer
        if timer is None or self._inline_when > deadline:
            if timer is not None:
                timer.cancel()
            self._inline_when = deadline
            self._inline_timer = loop.call_at(deadline, self._inline_tick)

    def _inline_tick(self) -> None:
        self._inline_timer = None
        attempt = self._inline_attempt
        if attempt is None:
            return  # armed for an attempt that has finished; the next one re-arms
        # Armed for an earlier attempt's deadline, or fired early (see ``_sleep_over``).
        loop = self._loop
        now = loop.time()
        rest = max(attempt.deadline - now, attempt.due - _monotonic())
        if rest > 0.0:
            self._inline_when = now + rest
            self._inline_timer = loop.call_later(rest, self._inline_tick)
            return
        if attempt.state != _RUNNING:
            return
        task = self._task
        if (self._abort_requested and not self._shutting) or task.cancelling() > attempt.baseline:
            return  # the caller's cancellation is already on its way into the attempt
        self._time_out(attempt, task)

    def _time_out(self, attempt: Attempt, task: asyncio.Task[Any]) -> None:
        """The attempt's time is up: cancel what runs it (inline: the coordinator's task)."""
        attempt.state = _TIMED_OUT
        task.cancel(TIMEOUT_MESSAGE)
        self._report().attempt_timed_out(
            attempt.job,
            attempt.number + 1,
            attempt.timeout,
            self._was_clipped(attempt.job, attempt.number),
        )

    def _on_timeout(self, attempt: Attempt) -> None:
        attempt.timer = None
        if attempt.state >= _TIMED_OUT:
            return
        task = attempt.task
        if task is None or task.done():
            return
        if attempt.state == _CALLED:  # pragma: no cover - the task's first step is queued
            attempt.timer = self._loop.call_soon(self._on_timeout, attempt)
            return
        rest = max(attempt.deadline - self._loop.time(), attempt.due - _monotonic())
        if rest > 0.0:  # fired early (see ``_sleep_over``)
            attempt.timer = self._loop.call_later(rest, self._on_timeout, attempt)
            return
        self._time_out(attempt, task)
