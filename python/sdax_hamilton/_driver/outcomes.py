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

from .._declarations import Acquisition
from .._failures import add_note_once
from .attempts import Attempt, AttemptMechanics, AttemptState
from .reporter import plural
from .runtime import is_retryable
from .state import BAD_INPUT, ELAPSED, RAISED, RETURNED, UNSTARTED, Event

_CancelledError: Final = asyncio.CancelledError
_CoroutineType: Final = types.CoroutineType
_RUNNING: Final = AttemptState.RUNNING
_CANCELLED: Final = AttemptState.CANCELLED
_CANCEL_MISSED: Final = AttemptState.CANCEL_MISSED


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
            self._sleeps[subject] = None
            self._execute(self._run.elapsed(subject))
        elif kind == UNSTARTED:
            self._unstarted(subject)
        elif kind == BAD_INPUT:
            self._bad_input(subject, payload)
        else:  # ABORT: an observer raised KeyboardInterrupt/SystemExit (already primary)
            self._execute(self._run.cancel())

    def _end(self, attempt: Attempt) -> None:
        self._running[attempt.job] = None
        timer = attempt.timer
        if timer is not None:
            attempt.timer = None
            timer.cancel()

    def _returned(self, attempt: Attempt, value: Any) -> None:
        self._end(attempt)
        job = attempt.job
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
        self._fail(attempt, exc, is_retryable(exc, retryable_set))

    def _fail(self, attempt: Attempt, exc: BaseException, retryable: bool) -> None:
        """Report a failed attempt; the core decides whether it is retried and when."""
        job = attempt.job
        delay, commands = self._run.failed(job, retryable)
        if delay is None:
            self._failed_for_good(attempt, exc)
        self._report().attempt_failed(
            job, attempt.number + 1, exc, timed_out=attempt.timed_out, retry_delay=delay
        )
        self._execute(commands)

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
        try:
            add_note_once(exc, note)
        except Exception:  # pragma: no cover - a user object with a broken __notes__
            pass
        self._report().failed_for_good(job, exc, attempts)
        self._failures().failed(exc)
