"""What one run holds, shared by the driver's parts (attempts, outcomes, phases).

The parts are layers of one object (``RunContext`` in ``phases.py`` derives from
``OutcomeHandling`` in ``outcomes.py``, which derives from ``AttemptMechanics`` in
``attempts.py``, which derives from ``RunState`` here): the hot path of a run (carry out a
START, await the attempt, report its outcome, carry out the next START) crosses all three
without an extra object or call in between. docs/internals.md describes the protocol.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from .. import _core
from .._declarations import Acquisition
from .._observe import GIVEN_RUN_ID
from .record import FailureRecord
from .reporter import Reporter
from .runtime import NodeRuntime

if TYPE_CHECKING:
    from .attempts import Attempt

# Events queued for the coordinator by done-callbacks and timers: (kind, subject, payload).
RETURNED: Final = 0  # (_, Attempt, value)
RAISED: Final = 1  # (_, Attempt, exception)
ELAPSED: Final = 2  # (_, job, None): a retry wait is over
UNSTARTED: Final = 3  # (_, Attempt, None): cancelled before its awaitable was first awaited
BAD_INPUT: Final = 4  # (_, Attempt, exception): the input check failed; nothing was called
ABORT: Final = 5  # (_, None, None): an observer raised KeyboardInterrupt/SystemExit: stop

Event = tuple[int, Any, Any]


class RunState:
    """The state of one run. Attributes only; behaviour lives in the subclasses."""

    __slots__ = (
        "_abort_requested",
        "_acquisitions",
        "_began",
        "_budget",
        "_carrier",
        "_clipped",
        "_deadline",
        "_entered",
        "_events",
        "_fresh",
        "_inline_attempt",
        "_inline_timer",
        "_inline_when",
        "_instant",
        "_internal",
        "_kwargs",
        "_live",
        "_loop",
        "_n",
        "_nodes",
        "_observers",
        "_outputs",
        "_phase_done",
        "_phase_over",
        "_phase_task",
        "_plan",
        "_record",
        "_reporter",
        "_run",
        "_run_id",
        "_running",
        "_seed",
        "_shutting",
        "_sleeping",
        "_sleeps",
        "_tables",
        "_task",
        "_through",
        "_two_clocks",
        "_values",
        "_waiter",
        "_watch",
    )

    # Set when the run is entered (``RunContext.__aenter__``).
    _run: _core.Run
    _loop: asyncio.AbstractEventLoop
    _watch: bool  # someone wants to hear about every attempt (``Reporter.wants_attempts``)
    # The driver's own state, made when it first carries out a command or hears of an
    # event (``_make_tables``; a run the core's Run carries out alone needs none of it).
    _running: list[Attempt | None]  # per job: the attempt carried out now
    _sleeps: list[asyncio.TimerHandle | None]  # per job: its retry wait
    _kwargs: list[dict[str, Any] | None]  # per forward job: its arguments, read at attempt 0
    _fresh: list[Attempt]  # started calls whose awaitables are not launched yet
    _events: deque[Event]  # the coordinator's queue
    _waiter: asyncio.Future[None] | None  # its one wake-up future
    _live: int  # attempt tasks not finished yet
    _sleeping: int  # retry waits armed and not over or stopped yet
    # The one timer serving every inline attempt's timeout (see ``AttemptMechanics``).
    _inline_attempt: Attempt | None
    _inline_timer: asyncio.TimerHandle | None
    _acquisitions: list[Acquisition[Any] | None]  # per owned forward job: what its release gets
    _task: asyncio.Task[Any]  # the phase's task (forward or shutdown), while it runs
    _inline_when: float
    _phase_over: bool
    _phase_done: asyncio.Future[None] | None
    _began: bool

    def __init__(
        self,
        plan: _core.Plan,
        nodes: Sequence[NodeRuntime],
        values: dict[str, Any],
        outputs: Sequence[str],
        seed: int | None,
        observers: Any,
        instant: bool,
        budget: float | None = None,
        carrier: _core.Carrier | None = None,
    ) -> None:
        self._plan = plan
        self._nodes = nodes
        self._values = values
        self._outputs = outputs
        self._seed = seed
        self._observers = observers
        self._instant = instant
        # The run's timeout (docs/lifecycle.md, "Deadlines and server-directed waits"): its
        # budget in seconds, the loop time it ends the forward phase (set when the run is
        # entered), and per forward job the attempt (0-based) whose START was clipped.
        self._budget = budget
        # How the core's Run carries out lone STARTs itself; ``None`` when the driver
        # carries out each (set so when the run is entered, if anyone watches attempts).
        self._carrier = carrier
        self._deadline: float | None = None
        self._clipped: list[int] | None = None
        self._entered = False
        self._two_clocks: bool | None = None  # see ``AttemptMechanics._clocks_differ``
        self._n = len(nodes)
        # Both created on first use: a run that neither fails nor is watched needs neither.
        self._record: FailureRecord | None = None
        self._reporter: Reporter | None = None
        self._run_id = GIVEN_RUN_ID.get()  # None: the reporter makes one when first used
        self._tables = False  # the driver's own state exists (``_make_tables``)
        self._shutting = False  # the coordinator carries out the shutdown phase
        self._through = False  # execute(): the forward task goes on with the shutdown phase
        # ``_inline_when``: the inline timer's due time, set with the timer.
        # The phase task (forward, then shutdown) and the caller's wait for it; with it
        # (``RunContext._start_phase``): ``_phase_over``, ``_phase_done`` and ``_began``,
        # the phase's coroutine has started running.
        self._phase_task: asyncio.Task[None] | None = None
        self._abort_requested = False  # the forward phase is to be aborted (caller cancelled)
        self._internal: BaseException | None = None  # an internal failure of a coordinator

    def _make_tables(self) -> None:
        """The driver's own state (declared above), made when it first carries out a
        command or hears of an event."""
        n = self._n
        self._running = [None] * (2 * n)
        self._sleeps = [None] * (2 * n)
        self._kwargs = [None] * n
        self._fresh = []
        self._events = deque()
        self._waiter = None
        self._live = 0
        self._sleeping = 0
        self._inline_attempt = None
        self._inline_timer = None
        self._tables = True

    def _failures(self) -> FailureRecord:
        """The run's failure record (``_record is None`` while nothing failed)."""
        record = self._record
        if record is None:
            record = self._record = FailureRecord()
        return record

    def _report(self) -> Reporter:
        """The run's reporter: logs and observers."""
        reporter = self._reporter
        if reporter is None:
            observers = self._observers
            reporter = self._reporter = Reporter(
                self._nodes,
                observers,
                self._loop,
                None if observers is None else self._terminated,
                self._run_id,
            )
        return reporter

    def _terminated(self, exc: BaseException) -> None:
        """An observer raised ``KeyboardInterrupt``/``SystemExit``: stop like a node would."""
        self._failures().terminate(exc)
        self._post((ABORT, None, None))

    def _post(self, event: Event) -> None:
        """Queue an event for the coordinator and wake it."""
        if not self._tables:
            self._make_tables()
        self._events.append(event)
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)
