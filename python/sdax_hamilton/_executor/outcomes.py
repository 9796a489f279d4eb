"""Outcomes: how each attempt ended, reported to the core and the reporter.

Every event the coordinator dequeues ends here, and so does the outcome of an attempt it
awaited inline: a value is checked and stored, the core is told and the commands it
answers with are carried out (``Calls``); a cancelled attempt drains. A failure (an
exception, a value that fails its check, a refused input, an expired deadline) goes on to
``failures.Failures``, made when the run first fails.
"""

from __future__ import annotations

import asyncio
import types
from typing import Any, Final

from .._declarations import Acquisition
from .._types import invalid_output
from .attempts import Attempt, AttemptState, Event, EventKind
from .cache import MISSED, CacheRun
from .calls import Calls
from .failures import Failures
from .guards import Guards
from .reporter import Reporter

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
_PERMIT: Final = EventKind.PERMIT
_FELL_BACK: Final = EventKind.FELL_BACK
_FAN: Final = EventKind.FAN
_TERMINATION: Final = (KeyboardInterrupt, SystemExit)


class Outcomes:
    """Events in; the core told, its commands carried out (made with the run's ``Calls``)."""

    __slots__ = (
        "_calls",
        "_execute",
        "_failures",
        "_guards",
        "_kwargs",
        "_plain",
        "_run",
        "_table",
        "_timed",
        "_values",
    )

    def __init__(self, calls: Calls, values: dict[str, Any], timed: bool) -> None:
        self._calls = calls
        self._execute = calls.execute
        self._table = calls.table
        self._kwargs = calls.kwargs  # grown in place with the run's jobs (``Calls._grow``)
        self._run = calls.run
        self._values = values
        self._timed = timed  # the run has a deadline: the core is told the time first
        # Nothing of the run looks at a value between its return and the core (no cache,
        # nobody watching attempts): a ``Job.plain`` job's attempts end in ``returned``'s
        # first branch.
        self._plain = calls.cache is None and not calls.watching
        self._failures: Failures | None = None
        self._guards: Guards | None = None  # the run's ``Calls.guards()``, once an attempt ends

    def _report(self) -> Reporter:
        return self._calls.report()

    def _failing(self) -> Failures:
        """The run's side of its failures, made when the run first fails."""
        failures = self._failures
        if failures is None:
            calls = self._calls
            failures = self._failures = Failures(
                calls, self._run, calls._loop, self._values, calls._acquisitions, self._timed,
                calls.failures(),
            )  # fmt: skip
        return failures

    def handle(self, event: Event) -> None:
        kind, subject, payload = event
        if self._timed:
            self._run.clock(self._calls._loop.time())
        if kind is _RETURNED:
            self.returned(subject, payload)
        elif kind is _RAISED:
            self._failing().raised(subject, payload)
        elif kind is _ELAPSED:
            table = self._table
            if table.sleeps[subject] is not None:
                table.sleeps[subject] = None
                table.sleeping -= 1
            self._execute(self._run.elapsed(subject))
        elif kind is _UNSTARTED:
            self._unstarted(subject)
        elif kind is _BAD_INPUT:
            self._failing().bad_input(subject, payload)
        elif kind is _EXPIRED:
            self._failing().expired(subject, payload)
        elif kind is _PERMIT:
            self._calls.guards().permit(subject, payload)
        elif kind is _FELL_BACK:
            self._calls.guards().fell_back(subject, payload, self._failing())
        elif kind is _STORED:
            self._stored(subject)
        else:
            self._abort_or_fan(kind, subject, payload)

    def _abort_or_fan(self, kind: EventKind, subject: Any, payload: Any) -> None:
        if kind is _FAN:
            subject(payload)  # a fan-out's source (``fanout.Sources``)
        else:  # ABORT: an observer raised KeyboardInterrupt/SystemExit (already primary)
            self._execute(self._run.cancel())

    def returned(self, attempt: Attempt, value: Any) -> None:
        job = attempt.job
        job_id = attempt.id
        running = self._table.running
        if (
            job.plain
            and self._plain
            and attempt.state is _RUNNING
            and running[job_id] is attempt  # the job's only live attempt, or its latest
        ):
            # The common case: ``_returned``'s path for it, with nothing to skip.
            running[job_id] = attempt.next  # ``AttemptTable.end``
            timer = attempt.timer
            if timer is not None:
                attempt.timer = None
                timer.cancel()
            node = job.node
            check = node.output_check
            if check is not None:  # ``_output_ok``, inlined
                try:
                    ok = check(value)
                except BaseException as broken:
                    self._failing().fail(attempt, broken, False)
                    return
                if not ok:
                    self._invalid(attempt, value)
                    return
            self._values[node.name] = value
            self._kwargs[job_id] = None  # as in ``_succeeded``
            commands = self._run.succeeded(job_id)
            if commands:  # most successes start nothing new
                self._execute(commands)
            return
        self._returned(attempt, value)

    def _returned(self, attempt: Attempt, value: Any) -> None:
        """``returned``, every case."""
        job = attempt.job
        job_id = attempt.id
        self._returned_end(attempt)
        if job.forward:
            node = job.node
            if node.release is not None:
                self._calls._acquisitions[job_id] = Acquisition(value, node.output_type)
            if attempt.state >= _CANCELLED:
                self._report().attempt_cancelled(job_id, attempt.number + 1)
                self._execute(self._run.drained(job_id))
                return
            cache = self._calls.cache  # the run's lookups and stores (``cache.py``), if any
            if cache is not None and self._looked_up(cache, attempt, value):
                return
            if self._calls.watching:
                self._report().attempt_returned(job_id, attempt.number + 1, attempt.timed_out)
            check = node.output_check
            if check is not None and not self._output_ok(attempt, check, value):
                return
            self._values[node.name] = value
            if cache is not None and cache.store(attempt, value):
                return  # done when the store is over (``_STORED``)
            self._succeeded(attempt)
            return
        self._release_returned(attempt, value)

    def _release_returned(self, attempt: Attempt, value: Any) -> None:
        """A release's attempt returned ``value``: done if it is ``None``."""
        job_id = attempt.id
        if attempt.state >= _CANCELLED:  # pragma: no cover - the core never cancels releases
            self._execute(self._run.drained(job_id))
            return
        if value is not None:
            error = TypeError(f"Shutdown must return None: {attempt.job.name}")
            self._failing().fail(attempt, error, False)
            return
        if self._calls.watching:
            self._report().attempt_succeeded(job_id, attempt.number + 1)
        self._execute(self._run.succeeded(job_id))

    def _returned_end(self, attempt: Attempt) -> None:
        """A returned attempt leaves the table; a guarded one gives its permit back and
        its success to the breaker (``guards.py``)."""
        self._table.end(attempt)
        if attempt.job.guarded:
            guards = self._guards
            if guards is None:
                guards = self._guards = self._calls.guards()
            guards.ended(attempt, attempt.state < _CANCELLED or None)

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
        cache = self._calls.cache
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
        if self._calls.watching:
            self._report().attempt_succeeded(attempt.id, attempt.number + 1)
        self._execute(self._run.succeeded(attempt.id))

    def _output_ok(self, attempt: Attempt, check: Any, value: Any) -> bool:
        """Check a returned value against the node's output check; a mismatch (or a
        broken checker) is the node's failure, reported here."""
        try:
            ok = check(value)
        except BaseException as broken:  # a broken checker is this node's failure
            # (a KeyboardInterrupt out of a metaclass's ``__instancecheck__`` stops the run)
            self._failing().fail(attempt, broken, False)
            return False
        if not ok:
            self._invalid(attempt, value)
        return bool(ok)

    def _invalid(self, attempt: Attempt, value: Any) -> None:
        """``value`` failed the node's output check: the node's failure, reported here."""
        node = attempt.job.node
        try:
            invalid: BaseException = invalid_output(node.name, node.origin, node.output_type, value)
        except BaseException as hostile:  # user code describing the type (a ``repr``)
            invalid = (
                hostile
                if isinstance(hostile, _TERMINATION)
                else TypeError(f"Invalid output from {node.name} ({node.origin})")
            )
        self._failing().fail(attempt, invalid, False)

    def raised(self, attempt: Attempt, exc: BaseException) -> None:
        """An attempt awaited inline raised ``exc`` (``Failures.raised``)."""
        self._failing().raised(attempt, exc)

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
                self._calls._acquisitions[job.id] = None
            self._execute(self._run.unstarted(job.id))
            return
        # The call itself ran and returned an awaitable we never awaited: it started.
        if asyncio.isfuture(aw):
            if not aw.done():
                aw.cancel()
            elif not aw.cancelled():
                aw.exception()  # retrieved: no "exception was never retrieved" later
        self._execute(self._run.drained(attempt.id))
