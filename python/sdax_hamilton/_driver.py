"""The asyncio driver: carries out a ``_core.Run``'s commands on the caller's event loop.

The Rust core decides *what* happens (which job starts, when a job retries, when the forward
phase aborts, in which order releases run). This module decides nothing of that; it turns
commands into calls, tasks, timers and cancellations, reports what happened back to the
core, and keeps the primary/secondary failure record of SPEC 7.9 / 7.11.

Shape of one run (``open_run`` returns an async context manager). Each phase's coordinator
runs in a task of its own, one per phase and run (not per node); the caller's task only waits
for it, shielded, so the caller's cancellations never land in a node or a release:

* ``__aenter__``: the forward phase. Its coordinator (the *forward task*) carries out the
  core's commands and waits on one future that done-callbacks and timers wake up (events
  are queued in a deque). The caller waits on a future of its own. Its first cancellation
  becomes the primary and is passed on to the forward task exactly once (``cancel()``),
  where it lands either on the coordinator's wait or in the attempt awaited inline; the
  core then aborts the forward phase (running attempts are cancelled once, retry waits
  dropped) and the coordinator keeps going until every attempt has drained. Further
  caller cancellations are absorbed (recorded per SPEC 7.9). Then either the body gets the
  outputs, or cleanup runs and the failure is raised.
* ``__aexit__``: cleanup. When a release is owed, the shutdown phase runs in a task of its
  own too, to completion whatever the caller's task receives meanwhile (cancellations are
  recorded, never passed on); then the primary is re-raised (same object, secondary
  diagnostics attached) or, when there is none, an ``ExecutionError`` /
  ``BaseExceptionGroup``.

Hot path: a lone ready forward job (nothing else running or waiting to retry) is awaited
inline in the forward task, no task of its own; its timeout, if any, is a timer cancelling
the forward task and taking the request back with ``uncancel()`` (the ``asyncio.timeout``
technique). Only the caller's first cancellation (passed on by us) and our timers cancel
the forward task, so a rise of its ``Task.cancelling()`` during an inline attempt tells
exactly whether our cancellation reached the attempt. Sync functions are called directly,
in the phase's task. Everything else runs as tasks wrapped so that no exception
(``KeyboardInterrupt`` included) ever escapes a task into the loop; their timeouts are
timers cancelling the attempt's own task. A caller cancellation arriving while an inline
attempt drains its own timeout is not passed on (the attempt is already cancelled once);
the coordinator aborts the run when the attempt has finished.

An attempt the core CANCELs may already have finished (its outcome queued in the same batch
of events as the failure or cancellation that aborted the run). When it ended in a
``CancelledError`` that no cancellation of ours reached (neither the abort nor its timeout),
it cancelled itself: that is a failure of the run (SPEC 7.2), not the drain of the abort.

Context variables: each phase's task runs in a copy of the caller's context (asyncio's
default), and attempt tasks in copies of that. Nodes and releases therefore see the
caller's context variables as they were when the phase began; a change made by a node or a
release never leaks back into the caller's context (whether another node sees it depends on
how each was run, so it is not promised).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import logging
import types
from collections import deque
from collections.abc import Callable, Coroutine, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final

from . import _core
from ._declarations import Acquisition
from ._failures import add_note_once, attach_failures, failure_group
from ._observe import EventKind, Observer, RunEvent, observers_of

__all__ = [
    "INSTANT_RETRIES",
    "JITTER_SEED",
    "TIMEOUT_MESSAGE",
    "NodeRuntime",
    "ReleaseRuntime",
    "is_retryable",
    "open_run",
]

logger = logging.getLogger("sdax_hamilton")

_START: Final = _core.START
_SLEEP: Final = _core.SLEEP
_CANCEL: Final = _core.CANCEL
_STOP_SLEEP: Final = _core.STOP_SLEEP

# Event kinds queued for the coordinator: (kind, attempt-or-job, payload).
_RETURNED: Final = 0  # (_, _Attempt, value)
_RAISED: Final = 1  # (_, _Attempt, exception)
_ELAPSED: Final = 2  # (_, job, None)
_UNSTARTED: Final = 3  # (_, _Attempt, None): cancelled before its awaitable was first awaited
_BAD_INPUT: Final = 4  # (_, _Attempt, exception): the input check failed; nothing was called
_ABORT: Final = 5  # (_, None, None): an observer raised KeyboardInterrupt/SystemExit: stop

_CoroutineType: Final = types.CoroutineType
_CancelledError: Final = asyncio.CancelledError
_TERMINATION: Final = (KeyboardInterrupt, SystemExit)

JITTER_SEED: ContextVar[int | None] = ContextVar("sdax_hamilton_jitter_seed", default=None)
"""Set by ``sdax_hamilton.testing.jitter_seed``: seeds every run opened meanwhile."""
INSTANT_RETRIES: ContextVar[bool] = ContextVar("sdax_hamilton_instant_retries", default=False)
"""Set by ``sdax_hamilton.testing.instant_retries``: retry waits of runs opened meanwhile are 0."""

_run_ids = itertools.count(1)

TIMEOUT_MESSAGE: Final = "sdax_hamilton: the attempt timed out"
"""The message of the cancellation that ends a timed-out attempt (node hooks around an
attempt tell a timeout from other cancellations by it, docs/adapters.md)."""


@dataclass(frozen=True, slots=True)
class ReleaseRuntime:
    """How to run the release (shutdown function) of one owned node."""

    origin: str
    """``module.qualname`` of the release function, for notes and logs."""
    call: Callable[[Any], Any]
    """Called with one ``Acquisition``; an awaitable result is awaited; must return ``None``."""
    retryable: tuple[type[BaseException], ...]


@dataclass(frozen=True, slots=True)
class NodeRuntime:
    """How to run one active node of a plan (``nodes[i]`` belongs to ``plan.nodes[i]``)."""

    name: str
    origin: str
    """``module.qualname`` of the declaring function."""
    call: Callable[..., Any]
    """Called with keyword arguments; an awaitable result is awaited."""
    args: tuple[tuple[str, str], ...]
    """``(keyword, value-table key)`` pairs read from the run's values."""
    defaults: Mapping[str, Any]
    """``keyword -> default`` for keywords not in ``args``."""
    input_checks: tuple[tuple[str, Callable[[Any], bool]], ...]
    """``(keyword, predicate)``, checked once before attempt 0 (never retried)."""
    output_check: Callable[[Any], bool] | None
    """Checked after a successful attempt, outside the attempt loop (never re-runs the call)."""
    retryable: tuple[type[BaseException], ...]
    output_type: Any
    """Declared output type, recorded in the node's ``Acquisition``."""
    release: ReleaseRuntime | None
    """Set on owned acquisitions."""


def is_retryable(exc: BaseException, retryable: tuple[type[BaseException], ...]) -> bool:
    """SPEC 7.7: ``isinstance`` against the set; an ``ExceptionGroup`` only if every leaf is.

    Flattening descends ``ExceptionGroup`` only: any other ``BaseExceptionGroup`` is tested
    as itself.
    """
    if isinstance(exc, ExceptionGroup):
        stack: list[BaseException] = [exc]
        while stack:
            item = stack.pop()
            if isinstance(item, ExceptionGroup):
                stack.extend(item.exceptions)
            elif not isinstance(item, retryable):
                return False
        return True
    return isinstance(exc, retryable)


def open_run(
    plan: _core.Plan,
    nodes: Sequence[NodeRuntime],
    values: dict[str, Any],
    outputs: Sequence[str],
    *,
    seed: int | None = None,
    observer: object = None,
) -> contextlib.AbstractAsyncContextManager[dict[str, Any]]:
    """One execution of ``plan`` as an async context manager (SPEC 7.9).

    ``values`` is the run's fresh value table; node outputs are stored into it. The body
    receives a fresh ``{name: values[name] for name in outputs}``. ``observer``: ``None``, a
    callable taking one ``RunEvent``, or a sequence of them (``TypeError`` otherwise).

    The test-mode context variables are read here, when the run is opened: a
    ``JITTER_SEED`` replaces ``seed``; ``INSTANT_RETRIES`` makes every retry wait 0.
    """
    observers = observers_of(observer)
    test_seed = JITTER_SEED.get()
    if test_seed is not None:
        seed = test_seed
    return _RunContext(plan, nodes, values, outputs, seed, observers, INSTANT_RETRIES.get())


class _Attempt:
    """One carried-out START command (a call of a node or of a release)."""

    __slots__ = (
        "aw",
        "baseline",
        "began",
        "cancelled",
        "deadline",
        "inline",
        "job",
        "number",
        "reached",
        "task",
        "timed_out",
        "timeout",
        "timer",
    )

    def __init__(self, job: int, number: int, timeout: float | None) -> None:
        self.job = job
        self.number = number  # 0-based attempt number
        self.timeout = timeout
        self.aw: Any = None  # the awaitable the call returned
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.Handle | None = None
        self.began = False  # the awaitable was first awaited (the call's body started)
        self.cancelled = False  # the core CANCELled this attempt
        self.reached = False  # that cancellation of ours reached the attempt before it ended
        self.timed_out = False  # our timer cancelled this attempt
        self.inline = False  # awaited in the coordinator itself (the forward task)
        self.baseline = 0  # inline: the forward task's cancelling() count when it began
        self.deadline = 0.0  # inline with a timeout: loop time at which it expires


def _plural(count: int) -> str:
    return f"{count} attempt" if count == 1 else f"{count} attempts"


class _RunContext:
    """State of one run; the async context manager returned by :func:`open_run`."""

    __slots__ = (
        "_abort_requested",
        "_acquisitions",
        "_began",
        "_debug",
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
        "_primary",
        "_run",
        "_run_id",
        "_running",
        "_secondary",
        "_seed",
        "_sleeps",
        "_task",
        "_values",
        "_waiter",
    )

    def __init__(
        self,
        plan: _core.Plan,
        nodes: Sequence[NodeRuntime],
        values: dict[str, Any],
        outputs: Sequence[str],
        seed: int | None,
        observers: tuple[Observer, ...] | None = None,
        instant: bool = False,
    ) -> None:
        self._plan = plan
        self._nodes = nodes
        self._values = values
        self._outputs = outputs
        self._seed = seed
        self._entered = False
        self._n = len(nodes)
        self._events: deque[tuple[int, Any, Any]] = deque()
        self._fresh: list[_Attempt] = []
        self._waiter: asyncio.Future[None] | None = None
        self._live = 0
        self._primary: BaseException | None = None
        self._secondary: list[BaseException] = []
        self._inline_attempt: _Attempt | None = None
        self._inline_timer: asyncio.TimerHandle | None = None
        self._inline_when = 0.0
        # The phase task (forward, then shutdown) and the caller's wait for it.
        self._phase_task: asyncio.Task[None] | None = None
        self._phase_done: asyncio.Future[None] | None = None
        self._phase_over = True
        self._began = False  # the phase's coroutine has started running
        self._abort_requested = False  # the forward phase is to be aborted (caller cancelled)
        self._internal: BaseException | None = None  # an internal failure of a coordinator
        self._task: asyncio.Task[Any]  # the forward task, once it runs
        self._observers = observers
        self._instant = instant
        self._run_id = next(_run_ids) if observers is not None else 0

    # ----------------------------------------------------------------- context protocol

    async def __aenter__(self) -> dict[str, Any]:
        if self._entered:
            raise RuntimeError("a run context can be entered only once")
        self._entered = True
        n = self._n
        if len(self._plan) != n:
            raise ValueError(f"Plan has {len(self._plan)} active nodes but {n} runtimes")
        self._run = _core.Run(self._plan, self._seed)
        self._loop = asyncio.get_running_loop()
        if asyncio.current_task() is None:
            raise RuntimeError("sdax_hamilton runs must be awaited inside an asyncio task")
        self._running: list[_Attempt | None] = [None] * (2 * n)
        self._sleeps: list[asyncio.TimerHandle | None] = [None] * (2 * n)
        self._kwargs: list[dict[str, Any] | None] = [None] * n
        self._acquisitions: list[Acquisition[Any] | None] = [None] * n
        self._debug = logger.isEnabledFor(logging.DEBUG)
        if self._observers is not None:
            self._emit("run_started", "", 0, nodes=self._plan.nodes)
            if self._primary is not None:  # the observer raised KeyboardInterrupt/SystemExit
                outcome = self._outcome_or_internal()
                raise self._finish(outcome) or outcome  # nothing ran: nothing to clean up

        await self._phase(self._forward(), False)
        if self._primary is None and not self._secondary:
            values = self._values
            return {name: values[name] for name in self._outputs}
        await self._cleanup()
        outcome = self._outcome_or_internal()
        raise self._finish(outcome) or outcome

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: types.TracebackType | None,
    ) -> bool:
        if exc is not None:
            self._primary = exc
        await self._cleanup()
        outcome = self._finish(self._outcome())
        if outcome is None or outcome is exc:
            return False  # the body's own exception (if any) propagates unchanged
        raise outcome

    # ----------------------------------------------------------------- phases

    async def _cleanup(self) -> None:
        if self._observers is not None:
            self._emit("shutdown_started", "", 0)
        commands = self._run.begin_shutdown()
        if commands or not self._run.finished:  # a release is owed: run them in a task
            await self._phase(self._shutdown(commands), True)

    async def _phase(self, coordinator: Coroutine[Any, Any, None], shutdown: bool) -> None:
        """Run a phase's coordinator in a task of its own; wait for it, shielded.

        The caller's cancellations land on our wait, never in the phase: they are recorded
        (SPEC 7.9), and in the forward phase the first one aborts it (passed on once).
        """
        loop = self._loop
        self._phase_over = False
        self._phase_done = None
        self._began = False
        task = self._phase_task = loop.create_task(coordinator)  # copies the caller's context
        try:
            while not self._phase_over:
                done = self._phase_done = loop.create_future()
                try:
                    await done
                except _CancelledError as exc:
                    self._caller_cancelled(exc, shutdown)
                    if task.done() and not self._phase_over:
                        self._never_ran(shutdown)
        except BaseException:
            # Not a cancellation: a KeyboardInterrupt raised into this task by a signal
            # handler, say. Nobody waits for the forward phase any more: abort it.
            if not shutdown:
                self._request_abort()
            raise
        self._phase_done = None
        self._phase_task = None  # finished: an open() body does not keep it alive
        internal = self._internal
        if internal is not None:
            raise internal

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
            self._record_cancel(_CancelledError(), False)
        self._phase_over_now()

    async def _forward(self) -> None:
        """The forward task: carry out the forward phase until it is quiescent."""
        self._began = True
        task = asyncio.current_task()
        assert task is not None
        self._task = task  # the forward task: inline attempts and their timeouts use it
        try:
            if not self._abort_requested:  # else the caller was cancelled before we began
                self._execute(self._run.start())
                await self._drive(False)
        except BaseException as exc:  # nothing escapes a task into the loop
            self._abandon(exc)
            self._internal = exc
        finally:
            timer = self._inline_timer
            if timer is not None:
                self._inline_timer = None
                timer.cancel()
            del self._task  # no inline attempt is left to use it
            self._phase_over_now()

    async def _shutdown(self, commands: list[_core.Command]) -> None:
        """The shutdown task: carry out the releases until every one has completed."""
        self._began = True
        try:
            self._execute(commands)
            await self._drive(True)
        except BaseException as exc:  # nothing escapes a task into the loop
            self._abandon(exc)
            self._internal = exc
        finally:
            self._phase_over_now()

    def _finish(self, outcome: BaseException | None) -> BaseException | None:
        """Emit ``run_finished``; returns the run's outcome (an observer may replace it)."""
        if self._observers is None:
            return outcome
        primary = self._primary
        self._emit("run_finished", "", 0, error=outcome)
        if self._primary is not primary:  # the observer raised KeyboardInterrupt/SystemExit
            return self._outcome()
        return outcome

    def _outcome(self) -> BaseException | None:
        primary = self._primary
        if primary is not None:
            if self._secondary:
                attach_failures(primary, self._secondary)
            return primary
        if self._secondary:
            return failure_group(self._secondary)
        return None

    def _outcome_or_internal(self) -> BaseException:
        outcome = self._outcome()
        if outcome is None:  # pragma: no cover - defensive: the core ended a phase early
            return RuntimeError("sdax_hamilton internal error: forward phase ended incomplete")
        return outcome

    async def _drive(self, shutdown: bool) -> None:
        """Process events and carry out commands until the phase is quiescent."""
        events = self._events
        fresh = self._fresh
        run = self._run
        handle = self._handle
        while True:
            while events:
                handle(events.popleft())
            if fresh:
                if (
                    not shutdown
                    and len(fresh) == 1
                    and self._live == 0
                    and not fresh[0].cancelled
                    and run.pending == 1
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
                    self._record_cancel(exc, True)
                    continue
                if not self._abort_requested:  # not passed on by us: taken as the caller's
                    self._abort_requested = True
                    self._record_cancel(exc, False)
                self._execute(run.cancel())

    def _post(self, event: tuple[int, Any, Any]) -> None:
        self._events.append(event)
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _abandon(self, exc: BaseException) -> None:
        """Internal failure of the coordinator: stop everything we started (best effort)."""
        if self._observers is not None:
            self._emit("run_finished", "", 0, error=exc)
        for attempt in self._running:
            if attempt is not None:
                if attempt.timer is not None:
                    attempt.timer.cancel()
                if attempt.task is not None:
                    attempt.task.cancel()
                elif not attempt.began and type(attempt.aw) is _CoroutineType:
                    attempt.aw.close()
        for handle in self._sleeps:
            if handle is not None:
                handle.cancel()

    # ----------------------------------------------------------------- observers

    def _emit(
        self,
        kind: EventKind,
        node: str,
        attempt: int,
        delay: float | None = None,
        error: BaseException | None = None,
        nodes: tuple[str, ...] = (),
    ) -> None:
        """Call every observer with one event; an observer's exception never escapes.

        Callers check ``self._observers is not None`` first (the only cost without
        observers). An ``Exception`` (or ``CancelledError``) from an observer is logged and
        ignored. ``KeyboardInterrupt`` / ``SystemExit`` are logged and then treated like
        the same exception out of a node: they become the primary, the forward phase stops,
        cleanup completes, and they propagate afterwards.
        """
        event = RunEvent(kind, node, attempt, self._loop.time(), delay, error, self._run_id, nodes)
        for observer in self._observers or ():
            try:
                observer(event)
            except BaseException as exc:
                self._observer_raised(observer, event, exc)

    def _observer_raised(self, observer: Observer, event: RunEvent, exc: BaseException) -> None:
        termination = isinstance(exc, _TERMINATION)
        name = getattr(observer, "__qualname__", None) or type(observer).__qualname__
        subject = f" of {event.node!r}" if event.node else ""
        logger.error(
            "observer %s raised %s on the %s event%s; %s",
            name,
            type(exc).__qualname__,
            event.kind,
            subject,
            "stopping the run" if termination else "ignored",
            exc_info=exc,
        )
        if termination:
            self._terminate(exc)
            self._post((_ABORT, None, None))

    # ----------------------------------------------------------------- primary record

    def _caller_cancelled(self, exc: BaseException, shutdown: bool) -> None:
        """The caller's task was cancelled while waiting for a phase (SPEC 7.9 steps 2, 6)."""
        self._record_cancel(exc, shutdown)
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
        attempt = self._inline_attempt
        if attempt is not None and attempt.timed_out:
            return  # already cancelled once, by its timeout: aborted once it has drained
        task.cancel()  # lands on the coordinator's wait or in the attempt awaited inline

    def _record_cancel(self, exc: BaseException, shutdown: bool) -> None:
        """Record a caller cancellation: the primary, absorbed, a secondary or a demotion."""
        primary = self._primary
        if primary is None:
            self._primary = exc
        elif isinstance(primary, _CancelledError):
            return  # absorbed: the primary already is a cancellation
        elif isinstance(primary, _TERMINATION) or not shutdown:
            # Process termination stays primary; in the forward phase any earlier primary
            # is a termination (a caller exception can only arrive in the body).
            self._secondary.append(exc)
        else:
            self._secondary.append(primary)  # SPEC 7.9 step 6: demoted
            self._primary = exc

    def _terminate(self, exc: BaseException) -> None:
        """A ``KeyboardInterrupt`` / ``SystemExit`` out of a node or release."""
        primary = self._primary
        if primary is None:
            self._primary = exc
        elif isinstance(primary, _TERMINATION):
            self._secondary.append(exc)
        else:
            self._secondary.append(primary)
            self._primary = exc

    def _record(self, attempt: _Attempt, exc: BaseException, before_first: bool = False) -> None:
        """A node or release failed for good: note it and collect it."""
        job = attempt.job
        n = self._n
        if job < n:
            name = self._nodes[job].name
            subject = f"node {name!r}"
        else:
            name = self._nodes[job - n].name
            subject = f"release of {name!r}"
        if before_first:
            note = f"sdax_hamilton: {subject} failed before its first attempt"
        else:
            note = f"sdax_hamilton: {subject} failed after {_plural(self._run.attempts(job))}"
        try:
            add_note_once(exc, note)
        except Exception:  # pragma: no cover - a user object with a broken __notes__
            pass
        if logger.isEnabledFor(logging.ERROR):
            if before_first:
                logger.error("%s failed before its first attempt", subject)
            else:
                logger.error(
                    "%s failed after %s with %s",
                    subject,
                    _plural(self._run.attempts(job)),
                    type(exc).__qualname__,
                )
        if isinstance(exc, _TERMINATION):
            self._terminate(exc)
        else:
            self._secondary.append(exc)

    # ----------------------------------------------------------------- commands

    def _execute(self, commands: list[_core.Command]) -> None:
        for op, job, attempt, arg in commands:
            if op == _START:
                self._start(job, attempt, arg)
            elif op == _SLEEP:
                self._sleep(job, arg)
            elif op == _CANCEL:
                self._cancel(job)
            elif op == _STOP_SLEEP:
                handle = self._sleeps[job]
                if handle is not None:
                    self._sleeps[job] = None
                    handle.cancel()
                if self._observers is not None:
                    self._emit("retry_cancelled", self._name(job), self._run.attempts(job))
            else:  # pragma: no cover - contract violation by the core
                raise RuntimeError(f"sdax_hamilton internal error: unknown command {op!r}")

    def _start(self, job: int, attempt_number: int, timeout: float | None) -> None:
        n = self._n
        attempt = _Attempt(job, attempt_number, timeout)
        self._running[job] = attempt
        if job < n:
            node = self._nodes[job]
            if attempt_number == 0:
                try:
                    kwargs = dict(node.defaults) if node.defaults else {}
                    values = self._values
                    for keyword, key in node.args:
                        kwargs[keyword] = values[key]
                    for keyword, check in node.input_checks:
                        if not check(kwargs[keyword]):
                            raise TypeError(f"Invalid input for {node.name}.{keyword}")
                except Exception as exc:
                    self._post((_BAD_INPUT, attempt, exc))
                    return
                self._kwargs[job] = kwargs
                if node.release is not None:
                    self._acquisitions[job] = Acquisition()
            else:
                kwargs = self._kwargs[job]  # type: ignore[assignment]
            if self._debug:
                logger.debug("node %r: attempt %d started", node.name, attempt_number + 1)
            if self._observers is not None:
                self._emit("attempt_started", node.name, attempt_number + 1)
            try:
                result = node.call(**kwargs)
            except BaseException as exc:
                self._post((_RAISED, attempt, exc))
                return
        else:
            owner = self._nodes[job - n]
            release = owner.release
            if release is None:  # pragma: no cover - contract violation by the core
                raise RuntimeError(f"sdax_hamilton internal error: no release for {owner.name!r}")
            record = self._acquisitions[job - n]
            if record is None:
                record = Acquisition()
            if self._debug:
                logger.debug("release of %r: attempt %d started", owner.name, attempt_number + 1)
            if self._observers is not None:
                self._emit("release_started", owner.name, attempt_number + 1)
            try:
                result = release.call(record)
            except BaseException as exc:
                self._post((_RAISED, attempt, exc))
                return
        if type(result) is _CoroutineType or inspect.isawaitable(result):
            attempt.aw = result
            self._fresh.append(attempt)
        else:
            self._post((_RETURNED, attempt, result))

    def _sleep(self, job: int, delay: float | None) -> None:
        wait = 0.0 if self._instant else (delay or 0.0)
        self._sleeps[job] = self._loop.call_later(wait, self._post, (_ELAPSED, job, None))

    def _cancel(self, job: int) -> None:
        attempt = self._running[job]
        if attempt is None or attempt.cancelled:
            return
        attempt.cancelled = True
        task = attempt.task
        if attempt.inline or task is None or attempt.timed_out:
            # inline: already finished (``_inline`` knows whether our cancellation reached
            # it); no task: either not launched yet (_launch reports it unstarted) or a sync
            # call whose outcome is queued (reported as drained); timed out: already
            # cancelled once and draining.
            return
        if not attempt.began:
            # The task never ran a step: cancelling it means the awaitable is never awaited.
            attempt.reached = task.cancel()
            task.add_done_callback(lambda _task: self._unstarted_done(attempt))
            return
        # False when the task has already finished: its outcome is queued and is its own.
        attempt.reached = task.cancel()

    def _unstarted_done(self, attempt: _Attempt) -> None:
        self._live -= 1
        self._post((_UNSTARTED, attempt, None))

    def _launch(self) -> None:
        loop = self._loop
        for attempt in self._fresh:
            if attempt.cancelled:
                self._post((_UNSTARTED, attempt, None))
                continue
            self._live += 1  # before create_task: an eager task factory may finish it at once
            attempt.task = loop.create_task(self._attempt_task(attempt))
            if attempt.timeout is not None:
                attempt.timer = loop.call_later(attempt.timeout, self._on_timeout, attempt)
        self._fresh.clear()

    async def _attempt_task(self, attempt: _Attempt) -> None:
        attempt.began = True
        try:
            value = await attempt.aw
        except BaseException as exc:  # never let anything (KeyboardInterrupt!) escape a task
            self._live -= 1
            self._post((_RAISED, attempt, exc))
        else:
            self._live -= 1
            self._post((_RETURNED, attempt, value))

    async def _inline(self, attempt: _Attempt) -> None:
        """Await a lone forward attempt in the coordinator itself, the forward task.

        Cancellations of the forward task are told apart by count (the ``asyncio.timeout``
        technique): our timeout cancels the task once and takes its request back with
        ``uncancel()``; the caller's first cancellation is passed on once (``cancel()``),
        so a rise of ``cancelling()`` while the abort is requested means it reached the
        attempt. A rise not of our making is the attempt cancelling its own task.
        """
        attempt.inline = True
        attempt.began = True
        task = self._task
        before = attempt.baseline = task.cancelling()
        timeout = attempt.timeout
        if timeout is not None:
            # One timer per run serves every inline attempt: armed for the earliest pending
            # deadline, re-armed when it fires early for a later one, never cancelled per
            # attempt (a long inline chain would otherwise pile cancelled timer handles
            # into the loop's heap without the loop ever running to clean them).
            loop = self._loop
            deadline = attempt.deadline = loop.time() + timeout
            self._inline_attempt = attempt
            timer = self._inline_timer
            if timer is None or self._inline_when > deadline:
                if timer is not None:
                    timer.cancel()
                self._inline_when = deadline
                self._inline_timer = loop.call_at(deadline, self._inline_tick)
        raised = False
        try:
            payload = await attempt.aw
        except BaseException as exc:
            raised = True
            payload = exc
        self._inline_attempt = None
        if attempt.timed_out:
            task.uncancel()
        if self._abort_requested:
            # The caller cancelled meanwhile (its own CancelledError is the primary already).
            # The cancellation we passed on reached this attempt, unless it was held back
            # because the attempt was draining its timeout.
            attempt.reached = task.cancelling() > before
            self._execute(self._run.cancel())
        # Nothing else is running, so no event can have been queued meanwhile: report now.
        if raised:
            self._raised(attempt, payload)
        else:
            self._returned(attempt, payload)

    def _inline_tick(self) -> None:
        self._inline_timer = None
        attempt = self._inline_attempt
        if attempt is None:
            return  # armed for an attempt that has finished; the next one re-arms
        if attempt.deadline > self._inline_when:
            self._inline_when = attempt.deadline
            self._inline_timer = self._loop.call_at(attempt.deadline, self._inline_tick)
            return
        if attempt.timed_out or attempt.cancelled:
            return
        task = self._task
        if self._abort_requested or task.cancelling() > attempt.baseline:
            return  # the caller's cancellation is already on its way into the attempt
        attempt.timed_out = True
        task.cancel(TIMEOUT_MESSAGE)
        self._timed_out(attempt)

    def _on_timeout(self, attempt: _Attempt) -> None:
        attempt.timer = None
        if attempt.cancelled or attempt.timed_out:
            return
        task = attempt.task
        if task is None or task.done():
            return
        if not attempt.began:  # pragma: no cover - the task's first step is already queued
            attempt.timer = self._loop.call_soon(self._on_timeout, attempt)
            return
        attempt.timed_out = True
        task.cancel(TIMEOUT_MESSAGE)
        self._timed_out(attempt)

    def _timed_out(self, attempt: _Attempt) -> None:
        if logger.isEnabledFor(logging.WARNING):
            logger.warning(
                "%s: attempt %d timed out after %s s; waiting for it to finish",
                self._subject(attempt.job),
                attempt.number + 1,
                attempt.timeout,
            )
        if self._observers is not None:
            job = attempt.job
            kind: EventKind = "attempt_timed_out" if job < self._n else "release_timed_out"
            self._emit(kind, self._name(job), attempt.number + 1)

    def _subject(self, job: int) -> str:
        n = self._n
        if job < n:
            return f"node {self._nodes[job].name!r}"
        return f"release of {self._nodes[job - n].name!r}"

    def _name(self, job: int) -> str:
        """The node a job belongs to (the owner, for a release job)."""
        n = self._n
        return self._nodes[job if job < n else job - n].name

    # ----------------------------------------------------------------- events

    def _handle(self, event: tuple[int, Any, Any]) -> None:
        kind, subject, payload = event
        if kind == _RETURNED:
            self._returned(subject, payload)
        elif kind == _RAISED:
            self._raised(subject, payload)
        elif kind == _ELAPSED:
            self._sleeps[subject] = None
            self._execute(self._run.elapsed(subject))
        elif kind == _UNSTARTED:
            self._unstarted(subject)
        elif kind == _BAD_INPUT:
            self._bad_input(subject, payload)
        else:  # _ABORT: an observer raised KeyboardInterrupt/SystemExit (already primary)
            self._execute(self._run.cancel())

    def _end(self, attempt: _Attempt) -> None:
        self._running[attempt.job] = None
        timer = attempt.timer
        if timer is not None:
            attempt.timer = None
            timer.cancel()

    def _returned(self, attempt: _Attempt, value: Any) -> None:
        self._end(attempt)
        job = attempt.job
        n = self._n
        run = self._run
        if job < n:
            node = self._nodes[job]
            if node.release is not None:
                self._acquisitions[job] = Acquisition(value, node.output_type)
            if attempt.cancelled:
                if self._observers is not None:
                    self._emit("attempt_cancelled", node.name, attempt.number + 1)
                self._execute(run.drained(job))
                return
            if self._debug:
                logger.debug(
                    "node %r: attempt %d returned%s",
                    node.name,
                    run.attempts(job),
                    " (after swallowing its timeout cancellation)" if attempt.timed_out else "",
                )
            check = node.output_check
            if check is not None:
                try:
                    ok = check(value)
                except Exception as broken:  # a broken checker is this node's failure
                    self._fail(attempt, broken, False)
                    return
                if not ok:
                    invalid = TypeError(f"Invalid output from {node.name} ({node.origin})")
                    self._fail(attempt, invalid, False)
                    return
            self._values[node.name] = value
            if self._observers is not None:
                self._emit("attempt_succeeded", node.name, attempt.number + 1)
            self._execute(run.succeeded(job))
            return
        if attempt.cancelled:  # pragma: no cover - the core never cancels releases
            self._execute(run.drained(job))
            return
        if value is not None:
            name = self._nodes[job - n].name
            self._fail(attempt, TypeError(f"Shutdown must return None: {name}"), False)
            return
        if self._debug:
            logger.debug("release of %r: completed", self._nodes[job - n].name)
        if self._observers is not None:
            self._emit("release_succeeded", self._nodes[job - n].name, attempt.number + 1)
        self._execute(run.succeeded(job))

    def _raised(self, attempt: _Attempt, exc: BaseException) -> None:
        self._end(attempt)
        job = attempt.job
        if attempt.cancelled:
            if isinstance(exc, _CancelledError) and not (attempt.reached or attempt.timed_out):
                # It had ended before our cancellation could reach it (its outcome was
                # queued with the event that aborted the run): it cancelled itself, which
                # fails the run (SPEC 7.2), and is never taken for the drain of the abort.
                self._record(attempt, exc)
                if self._observers is not None:
                    self._emit("attempt_failed", self._name(job), attempt.number + 1, error=exc)
                self._execute(self._run.drained(job))
                return
            # Drained after the core cancelled it: its own cancellation is expected; anything
            # else it raised meanwhile is still a diagnostic of the run.
            if not isinstance(exc, _CancelledError):
                self._record(attempt, exc)
            if self._observers is not None:
                error = None if isinstance(exc, _CancelledError) else exc
                self._emit("attempt_cancelled", self._name(job), attempt.number + 1, error=error)
            self._execute(self._run.drained(job))
            return
        n = self._n
        if job < n:
            retryable_set = self._nodes[job].retryable
        else:
            release = self._nodes[job - n].release
            assert release is not None
            retryable_set = release.retryable
        if attempt.timed_out and isinstance(exc, _CancelledError):
            exc = TimeoutError()
        # A CancelledError the attempt raised by itself, KeyboardInterrupt and SystemExit are
        # never in a validated set, so they are never retried.
        self._fail(attempt, exc, is_retryable(exc, retryable_set))

    def _fail(self, attempt: _Attempt, exc: BaseException, retryable: bool) -> None:
        job = attempt.job
        run = self._run
        commands = run.failed(job, retryable)
        delay: float | None = None
        for op, command_job, _number, arg in commands:
            if op == _SLEEP and command_job == job:
                delay = 0.0 if self._instant else (arg or 0.0)
                if logger.isEnabledFor(logging.WARNING):
                    logger.warning(
                        "%s: attempt %d failed with %s; retry %d in %.3f s",
                        self._subject(job),
                        run.attempts(job),
                        type(exc).__qualname__,
                        run.attempts(job),
                        delay,
                    )
                break
        else:
            self._record(attempt, exc)
        if self._observers is not None:
            name = self._name(job)
            number = attempt.number + 1
            forward = job < self._n
            self._emit("attempt_failed" if forward else "release_failed", name, number, error=exc)
            if delay is not None:
                retry: EventKind = "retry_scheduled" if forward else "release_retry_scheduled"
                self._emit(retry, name, number, delay=delay)
        self._execute(commands)

    def _unstarted(self, attempt: _Attempt) -> None:
        self._end(attempt)
        job = attempt.job
        aw = attempt.aw
        if self._observers is not None:
            self._emit("attempt_cancelled", self._name(job), attempt.number + 1)
        if type(aw) is _CoroutineType:
            aw.close()  # never awaited: its body never ran
            if job < self._n and attempt.number == 0:
                self._acquisitions[job] = None
            self._execute(self._run.unstarted(job))
            return
        # The call itself ran and returned an awaitable we never awaited: it started.
        if asyncio.isfuture(aw):
            if not aw.done():
                aw.cancel()
            elif not aw.cancelled():
                aw.exception()  # retrieved: no "exception was never retrieved" later
        self._execute(self._run.drained(job))

    def _bad_input(self, attempt: _Attempt, exc: BaseException) -> None:
        self._running[attempt.job] = None
        self._record(attempt, exc, before_first=True)
        if self._observers is not None:
            self._emit("input_rejected", self._name(attempt.job), 0, error=exc)
        # Nothing was called: no attempt counted, no release owed; the core aborts the run.
        self._execute(self._run.unstarted(attempt.job))
