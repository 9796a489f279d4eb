"""The reporter: the one place where a run tells the outside world what happens.

Logs (logger ``sdax_hamilton``) and observers (``observer=``, docs/api.md "Observing runs",
called through ``observers.py``) sit behind it; so can other listeners (Hamilton lifecycle
adapters, say): each moment of a run is one method here, called once, by the driver, in
causal order.

Adding a kind of listener: call it from these methods, make :meth:`Reporter.wants_attempts`
say yes when it is present, and widen the run's ``self._observers is not None`` tests
around the whole-run calls (``context.py``) to it.

Jobs are the core's job ids, read through the plan's ``JobTable``. Attempt numbers are
1-based, as in logs and events.

A run creates its reporter on first use. It asks :meth:`Reporter.wants_attempts` once and
skips the per-attempt calls of a successful run (``attempt_started``, ``attempt_returned``,
``attempt_succeeded``) when nobody wants them, and the whole-run calls (``run_started``,
``shutdown_started``, ``run_finished``) when there are no observers (nothing logs them): a
run that nobody watches and that does not fail never creates one. Every other call is made
whenever its moment happens (failures, retries, timeouts: they log).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from .._observe import EventKind, Observer, new_run_id
from .jobs import JobTable
from .observers import Observers
from .verdicts import plural

logger = logging.getLogger("sdax_hamilton")

# logging's own memo of ``logger.isEnabledFor`` answers (emptied in place whenever a level
# changes); an empty dict where a logging module keeps none, so the method decides.
_answers: Final[dict[int, bool]] = getattr(logger, "_cache", {})


def seconds(value: float) -> str:
    """A duration for a log line, to the millisecond (``0.01``, ``0.001``, ``2.5``, ``30``);
    one significant digit below that (``0.0004``)."""
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return f"{value:.1g}" if text == "0" and value > 0 else text


class Reporter:
    """Logs and observers of one run.

    Every record it logs carries the run's id and the node as ``LogRecord`` attributes
    ``run_id`` and ``node`` (``None`` for a record about the whole run), the id the run's
    events (``RunEvent.run``) and Hamilton graph hooks get (docs/logging.md).

    Observers are called through ``observers.Observers``: an observer's exception never
    escapes into the run, and a ``KeyboardInterrupt`` / ``SystemExit`` goes to
    ``on_termination``, which stops the run like the same exception out of a node would.
    """

    __slots__ = ("_debug", "_jobs", "_observers", "_run_id")

    def __init__(
        self,
        jobs: JobTable,
        observers: tuple[Observer, ...] | None,
        loop: asyncio.AbstractEventLoop,
        on_termination: Callable[[BaseException], None] | None,
        run_id: str | None = None,
    ) -> None:
        self._jobs = jobs  # names are looked up when needed: nothing per node per run
        # Given when Hamilton graph hooks run around the run (they got it first); made here
        # otherwise, on first use: a run nobody watches and that does not fail makes none.
        run_id = self._run_id = run_id if run_id is not None else new_run_id()
        # Only observers can raise into the run; without them, no way back into it.
        self._observers = (
            None if observers is None else Observers(observers, loop, on_termination, run_id)
        )
        self._debug = logger.isEnabledFor(logging.DEBUG)

    @staticmethod
    def wants_attempts(observers: tuple[Observer, ...] | None) -> bool:
        """Whether anyone wants every attempt of a run: an observer, or DEBUG logging.

        Asked when every run is opened: ``logger.isEnabledFor(DEBUG)`` is read from
        logging's memo when it has the answer (the method call would cost more than the
        rest of the check)."""
        if observers is not None:
            return True
        if logger.disabled:
            return False
        answer = _answers.get(logging.DEBUG)
        return logger.isEnabledFor(logging.DEBUG) if answer is None else answer

    def close(self) -> None:
        """The run is over: drop the way back into it and the listeners (which may keep
        the run's failures), so no reference cycle outlives the run. Nothing is reported
        afterwards."""
        if self._observers is not None:
            self._observers.close()

    # ---------------------------------------------------------------- the whole run

    def run_started(
        self, nodes: tuple[str, ...], deadline: float | None = None, timeout: float = 0.0
    ) -> None:
        """The run begins; ``deadline``: loop time at which its ``timeout`` (seconds, as
        the caller gave it) ends the forward phase (``None``: the run has no timeout)."""
        if deadline is not None and self._debug:
            # The caller's figure, not the time left now: a log line reads back what was asked.
            logger.debug(
                "run timeout %.3f s: the forward phase ends by loop time %.3f",
                timeout,
                deadline,
                extra=self._whole(),
            )
        if self._observers is not None:
            # Stamped with the instant the deadline was counted from, so the two agree exactly.
            at = None if deadline is None else deadline - timeout
            self._observers.emit("run_started", "", 0, nodes=nodes, deadline=deadline, at=at)

    def shutdown_started(self) -> None:
        if self._observers is not None:
            self._observers.emit("shutdown_started", "", 0)

    def run_finished(self, error: BaseException | None) -> None:
        """Everything is released (or the driver gave up); ``error`` is what the run raises."""
        if self._observers is not None:
            self._observers.emit("run_finished", "", 0, error=error)
            self._observers.sum_up()

    # ---------------------------------------------------------------- attempts

    def attempt_started(self, job: int, number: int, clipped: bool = False) -> None:
        """The function of ``job`` is called for attempt ``number`` (``clipped``: its
        timeout is the time left before the run's deadline)."""
        forward = self._jobs[job].forward
        name = self._name(job)
        if self._debug:
            if forward:
                logger.debug(
                    "node %r: attempt %d started%s",
                    name,
                    number,
                    " (timeout clipped to the run's)" if clipped else "",
                    extra=self._extra(job),
                )
            else:
                logger.debug(
                    "release of %r: attempt %d started", name, number, extra=self._extra(job)
                )
        if self._observers is not None:
            kind: EventKind = "attempt_started" if forward else "release_started"
            self._observers.emit(kind, name, number, clipped=clipped)

    def guarded_attempt_started(
        self,
        job: int,
        number: int,
        clipped: bool,
        bulkhead_wait: float | None,
        breaker_state: str | None,
    ) -> None:
        """``attempt_started`` of a node with a bulkhead or a breaker, with what they did
        (docs/resilience.md)."""
        if self._debug:
            logger.debug(
                "node %r: attempt %d started%s (bulkhead wait %s, breaker %s)",
                self._name(job),
                number,
                " (timeout clipped to the run's)" if clipped else "",
                "-" if bulkhead_wait is None else f"{seconds(bulkhead_wait)} s",
                breaker_state or "-",
                extra=self._extra(job),
            )
        if self._observers is not None:
            self._observers.emit(
                "attempt_started",
                self._name(job),
                number,
                clipped=clipped,
                bulkhead_wait=bulkhead_wait,
                breaker_state=breaker_state,
            )

    def attempt_returned(self, job: int, number: int, timed_out: bool) -> None:
        """A forward attempt returned a value (its output check comes next)."""
        if self._debug:
            logger.debug(
                "node %r: attempt %d returned%s",
                self._name(job),
                number,
                " (after swallowing its timeout cancellation)" if timed_out else "",
                extra=self._extra(job),
            )

    def attempt_succeeded(self, job: int, number: int) -> None:
        """The attempt returned and its value was accepted; the job is done."""
        forward = self._jobs[job].forward
        name = self._name(job)
        if self._debug and not forward:
            logger.debug("release of %r: completed", name, extra=self._extra(job))
        if self._observers is not None:
            self._observers.emit(
                "attempt_succeeded" if forward else "release_succeeded", name, number
            )

    def attempt_failed(
        self,
        job: int,
        number: int,
        error: BaseException,
        *,
        timed_out: bool,
        retry_delay: float | None,
    ) -> None:
        """The attempt failed with ``error`` (a ``TimeoutError`` when ``timed_out``); the
        core scheduled a retry after ``retry_delay`` seconds, or (``None``) none."""
        forward = self._jobs[job].forward
        name = self._name(job)
        if retry_delay is not None and logger.isEnabledFor(logging.WARNING):
            logger.warning(
                "%s: attempt %d failed with %s; retry %d in %.3f s",
                self._subject(job),
                number,
                type(error).__qualname__,
                number,
                retry_delay,
                extra=self._extra(job),
            )
        if self._observers is not None:
            self._observers.emit(
                "attempt_failed" if forward else "release_failed", name, number, error=error
            )
            if retry_delay is not None:
                retry: EventKind = "retry_scheduled" if forward else "release_retry_scheduled"
                self._observers.emit(retry, name, number, delay=retry_delay)

    def attempt_timed_out(
        self, job: int, number: int, timeout: float | None, clipped: bool = False
    ) -> None:
        """Our timer cancelled the attempt; it is draining. ``clipped``: the timeout was
        the time left before the run's deadline (the run's timeout cut it short)."""
        if logger.isEnabledFor(logging.WARNING):
            logger.warning(
                "%s: attempt %d timed out after %s s%s; waiting for it to finish",
                self._subject(job),
                number,
                "?" if timeout is None else seconds(timeout),
                " (cut short by the run's timeout)" if clipped else "",
                extra=self._extra(job),
            )
        if self._observers is not None:
            kind: EventKind = (
                "attempt_timed_out" if self._jobs[job].forward else "release_timed_out"
            )
            self._observers.emit(kind, self._name(job), number, clipped=clipped)

    def retry_skipped(
        self,
        job: int,
        number: int,
        error: BaseException,
        wait: float | None,
        reason: str = "deadline",
    ) -> None:
        """The failure of attempt ``number`` would be retried, but the wait (``None``: any)
        would not end before the run's deadline (``reason`` ``"deadline"``), or the retry
        budget refused the retry (``"budget"``): the job failed for good."""
        if reason == "budget":
            if logger.isEnabledFor(logging.WARNING):
                logger.warning(
                    "%s: attempt %d failed with %s; the retry budget was exhausted",
                    self._subject(job),
                    number,
                    type(error).__qualname__,
                    extra=self._extra(job),
                )
            if self._observers is not None:
                self._observers.emit(
                    "retry_skipped", self._name(job), number, error=error, reason=reason
                )
            return
        if logger.isEnabledFor(logging.WARNING):
            logger.warning(
                "%s: attempt %d failed with %s; the run's timeout left no room for a retry%s",
                self._subject(job),
                number,
                type(error).__qualname__,
                "" if wait is None else f" (wait {wait:.3f} s)",
                extra=self._extra(job),
            )
        if self._observers is not None:
            self._observers.emit(
                "retry_skipped", self._name(job), number, delay=wait, error=error, reason=reason
            )

    def bulkhead_waiting(self, job: int, number: int) -> None:
        """Attempt ``number`` waits for a bulkhead's permit."""
        if self._debug:
            logger.debug(
                "%s: attempt %d waits for a bulkhead permit",
                self._subject(job),
                number,
                extra=self._extra(job),
            )
        if self._observers is not None:
            self._observers.emit("bulkhead_waiting", self._name(job), number)

    def bulkhead_waited(self, job: int, number: int, waited: float) -> None:
        """Attempt ``number`` got its permit after ``waited`` seconds."""
        if self._debug:
            logger.debug(
                "%s: attempt %d got a bulkhead permit after %s s",
                self._subject(job),
                number,
                seconds(waited),
                extra=self._extra(job),
            )

    def rejected(self, job: int, number: int, kind: str, error: BaseException) -> None:
        """Attempt ``number`` was refused without a call (``kind``: ``bulkhead_rejected``
        or ``circuit_rejected``) with ``error``."""
        if self._observers is not None:
            rejected: EventKind = (
                "bulkhead_rejected" if kind == "bulkhead_rejected" else "circuit_rejected"
            )
            self._observers.emit(rejected, self._name(job), number, error=error)

    def fallback_used(self, job: int, number: int, error: BaseException) -> None:
        """``job`` failed for good with ``error``; its fallback's value is used."""
        if self._observers is not None:
            self._observers.emit("fallback_used", self._name(job), number, error=error)

    def hint_unusable(self, job: int, number: int, problem: str) -> None:
        """The ``retry_after`` hook asked about attempt ``number`` ``problem`` (raised, or
        returned an unusable wait): the retry was not taken."""
        if logger.isEnabledFor(logging.WARNING):
            logger.warning(
                "%s: attempt %d: its retry_after hook %s; the retry was not taken",
                self._subject(job),
                number,
                problem,
                extra=self._extra(job),
            )

    def deadline_expired(self, job: int, number: int, error: BaseException) -> None:
        """The run's deadline passed before attempt ``number`` of ``job`` could start."""
        if logger.isEnabledFor(logging.WARNING):
            logger.warning(
                "%s: the run's timeout expired before %s could start",
                self._subject(job),
                "it" if number == 1 else f"attempt {number}",
                extra=self._extra(job),
            )
        if self._observers is not None:
            self._observers.emit("deadline_expired", self._name(job), number, error=error)

    def attempt_cancelled(
        self,
        job: int,
        number: int,
        error: BaseException | None = None,
        reason: str | None = None,
    ) -> None:
        """The run's abort ended the attempt (``error``: what it raised meanwhile, if not its
        cancellation), or it never began; ``reason`` ``"lost to attempt N"``: a hedged
        round's loser, drained."""
        if self._observers is not None:
            self._observers.emit(
                "attempt_cancelled", self._name(job), number, error=error, reason=reason
            )

    def hedge_started(self, job: int, number: int) -> None:
        """A hedged round starts another call, attempt ``number`` (docs/hedging.md)."""
        if self._debug:
            logger.debug(
                "%s: hedge started (attempt %d)", self._subject(job), number, extra=self._extra(job)
            )
        if self._observers is not None:
            self._observers.emit("hedge_started", self._name(job), number)

    def attempt_self_cancelled(self, job: int, number: int, error: BaseException) -> None:
        """The attempt ended in a ``CancelledError`` none of ours caused: a failure."""
        if self._observers is not None:
            self._observers.emit("attempt_failed", self._name(job), number, error=error)

    def retry_cancelled(self, job: int, attempts: int) -> None:
        """The core dropped the retry wait that followed attempt ``attempts``."""
        if self._observers is not None:
            self._observers.emit("retry_cancelled", self._name(job), attempts)

    def cache_hit(self, job: int) -> None:
        """``job`` took its value from the cache (``Driver(..., cache=)``): no attempt."""
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("%s: cache hit", self._subject(job), extra=self._extra(job))
        if self._observers is not None:
            self._observers.emit("cache_hit", self._name(job), 0)

    def input_rejected(self, job: int, error: BaseException) -> None:
        """The input check of ``job`` failed before its first attempt: nothing was called."""
        if self._observers is not None:
            self._observers.emit("input_rejected", self._name(job), 0, error=error)

    def failed_for_good(self, job: int, error: BaseException, attempts: int | None) -> None:
        """``job`` failed for good after ``attempts`` attempts (``None``: before the first)."""
        if logger.isEnabledFor(logging.ERROR):
            if attempts is None:
                logger.error(
                    "%s failed before its first attempt", self._subject(job), extra=self._extra(job)
                )
            else:
                logger.error(
                    "%s failed after %s with %s",
                    self._subject(job),
                    plural(attempts),
                    type(error).__qualname__,
                    extra=self._extra(job),
                )

    # ---------------------------------------------------------------- helpers

    def _extra(self, job: int) -> dict[str, object]:
        """The ``LogRecord`` attributes of a record about ``job``: the run's id, the node."""
        return {"run_id": self._run_id, "node": self._name(job)}

    def _whole(self) -> dict[str, object]:
        """The ``LogRecord`` attributes of a record about the whole run."""
        return {"run_id": self._run_id, "node": None}

    @property
    def run_id(self) -> str:
        """The run's id (``RunEvent.run``, log records' ``run_id``)."""
        return self._run_id

    def _name(self, job: int) -> str:
        """The node a job belongs to (the owner, for a release job)."""
        return self._jobs[job].name

    def _subject(self, job: int) -> str:
        """``node 'name'`` or ``release of 'name'``, as in notes and logs."""
        return self._jobs[job].subject
