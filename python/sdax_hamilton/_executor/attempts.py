"""The attempt table: every live attempt of a run, its retry waits and its event queue.

An attempt is one carried-out START (a call of a node's or a release's function). The
table holds, per job, the attempts running now: several at once for one job is allowed (the
table chains them), and it grows when a run adds jobs. Done-callbacks and timers append
events to the table's queue and wake the coordinator (``RunContext._drive``), which hands
them to ``Outcomes``. Data only: ``calls.py`` carries out the commands.
"""

from __future__ import annotations

import asyncio
import enum
import types
from collections import deque
from collections.abc import Generator, Iterator
from typing import Any, Final

from .jobs import Job


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


class EventKind(enum.IntEnum):
    """What an event on the coordinator's queue reports: ``(kind, subject, payload)``."""

    RETURNED = 0
    """``(_, Attempt, value)``: the attempt returned ``value``."""
    RAISED = 1
    """``(_, Attempt, exception)``: the attempt raised."""
    ELAPSED = 2
    """``(_, job id, None)``: a retry wait is over."""
    UNSTARTED = 3
    """``(_, Attempt, None)``: cancelled before its awaitable was first awaited."""
    BAD_INPUT = 4
    """``(_, Attempt, exception)``: the input check failed; nothing was called."""
    ABORT = 5
    """``(_, None, None)``: an observer raised ``KeyboardInterrupt``/``SystemExit``: stop."""
    EXPIRED = 6
    """``(_, Job, attempt number)``: the run's deadline passed before it could start."""
    STORED = 7
    """``(_, Attempt, None)``: the cache's store of the attempt's value is over
    (``cache.py``): the node is done."""
    PERMIT = 8
    """``(_, Attempt, granted)``: a waiting attempt's permit came (``True``), or the run's
    deadline passed while it waited (``False``): ``guards.py``."""
    FELL_BACK = 9
    """``(_, Attempt, (raised, value or error, original))``: an async fallback ended."""
    FAN = 10
    """``(_, handler, payload)``: a fan-out's source did something (``fanout.py``); the
    coordinator calls ``handler(payload)``."""


Event = tuple[EventKind, Any, Any]

# The members as module constants, defined here once for the modules that test or post
# them on their paths per attempt (cancels.py, handback.py, fanout.py): one global lookup, where
# ``AttemptState.RUNNING`` is two.
CALLED: Final = AttemptState.CALLED
RUNNING: Final = AttemptState.RUNNING
TIMED_OUT: Final = AttemptState.TIMED_OUT
CANCELLED: Final = AttemptState.CANCELLED
CANCELLED_TIMED_OUT: Final = AttemptState.CANCELLED_TIMED_OUT
CANCEL_MISSED: Final = AttemptState.CANCEL_MISSED
RETURNED: Final = EventKind.RETURNED
RAISED: Final = EventKind.RAISED
UNSTARTED: Final = EventKind.UNSTARTED
BAD_INPUT: Final = EventKind.BAD_INPUT


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
        "id",
        "job",
        "next",
        "number",
        "started",
        "state",
        "task",
        "timeout",
        "timer",
    )

    def __init__(
        self, job: Job, number: int, timeout: float | None, following: Attempt | None = None
    ) -> None:
        self.job = job
        self.id = job.id  # the core's job id, which every report to the core names
        self.number = number  # 0-based attempt number
        self.timeout = timeout
        self.state = CALLED
        self.aw: Any = None  # the awaitable the call returned
        self.task: asyncio.Task[None] | None = None  # its own task, when not inline
        self.timer: asyncio.Handle | None = None  # its own timeout, when not inline
        # The job's next live attempt (``AttemptTable``): ``following`` when the attempt
        # is made live as it is made (``Calls._start``).
        self.next = following
        # Carried out by the core (``Calls.carried``) with a timeout: ``(loop time,
        # monotonic time)`` before the call, where its timer counts from; else from being
        # awaited.
        self.started: tuple[float, float] | None = None
        # Set where they are first needed (not every attempt needs them):
        # ``baseline``: inline, the phase task's cancelling() count when the attempt began;
        # ``deadline``, ``due``: with a timeout, when it expires by the loop's clock and by
        # the monotonic clock.

    @property
    def cancelled(self) -> bool:
        """The core CANCELled this attempt."""
        return self.state >= CANCELLED

    @property
    def timed_out(self) -> bool:
        """Our timer cancelled this attempt."""
        return self.state == TIMED_OUT or self.state == CANCELLED_TIMED_OUT


class AttemptTable:
    """The live attempts of a run per job, its retry waits, and the coordinator's queue.

    Made when the run first needs the driver (a run the core's ``Run`` carries out alone
    never makes one). ``running[job]`` is the job's most recent live attempt; older live
    attempts of the same job follow through ``Attempt.next``.
    """

    __slots__ = ("events", "fresh", "live", "running", "sleeping", "sleeps", "waiter")

    def __init__(self, jobs: int) -> None:
        self.running: list[Attempt | None] = [None] * jobs
        self.sleeps: list[asyncio.TimerHandle | None] = [None] * jobs  # per job: its retry wait
        self.fresh: list[Attempt] = []  # started calls whose awaitables are not launched yet
        self.events: deque[Event] = deque()  # the coordinator's queue
        self.waiter: asyncio.Future[None] | None = None  # its one wake-up future
        self.live = 0  # attempt tasks not finished yet
        self.sleeping = 0  # retry waits armed and not over or stopped yet

    def grow(self, jobs: int) -> None:
        """Make room for ``jobs`` more job ids (jobs a run adds while it goes on)."""
        self.running.extend([None] * jobs)
        self.sleeps.extend([None] * jobs)

    def add(self, attempt: Attempt) -> None:
        """``attempt`` is live (its job's other live attempts, if any, stay so)."""
        job = attempt.id
        attempt.next = self.running[job]
        self.running[job] = attempt

    def end(self, attempt: Attempt) -> None:
        """``attempt`` is over: out of the table, its own timer (if any) stopped."""
        running = self.running
        job = attempt.id
        head = running[job]
        if head is attempt:
            running[job] = attempt.next
        else:
            while head is not None and head.next is not attempt:
                head = head.next
            if head is not None:
                head.next = attempt.next
        attempt.next = None
        timer = attempt.timer
        if timer is not None:
            attempt.timer = None
            timer.cancel()

    def live_of(self, job: int) -> Iterator[Attempt]:
        """The live attempts of ``job``, most recent first."""
        attempt = self.running[job]
        while attempt is not None:
            following = attempt.next
            yield attempt
            attempt = following

    def all_live(self) -> Iterator[Attempt]:
        for job in range(len(self.running)):
            yield from self.live_of(job)

    def post(self, event: Event) -> None:
        """Queue an event for the coordinator and wake it."""
        self.events.append(event)
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)


@types.coroutine
def resume(coroutine: Any, yielded: Any) -> Generator[Any, Any, Any]:
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
        return (yield from resume(coroutine, yielded))
    return (yield from coroutine)
