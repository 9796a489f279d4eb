"""Outcomes: how each attempt ended, reported to the core, the reporter and the record.

Every event the coordinator dequeues ends here, and so does the outcome of an attempt it
awaited inline: a value is checked and stored; an exception is judged (``verdicts.py``),
the core is told and the commands it answers with are carried out (``Calls``). What the
core decides about a failure (retry after a delay, or final) is what the reporter and the
failure record hear.
"""

from __future__ import annotations

import asyncio
import types
from typing import Any, Final

from .. import _core
from .._declarations import Acquisition
from .._failures import add_note_once, attach_failures
from .._types import invalid_output
from .attempts import Attempt, AttemptState, Event, EventKind
from .cache import MISSED, CacheRun
from .calls import Calls
from .jobs import Job
from .record import FailureRecord
from .reporter import Reporter
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
_RUNNING: Final = AttemptState.RUNNING
_CANCELLED: Final = AttemptState.CANCELLED
_RETURNED: Final = EventKind.RETURNED
_RAISED: Final = EventKind.RAISED
_ELAPSED: Final = EventKind.ELAPSED
_UNSTARTED: Final = EventKind.UNSTARTED
_BAD_INPUT: Final = EventKind.BAD_INPUT
_EXPIRED: Final = EventKind.EXPIRED
_STORED: Final = EventKind.STORED
_ABORT: Final = EventKind.ABORT
_PERMIT: Final = EventKind.PERMIT
_FELL_BACK: Final = EventKind.FELL_BACK
_FAN: Final = EventKind.FAN
_NO_BUDGET: Final = _core.NO_BUDGET
_FALLBACK: Final = _core.FALLBACK
_FAILED: Final = Verdict.FAILED
_HINT: Final = _core.HINT
_NO_ROOM: Final = _core.NO_ROOM
_TERMINATION: Final = (KeyboardInterrupt, SystemExit)


class Outcomes:
    """Events in; the core told, its commands carried out (made with the run's ``Calls``)."""

    __slots__ = (
        "_acquisitions",
        "_cache",
        "_calls",
        "_execute",
        "_loop",
        "_record",
        "_reporter",
        "_run",
        "_table",
        "_timed",
        "_values",
        "_watch",
    )

    def __init__(
        self,
        calls: Calls,
        run: _core.Run,
        loop: asyncio.AbstractEventLoop,
        values: dict[str, Any],
        acquisitions: list[Acquisition[Any] | None],
        timed: bool,
        watch: bool,
        reporter: Reporter | None,
        record: FailureRecord,
    ) -> None:
        self._calls = calls
        self._cache = calls.cache  # the run's lookups and stores (``cache.py``), if any
        self._execute = calls.execute
        self._table = calls.table
        self._run = run
        self._loop = loop
        self._values = values
        self._acquisitions = acquisitions
        self._timed = timed  # the run has a deadline: the core is told the time first
        self._watch = watch
        self._reporter = reporter
        self._record = record

    def _report(self) -> Reporter:
        reporter = self._reporter
        if reporter is None:
            reporter = self._reporter = self._calls.report()
        return reporter

    def handle(self, event: Event) -> None:
        kind, subject, payload = event
        if self._timed:
            self._run.clock(self._loop.time())
        if kind is _RETURNED:
            self.returned(subject, payload)
        elif kind is _RAISED:
            self.raised(subject, payload)
        elif kind is _ELAPSED:
            table = self._table
            if table.sleeps[subject] is not None:
                table.sleeps[subject] = None
                table.sleeping -= 1
            self._execute(self._run.elapsed(subject))
        elif kind is _UNSTARTED:
            self._unstarted(subject)
        elif kind is _BAD_INPUT:
            self._bad_input(subject, payload)
        elif kind is _EXPIRED:
            self._expired(subject, payload)
        else:
            self._other(kind, subject, payload)

    def _other(self, kind: EventKind, subject: Any, payload: Any) -> None:
        """The events of guards, the cache, fan-outs and an observer's termination."""
        if kind is _PERMIT:
            self._calls.guards().permit(subject, payload)
        elif kind is _FELL_BACK:
            self._calls.guards().fell_back(subject, payload, self)
        elif kind is _STORED:
            self._stored(subject)
        elif kind is _FAN:
            subject(payload)  # a fan-out's source (``fanout.Sources``)
        else:  # ABORT: an observer raised KeyboardInterrupt/SystemExit (already primary)
            self._execute(self._run.cancel())

    def returned(self, attempt: Attempt, value: Any) -> None:
        job = attempt.job
        running = self._table.running
        if running[job.id] is attempt and attempt.timer is None and not job.guarded:
            running[job.id] = attempt.next  # ``AttemptTable.end``, for the common case
        else:
            self._returned_end(attempt)
        run = self._run
        if job.forward:
            node = job.node
            if node.release is not None:
                self._acquisitions[job.id] = Acquisition(value, node.output_type)
            # ``is not _RUNNING`` first: the common case costs one identity test.
            state = attempt.state
            if state is not _RUNNING and state >= _CANCELLED:
                self._report().attempt_cancelled(job.id, attempt.number + 1)
                self._execute(run.drained(job.id))
                return
            cache = self._cache
            if cache is not None and self._looked_up(cache, attempt, value):
                return
            if self._watch:
                self._report().attempt_returned(job.id, attempt.number + 1, attempt.timed_out)
            check = node.output_check
            if check is not None and not self._output_ok(attempt, check, value):
                return
            self._values[node.name] = value
            if cache is not None and cache.store(attempt, value):
                return  # done when the store is over (``_STORED``)
            self._succeeded(attempt)
            return
        if attempt.state >= _CANCELLED:  # pragma: no cover - the core never cancels releases
            self._execute(run.drained(job.id))
            return
        if value is not None:
            self._fail(attempt, TypeError(f"Shutdown must return None: {job.name}"), False)
            return
        if self._watch:
            self._report().attempt_succeeded(job.id, attempt.number + 1)
        self._execute(run.succeeded(job.id))

    def _returned_end(self, attempt: Attempt) -> None:
        """A returned attempt leaves the table; a guarded one gives its permit back and
        its success to the breaker (``guards.py``)."""
        self._table.end(attempt)
        if attempt.job.guarded:
            self._calls.guards().ended(attempt, attempt.state < _CANCELLED or None)

    def _looked_up(self, cache: CacheRun, attempt: Attempt, value: Any) -> bool:
        """If ``attempt`` was a lookup (``cache.py``), carry out how it ended: a miss
        calls the node; a hit's value is checked and is the node's (no attempt)."""
        job = attempt.job
        if value is MISSED:
            self._calls.start_after_miss(job, cache.call_timeout(job.id))
            return True
        if not cache.hit(attempt):
            return False  # the value of a call
        node = job.node
        check = node.output_check
        if check is not None and not self._output_ok(attempt, check, value):
            return True
        self._values[node.name] = value
        self._calls.kwargs[job.id] = None  # as in ``_succeeded``
        self._report().cache_hit(job.id)
        self._execute(self._run.succeeded(job.id))
        return True

    def _stored(self, attempt: Attempt) -> None:
        """The cache's store of the attempt's value is over: the node is done, or drained
        if the core cancelled it meanwhile (the entry is whole either way)."""
        cache = self._cache
        if cache is not None and cache.store_cancelled(attempt.id):
            self._report().attempt_cancelled(attempt.id, attempt.number + 1)
            self._execute(self._run.drained(attempt.id))
            return
        self._succeeded(attempt)

    def _succeeded(self, attempt: Attempt) -> None:
        """A forward attempt's value passed its check (and was stored, if cached)."""
        # No attempt of it will need its arguments again (an open run would otherwise hold
        # them until it exits).
        self._calls.kwargs[attempt.id] = None
        if self._watch:
            self._report().attempt_succeeded(attempt.id, attempt.number + 1)
        self._execute(self._run.succeeded(attempt.id))

    def _output_ok(self, attempt: Attempt, check: Any, value: Any) -> bool:
        """Check a returned value against the node's output check; a mismatch (or a
        broken checker) is the node's failure, reported here."""
        try:
            ok = check(value)
        except BaseException as broken:  # a broken checker is this node's failure
            # (a KeyboardInterrupt out of a metaclass's ``__instancecheck__`` stops the run)
            self._fail(attempt, broken, False)
            return False
        if not ok:
            node = attempt.job.node
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
        return bool(ok)

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
            self._fail(attempt, failure, retryable)
            return
        if job.guarded:
            self._calls.guards().ended(attempt, None)
        number = attempt.number + 1
        if verdict == Verdict.SELF_CANCELLED:
            self._failed_for_good(attempt.job, exc, self._run.attempts(job.id))
            self._report().attempt_self_cancelled(job.id, number, exc)
        elif verdict == Verdict.DRAINED_WITH_ERROR:
            self._failed_for_good(attempt.job, exc, self._run.attempts(job.id))
            self._report().attempt_cancelled(job.id, number, exc)
        else:
            self._report().attempt_cancelled(job.id, number, None)
        self._execute(self._run.drained(job.id))

    def _fail(self, attempt: Attempt, exc: BaseException, retryable: bool) -> None:
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
        self._report().attempt_failed(
            job.id, number, exc, timed_out=attempt.timed_out, retry_delay=delay
        )
        if no_room is not None:
            self._report().retry_skipped(job.id, number, exc, no_room[0])
        elif budget:
            self._report().retry_skipped(job.id, number, exc, None, "budget")
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
        self._report().fallback_used(job.id, attempt.number + 1, original)
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
            self._report().hint_unusable(job.id, attempt.number + 1, problem)
        for note in why_notes(job.subject, attempt.number + 1, clipped, problem, no_room):
            self._note(exc, note)
        return no_room

    def _expired(self, job: Job, attempt_number: int) -> None:
        """EXPIRE: the run's deadline passed before attempt ``attempt_number`` of ``job``
        could start; the job fails with a ``TimeoutError``."""
        error = TimeoutError("the run's timeout expired")
        self._failed_for_good(job, error, self._run.attempts(job.id) if attempt_number else None)
        add_note_once(error, expired_note(job.subject, attempt_number))
        self._report().deadline_expired(job.id, attempt_number + 1, error)

    def _unstarted(self, attempt: Attempt) -> None:
        self._table.end(attempt)
        job = attempt.job
        aw = attempt.aw
        if job.guarded:
            self._calls.guards().ended(attempt, None)
        self._report().attempt_cancelled(job.id, attempt.number + 1)
        if aw is None or type(aw) is _CoroutineType:
            # never awaited: its body never ran (``None``: it waited for a permit)
            if aw is not None:
                aw.close()
            if job.forward and attempt.number == 0:
                self._acquisitions[job.id] = None
            self._execute(self._run.unstarted(job.id))
            return
        # The call itself ran and returned an awaitable we never awaited: it started.
        if asyncio.isfuture(aw):
            if not aw.done():
                aw.cancel()
            elif not aw.cancelled():
                aw.exception()  # retrieved: no "exception was never retrieved" later
        self._execute(self._run.drained(attempt.id))

    def _bad_input(self, attempt: Attempt, exc: BaseException) -> None:
        self._table.end(attempt)
        self._failed_for_good(attempt.job, exc, None)
        self._report().input_rejected(attempt.id, exc)
        # Nothing was called: no attempt counted, no release owed; the core aborts the run.
        self._execute(self._run.rejected(attempt.id))

    def _failed_for_good(self, job: Job, exc: BaseException, attempts: int | None) -> None:
        """A node or release failed for good after ``attempts`` (``None``: before its
        first): note it on the exception, log it, record it."""
        self._note(exc, final_note(job.subject, attempts))
        self._report().failed_for_good(job.id, exc, attempts)
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
