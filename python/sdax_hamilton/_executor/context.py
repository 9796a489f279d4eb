"""The run context: one run (``open_run``), and the caller's side of its phase protocol.

``__aenter__`` runs the forward phase, ``__aexit__`` the cleanup; ``execute()`` runs both in
one task. Each phase's coordinator (``coordinator.coordinate``) runs in a task of its own
(``eager.phase_task``) while the caller's task waits for it, so the caller's cancellations
never land in a node or a release: they land on its wait (``waiting.py``), are recorded
and, in the forward phase, the first one is passed on. The run's lifecycle is one
``Stage``; the executor's parts (``Calls``, ``Outcomes``) are made when the run first
needs them. docs/internals.md ("How the driver carries out STARTs") describes the protocol
and why it has this shape.
"""

from __future__ import annotations

import asyncio
import types
import warnings
from collections.abc import Coroutine, Sequence
from contextvars import ContextVar
from typing import Any, Final, NoReturn, cast

from .. import _core
from .._declarations import Acquisition
from .._observe import GIVEN_RUN_ID, observers_of
from .attempts import EventKind
from .calls import Calls
from .coordinator import Stage, coordinate, salvage_detached
from .eager import IN_RUN, PHASE_TASK_NAME, check_room, current_task, phase_task
from .fanout import RunJobs
from .jobs import JobTable
from .outcomes import Outcomes
from .record import FailureRecord
from .reporter import Reporter
from .runtime import NodeRuntime
from .waiting import wait_phase

_running_loop: Final = asyncio.get_running_loop
_wants_attempts: Final = Reporter.wants_attempts

JITTER_SEED: ContextVar[int | None] = ContextVar("sdax_hamilton_jitter_seed", default=None)
"""Set by ``sdax_hamilton.testing.jitter_seed``: seeds every run opened meanwhile."""
INSTANT_RETRIES: ContextVar[bool] = ContextVar("sdax_hamilton_instant_retries", default=False)
"""Set by ``sdax_hamilton.testing.instant_retries``: retry waits of runs opened meanwhile are 0."""

NEVER_ENTERED: Final = (
    "sdax_hamilton: __aexit__ of an open() context that was never entered: use it as "
    "`async with plan.open(...) as values:` (its __aenter__ runs the forward phase, its "
    "__aexit__ the releases)"
)
"""Why ``__aexit__`` of an ``open()`` context is refused before ``__aenter__``."""
_in_run: Final = IN_RUN.get


_NEW: Final = Stage.NEW
_STARTING: Final = Stage.STARTING
_SALVAGING: Final = Stage.SALVAGING
_BETWEEN: Final = Stage.BETWEEN
_CLOSING: Final = Stage.CLOSING
_DONE: Final = Stage.DONE


def open_run(
    plan: _core.Plan,
    jobs: JobTable | Sequence[NodeRuntime],
    values: dict[str, Any],
    outputs: Sequence[str],
    seed: int | None = None,
    observer: object = None,
    timeout: float | None = None,
    carrier: _core.Carrier | None = None,
) -> RunContext:
    """One execution of ``plan`` as an async context manager (docs/api.md, "execute and
    open").

    ``jobs``: the plan's ``JobTable`` (or its nodes' runtimes, made into one, with
    ``carrier``). ``values`` is the run's fresh value table; node outputs are stored into
    it. The body receives a fresh ``{name: values[name] for name in outputs}``.
    ``observer``: ``None``, a callable taking one ``RunEvent``, or a sequence of them.

    The test-mode context variables are read here, when the run is opened: a
    ``JITTER_SEED`` replaces ``seed``; ``INSTANT_RETRIES`` makes every retry wait 0 (the
    core's ``Run`` option). ``timeout`` is the forward phase's budget in seconds (already
    checked, ``None`` for none), measured from entering the context. ``open()`` wraps it
    in a ``HeldRun``.
    """
    if not isinstance(jobs, JobTable):
        jobs = JobTable(jobs, carrier)
    observers = None if observer is None else observers_of(observer)
    test_seed = JITTER_SEED.get()
    if test_seed is not None:
        seed = test_seed
    return RunContext(plan, jobs, values, outputs, seed, observers, INSTANT_RETRIES.get(), timeout)


def core_run(plan: _core.Plan, jobs: JobTable, seed: int | None, instant: bool) -> _core.Run:
    """The core's ``Run`` of one run of ``plan``: seeded, with the test mode's instant
    retries, and with what the plan's runs share (``JobTable.shared``: the Driver's retry
    budget, the forward jobs with a fallback; docs/resilience.md)."""
    shared = jobs.shared
    fan_outs = jobs.fan_outs  # docs/fanout.md
    fans = None if fan_outs is None else [fan.core_args() for fan in fan_outs]
    if shared is None:
        return _core.Run(plan, seed, instant_retries=instant, fan_outs=fans)
    budget, fallbacks = shared
    return _core.Run(
        plan,
        seed,
        instant_retries=instant,
        retry_budget=None if budget is None else budget._core,
        fallbacks=fallbacks,
        fan_outs=fans,
    )


class RunContext:
    """One run; the async context manager returned by :func:`open_run`."""

    __slots__ = (
        "_acquisitions",
        "_budget",
        "_calls",
        "_carrier",
        "_clipped",
        "_deadline",
        "_instant",
        "_internal",
        "_jobs",
        "_loop",
        "_observers",
        "_outcomes",
        "_outputs",
        "_phase_done",
        "_phase_task",
        "_plan",
        "_record",
        "_reporter",
        "_run",
        "_run_id",
        "_seed",
        "_stage",
        "_values",
        "_watch",
    )

    _run: _core.Run  # set when the run is entered, with the two below
    _loop: asyncio.AbstractEventLoop
    _watch: bool  # someone wants to hear about every attempt (``Reporter.wants_attempts``)

    def __init__(
        self,
        plan: _core.Plan,
        jobs: JobTable,
        values: dict[str, Any],
        outputs: Sequence[str],
        seed: int | None,
        observers: Any,
        instant: bool,
        budget: float | None = None,
    ) -> None:
        self._plan = plan
        # A plan with a Parallelizable node: the run's own table, grown as it goes (fanout.py).
        # ``RunJobs`` reads as the plan's table does (``jobs[job]``, the same attributes).
        self._jobs = jobs if jobs.fan_outs is None else cast("JobTable", RunJobs(jobs))
        self._values = values
        self._outputs = outputs
        self._seed = seed
        self._observers = observers
        self._instant = instant
        self._stage = _NEW
        # The run's timeout (docs/lifecycle.md, "Deadlines and server-directed waits"): its
        # budget in seconds, the loop time it ends the forward phase (set when the run is
        # entered), and per forward job the attempt (0-based) whose START was clipped.
        self._budget = budget
        self._deadline: float | None = None
        self._clipped: list[int] | None = None
        # How the core's Run carries out lone STARTs itself (src/carry.rs); ``None`` when
        # the driver carries out each (anyone watching attempts, or a run timeout).
        self._carrier = jobs.carrier
        # Made on first use: a run that neither fails nor is watched needs none of them.
        self._record: FailureRecord | None = None
        self._reporter: Reporter | None = None
        self._run_id = GIVEN_RUN_ID.get()  # None: the reporter makes one when first used
        self._calls: Calls | None = None
        self._outcomes: Outcomes | None = None
        self._phase_task: asyncio.Task[None] | None = None
        self._phase_done: asyncio.Future[None] | None = None  # the caller's wait for it
        self._internal: BaseException | None = None  # an internal failure of a coordinator

    # ----------------------------------------------------------------- parts

    def _failures(self) -> FailureRecord:
        """The run's failure record, shared with its parts (``Calls.failures``)."""
        record = self._record
        if record is None:
            calls = self._calls
            record = self._record = FailureRecord() if calls is None else calls.failures()
        return record

    def _report(self) -> Reporter:
        """The run's reporter: logs and observers."""
        reporter = self._reporter
        if reporter is None:
            observers = self._observers
            if observers is None and self._calls is not None:
                reporter = self._reporter = self._calls.report()  # one per run: its id
            else:
                on_termination = None if observers is None else self._terminated
                reporter = self._reporter = Reporter(
                    self._jobs, observers, self._loop, on_termination, self._run_id
                )
        return reporter

    def _parts(self) -> Calls:
        """The driver's parts (``_calls``, ``_outcomes``), made when the run first carries
        out a command itself or hears of an event (the run's reporter, if it has one: the
        parts make one when needed); returns ``_calls``."""
        calls = self._calls
        if calls is None:
            reporter, run, loop, values = self._reporter, self._run, self._loop, self._values
            acquisitions = self._acquisitions
            calls = self._calls = Calls(
                self._jobs, run, loop, values, acquisitions, self._clipped, self._watch,
                reporter, self._record, self._run_id,
            )  # fmt: skip
            self._outcomes = Outcomes(
                calls, run, loop, values, acquisitions, self._deadline is not None,
                self._watch, reporter,
            )  # fmt: skip
        return calls

    def _terminated(self, exc: BaseException) -> None:
        """An observer raised ``KeyboardInterrupt``/``SystemExit``: stop like a node would."""
        self._failures().terminate(exc)
        self._parts().table.post((EventKind.ABORT, None, None))

    # ----------------------------------------------------------------- context protocol

    async def __aenter__(self) -> dict[str, Any]:
        self._enter()
        await self._phase(coordinate(self, None, False), _BETWEEN)
        record = self._record
        if record is None or record.clean:
            values = self._values
            return {name: values[name] for name in self._outputs}
        if self._stage < _CLOSING:  # a salvaged forward phase has carried out its releases
            await self._cleanup()
        self._fail_run()

    async def execute(self) -> dict[str, Any]:
        """The run without a body: the forward task goes on with the shutdown phase."""
        results = self.execute_at_once()
        if results is None:
            results = await self.execute_rest()
        return results

    def execute_at_once(self) -> dict[str, Any] | None:
        """:meth:`execute` as far as it goes without waiting: its results, or ``None`` when
        the caller must ``await execute_rest()`` (the phase suspended, or a cancellation
        is pending for the caller)."""
        self._enter()
        if not self._start_phase(coordinate(self, None, True), _DONE):
            return None
        return self._executed()

    async def execute_rest(self) -> dict[str, Any]:
        """The rest of :meth:`execute` after :meth:`execute_at_once` returned ``None``."""
        await wait_phase(self, _DONE)
        return self._executed()

    def _executed(self) -> dict[str, Any]:
        """Both phases are over: the results, or the run's failure raised."""
        self._phase_ended()
        record = self._record
        if record is not None and not record.clean:
            self._fail_run()
        outputs = self._outputs
        # dict/zip/map: no comprehension frame on the hot path
        results = dict(zip(outputs, map(self._values.__getitem__, outputs), strict=True))
        if self._observers is None:
            return results  # nobody to tell, nothing recorded (a failure raised above)
        outcome = self._finish(None)
        if outcome is None:
            return results
        try:
            raise outcome  # an observer raised KeyboardInterrupt/SystemExit at the end
        finally:
            del outcome  # the traceback holds this frame: no cycle through it

    def _enter(self) -> None:
        """Open the run: the core's ``Run``, the loop, the acquisition table."""
        if self._stage is not _NEW:
            raise RuntimeError("a run context can be entered only once")
        self._stage = _STARTING
        jobs = self._jobs
        n = jobs.forward_count
        if len(self._plan) != n:
            raise ValueError(f"Plan has {len(self._plan)} active nodes but {n} runtimes")
        if jobs.shared is None and not self._instant and jobs.fan_outs is None:
            # ``core_run``'s plain case
            self._run = _core.Run(self._plan, self._seed)
        else:
            self._run = core_run(self._plan, jobs, self._seed, self._instant)
        loop = self._loop = _running_loop()
        if current_task(loop) is None:
            raise RuntimeError("sdax_hamilton runs must be awaited inside an asyncio task")
        if _in_run():
            check_room()  # a run inside a run's node: runs nest on one stack
        budget = self._budget
        if budget is not None:
            # The core decides from the deadline; it is told the time before each event.
            deadline = self._deadline = loop.time() + budget
            self._run.set_deadline(deadline)
            self._clipped = [-1] * n
        self._acquisitions: list[Acquisition[Any] | None] = [None] * n
        observers = self._observers
        watch = self._watch = _wants_attempts(observers)
        if watch or budget is not None:
            # Every attempt is reported, or told the time: the driver carries out each.
            self._carrier = None
        if observers is not None or budget is not None:
            nodes = self._plan.nodes
            if isinstance(self._jobs, RunJobs):
                nodes = self._jobs.listed(nodes)
            self._report().run_started(nodes, self._deadline, budget or 0.0)
            if self._record is not None:  # the observer raised KeyboardInterrupt/SystemExit
                self._stage = _DONE
                self._fail_run()  # nothing ran: nothing to clean up

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: types.TracebackType | None,
    ) -> bool:
        if self._stage is _NEW:
            raise RuntimeError(NEVER_ENTERED)
        try:
            if exc is not None:
                self._failures().body_raised(exc)
            await self._cleanup()
            record = self._record
            outcome = self._finish(None if record is None else record.outcome())
            if outcome is None or outcome is exc:
                return False  # the body's own exception (if any) propagates unchanged
            raise outcome
        finally:
            # The raised exception's traceback holds this frame: drop what it would keep
            # alive in a cycle (the way asyncio's TaskGroup does).
            exc = traceback = outcome = record = None  # noqa: F841

    def _fail_run(self) -> NoReturn:
        """Raise the outcome of a run that failed before its body could run."""
        outcome = self._finish(self._outcome_or_internal())
        assert outcome is not None
        try:
            raise outcome
        finally:
            del outcome  # the traceback holds this frame: no cycle through it

    def _finish(self, outcome: BaseException | None) -> BaseException | None:
        """Emit ``run_finished``, then drop the run's references to its failures; the run's
        outcome (an observer may replace it). A failure's traceback refers to the run's
        frames: with nothing of the run referring to it, no cycle forms, and a failed run
        is freed by reference counting alone (tests/test_driver_memory.py)."""
        if self._observers is not None:
            record = self._failures()
            primary = record.primary
            self._report().run_finished(outcome)
            if record.primary is not primary:  # the observer raised KeyboardInterrupt/SystemExit
                outcome = record.outcome()
            self._drop_listeners()
        if self._record is not None:
            self._dispose()
        return outcome

    def _drop_listeners(self) -> None:
        self._observers = None
        if self._reporter is not None:
            self._reporter.close()

    def _dispose(self) -> None:
        if self._record is not None:
            self._record.clear()  # the parts share it
        if self._calls is not None:
            self._calls.table.events.clear()
        self._internal = None

    def _outcome_or_internal(self) -> BaseException:
        outcome = self._failures().outcome()
        if outcome is None:  # pragma: no cover - defensive: the core ended a phase early
            return RuntimeError("sdax_hamilton internal error: forward phase ended incomplete")
        return outcome

    # ----------------------------------------------------------------- phases

    async def _cleanup(self) -> None:
        if self._observers is not None:
            self._report().shutdown_started()
        self._stage = _CLOSING
        commands = self._run.begin_shutdown()
        if commands or not self._run.finished:  # a release is owed: run them in a task
            await self._phase(coordinate(self, commands, True), _DONE)
        self._stage = _DONE

    async def _phase(self, coordinator: Coroutine[Any, Any, None], until: Stage) -> None:
        """Run a phase's coordinator in a task of its own and wait until the run reaches
        ``until``. The caller's cancellations land on our wait, never in the phase: they
        are recorded, and in the forward phase the first one aborts it (passed on once)."""
        if not self._start_phase(coordinator, until):
            await wait_phase(self, until)
        self._phase_ended()

    def _start_phase(self, coordinator: Coroutine[Any, Any, None], until: Stage) -> bool:
        """Start the phase's task (eagerly where the loop allows: ``eager.phase_task``).

        True when the run is already at ``until`` and the caller has no cancellation
        pending: the caller then need not wait at all, which is how a phase whose nodes
        never suspend costs no wait and no loop iteration.
        """
        loop = self._loop
        self._phase_done = None
        self._phase_task = phase_task(loop, coordinator)  # copies the caller's context
        if self._stage < until:
            return False
        caller = current_task(loop)
        return caller is None or not caller.cancelling()

    def _phase_ended(self) -> None:
        """The phase is over: drop it, and raise the coordinator's internal failure."""
        self._phase_done = None
        self._phase_task = None  # finished: an open() body does not keep it alive
        internal = self._internal
        if internal is not None:
            # run_finished was emitted when the coordinator gave up
            self._drop_listeners()
            stage = self._stage
            if stage >= _CLOSING or stage is _SALVAGING:
                self._dispose()
            else:
                # Too deep even to begin the salvage (``coordinate``): it runs in a task of
                # its own, from the loop; the caller gets the failure now.
                salvage_detached(self, internal)
            try:
                raise internal
            finally:
                del internal


class HeldRun:
    """An ``open()`` run: its ``RunContext``, and what notices it being dropped while held.

    A context entered and never exited holds what its nodes acquired. When it is collected
    it says so with a ``ResourceWarning`` naming the owned nodes still held (as asyncio
    warns about a coroutine never awaited) and, while its loop is open, carries out its
    releases in a task of their own, as its ``__aexit__`` would have (as asyncio closes an
    async generator dropped unfinished). ``execute()`` never holds a run: its runs have no
    finalizer to call.
    """

    __slots__ = ("_held", "_run")

    def __init__(self, run: RunContext) -> None:
        self._run = run
        self._held = False  # entered, the forward phase over, and not exited yet

    async def __aenter__(self) -> dict[str, Any]:
        values = await self._run.__aenter__()
        self._held = True
        return values

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: types.TracebackType | None,
    ) -> bool:
        self._held = False
        try:
            return await self._run.__aexit__(exc_type, exc, traceback)
        finally:
            exc = traceback = None  # the raised exception's traceback holds this frame

    def __del__(self) -> None:
        if not getattr(self, "_held", False):
            return
        self._held = False
        try:
            self._dropped()
        except BaseException:  # dropped near the recursion limit, say: a finalizer cannot raise
            pass

    def _dropped(self) -> None:
        run = self._run
        held = [
            job.name
            for job, record in zip(run._jobs, run._acquisitions, strict=False)
            if record is not None and job.node.release is not None
        ]
        loop = run._loop
        releasing = False
        if held and not loop.is_closed():
            try:  # first: a warning filter may turn the warning into an error
                loop.call_soon_threadsafe(self._release_dropped)
                releasing = True
            except RuntimeError:  # closed meanwhile (another thread)
                pass
        warnings.warn(
            "sdax_hamilton: an open() context was dropped while entered, never exited; "
            f"it held {held or 'no resource'}"
            + ("; its releases run now, in a task" if releasing else "")
            + ". Exit it: `async with plan.open(...) as values:`",
            ResourceWarning,
            stacklevel=2,
            source=self,
        )

    def _release_dropped(self) -> None:
        self._run._loop.create_task(self._exit_dropped(), name=PHASE_TASK_NAME)

    async def _exit_dropped(self) -> None:
        try:
            await self._run.__aexit__(None, None, None)
        except Exception:  # logged as each release failed; nobody to raise it to
            pass
