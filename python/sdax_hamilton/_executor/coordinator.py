"""The coordinator: a run's phase carried out in the phase's own task.

``coordinate(run, commands, through)`` is the coroutine of a run's phase task (``RunContext``
hands it to ``eager.phase_task``). It starts the forward phase (or the shutdown phase),
carries out the core's commands through ``Calls``, feeds ``Outcomes`` the events the
attempts post, awaits a lone attempt inline, and takes the cancellations that land on its
own wait. It moves the run's ``Stage`` as the phase goes; the caller's side of the
protocol (waiting for the phase, passing a cancellation on) is ``RunContext``'s. It reaches
the run through ``PhaseOwner``, so this module imports nothing that imports it.
docs/internals.md, "How the driver carries out STARTs", gives the reasons.
"""

from __future__ import annotations

import asyncio
import enum
import types
from typing import Any, Final, Protocol

from .. import _core
from .._declarations import Acquisition
from .._failures import add_note_once
from .attempts import Attempt, AttemptState, EventKind
from .calls import Calls
from .eager import IN_RUN, PHASE_TASK_NAME, current_task
from .jobs import Job
from .outcomes import Outcomes
from .record import FailureRecord
from .reporter import Reporter

_CancelledError: Final = asyncio.CancelledError
_CALLED: Final = AttemptState.CALLED
_TIMED_OUT: Final = AttemptState.TIMED_OUT
_CANCELLED: Final = AttemptState.CANCELLED
_CANCELLED_TIMED_OUT: Final = AttemptState.CANCELLED_TIMED_OUT
_CANCEL_MISSED: Final = AttemptState.CANCEL_MISSED
_CoroutineType: Final = types.CoroutineType
_TERMINATION: Final = (KeyboardInterrupt, SystemExit)
_sleep: Final = asyncio.sleep


class Stage(enum.IntEnum):
    """Where a run stands; it only moves forward (the order is the lifecycle's)."""

    NEW = 0
    """Not entered yet."""
    STARTING = 1
    """The forward phase's task exists; its coordinator has not begun."""
    FORWARD = 2
    """The forward phase runs."""
    ABORTING = 3
    """The forward phase is being aborted at the caller's request (one cancellation passed
    on to its task, unless it had not begun)."""
    SALVAGING = 4
    """The forward phase's own bookkeeping failed: its attempts are being stopped before
    its releases are carried out all the same (``salvage``)."""
    BETWEEN = 5
    """The forward phase is over (``open()``: the body runs)."""
    CLOSING = 6
    """The shutdown phase: the caller's cancellations are cleanup's (recorded, absorbed)."""
    DONE = 7
    """Every phase is over."""


_STARTING: Final = Stage.STARTING
_FORWARD: Final = Stage.FORWARD
_ABORTING: Final = Stage.ABORTING
_SALVAGING: Final = Stage.SALVAGING
_BETWEEN: Final = Stage.BETWEEN
_CLOSING: Final = Stage.CLOSING
_DONE: Final = Stage.DONE


class PhaseOwner(Protocol):
    """The run a coordinator carries out a phase of (``RunContext``): what it reads, the
    lifecycle it moves, and the parts it uses."""

    _stage: Stage
    _run: _core.Run
    _loop: asyncio.AbstractEventLoop
    _carrier: _core.Carrier | None
    _values: dict[str, Any]
    _acquisitions: list[Acquisition[Any] | None]
    _deadline: float | None
    _observers: Any
    _calls: Calls | None
    _outcomes: Outcomes | None
    _internal: BaseException | None
    _record: FailureRecord | None
    _phase_done: asyncio.Future[None] | None
    _phase_task: asyncio.Task[None] | None

    def _parts(self) -> Calls: ...
    def _report(self) -> Reporter: ...
    def _failures(self) -> FailureRecord: ...
    def _dispose(self) -> None: ...


async def coordinate(ctx: PhaseOwner, commands: list[_core.Command] | None, through: bool) -> None:
    """A phase's task: the forward phase (``commands`` is ``None``), followed by the
    shutdown phase when ``through`` (``execute()``); or the shutdown phase alone, from
    the core's first shutdown ``commands``. Carries out commands until the phase is
    quiescent."""
    forward_only = commands is None and not through
    run = ctx._run
    carrying = None
    task: asyncio.Task[Any] | None = None
    try:
        IN_RUN.set(True)  # this task's own context: never the caller's
        loop = ctx._loop
        task = current_task(loop)
        assert task is not None
        carrier = ctx._carrier
        # With a carrier, the core's Run carries out lone STARTs in this task.
        if carrier is not None:
            carrying = (carrier, ctx._values, ctx._acquisitions, task, loop.time)
        if commands is None:
            if _begin_forward(ctx, carrying, task):
                await _drive(ctx, task)
            if not through:
                return
            if ctx._observers is not None:
                ctx._report().shutdown_started()
            ctx._stage = _CLOSING  # from here on the caller's cancellations are cleanup's
            commands = run.begin_shutdown_or_finish()
            if commands is None:  # the run is over; the Run has let the carrier go
                carrying = None
                return
        elif carrying is not None:
            run.carry_with(carrying)
        calls = ctx._parts()
        calls.task = task  # inline attempts and their timeouts use it
        calls.execute(commands)
        # A failure the core's Run handed back in them has a traceback whose frames
        # link back to this one: keep no reference to it here (no cycle).
        commands = None
        await _drive(ctx, task)
    except BaseException as exc:  # nothing escapes a task into the loop
        # First, with no call that could fail: the caller sees a failure, never outputs
        # that were not stored.
        ctx._internal = exc
        try:
            await _give_up(ctx, exc)
        except BaseException:
            pass
    finally:
        # A failure's traceback may keep this frame (and its locals) after the task ends:
        # it must not keep the task (``_phase_task_ends`` lets ``Calls`` go of it too).
        task = None
        try:
            _phase_task_ends(ctx, carrying is not None)
            carrying = None
        finally:
            # The caller is woken whatever failed above (no call that could fail). A
            # salvaged forward phase has carried out its releases: the run is done.
            ctx._stage = _BETWEEN if forward_only and ctx._stage < _CLOSING else _DONE
            done = ctx._phase_done
            if done is not None and not done.done():
                done.set_result(None)


def _phase_task_ends(ctx: PhaseOwner, carrying: bool) -> None:
    """The phase's task ends: its inline timer goes, no inline attempt is left to use the
    task, and the run holds the failure record its parts made meanwhile, if any."""
    calls = ctx._calls
    if calls is not None:
        timers = calls.timers
        if timers is not None:  # ``Calls.stop_inline``
            timers.stop_inline()
        if ctx._record is None:
            ctx._record = calls.record
        # The run outlives its phase's task wherever a failure's traceback keeps its
        # frames: it does not keep the task (and what the task holds) alive with it.
        try:
            del calls.task
        except AttributeError:
            pass
        if calls.cache is not None:
            calls.cache.close()  # keys it led but did not produce: waiters go on
    if carrying:
        ctx._run.carry_with(None)  # the Run refers to this task no more


async def _give_up(ctx: PhaseOwner, exc: BaseException) -> None:
    """The coordinator failed with ``exc``: in the forward phase the run is salvaged
    (``salvage``); otherwise, or if that fails, everything started is stopped."""
    if ctx._stage >= _CLOSING or not await salvage(ctx, exc):
        abandon(ctx, exc)


async def salvage(ctx: PhaseOwner, exc: BaseException) -> bool:
    """The forward phase's own bookkeeping failed with ``exc`` (a ``RecursionError`` or
    ``MemoryError`` near the interpreter's limits, say): stop every attempt, wait for them,
    and carry out every release owed all the same, in dependency order (the core's
    ``Run.abandon``), from a fresh step of this task, out of the depth that failed. ``exc``
    is then a failure of the run like a node's (a termination its primary), and the run
    ends as a failed one. False when even that failed: the run is abandoned, ``exc``
    raised as is."""
    ctx._stage = _SALVAGING
    try:
        try:
            await _sleep(0)  # leave the depth that failed
        except _CancelledError:
            pass  # a timeout's, or someone else's: the salvage goes on
        task = current_task(ctx._loop)
        assert task is not None
        calls = ctx._parts()
        calls.task = task
        in_flight = [
            repr(job.name) if job.forward else f"the release of {job.name!r}"
            for job in _stop_everything(ctx, calls)
        ]
        await _wait_stopped(ctx, calls)
        failures = ctx._failures()
        if isinstance(exc, _TERMINATION):
            failures.terminate(exc)
        else:
            where = f" while {', '.join(in_flight)} ran" if in_flight else ""
            add_note_once(
                exc,
                f"sdax_hamilton: the run could not go on{where} ({type(exc).__name__} in "
                "its own bookkeeping); its attempts were stopped and its releases carried out",
            )
            failures.failed(exc)
        ctx._internal = None
        if calls.fans is not None:  # every open source closed before any release
            await calls.fans.salvage(ctx._run.close_sources())
        ctx._stage = _CLOSING
        calls.execute(ctx._run.abandon())
        await _drive(ctx, task)
        return True
    except BaseException:
        return False


async def _wait_stopped(ctx: PhaseOwner, calls: Calls) -> None:
    """``salvage``: wait for the stopped attempts to end. What they tell is kept (an
    outcome recorded, a returned acquisition kept for its release); nothing is reported
    to the core, which is told next that the forward phase is over."""
    table = calls.table
    events = table.events
    while True:
        while events:
            _salvaged(ctx, calls, events.popleft())
        if table.live == 0:
            return
        waiter = table.waiter = ctx._loop.create_future()
        try:
            await waiter
        except _CancelledError:
            table.waiter = None


def _salvaged(ctx: PhaseOwner, calls: Calls, event: Any) -> None:
    """An event of an attempt stopped by ``salvage``: what it tells is kept."""
    kind, attempt, payload = event
    if not isinstance(attempt, Attempt) or not attempt.job.forward:
        return
    job = attempt.job
    calls.table.end(attempt)
    if kind is EventKind.RETURNED:
        if job.node.release is not None:
            ctx._acquisitions[job.id] = Acquisition(payload, job.node.output_type)
    elif kind is EventKind.RAISED or kind is EventKind.BAD_INPUT:
        if not isinstance(payload, _CancelledError):
            ctx._failures().failed(payload)
    elif kind is EventKind.UNSTARTED and type(attempt.aw) is _CoroutineType:
        attempt.aw.close()


def _begin_forward(ctx: PhaseOwner, carrying: Any, task: asyncio.Task[Any]) -> bool:
    """Start the forward phase, carried out with ``carrying`` (``Run.carry_with``'s
    argument) if not ``None``; whether it is still to be driven (``_drive``): not when
    the core's Run carried out all of it, nor when the caller was cancelled before it
    began (the request is then all there is)."""
    if ctx._stage is _STARTING:
        ctx._stage = _FORWARD
    run = ctx._run
    if ctx._stage is _ABORTING:
        if carrying is not None:
            run.carry_with(carrying)  # for the shutdown phase that follows
        return False
    if ctx._deadline is not None:
        run.clock(ctx._loop.time())
    commands = run.start() if carrying is None else run.start_carried(carrying)
    if commands:  # not all carried out by the core's Run
        calls = ctx._parts()
        calls.task = task
        calls.execute(commands)
        return True
    return ctx._calls is not None or run.pending > 0


async def _drive(ctx: PhaseOwner, task: asyncio.Task[Any]) -> None:
    """Process events and carry out commands until the phase is quiescent."""
    calls = ctx._parts()
    outcomes = ctx._outcomes
    assert outcomes is not None  # made with ``calls``
    calls.task = task
    # Read back from ``calls`` from here on: a failure's traceback may keep this frame, and
    # the phase's end lets ``calls`` go of the task (``_phase_task_ends``).
    del task
    table = calls.table
    events = table.events
    fresh = table.fresh
    handle = outcomes.handle
    run = ctx._run
    while True:
        while events:
            handle(events.popleft())
        if fresh:
            if (
                len(fresh) == 1
                and table.live == 0
                and fresh[0].state is _CALLED  # not cancelled since the call
                and run.lone  # the core's rule, as for a carried START
            ):
                attempt = fresh.pop()
                raised, payload = await calls.inline(attempt)
                try:
                    _inline_over(ctx, attempt, raised, payload, calls.task, outcomes)
                finally:
                    # An exception's traceback holds this frame: no cycle through it.
                    payload = None
            else:
                calls.launch()
            continue
        if table.live == 0 and (run.finished if ctx._stage >= _CLOSING else not run.pending):
            return
        waiter = table.waiter = ctx._loop.create_future()
        try:
            await waiter
        except _CancelledError as exc:
            table.waiter = None
            if ctx._stage >= _CLOSING:
                # Not the caller's (never passed on): someone cancelled our task.
                ctx._failures().caller_cancelled(exc, True)
                continue
            if ctx._stage is not _ABORTING:  # not passed on by us: the caller's
                ctx._stage = _ABORTING
                ctx._failures().caller_cancelled(exc, False)
            calls.execute(run.cancel())


def _inline_over(
    ctx: PhaseOwner,
    attempt: Attempt,
    raised: bool,
    payload: Any,
    task: asyncio.Task[Any],
    outcomes: Outcomes,
) -> None:
    """An attempt awaited inline has ended: tell which cancellations reached it, then
    report its outcome (nothing else is running, so no event was queued meanwhile).

    Only our timeout (taken back with ``uncancel()``) and the caller's cancellation,
    passed on once, cancel the phase's task: a rise of its ``cancelling()`` count over
    ``attempt.baseline`` is the caller's while the forward phase is aborted, and
    otherwise someone else's (the attempt cancelling its own task).
    """
    timed_out = attempt.state is _TIMED_OUT
    stage = ctx._stage
    if stage >= _CLOSING:
        if not timed_out and task.cancelling() > attempt.baseline:
            # Someone cancelled the shutdown task (never the caller: its cancellations
            # land on its own wait): recorded as a cancellation during cleanup.
            ctx._failures().caller_cancelled(_CancelledError(), True)
    elif stage is _ABORTING:
        # The caller cancelled meanwhile (its own CancelledError is the primary already).
        # The cancellation we passed on reached this attempt, unless it was held back
        # because the attempt was draining its timeout. Marked before the core's CANCEL.
        if timed_out:
            attempt.state = _CANCELLED_TIMED_OUT
        elif task.cancelling() > attempt.baseline:
            attempt.state = _CANCELLED
        else:
            attempt.state = _CANCEL_MISSED
        ctx._parts().execute(ctx._run.cancel())
    if ctx._deadline is not None:
        ctx._run.clock(ctx._loop.time())
    if raised:
        outcomes.raised(attempt, payload)
    else:
        outcomes.returned(attempt, payload)


def abandon(ctx: PhaseOwner, exc: BaseException) -> None:
    """Internal failure of the coordinator: stop everything started (best effort)."""
    ctx._report().run_finished(exc)
    calls = ctx._calls
    if calls is None:
        return  # the driver carried out nothing
    if calls.fans is not None:
        calls.fans.cancel_all()
    for attempt in calls.table.all_live():
        if attempt.timer is not None:
            attempt.timer.cancel()
        if attempt.task is not None:
            attempt.task.cancel()
        elif attempt.state == _CALLED and type(attempt.aw) is _CoroutineType:
            attempt.aw.close()
    for handle in calls.table.sleeps:
        if handle is not None:
            handle.cancel()
    calls.stop_inline()
    guards = calls.guards_made
    if guards is not None:
        guards.abandon()  # permits and places in a queue are shared: none may leak


def _stop_everything(ctx: PhaseOwner, calls: Calls) -> list[Job]:
    """``salvage``: cancel every live attempt and retry wait; the jobs that were in flight.
    A coroutine never awaited is closed, and a forward first attempt of it owes no release
    (``Run.unstarted``)."""
    table = calls.table
    run = ctx._run
    run.carry_with(None)  # every release is the driver's: see them all end
    if calls.fans is not None:
        calls.fans.cancel_all()  # carried items: each handed to the driver as it ends
    live = list(table.all_live())
    for attempt in live:
        unlaunched = attempt.task is None and attempt.state == _CALLED
        calls.cancels().attempt(attempt)
        if unlaunched and type(attempt.aw) is _CoroutineType:
            attempt.aw.close()  # never awaited: its body never ran
            table.end(attempt)
            job = attempt.job
            if job.forward and attempt.number == 0:
                ctx._acquisitions[job.id] = None
                run.unstarted(job.id)  # no release owed for it
    table.fresh.clear()
    for handle in table.sleeps:
        if handle is not None:
            handle.cancel()
    table.sleeps = [None] * len(table.sleeps)
    table.sleeping = 0
    calls.stop_inline()
    return [attempt.job for attempt in live]


def salvage_detached(ctx: PhaseOwner, exc: BaseException) -> None:
    """Too deep even to begin the salvage in the phase's task: it runs in a task of its
    own, created from the loop (a task failing to be made here would warn)."""
    try:
        ctx._loop.call_soon(_salvage_task, ctx, exc)
    except BaseException:
        pass


def _salvage_task(ctx: PhaseOwner, exc: BaseException) -> None:
    ctx._loop.create_task(_salvage_in_task(ctx, exc), name=PHASE_TASK_NAME)


async def _salvage_in_task(ctx: PhaseOwner, exc: BaseException) -> None:
    try:
        if not await salvage(ctx, exc):
            abandon(ctx, exc)
    finally:
        _phase_task_ends(ctx, False)
        ctx._dispose()
