"""Commands carried out: calls, attempt tasks, inline awaits and timers.

A START becomes a call of the node's (or release's) function. An awaitable result is either
awaited inline in the phase's task (a lone attempt: ``Calls.inline``, which the coordinator
decides on) or in a task of its own; a timeout is a timer that cancels what runs it
(``cancels.py``, as a CANCEL does; a ``CARRIED`` START is picked up by ``handback.py``). How
an attempt ended goes on the table's queue (or, inline, back to the coordinator), for
``Outcomes``. docs/internals.md, "How the driver carries out STARTs", gives the reasons.
"""

from __future__ import annotations

import asyncio
import inspect
import types
import weakref
from collections.abc import Sequence
from typing import Any, Final

from .. import _core
from .._declarations import Acquisition
from .attempts import Attempt, AttemptState, AttemptTable, EventKind
from .cache import CacheRun
from .cancels import Cancels
from .fanout import RunJobs, Sources
from .guards import Guards
from .handback import carried
from .hedging import Hedger
from .jobs import Job, JobTable
from .record import FailureRecord
from .reporter import Reporter
from .timers import Timers

_START: Final = _core.START
_SLEEP: Final = _core.SLEEP
_CANCEL: Final = _core.CANCEL
_STOP_SLEEP: Final = _core.STOP_SLEEP
_START_CLIPPED: Final = _core.START_CLIPPED
_EXPIRE: Final = _core.EXPIRE
_NO_ROOM: Final = _core.NO_ROOM
_BAD_HINT: Final = _core.BAD_HINT
_NO_BUDGET: Final = _core.NO_BUDGET
_FALLBACK: Final = _core.FALLBACK
_FAN_OPS: Final = (_core.DRAW, _core.CLOSE, _core.STOP_DRAW)
_CARRIED: Final = _core.CARRIED
_CARRIED_BREAKER: Final = _core.CARRIED_BREAKER
_RETURNED: Final = EventKind.RETURNED
_RAISED: Final = EventKind.RAISED
_UNSTARTED: Final = EventKind.UNSTARTED
_BAD_INPUT: Final = EventKind.BAD_INPUT
_EXPIRED: Final = EventKind.EXPIRED
_CALLED: Final = AttemptState.CALLED
_RUNNING: Final = AttemptState.RUNNING
_TIMED_OUT: Final = AttemptState.TIMED_OUT
_CANCELLED: Final = AttemptState.CANCELLED
_CoroutineType: Final = types.CoroutineType
_isawaitable: Final = inspect.isawaitable


class Calls:
    """Carries out the core's commands for one run (made when the run first needs it)."""

    __slots__ = (
        "__weakref__",
        "_acquisitions",
        "_arguments",
        "_cancels",
        "_guards",
        "_hedger",
        "_loop",
        "_reporter",
        "_run_id",
        "_values",
        "cache",
        "clipped",
        "fans",
        "jobs",
        "kwargs",
        "record",
        "run",
        "table",
        "task",
        "timers",
        "watching",
    )

    task: asyncio.Task[Any]  # the phase's task (forward or shutdown), while it runs

    def __init__(
        self,
        jobs: JobTable,
        run: _core.Run,
        loop: asyncio.AbstractEventLoop,
        values: dict[str, Any],
        acquisitions: list[Acquisition[Any] | None],
        clipped: list[int] | None,
        watch: bool,
        reporter: Reporter | None,
        record: FailureRecord | None,
        run_id: str | None,
    ) -> None:
        self.jobs = jobs
        self._run_id = run_id  # the id a reporter made here gives the run's log records
        self._arguments = jobs.calling.arguments
        self.run = run
        self._loop = loop
        self._values = values
        self._acquisitions = acquisitions  # per owned forward job: what its release gets
        self.clipped = clipped  # per forward job: the attempt whose START was clipped
        self.watching = watch  # someone wants to hear about every attempt
        self._reporter = reporter
        self.record = record  # the run's failure record, made when something first fails
        self.table = AttemptTable(len(jobs))
        n = jobs.forward_count
        self.kwargs: list[dict[str, Any] | None] = [None] * n  # read at attempt 0, retries reuse
        self.timers: Timers | None = None  # attempt timeouts and retry waits, when first used
        self._guards: Guards | None = None  # the shared objects at work (``guards``)
        self._hedger: Hedger | None = None  # hedged rounds (``hedger``)
        self._cancels: Cancels | None = None  # cancellations of attempts (``cancels``)
        # The run's lookups and stores (``cache.py``), when the plan caches nodes.
        self.cache = None if jobs.cache is None else CacheRun(jobs.cache, self, loop)
        # The run's fan-out sources (``fanout.py``); ``None``: the plan has none.
        self.fans: Sources | None = None
        if jobs.fan_outs is not None and isinstance(jobs, RunJobs):
            self.fans = Sources(self, jobs, values)
            jobs.on_grow = weakref.WeakMethod(self._grow)

    def _grow(self, jobs: int, forward: bool) -> None:
        """The run's job table grew by ``jobs`` (a fan-out's item, or its releases)."""
        self.table.grow(jobs)
        if forward:
            self.kwargs.extend([None] * jobs)
            self._acquisitions.extend([None] * jobs)
            if self.clipped is not None:
                self.clipped.extend([-1] * jobs)

    def report(self) -> Reporter:
        """The run's reporter: its own (observers), else one made on first use (the log's)."""
        reporter = self._reporter
        if reporter is None:
            reporter = self._reporter = Reporter(self.jobs, None, self._loop, None, self._run_id)
        return reporter

    def failures(self) -> FailureRecord:
        """The run's failure record (``record``), made when something first fails."""
        record = self.record
        if record is None:
            record = self.record = FailureRecord()
        return record

    def _timers(self) -> Timers:
        """The run's timers (``timers``), made when one is first armed."""
        timers = self.timers
        if timers is None:
            timers = self.timers = Timers(self._loop, self.table)
        return timers

    def stop_inline(self) -> None:
        """The phase's task ends: so does the inline attempts' timer, if any."""
        if self.timers is not None:
            self.timers.stop_inline()

    def guards(self) -> Guards:
        """The run's side of its bulkheads, breakers and fallbacks, made on first use."""
        guards = self._guards
        if guards is None:
            guards = self._guards = Guards(self, self._loop)
        return guards

    def hedger(self) -> Hedger:
        """The run's hedged rounds (``hedging.py``), made on first use."""
        hedger = self._hedger
        if hedger is None:
            hedger = self._hedger = Hedger(self, self._loop)
        return hedger

    def cancels(self) -> Cancels:
        """The run's cancellations of attempts (``cancels.py``), made on first use."""
        cancels = self._cancels
        if cancels is None:
            cancels = self._cancels = Cancels(self)
        return cancels

    def _time_out(self, attempt: Attempt, task: asyncio.Task[Any]) -> None:
        """An attempt's timer fired (``Timers``): cancelled as ``Cancels.time_out`` says."""
        self.cancels().time_out(attempt, task)

    @property
    def guards_made(self) -> Guards | None:
        return self._guards

    def execute(self, commands: Sequence[_core.Command]) -> None:
        """Carry out ``commands`` in order, now."""
        for op, job, attempt, arg in commands:
            if op == _START:
                if self.fans is None or not self.fans.carry(job, attempt, arg):
                    self._start(self.jobs[job], attempt, arg)
            elif op == _CARRIED:
                carried(self, self.jobs[job], attempt, arg)
            elif op == _SLEEP:
                self._timers().sleep(job, arg or 0.0)
            elif op == _CANCEL:
                # A carried item's is its task's (``fanout.Items.carry``).
                if self.fans is None or not self.fans.cancel(job):
                    self.cancels().job(job)
            elif op == _STOP_SLEEP:
                if self.timers is not None:  # else no wait was ever armed
                    self.timers.stop_sleep(job)
                self.report().retry_cancelled(job, self.run.attempts(job))
            elif op == _START_CLIPPED:
                clipped = self.clipped
                assert clipped is not None  # only a run with a deadline is clipped
                clipped[job] = attempt
                self._start(self.jobs[job], attempt, arg)
            elif op == _EXPIRE:
                self.table.post((_EXPIRED, self.jobs[job], attempt))
            else:
                self._other_command(op, job, attempt, arg)

    def _other_command(self, op: int, job: int, attempt: int, arg: Any) -> None:
        """Why a failure is final or a fallback (read by ``Outcomes``), a carried attempt's
        breaker transition, or a fan-out's DRAW, CLOSE or STOP_DRAW (``fanout.Sources``)."""
        if op == _NO_ROOM or op == _BAD_HINT or op == _NO_BUDGET or op == _FALLBACK:
            return
        if op == _CARRIED_BREAKER:
            self.guards().carried_transition(job, arg)
            return
        if self.fans is None or op not in _FAN_OPS:  # pragma: no cover - the core's contract
            raise RuntimeError(f"sdax_hamilton internal error: unknown command {op!r}")
        self.fans.execute(op, job, attempt)

    def was_clipped(self, job: Job, attempt_number: int) -> bool:
        """Whether that forward attempt's START was clipped to the run's deadline."""
        clipped = self.clipped
        return clipped is not None and job.forward and clipped[job.id] == attempt_number

    def _start(self, job: Job, attempt_number: int, timeout: float | None) -> None:
        """Call the job's function now. An awaitable result joins ``fresh``: the
        coordinator awaits it inline or launches it in a task of its own."""
        table = self.table
        running = table.running  # ``AttemptTable.add``, inlined: every attempt passes here
        job_id = job.id
        attempt = running[job_id] = Attempt(job, attempt_number, timeout, running[job_id])
        if not job.forward:
            self._start_release(attempt, job)
            return
        # Arguments are read and checked once, at the first attempt (before a lookup, if any:
        # ``start_after_miss``), as a carried START's are (one reading for both paths:
        # ``Carrier.arguments``, src/carry.rs); retries reuse them.
        kwargs = self.kwargs[job_id]
        if kwargs is None:
            if attempt_number:
                return  # the first attempt's input was bad, reported
            try:
                kwargs = self._arguments(job_id, self._values)
            except BaseException as exc:  # a KeyboardInterrupt from a check stops the run
                table.post((_BAD_INPUT, attempt, exc))
                return
            self.kwargs[job_id] = kwargs
            if job.node.release is not None:
                self._acquisitions[job_id] = Acquisition()  # an owner's record, once
        if (self.cache is not None or job.guarded) and self._diverted(
            attempt, job, kwargs, timeout
        ):
            return
        if self.watching:
            self.report().attempt_started(
                job_id, attempt_number + 1, self.was_clipped(job, attempt_number)
            )
        try:
            result = job.node.call(**kwargs)
        except BaseException as exc:
            table.post((_RAISED, attempt, exc))
            return
        if type(result) is _CoroutineType:  # ``returned``'s common case: every async call
            attempt.aw = result
            table.fresh.append(attempt)
        else:
            self.returned(attempt, result)

    def _start_release(self, attempt: Attempt, job: Job) -> None:
        """``_start`` of a release job: call the release with what its node acquired."""
        release = job.release
        if release is None:  # pragma: no cover - contract violation by the core
            raise RuntimeError(f"sdax_hamilton internal error: no release for {job.name!r}")
        record = self._acquisitions[job.owner]
        if self.watching:
            self.report().attempt_started(job.id, attempt.number + 1)
        try:
            result = release.call(Acquisition() if record is None else record)
        except BaseException as exc:
            self.table.post((_RAISED, attempt, exc))
            return
        self.returned(attempt, result)

    def _diverted(
        self, attempt: Attempt, job: Job, kwargs: dict[str, Any], timeout: float | None
    ) -> bool:
        """Whether a forward START goes somewhere before (or instead of) the call: the
        cache's lookup, or a bulkhead's and a breaker's admission (called once admitted,
        ``guards.py``)."""
        cache = self.cache
        if cache is not None and not attempt.number and cache.looks_up(job.id):
            # Not a call: the lookup's own attempt, without the call's timeout; a
            # miss starts the call (``start_after_miss``).
            attempt.timeout = None
            attempt.aw = cache.lookup(attempt, kwargs, timeout)
            self.table.fresh.append(attempt)
            return True
        if not job.guarded:
            return False
        if job.node.hedge is not None:
            self.hedger().number(attempt)
        if not self.guards().admit(attempt):
            return True  # rejected, or waiting for a permit (called when it comes)
        if job.node.hedge is None and not self.watching:
            return False  # admitted, nothing to report: ``_start`` calls it, as any other
        self.call(attempt, job, kwargs)
        return True

    def call(self, attempt: Attempt, job: Job, kwargs: dict[str, Any]) -> None:
        """Call a guarded forward job's function for an admitted ``attempt`` now
        (``_start``'s call, with what its bulkhead and breaker did)."""
        if self.watching:
            wait, state = self.guards().admitted(attempt)
            self.report().guarded_attempt_started(
                job.id, attempt.number + 1, self.was_clipped(job, attempt.number), wait, state
            )
        if job.node.hedge is not None:
            self.hedger().begin(attempt, kwargs)  # the call is a hedged round
            return
        try:
            result = job.node.call(**kwargs)
        except BaseException as exc:
            self.table.post((_RAISED, attempt, exc))
            return
        self.returned(attempt, result)

    def returned(self, attempt: Attempt, result: Any) -> None:
        """The call for ``attempt`` returned ``result``: awaited next, or its outcome."""
        table = self.table
        try:
            awaitable = type(result) is _CoroutineType or _isawaitable(result)
        except BaseException as exc:  # user code asked (a ``__class__`` property)
            self._returned_unreadable(attempt, result, exc)
            return
        if awaitable:
            attempt.aw = result
            table.fresh.append(attempt)
        else:
            table.post((_RETURNED, attempt, result))

    def start_after_miss(self, job: Job, timeout: float | None) -> None:
        """The lookup before ``job``'s first attempt missed (``cache.py``): call it now,
        with the arguments the lookup was given."""
        self._start(job, 0, timeout)

    def _returned_unreadable(self, attempt: Attempt, result: Any, exc: BaseException) -> None:
        """Asking whether ``result`` is awaitable raised ``exc``: the attempt failed with it;
        an owner's release still gets the value it returned."""
        job = attempt.job
        if job.forward and job.node.release is not None:
            self._acquisitions[job.id] = Acquisition(result, job.node.output_type)
        self.table.post((_RAISED, attempt, exc))

    def launch(self) -> None:
        """Give every fresh awaitable a task of its own (and its timeout a timer)."""
        loop = self._loop
        table = self.table
        for attempt in table.fresh:
            state = attempt.state
            # A fresh attempt is CALLED unless the core CANCELled it since.
            if state is not _CALLED and state >= _CANCELLED:
                table.post((_UNSTARTED, attempt, None))
                continue
            table.live += 1  # before create_task: an eager task factory may finish it at once
            attempt.task = loop.create_task(self._attempt_task(attempt))
            timeout = attempt.timeout
            if timeout is not None:
                (self.timers or self._timers()).arm(attempt, timeout, self._time_out)
        table.fresh.clear()

    async def _attempt_task(self, attempt: Attempt) -> None:
        attempt.state = _RUNNING
        try:
            value = await attempt.aw
        except BaseException as exc:  # never let anything (KeyboardInterrupt!) escape a task
            self.table.live -= 1
            self.table.post((_RAISED, attempt, exc))
            del attempt  # exc's traceback holds this frame: not the attempt and its task
        else:
            table = self.table
            table.live -= 1
            table.events.append((_RETURNED, attempt, value))  # ``AttemptTable.post``, inlined
            waiter = table.waiter
            if waiter is not None:
                table.waiter = None
                if not waiter.done():
                    waiter.set_result(None)

    async def inline(self, attempt: Attempt) -> tuple[bool, Any]:
        """Await a lone attempt in the phase's task itself; ``(raised, value or exception)``.

        Our timeout cancels the task once and takes its request back with ``uncancel()``
        (the ``asyncio.timeout`` technique), so the task's ``cancelling()`` count, against
        ``attempt.baseline``, tells the coordinator whether any other cancellation reached
        the attempt.
        """
        attempt.state = _RUNNING
        task = self.task
        attempt.baseline = task.cancelling()
        timeout = attempt.timeout
        if timeout is not None:
            self._timers().arm_inline(attempt, timeout, task, self._time_out)
        timers = self.timers  # ``None``: no attempt of the run had a timeout yet
        try:
            value = await attempt.aw
        except BaseException as exc:
            if timers is not None:
                timers.inline = None
            if attempt.state is _TIMED_OUT:
                task.uncancel()
            del task  # exc's traceback holds this frame: not the phase's task
            return True, exc
        if timers is not None:
            timers.inline = None
        if attempt.state is _TIMED_OUT:  # identity: the enum member itself
            task.uncancel()
        return False, value
