"""The run context: the phase and cancellation protocol of one run (``open_run``).

``__aenter__`` runs the forward phase, ``__aexit__`` the cleanup; each phase's coordinator
runs in a task of its own while the caller's task waits for it, shielded, so the caller's
cancellations never land in a node or a release. docs/internals.md ("How the driver carries
out STARTs") describes the protocol and why it has this shape.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import types
import warnings
from collections.abc import Coroutine, Sequence
from contextvars import ContextVar
from typing import Any, Final, NoReturn

from .. import _core
from .._declarations import Acquisition
from .._failures import add_note_once
from .._observe import observers_of
from .attempts import Attempt, AttemptState
from .outcomes import OutcomeHandling
from .reporter import Reporter
from .runtime import NodeRuntime
from .state import BAD_INPUT, RAISED, RETURNED, UNSTARTED

_CancelledError: Final = asyncio.CancelledError
_CoroutineType: Final = types.CoroutineType
_CALLED: Final = AttemptState.CALLED
_RETURNED: Final = RETURNED
_RAISED: Final = RAISED
_BAD_INPUT: Final = BAD_INPUT
_UNSTARTED: Final = UNSTARTED
_TERMINATION: Final = (KeyboardInterrupt, SystemExit)
_sleep: Final = asyncio.sleep
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

PHASE_TASK_NAME: Final = "sdax_hamilton run"
"""The name of a run's phase tasks (a name given costs less than ``Task-N`` on 3.11)."""

_IN_RUN: Final[ContextVar[bool]] = ContextVar("sdax_hamilton_in_run", default=False)
"""Set in each phase task's context (a copy of its caller's): what runs in it, or in a task
made from it, is inside a run, and a run it starts is nested (``_check_room``)."""
_in_run: Final = _IN_RUN.get

ROOM: Final = 100
"""The frames a run needs below the recursion limit to carry itself out, whatever its nodes
raise (its bookkeeping, logging and releases): a nested run started with less is refused."""


def _check_room() -> None:
    """Refuse a run started too close to the recursion limit, before anything runs.

    A run inside a run's node (a plan run recursively, say) starts its phase eagerly, one
    stack deeper each time; with no room left below the limit, the run's own bookkeeping
    would fail part-way and leave its acquisitions to a salvage (``_salvage``). Refused
    here, it is the node's ``RecursionError``, which the enclosing run handles with the
    room this keeps (docs/contract.md#hostile-run). Asked only of nested runs."""
    # The recursion counter of C calls (on 3.11 Python frames count against it too; from
    # 3.12 it has a limit of its own, which nested eager tasks can reach first).
    if _core.has_room(ROOM):
        if sys.version_info < (3, 12):
            return
        # From 3.12 the recursion limit counts Python frames alone.
        try:
            sys._getframe(sys.getrecursionlimit() - ROOM)
        except ValueError:
            return
    raise RecursionError(
        f"sdax_hamilton: a run nested in another started within {ROOM} levels of the "
        f"recursion limit ({sys.getrecursionlimit()}): too deep to carry it out, nothing ran"
    )


if sys.version_info >= (3, 12):
    _task_of: Final = asyncio.current_task  # implemented in C from 3.12

    def _phase_task(
        loop: asyncio.AbstractEventLoop, coordinator: Coroutine[Any, Any, None]
    ) -> asyncio.Task[None]:
        """The phase's task, started eagerly where the loop keeps asyncio's default task
        factory: a phase that never suspends (small graphs with quick nodes) is over before
        this returns, without a loop iteration; the caller then handles it as under an eager
        task factory (``RunContext._phase``, tests/test_driver_loops.py)."""
        try:
            if loop.get_task_factory() is None:
                return asyncio.Task(coordinator, loop=loop, eager_start=True, name=PHASE_TASK_NAME)
            return loop.create_task(coordinator, name=PHASE_TASK_NAME)
        except BaseException:
            coordinator.close()  # never started (a RecursionError near the limit, say)
            raise

else:
    # ``asyncio.current_task`` is Python code on 3.11; the table it reads is C's.
    _task_of: Final = asyncio.tasks._current_tasks.get  # type: ignore[attr-defined]
    _enter_task: Final = asyncio.tasks._enter_task
    _leave_task: Final = asyncio.tasks._leave_task

    # Stands in for the loop's ``call_soon`` while a phase task is created: keeps the
    # task's first step instead of queueing it. One per thread: loops in other threads
    # may be creating their tasks meanwhile (the constructor runs Python code); in one
    # thread, a catcher is emptied before the step runs (a run inside the step uses it).
    _catchers: Final = threading.local()

    def _phase_task(
        loop: asyncio.AbstractEventLoop, coordinator: Coroutine[Any, Any, None]
    ) -> asyncio.Task[None]:
        """The phase's task, started eagerly as on Python 3.12 (above), where the loop keeps
        asyncio's default task factory and has an instance dictionary (asyncio's loops and
        uvloop's do).

        ``asyncio.Task`` hands its first step to ``loop.call_soon``; an instance attribute
        shadowing that method for the duration of the constructor catches it, and the step
        runs now, in the task's context, with the task as the loop's current task (the
        caller's task is set aside meanwhile), which is what 3.12's ``eager_start`` does. A
        phase that never suspends is then over without a loop iteration; one that
        suspends goes on as any task. Nothing else runs while the stand-in is in place
        (tests/test_driver_loops.py: an eager phase, a replaced ``call_soon`` kept).
        """
        attrs = getattr(loop, "__dict__", None)
        if attrs is None or "call_soon" in attrs or loop.get_task_factory() is not None:
            return loop.create_task(coordinator, name=PHASE_TASK_NAME)
        catcher = getattr(_catchers, "catcher", None)
        if catcher is None:
            catcher = _catchers.catcher = _core.StepCatcher()
        attrs["call_soon"] = catcher
        try:
            task = asyncio.Task(coordinator, loop=loop, name=PHASE_TASK_NAME)
        except BaseException:
            # The constructor failed after handing over its step (3.11 registers the task
            # in Python code after ``call_soon``: a RecursionError near the limit). The
            # catcher is left empty for the thread's next run, and the task, which will
            # never run, is dropped without a warning.
            _drop_caught(catcher.take())
            coordinator.close()
            raise
        finally:
            del attrs["call_soon"]
        caught = catcher.take()
        if caught is None:  # pragma: no cover - the task queued its step some other way
            return task
        step, context = caught
        caller = _task_of(loop)
        if caller is not None:
            _leave_task(loop, caller)
        try:
            context.run(step)
        except BaseException:
            if task.done():
                raise
            # The step was refused before it ran (the recursion limit is checked when it is
            # called): queue it as the constructor would have; the caller waits for it.
            loop.call_soon(step, context=context)
        finally:
            if caller is not None:
                _enter_task(loop, caller)
        return task

    def _drop_caught(caught: tuple[Any, Any] | None) -> None:
        """Silence the task of a step caught from a constructor that then failed."""
        if caught is not None:
            task = getattr(caught[0], "__self__", None)
            if isinstance(task, asyncio.Task):
                task._log_destroy_pending = False  # type: ignore[attr-defined]


def open_run(
    plan: _core.Plan,
    nodes: Sequence[NodeRuntime],
    values: dict[str, Any],
    outputs: Sequence[str],
    seed: int | None = None,
    observer: object = None,
    timeout: float | None = None,
    carrier: _core.Carrier | None = None,
    body: bool = False,
) -> RunContext:
    """One execution of ``plan`` as an async context manager (docs/api.md, "execute and
    open").

    ``values`` is the run's fresh value table; node outputs are stored into it. The body
    receives a fresh ``{name: values[name] for name in outputs}``. ``observer``: ``None``, a
    callable taking one ``RunEvent``, or a sequence of them (``TypeError`` otherwise).

    The test-mode context variables are read here, when the run is opened: a
    ``JITTER_SEED`` replaces ``seed``; ``INSTANT_RETRIES`` makes every retry wait 0 (the
    core's ``Run`` option). ``timeout`` is the forward phase's budget in seconds (already
    checked, ``None`` for none), measured from entering the context. ``carrier`` (the
    plan's, from ``carrier_of(nodes)``) lets the core's ``Run`` carry out lone STARTs
    itself (docs/internals.md, "How the driver carries out STARTs"). ``body``: the run is
    ``open()``'s, whose context may be dropped without being exited (``HeldRun``).
    """
    observers = None if observer is None else observers_of(observer)
    test_seed = JITTER_SEED.get()
    if test_seed is not None:
        seed = test_seed
    return (HeldRun if body else RunContext)(
        plan, nodes, values, outputs, seed, observers, INSTANT_RETRIES.get(), timeout, carrier
    )


class RunContext(OutcomeHandling):
    """One run; the async context manager returned by :func:`open_run`."""

    __slots__ = ("_held", "_salvaging")

    _held: bool  # entered, the forward phase over, and not exited yet (``open()``'s body)
    _salvaging: bool  # ``_salvage`` began (set only then)

    # ----------------------------------------------------------------- context protocol

    async def __aenter__(self) -> dict[str, Any]:
        self._enter()
        await self._phase(self._coordinate(None), False)
        if self._record is None:
            values = self._values
            self._held = True
            return {name: values[name] for name in self._outputs}
        if not self._shutting:  # a salvaged forward phase has carried out its releases
            await self._cleanup()
        self._fail_run()

    async def execute(self) -> dict[str, Any]:
        """The run without a body (``PreparedPlan.execute``): the forward task goes on with
        the shutdown phase as soon as the forward phase is over, so both phases cost one
        task and one wait. The caller's cancellations are taken as during the phase the
        task is in (docs/internals.md, "How the driver carries out STARTs")."""
        results = self.execute_at_once()
        if results is None:
            results = await self.execute_rest()
        return results

    def execute_at_once(self) -> dict[str, Any] | None:
        """:meth:`execute` as far as it goes without waiting: its results when the run was
        over within its task's first step and the caller has no cancellation pending,
        ``None`` when the caller must ``await execute_rest()``. A run whose nodes never
        suspend then costs its caller no coroutine of its own (``PreparedPlan.execute``)."""
        self._through = True
        self._enter()
        if not self._start_phase(self._coordinate(None)):
            return None
        return self._executed()

    async def execute_rest(self) -> dict[str, Any]:
        """The rest of :meth:`execute` after :meth:`execute_at_once` returned ``None``."""
        await self._wait_phase(False)
        return self._executed()

    def _executed(self) -> dict[str, Any]:
        """Both phases are over: the results, or the run's failure raised."""
        self._phase_ended()
        if self._record is not None:
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
        """Open the run: the core's ``Run``, the loop, the per-job tables."""
        if self._entered:
            raise RuntimeError("a run context can be entered only once")
        self._entered = True
        n = self._n
        if len(self._plan) != n:
            raise ValueError(f"Plan has {len(self._plan)} active nodes but {n} runtimes")
        if self._instant:
            self._run = _core.Run(self._plan, self._seed, instant_retries=True)
        else:  # a keyword argument costs a run ~0.15 µs in the bindings
            self._run = _core.Run(self._plan, self._seed)
        loop = self._loop = _running_loop()
        caller = _task_of(loop)
        if caller is None:
            raise RuntimeError("sdax_hamilton runs must be awaited inside an asyncio task")
        if _in_run():
            _check_room()  # a run inside a run's node: runs nest on one stack
        budget = self._budget
        if budget is not None:
            # The core decides from the deadline; we tell it the time before each event.
            deadline = self._deadline = loop.time() + budget
            self._run.set_deadline(deadline)
            self._clipped = [-1] * n
        self._acquisitions = [None] * n
        observers = self._observers
        watch = self._watch = _wants_attempts(observers)
        if watch or budget is not None:
            # Every attempt is reported, or told the time: the driver carries out each.
            self._carrier = None
        if observers is not None or budget is not None:
            self._report().run_started(self._plan.nodes, self._deadline)
            if self._record is not None:  # the observer raised KeyboardInterrupt/SystemExit
                self._fail_run()  # nothing ran: nothing to clean up

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: types.TracebackType | None,
    ) -> bool:
        if not self._entered:
            raise RuntimeError(NEVER_ENTERED)
        self._held = False
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
        """Emit ``run_finished``, then drop the run's references to its failures.

        Returns the run's outcome (an observer may replace it). After this, nothing of the
        run refers to an exception, so a failure's traceback (which refers to the run's
        frames) forms no reference cycle: a failed run is freed by reference counting
        alone (tests/test_driver_memory.py).
        """
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
        self._record = None
        if self._tables:
            self._events.clear()
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
        commands = self._run.begin_shutdown()
        if commands or not self._run.finished:  # a release is owed: run them in a task
            await self._phase(self._coordinate(commands), True)

    async def _phase(self, coordinator: Coroutine[Any, Any, None], shutdown: bool) -> None:
        """Run a phase's coordinator in a task of its own; wait for it, shielded.

        The caller's cancellations land on our wait, never in the phase: they are recorded,
        and in the forward phase the first one aborts it (passed on once).
        """
        if not self._start_phase(coordinator):
            await self._wait_phase(shutdown)
        self._phase_ended()

    def _start_phase(self, coordinator: Coroutine[Any, Any, None]) -> bool:
        """Start the phase's task (eagerly where the loop allows: ``_phase_task``).

        True when the phase is already over and the caller has no cancellation pending: the
        caller then need not wait (``_wait_phase``) at all, which is how a phase whose
        nodes never suspend costs no wait and no loop iteration.
        """
        loop = self._loop
        self._phase_over = False
        self._phase_done = None
        self._began = False
        self._phase_task = _phase_task(loop, coordinator)  # copies the caller's context
        if not self._phase_over:
            return False
        caller = _task_of(loop)
        return caller is None or not caller.cancelling()

    async def _wait_phase(self, shutdown: bool) -> None:
        """Wait for the phase's task, shielded (``_phase``)."""
        loop = self._loop
        task = self._phase_task
        assert task is not None
        try:
            if self._phase_over:
                # An eager start ran the whole phase while the caller had a cancellation
                # pending: the caller never waited, so it was not delivered. Take it now,
                # as a wait would have, so it stays the caller's primary.
                await self._take_pending_cancellation(shutdown or self._shutting)
            while not self._phase_over:
                done = self._phase_done = loop.create_future()
                try:
                    await done
                except _CancelledError as exc:
                    # ``_shutting``: an execute()'s forward task has gone on with the cleanup.
                    self._caller_cancelled(exc, shutdown or self._shutting)
                    if task.done() and not self._phase_over:
                        self._never_ran(shutdown)
        except BaseException:
            # Not a cancellation: a KeyboardInterrupt raised into this task by a signal
            # handler, say. Nobody waits for the forward phase any more: abort it.
            if not (shutdown or self._shutting):
                self._request_abort()
            raise

    def _phase_ended(self) -> None:
        """The phase is over: drop it, and raise the coordinator's internal failure."""
        self._phase_done = None
        self._phase_task = None  # finished: an open() body does not keep it alive
        internal = self._internal
        if internal is not None:
            # run_finished was emitted when the coordinator gave up
            self._drop_listeners()
            if self._shutting or getattr(self, "_salvaging", False):
                self._dispose()
            else:
                # Too deep even to begin the salvage (``_coordinate``): it runs in a task of
                # its own, from the loop; the caller gets the failure now.
                self._salvage_detached(internal)
            try:
                raise internal
            finally:
                del internal

    def _salvage_detached(self, exc: BaseException) -> None:
        try:  # the task is created from the loop: a task failing to be made here would warn
            self._loop.call_soon(self._salvage_task, exc)
        except BaseException:
            pass

    def _salvage_task(self, exc: BaseException) -> None:
        self._loop.create_task(self._salvage_in_task(exc), name=PHASE_TASK_NAME)

    async def _salvage_in_task(self, exc: BaseException) -> None:
        self._task = _task_of(self._loop)
        try:
            if not await self._salvage(exc):
                self._abandon(exc)
        finally:
            del self._task
            self._dispose()

    async def _take_pending_cancellation(self, shutdown: bool) -> None:
        """Yield once: the caller may have a cancellation pending (``cancelling()`` counts
        requests not yet taken back); it is delivered here, and recorded."""
        try:
            await asyncio.sleep(0)
        except _CancelledError as exc:
            self._caller_cancelled(exc, shutdown)

    def _phase_over_now(self) -> None:
        """The phase's coordinator has finished: wake the caller."""
        self._phase_over = True
        done = self._phase_done
        if done is not None and not done.done():
            done.set_result(None)

    def _never_ran(self, shutdown: bool) -> None:
        """The phase's task was cancelled before its first step, by someone else (we never
        do): nothing of the phase ran. Seen when the caller is cancelled too (a loop being
        torn down cancels every task); a task is not watched for this otherwise, which
        would cost every run a callback."""
        if shutdown:
            self._internal = RuntimeError(
                "sdax_hamilton internal error: the shutdown task was cancelled before it began"
            )
        else:
            self._failures().caller_cancelled(_CancelledError(), False)
        self._phase_over_now()

    async def _coordinate(self, commands: list[_core.Command] | None) -> None:
        """A phase's task: the forward phase (``commands`` is ``None``), followed by the
        shutdown phase for ``execute()``; or the shutdown phase alone, from the core's
        first shutdown ``commands``. Carries out commands until the phase is quiescent."""
        self._began = True
        run = self._run
        carrying = None
        try:
            _IN_RUN.set(True)  # this task's own context: never the caller's
            loop = self._loop
            task = _task_of(loop)
            assert task is not None
            self._task = task  # the phase's task: inline attempts and their timeouts use it
            carrier = self._carrier
            # With a carrier, the core's Run carries out lone STARTs in this task.
            if carrier is not None:
                carrying = (carrier, self._values, self._acquisitions, task, loop.time)
            if commands is None:
                if self._begin_forward(carrying):
                    await self._drive(False)
                if not self._through:
                    return
                if self._observers is not None:
                    self._report().shutdown_started()
                commands = run.begin_shutdown_or_finish()
                if commands is None:  # the run is over; the Run has let the carrier go
                    carrying = None
                    return
            elif carrying is not None:
                run.carry_with(carrying)
            self._shutting = True  # from here on the caller's cancellations are cleanup's
            self._execute(commands)
            # A failure the core's Run handed back in them has a traceback whose frames
            # link back to this one: keep no reference to it here (no cycle).
            commands = None
            await self._drive(True)
        except BaseException as exc:  # nothing escapes a task into the loop
            # First, with no call that could fail: the caller sees a failure, never outputs
            # that were not stored.
            self._internal = exc
            try:
                await self._give_up(exc)
            except BaseException:
                pass
        finally:
            try:
                self._phase_task_ends(carrying is not None)
            finally:
                # The caller is woken whatever failed above (``_phase_over_now``, no call).
                self._phase_over = True
                done = self._phase_done
                if done is not None and not done.done():
                    done.set_result(None)

    def _phase_task_ends(self, carrying: bool) -> None:
        """The phase's task ends: its inline timer goes, and no inline attempt is left to
        use the task."""
        timer = self._inline_timer if self._tables else None
        if timer is not None:
            self._inline_timer = None
            timer.cancel()
        if carrying:
            self._run.carry_with(None)  # the Run refers to this task no more
        del self._task

    async def _give_up(self, exc: BaseException) -> None:
        """The coordinator failed with ``exc``: in the forward phase the run is salvaged
        (``_salvage``); otherwise, or if that fails, everything started is stopped."""
        if self._shutting or not await self._salvage(exc):
            self._abandon(exc)

    def _begin_forward(self, carrying: Any) -> bool:
        """Start the forward phase, carried out with ``carrying`` (``Run.carry_with``'s
        argument) if not ``None``; whether it is still to be driven (``_drive``): not when
        the core's Run carried out all of it, nor when the caller was cancelled before it
        began (the request is then all there is)."""
        run = self._run
        if self._abort_requested:
            if carrying is not None:
                run.carry_with(carrying)  # for the shutdown phase that follows
            return False
        if self._deadline is not None:
            run.clock(self._loop.time())
        commands = run.start() if carrying is None else run.start_carried(carrying)
        if commands:  # not all carried out by the core's Run
            self._execute(commands)
            return True
        return self._tables or bool(run.pending)

    async def _drive(self, shutdown: bool) -> None:
        """Process events and carry out commands until the phase is quiescent."""
        if not self._tables:
            self._make_tables()
        events = self._events
        fresh = self._fresh
        run = self._run
        handle = self._handle if self._deadline is None else self._handle_timed
        while True:
            while events:
                handle(events.popleft())
            if fresh:
                if (
                    len(fresh) == 1
                    and self._live == 0
                    and fresh[0].state is _CALLED  # not cancelled since the call
                    and (self._sleeping == 0 if shutdown else run.pending == 1)
                ):
                    await self._inline(fresh.pop())
                else:
                    self._launch()
                continue
            if self._live == 0 and (run.finished if shutdown else run.pending == 0):
                return
            waiter = self._waiter = self._loop.create_future()
            try:
                await waiter
            except _CancelledError as exc:
                self._waiter = None
                if shutdown:  # not the caller's (never passed on): someone cancelled our task
                    self._failures().caller_cancelled(exc, True)
                    continue
                if not self._abort_requested:  # not passed on by us: taken as the caller's
                    self._abort_requested = True
                    self._failures().caller_cancelled(exc, False)
                self._execute(run.cancel())

    async def _salvage(self, exc: BaseException) -> bool:
        """The forward phase's own bookkeeping failed with ``exc`` (a ``RecursionError`` or
        ``MemoryError`` near the interpreter's limits, say): stop every attempt, wait for
        them, and carry out every release owed all the same, in dependency order (the
        core's ``Run.abandon``), from a fresh step of this task, out of the depth that
        failed. ``exc`` is then a failure of the run like a node's (a termination its
        primary), and the run ends as a failed one. False when even that failed: the run
        is abandoned as before, ``exc`` raised as is."""
        self._salvaging = True
        try:
            try:
                await _sleep(0)  # leave the depth that failed
            except _CancelledError:
                pass  # ours, passed on (the caller's own is recorded) or a timeout's
            in_flight = self._stop_everything()
            await self._wait_stopped()
            failures = self._failures()
            if isinstance(exc, _TERMINATION):
                failures.terminate(exc)
            else:
                where = f" while {', '.join(in_flight)} ran" if in_flight else ""
                add_note_once(
                    exc,
                    f"sdax_hamilton: the run could not go on{where} ({type(exc).__name__} in "
                    "its own bookkeeping); its attempts were stopped and its releases carried "
                    "out",
                )
                failures.failed(exc)
            self._internal = None
            self._shutting = True
            self._execute(self._run.abandon())
            await self._drive(True)
            return True
        except BaseException:
            return False

    def _stop_everything(self) -> list[str]:
        """``_salvage``: cancel every attempt and retry wait; what was in flight, named."""
        if not self._tables:
            self._make_tables()
        run = self._run
        run.carry_with(None)  # every release is the driver's: see them all end
        n = self._n
        nodes = self._nodes
        in_flight = [
            repr(nodes[job].name) if job < n else f"the release of {nodes[job - n].name!r}"
            for job, attempt in enumerate(self._running)
            if attempt is not None
        ]
        for job, attempt in enumerate(self._running):
            if attempt is None:
                continue
            unlaunched = attempt.task is None and attempt.state == _CALLED
            self._cancel(job)
            if unlaunched and type(attempt.aw) is _CoroutineType:
                attempt.aw.close()  # never awaited: its body never ran
                self._running[job] = None
                if job < n and attempt.number == 0:
                    self._acquisitions[job] = None
                    run.unstarted(job)  # no release owed for it
        self._fresh.clear()
        for handle in self._sleeps:
            if handle is not None:
                handle.cancel()
        self._sleeps = [None] * (2 * n)
        self._sleeping = 0
        timer = self._inline_timer
        if timer is not None:
            self._inline_timer = None
            timer.cancel()
        return in_flight

    async def _wait_stopped(self) -> None:
        """``_salvage``: wait for the stopped attempts to end. What they tell is kept (an
        outcome recorded, a returned acquisition kept for its release); nothing is reported
        to the core, which is told next that the forward phase is over."""
        events = self._events
        while True:
            while events:
                self._salvaged(events.popleft())
            if self._live == 0:
                return
            waiter = self._waiter = self._loop.create_future()
            try:
                await waiter
            except _CancelledError:
                self._waiter = None

    def _salvaged(self, event: Any) -> None:
        """An event of an attempt stopped by ``_salvage``: what it tells is kept."""
        kind, attempt, payload = event
        if attempt is None or not isinstance(attempt, Attempt) or attempt.job >= self._n:
            return
        job = attempt.job
        self._running[job] = None
        if kind == _RETURNED:
            if self._nodes[job].release is not None:
                self._acquisitions[job] = Acquisition(payload, self._nodes[job].output_type)
        elif kind == _RAISED or kind == _BAD_INPUT:
            if not isinstance(payload, _CancelledError):
                self._failures().failed(payload)
        elif kind == _UNSTARTED and type(attempt.aw) is _CoroutineType:
            attempt.aw.close()

    def _abandon(self, exc: BaseException) -> None:
        """Internal failure of the coordinator: stop everything we started (best effort)."""
        self._report().run_finished(exc)
        if not self._tables:
            return  # the driver carried out nothing
        attempt: Attempt | None
        for attempt in self._running:
            if attempt is not None:
                if attempt.timer is not None:
                    attempt.timer.cancel()
                if attempt.task is not None:
                    attempt.task.cancel()
                elif attempt.state == _CALLED and type(attempt.aw) is _CoroutineType:
                    attempt.aw.close()
        for handle in self._sleeps:
            if handle is not None:
                handle.cancel()

    # ----------------------------------------------------------------- cancellation

    def _caller_cancelled(self, exc: BaseException, shutdown: bool) -> None:
        """The caller's task was cancelled while waiting for a phase."""
        self._failures().caller_cancelled(exc, shutdown)
        if not shutdown:  # cleanup is never abandoned
            self._request_abort()

    def _request_abort(self) -> None:
        """Abort the forward phase, once: pass one cancellation on to the forward task."""
        if self._abort_requested:
            return
        self._abort_requested = True
        task = self._phase_task
        if not self._began or task is None or task.done():
            return  # not begun: the coordinator sees the request and starts nothing
        attempt = self._inline_attempt if self._tables else None
        if attempt is not None and attempt.timed_out:
            return  # already cancelled once, by its timeout: aborted once it has drained
        task.cancel()  # lands on the coordinator's wait or in the attempt awaited inline


class HeldRun(RunContext):
    """An ``open()`` run: a ``RunContext`` that notices being dropped while held.

    A context entered and never exited holds what its nodes acquired. When it is collected
    it says so with a ``ResourceWarning`` naming the owned nodes still held (as asyncio
    warns about a coroutine never awaited) and, while its loop is open, carries out its
    releases in a task of their own, as its ``__aexit__`` would have (as asyncio closes an
    async generator dropped unfinished). ``execute()`` never holds a run: its runs are
    plain ``RunContext``s, with no finalizer to call.
    """

    __slots__ = ()

    def __del__(self) -> None:
        if not getattr(self, "_held", False):
            return
        self._held = False
        try:
            self._dropped()
        except BaseException:  # dropped near the recursion limit, say: a finalizer cannot raise
            pass

    def _dropped(self) -> None:
        n = self._n
        nodes = self._nodes
        held = [
            nodes[job].name
            for job, record in enumerate(self._acquisitions[:n])
            if record is not None and nodes[job].release is not None
        ]
        loop = self._loop
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
        self._loop.create_task(self._exit_dropped(), name=PHASE_TASK_NAME)

    async def _exit_dropped(self) -> None:
        try:
            await self.__aexit__(None, None, None)
        except Exception:  # logged as each release failed; nobody to raise it to
            pass
