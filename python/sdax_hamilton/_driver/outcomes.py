"""Outcome handling: how each attempt ended, reported to the core and to the reporter.

Every event the coordinator dequeues ends here: a value is checked and stored, an exception
is classified (retryable or not, a timeout, the drain of the run's abort, or a failure of
its own), the core is told and its commands are carried out. What the core decides about a
failure (retry after a delay, or final) is what the reporter and the failure record hear.
"""

from __future__ import annotations

import asyncio
import types
from typing import Any, Final

from .. import _core
from .._declarations import Acquisition
from .._failures import add_note_once, attach_failures
from .._types import invalid_output
from .attempts import Attempt, AttemptMechanics, AttemptState
from .reporter import plural
from .runtime import NodeRuntime, is_retryable
from .state import BAD_INPUT, ELAPSED, RAISED, RETURNED, UNSTARTED, Event

_CancelledError: Final = asyncio.CancelledError
_CoroutineType: Final = types.CoroutineType
_RUNNING: Final = AttemptState.RUNNING
_CANCELLED: Final = AttemptState.CANCELLED
_CANCEL_MISSED: Final = AttemptState.CANCEL_MISSED
_HINT: Final = _core.HINT
_NO_ROOM: Final = _core.NO_ROOM
_BAD_HINT: Final = _core.BAD_HINT
_TERMINATION: Final = (KeyboardInterrupt, SystemExit)
_UNUSABLE_WAIT: Final = "an unusable wait (negative, NaN, or infinite without max_delay)"


class OutcomeHandling(AttemptMechanics):
    """Events in, core events and commands out."""

    __slots__ = ()

    def _handle(self, event: Event) -> None:
        kind, subject, payload = event
        if kind == RETURNED:
            self._returned(subject, payload)
        elif kind == RAISED:
            self._raised(subject, payload)
        elif kind == ELAPSED:
            if self._sleeps[subject] is not None:
                self._sleeps[subject] = None
                self._sleeping -= 1
            self._execute(self._run.elapsed(subject))
        elif kind == UNSTARTED:
            self._unstarted(subject)
        elif kind == BAD_INPUT:
            self._bad_input(subject, payload)
        else:  # ABORT: an observer raised KeyboardInterrupt/SystemExit (already primary)
            self._execute(self._run.cancel())

    def _handle_timed(self, event: Event) -> None:
        """``_handle`` for a run with a deadline: the core is told the time first."""
        self._run.clock(self._loop.time())
        self._handle(event)

    def _end(self, attempt: Attempt) -> None:
        self._running[attempt.job] = None
        timer = attempt.timer
        if timer is not None:
            attempt.timer = None
            timer.cancel()

    def _returned(self, attempt: Attempt, value: Any) -> None:
        job = attempt.job
        self._running[job] = None  # ``_end``, inlined: every node of a run passes here
        timer = attempt.timer
        if timer is not None:
            attempt.timer = None
            timer.cancel()
        n = self._n
        run = self._run
        if job < n:
            node = self._nodes[job]
            if node.release is not None:
                self._acquisitions[job] = Acquisition(value, node.output_type)
            # ``is not _RUNNING`` first: the common case costs one identity test.
            state = attempt.state
            if state is not _RUNNING and state >= _CANCELLED:
                self._report().attempt_cancelled(job, attempt.number + 1)
                self._execute(run.drained(job))
                return
            if self._watch:
                self._report().attempt_returned(job, attempt.number + 1, attempt.timed_out)
            if node.output_check is not None and not self._output_ok(attempt, node, value):
                return
            self._values[node.name] = value
            if self._watch:
                self._report().attempt_succeeded(job, attempt.number + 1)
            self._execute(run.succeeded(job))
            return
        if attempt.state >= _CANCELLED:  # pragma: no cover - the core never cancels releases
            self._execute(run.drained(job))
            return
        if value is not None:
            name = self._nodes[job - n].name
            self._fail(attempt, TypeError(f"Shutdown must return None: {name}"), False)
            return
        if self._watch:
            self._report().attempt_succeeded(job, attempt.number + 1)
        self._execute(run.succeeded(job))

    def _output_ok(self, attempt: Attempt, node: NodeRuntime, value: Any) -> bool:
        """Check a returned value against the node's output check; a mismatch (or a
        broken checker) is the node's failure, reported here."""
        check = node.output_check
        assert check is not None
        try:
            ok = check(value)
        except BaseException as broken:  # a broken checker is this node's failure
            # (a KeyboardInterrupt out of a metaclass's ``__instancecheck__`` stops the run)
            self._fail(attempt, broken, False)
            return False
        if not ok:
            try:
                invalid: BaseException = invalid_output(
                    node.name, node.origin, node.output_type, value
                )
            except BaseException as hostile:  # user code describing the type (a ``repr``)
                invalid = (
                    hostile
                    if isinstance(hostile, _TERMINATION)
                    else TypeError(f"Invalid output from {node.name} ({node.origin})")
                )
            self._fail(attempt, invalid, False)
        return ok

    def _raised(self, attempt: Attempt, exc: BaseException) -> None:
        self._end(attempt)
        job = attempt.job
        state = attempt.state
        if state >= _CANCELLED:
            number = attempt.number + 1
            if state == _CANCEL_MISSED and isinstance(exc, _CancelledError):
                # It had ended before our cancellation could reach it (its outcome was
                # queued with the event that aborted the run): it cancelled itself, which
                # fails the run, and is never taken for the drain of the abort
                # (docs/lifecycle.md, "Cancellation").
                self._failed_for_good(attempt, exc)
                self._report().attempt_self_cancelled(job, number, exc)
                self._execute(self._run.drained(job))
                return
            # Drained after the core cancelled it: its own cancellation is expected; anything
            # else it raised meanwhile is still a diagnostic of the run.
            error = None if isinstance(exc, _CancelledError) else exc
            if error is not None:
                self._failed_for_good(attempt, error)
            self._report().attempt_cancelled(job, number, error)
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
        try:
            retryable = is_retryable(exc, retryable_set)
        except BaseException as hostile:  # a metaclass ``__instancecheck__`` in the set
            retryable = False
            self._user_code_raised(exc, hostile, keep=True)
        self._fail(attempt, exc, retryable)

    def _fail(self, attempt: Attempt, exc: BaseException, retryable: bool) -> None:
        """Report a failed attempt; the core decides whether it is retried and when."""
        job = attempt.job
        delay, commands = self._run.failed(job, retryable)
        problem: str | None = None
        if delay is None and commands and commands[0][0] == _HINT:
            delay, commands, problem = self._ask_hook(attempt, exc)
        skipped: tuple[float | None] | None = None
        if delay is None:
            self._failed_for_good(attempt, exc)
            if self._deadline is not None or problem is not None:
                skipped = self._note_why(attempt, exc, commands, problem)
        number = attempt.number + 1
        self._report().attempt_failed(
            job, number, exc, timed_out=attempt.timed_out, retry_delay=delay
        )
        if skipped is not None:
            self._report().retry_skipped(job, number, exc, skipped[0])
        self._execute(commands)

    def _ask_hook(
        self, attempt: Attempt, exc: BaseException
    ) -> tuple[float | None, list[_core.Command], str | None]:
        """HINT: call the job's ``retry_after`` hook with ``exc`` and tell the core what it
        said. Returns the core's ``(delay, commands)`` and, when the hint was unusable, what
        was wrong with it (for the note; never the value itself)."""
        job = attempt.job
        n = self._n
        if job < n:
            hook = self._nodes[job].retry_after
        else:
            release = self._nodes[job - n].release
            hook = release.retry_after if release is not None else None
        run = self._run
        if hook is None:  # pragma: no cover - the core asks only jobs that have a hook
            raise RuntimeError("sdax_hamilton internal error: HINT for a job without a hook")
        problem: str | None = None
        try:
            value = hook(exc)
        except BaseException as hook_error:
            problem = f"raised {type(hook_error).__qualname__}"
            if isinstance(hook_error, _TERMINATION):  # stops the run, like out of a node
                self._failures().terminate(hook_error)
                self._execute(run.cancel())
            else:  # kept with the failure it was asked about (``failures(exc)``)
                self._attach(exc, hook_error)
            if self._deadline is not None:
                run.clock(self._loop.time())
            delay, commands = run.hint_failed(job)
            return delay, commands, problem
        if type(value) is _CoroutineType:
            value.close()  # an async hook: unusable (it is called, never awaited)
        if self._deadline is not None:
            run.clock(self._loop.time())
        delay, commands = run.hinted(job, value)
        if delay is None and any(op == _BAD_HINT for op, *_ in commands):
            kind = type(value)
            if _core.is_number(value):
                problem = f"returned {_UNUSABLE_WAIT}"
            else:
                problem = f"returned a {kind.__qualname__} instead of a number or None"
        return delay, commands, problem

    def _note_why(
        self,
        attempt: Attempt,
        exc: BaseException,
        commands: list[_core.Command],
        problem: str | None,
    ) -> tuple[float | None] | None:
        """Note on ``exc`` why its failure is final when the run's timeout or the
        ``retry_after`` hook decided it. Returns ``(wait,)`` when a retry was skipped for lack
        of time (``wait``: the one that did not fit, ``None`` once the deadline had passed)."""
        job = attempt.job
        subject = self._report().subject(job)
        notes: list[str] = []
        skipped: tuple[float | None] | None = None
        clipped = attempt.timed_out and self._was_clipped(job, attempt.number)
        if clipped:
            notes.append(
                f"sdax_hamilton: {subject}: attempt {attempt.number + 1} was cut short by "
                "the run's timeout"
            )
        if problem is not None:
            notes.append(
                f"sdax_hamilton: {subject}: its retry_after hook {problem}; the retry was not taken"
            )
            self._report().hint_unusable(job, attempt.number + 1, problem)
        for op, command_job, _number, arg in commands:
            if op == _NO_ROOM and command_job == job:
                skipped = (arg,)
                if arg is not None:
                    notes.append(
                        f"sdax_hamilton: {subject}: the run's timeout left no room for a "
                        f"retry (its wait of {arg:.3g} s would end past it)"
                    )
                elif not clipped:  # a clipped timeout says it already
                    notes.append(
                        f"sdax_hamilton: {subject}: the run's timeout left no room for a retry"
                    )
                break
        for note in notes:
            self._note(exc, note)
        return skipped

    def _expired(self, job: int, attempt_number: int) -> None:
        """EXPIRE: the run's deadline passed before attempt ``attempt_number`` of ``job``
        could start; the job fails with a ``TimeoutError``."""
        error = TimeoutError("the run's timeout expired")
        subject = self._report().subject(job)
        when = f"attempt {attempt_number + 1} could start" if attempt_number else "it could start"
        self._failed_for_good(Attempt(job, attempt_number, None), error, attempt_number == 0)
        add_note_once(error, f"sdax_hamilton: {subject}: the run's timeout expired before {when}")
        self._report().deadline_expired(job, attempt_number + 1, error)

    def _unstarted(self, attempt: Attempt) -> None:
        self._end(attempt)
        job = attempt.job
        aw = attempt.aw
        self._report().attempt_cancelled(job, attempt.number + 1)
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

    def _bad_input(self, attempt: Attempt, exc: BaseException) -> None:
        self._running[attempt.job] = None
        self._failed_for_good(attempt, exc, before_first=True)
        self._report().input_rejected(attempt.job, exc)
        # Nothing was called: no attempt counted, no release owed; the core aborts the run.
        self._execute(self._run.rejected(attempt.job))

    def _failed_for_good(
        self, attempt: Attempt, exc: BaseException, before_first: bool = False
    ) -> None:
        """A node or release failed for good: note it on the exception, log it, record it."""
        job = attempt.job
        n = self._n
        if job < n:
            subject = f"node {self._nodes[job].name!r}"
        else:
            subject = f"release of {self._nodes[job - n].name!r}"
        attempts = None if before_first else self._run.attempts(job)
        if attempts is None:
            note = f"sdax_hamilton: {subject} failed before its first attempt"
        else:
            note = f"sdax_hamilton: {subject} failed after {plural(attempts)}"
        self._note(exc, note)
        self._report().failed_for_good(job, exc, attempts)
        self._failures().failed(exc)

    def _note(self, exc: BaseException, note: str) -> None:
        """Add ``note`` to ``exc``, which runs its class's ``add_note`` (user code)."""
        try:
            add_note_once(exc, note)
        except BaseException as hostile:
            self._user_code_raised(exc, hostile)

    def _attach(self, exc: BaseException, item: BaseException) -> None:
        """Keep ``item`` with ``exc`` (``failures(exc)``), which notes it on ``exc``."""
        try:
            attach_failures(exc, (item,))
        except BaseException as hostile:
            self._user_code_raised(exc, hostile)

    def _user_code_raised(
        self, exc: BaseException, hostile: BaseException, keep: bool = False
    ) -> None:
        """User code the driver ran about ``exc`` (its ``add_note``, a metaclass's
        ``__instancecheck__`` of a retryable class) raised ``hostile``: a
        ``KeyboardInterrupt``/``SystemExit`` stops the run as out of a node would, and
        releases still run; anything else costs only what was asked (a note), or with
        ``keep`` is kept with ``exc`` (``failures(exc)``)."""
        if isinstance(hostile, _TERMINATION):
            self._terminated(hostile)
        elif keep and hostile is not exc:
            try:
                attach_failures(exc, (hostile,))
            except BaseException as again:
                if isinstance(again, _TERMINATION):
                    self._terminated(again)
