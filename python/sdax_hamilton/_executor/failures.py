"""Failures: how a failed attempt is judged, told to the core, noted and recorded.

``outcomes.Outcomes`` hands an attempt here when it raised, when its value failed its
output check, when its input was refused or the run's deadline passed before it could
start, and when a node's fallback ended. What the attempt's ending means is
``verdicts.py``'s (pure); whether a failure is retried, and when, is the core's: its answer
is carried out (``Calls.execute``), said in the notes on the exception and in the log, and
a failure for good goes to the run's ``FailureRecord``. Made when a run first fails: a run
where nothing fails makes none.
"""

from __future__ import annotations

import asyncio
import types
from typing import Any, Final

from .. import _core
from .._declarations import Acquisition
from .._failures import add_note_once, attach_failures
from .attempts import Attempt, EventKind
from .calls import Calls
from .jobs import Job
from .record import FailureRecord
from .threads import NO_LATE_VALUE, late_value
from .verdicts import (
    Verdict,
    expired_note,
    failure_of,
    final_note,
    is_retryable,
    judge_raised,
    why_notes,
)

_CoroutineType: Final = types.CoroutineType
_ABORT: Final = EventKind.ABORT
_NO_BUDGET: Final = _core.NO_BUDGET
_FALLBACK: Final = _core.FALLBACK
_FAILED: Final = Verdict.FAILED
_HINT: Final = _core.HINT
_NO_ROOM: Final = _core.NO_ROOM
_TERMINATION: Final = (KeyboardInterrupt, SystemExit)


class Failures:
    """One run's failed attempts, reported to the core, the reporter and the record (made
    with the run's ``Calls``)."""

    __slots__ = (
        "_acquisitions",
        "_calls",
        "_execute",
        "_loop",
        "_record",
        "_run",
        "_table",
        "_timed",
        "_values",
    )

    def __init__(
        self,
        calls: Calls,
        run: _core.Run,
        loop: asyncio.AbstractEventLoop,
        values: dict[str, Any],
        acquisitions: list[Acquisition[Any] | None],
        timed: bool,
        record: FailureRecord,
    ) -> None:
        self._calls = calls
        self._execute = calls.execute
        self._table = calls.table
        self._run = run
        self._loop = loop
        self._values = values
        self._acquisitions = acquisitions
        self._timed = timed  # the run has a deadline: the core is told the time first
        self._record = record

    def raised(self, attempt: Attempt, exc: BaseException) -> None:
        self._table.end(attempt)
        job = attempt.job
        if job.forward and job.node.release is not None:
            late = late_value(exc)  # an in_thread acquisition's thread returned after all
            if late is not NO_LATE_VALUE:
                self._acquisitions[job.id] = Acquisition(late, job.node.output_type)
        verdict = judge_raised(attempt.state, exc)
        if verdict is _FAILED:
            failure = failure_of(attempt.state, exc)
            try:
                retryable = is_retryable(failure, job.retryable)
            except BaseException as hostile:  # a metaclass ``__instancecheck__`` in the set
                retryable = False
                self._user_code_raised(failure, hostile, keep=True)
            if job.guarded:  # a retryable failure is the breaker's; others are not
                self._calls.guards().ended(attempt, False if retryable else None)
            self.fail(attempt, failure, retryable)
            return
        if job.guarded:
            self._calls.guards().ended(attempt, None)
        number = attempt.number + 1
        if verdict == Verdict.SELF_CANCELLED:
            self._failed_for_good(attempt.job, exc, self._run.attempts(job.id))
            self._calls.report().attempt_self_cancelled(job.id, number, exc)
        elif verdict == Verdict.DRAINED_WITH_ERROR:
            self._failed_for_good(attempt.job, exc, self._run.attempts(job.id))
            self._calls.report().attempt_cancelled(job.id, number, exc)
        else:
            self._calls.report().attempt_cancelled(job.id, number, None)
        self._execute(self._run.drained(job.id))

    def fail(self, attempt: Attempt, exc: BaseException, retryable: bool) -> None:
        """Report a failed attempt; the core decides whether it is retried and when."""
        job = attempt.job
        delay, commands = self._run.failed(job.id, retryable)
        problem: str | None = None
        if delay is None and commands and commands[0][0] == _HINT:
            delay, commands, problem = self._ask_hook(attempt, exc)
        no_room: tuple[float | None] | None = None
        budget = fallback = False
        if delay is None:
            if commands and job.forward:
                budget, fallback = self._why_final(job, commands)
            if not fallback:
                self._failed_for_good(job, exc, self._run.attempts(job.id))
            if self._timed or problem is not None:
                no_room = self._note_why(attempt, exc, commands, problem)
            if budget:
                self._note(exc, f"sdax_hamilton: {job.subject}: the retry budget was exhausted")
        number = attempt.number + 1
        self._calls.report().attempt_failed(
            job.id, number, exc, timed_out=attempt.timed_out, retry_delay=delay
        )
        if no_room is not None:
            self._calls.report().retry_skipped(job.id, number, exc, no_room[0])
        elif budget:
            self._calls.report().retry_skipped(job.id, number, exc, None, "budget")
        self._execute(commands)
        if fallback:
            self._calls.guards().fall_back(attempt, exc, self)

    @staticmethod
    def _why_final(job: Job, commands: list[_core.Command]) -> tuple[bool, bool]:
        """Whether the retry budget refused the retry, and whether the core said FALLBACK."""
        budget = fallback = False
        for op, command_job, _number, _arg in commands:
            if command_job == job.id:
                if op == _NO_BUDGET:
                    budget = True
                elif op == _FALLBACK:
                    fallback = True
        return budget, fallback

    def fallback_used(self, attempt: Attempt, value: Any, original: BaseException) -> None:
        """The node's fallback gave a value that passed the check: the run goes on as if
        the node had returned it."""
        job = attempt.job
        self._values[job.node.name] = value
        self._calls.kwargs[job.id] = None  # done: as in ``_succeeded``
        self._calls.report().fallback_used(job.id, attempt.number + 1, original)
        self._execute(self._run.succeeded(job.id))

    def fallback_failed(self, attempt: Attempt, error: BaseException) -> None:
        """The node's fallback raised ``error`` (or its value failed the check): the node
        fails with it, for good."""
        job = attempt.job
        _delay, commands = self._run.failed(job.id, False)
        self._failed_for_good(job, error, self._run.attempts(job.id))
        self._execute(commands)

    def _ask_hook(
        self, attempt: Attempt, exc: BaseException
    ) -> tuple[float | None, list[_core.Command], str | None]:
        """HINT: call the job's ``retry_after`` hook with ``exc`` and tell the core what it
        said. Returns the core's ``(delay, commands)`` and, when the hint was unusable, what
        was wrong with it (for the note; never the value itself)."""
        job = attempt.job
        hook = job.hook
        run = self._run
        if hook is None:  # pragma: no cover - the core asks only jobs that have a hook
            raise RuntimeError("sdax_hamilton internal error: HINT for a job without a hook")
        problem: str | None = None
        try:
            value = hook(exc)
        except BaseException as hook_error:
            problem = f"raised {type(hook_error).__qualname__}"
            if isinstance(hook_error, _TERMINATION):  # stops the run, like out of a node
                self._record.terminate(hook_error)
                self._execute(run.cancel())
            else:  # kept with the failure it was asked about (``failures(exc)``)
                self._attach(exc, hook_error)
            if self._timed:
                run.clock(self._loop.time())
            decision = run.hint_failed(job.id)
            return decision.delay, decision.commands, problem
        if type(value) is _CoroutineType:
            value.close()  # an async hook: unusable (it is called, never awaited)
        if self._timed:
            run.clock(self._loop.time())
        decision = run.hinted(job.id, value)  # the core says why it refused a hint
        return decision.delay, decision.commands, decision.refused

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
        no_room: tuple[float | None] | None = None
        for op, command_job, _number, arg in commands:
            if op == _NO_ROOM and command_job == job.id:
                no_room = (arg,)
                break
        clipped = attempt.timed_out and self._calls.was_clipped(job, attempt.number)
        if problem is not None:
            self._calls.report().hint_unusable(job.id, attempt.number + 1, problem)
        for note in why_notes(job.subject, attempt.number + 1, clipped, problem, no_room):
            self._note(exc, note)
        return no_room

    def expired(self, job: Job, attempt_number: int) -> None:
        """EXPIRE: the run's deadline passed before attempt ``attempt_number`` of ``job``
        could start; the job fails with a ``TimeoutError``."""
        error = TimeoutError("the run's timeout expired")
        self._failed_for_good(job, error, self._run.attempts(job.id) if attempt_number else None)
        add_note_once(error, expired_note(job.subject, attempt_number))
        self._calls.report().deadline_expired(job.id, attempt_number + 1, error)

    def bad_input(self, attempt: Attempt, exc: BaseException) -> None:
        self._table.end(attempt)
        self._failed_for_good(attempt.job, exc, None)
        self._calls.report().input_rejected(attempt.id, exc)
        # Nothing was called: no attempt counted, no release owed; the core aborts the run.
        self._execute(self._run.rejected(attempt.id))

    def _failed_for_good(self, job: Job, exc: BaseException, attempts: int | None) -> None:
        """A node or release failed for good after ``attempts`` (``None``: before its
        first): note it on the exception, log it, record it."""
        self._note(exc, final_note(job.subject, attempts))
        self._calls.report().failed_for_good(job.id, exc, attempts)
        self._record.failed(exc)

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
            self._terminate(hostile)
        elif keep and hostile is not exc:
            try:
                attach_failures(exc, (hostile,))
            except BaseException as again:
                if isinstance(again, _TERMINATION):
                    self._terminate(again)

    def _terminate(self, exc: BaseException) -> None:
        """Stop the run with ``exc`` (a termination), as out of a node: the primary, and
        the run aborted (an ``ABORT`` event, handled next)."""
        self._record.terminate(exc)
        self._table.post((_ABORT, None, None))
