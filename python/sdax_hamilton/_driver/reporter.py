"""The reporter: the one place where a run tells the outside world what happens.

Logs (logger ``sdax_hamilton``) and observers (``observer=``, docs/api.md "Observing runs")
sit behind it; so can other listeners (Hamilton lifecycle adapters, say): each moment of a
run is one method here, called once, by the driver, in causal order.

Jobs are the core's job ids: ``job < n`` is the forward job of node ``job``; ``job >= n``
the release of node ``job - n``. Attempt numbers are 1-based, as in logs and events.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Sequence
from typing import Final

from .._observe import EventKind, Observer, RunEvent

logger = logging.getLogger("sdax_hamilton")

_TERMINATION: Final = (KeyboardInterrupt, SystemExit)

_run_ids = itertools.count(1)


def plural(count: int) -> str:
    return f"{count} attempt" if count == 1 else f"{count} attempts"


class Reporter:
    """Logs and observers of one run.

    ``watching`` is ``True`` when anyone wants to hear about every attempt (an observer, or
    the logger at DEBUG level); the driver checks it before the per-attempt calls of a
    successful run (``attempt_started``, ``attempt_returned``, ``attempt_succeeded``), so
    a run nobody watches pays one attribute test for them. Every other call is made
    whenever its moment happens (they are about failures, retries and phases).

    An observer's ``Exception`` (or ``CancelledError``) is logged and ignored. A
    ``KeyboardInterrupt`` / ``SystemExit`` is logged and handed to ``on_termination``,
    which stops the run like the same exception out of a node would.
    """

    __slots__ = (
        "_debug",
        "_loop",
        "_n",
        "_names",
        "_observers",
        "_on_termination",
        "_run_id",
        "watching",
    )

    def __init__(
        self,
        names: Sequence[str],
        observers: tuple[Observer, ...] | None,
        loop: asyncio.AbstractEventLoop,
        on_termination: Callable[[BaseException], None],
    ) -> None:
        self._names = names
        self._n = len(names)
        self._observers = observers
        self._loop = loop
        self._on_termination: Callable[[BaseException], None] | None = on_termination
        self._run_id = next(_run_ids) if observers is not None else 0
        self._debug = logger.isEnabledFor(logging.DEBUG)
        self.watching = observers is not None or self._debug

    def close(self) -> None:
        """The run is over: drop the way back into it (no reference cycle outlives it)."""
        self._on_termination = None

    # ---------------------------------------------------------------- the whole run

    def run_started(self, nodes: tuple[str, ...]) -> None:
        if self._observers is not None:
            self._emit("run_started", "", 0, nodes=nodes)

    def shutdown_started(self) -> None:
        if self._observers is not None:
            self._emit("shutdown_started", "", 0)

    def run_finished(self, error: BaseException | None) -> None:
        """Everything is released (or the driver gave up); ``error`` is what the run raises."""
        if self._observers is not None:
            self._emit("run_finished", "", 0, error=error)

    # ---------------------------------------------------------------- attempts

    def attempt_started(self, job: int, number: int) -> None:
        """The function of ``job`` is called for attempt ``number``."""
        forward = job < self._n
        name = self._name(job)
        if self._debug:
            if forward:
                logger.debug("node %r: attempt %d started", name, number)
            else:
                logger.debug("release of %r: attempt %d started", name, number)
        if self._observers is not None:
            self._emit("attempt_started" if forward else "release_started", name, number)

    def attempt_returned(self, job: int, number: int, timed_out: bool) -> None:
        """A forward attempt returned a value (its output check comes next)."""
        if self._debug:
            logger.debug(
                "node %r: attempt %d returned%s",
                self._name(job),
                number,
                " (after swallowing its timeout cancellation)" if timed_out else "",
            )

    def attempt_succeeded(self, job: int, number: int) -> None:
        """The attempt returned and its value was accepted; the job is done."""
        forward = job < self._n
        name = self._name(job)
        if self._debug and not forward:
            logger.debug("release of %r: completed", name)
        if self._observers is not None:
            self._emit("attempt_succeeded" if forward else "release_succeeded", name, number)

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
        forward = job < self._n
        name = self._name(job)
        if retry_delay is not None and logger.isEnabledFor(logging.WARNING):
            logger.warning(
                "%s: attempt %d failed with %s; retry %d in %.3f s",
                self._subject(job),
                number,
                type(error).__qualname__,
                number,
                retry_delay,
            )
        if self._observers is not None:
            self._emit("attempt_failed" if forward else "release_failed", name, number, error=error)
            if retry_delay is not None:
                retry: EventKind = "retry_scheduled" if forward else "release_retry_scheduled"
                self._emit(retry, name, number, delay=retry_delay)

    def attempt_timed_out(self, job: int, number: int, timeout: float | None) -> None:
        """Our timer cancelled the attempt; it is draining."""
        if logger.isEnabledFor(logging.WARNING):
            logger.warning(
                "%s: attempt %d timed out after %s s; waiting for it to finish",
                self._subject(job),
                number,
                timeout,
            )
        if self._observers is not None:
            kind: EventKind = "attempt_timed_out" if job < self._n else "release_timed_out"
            self._emit(kind, self._name(job), number)

    def attempt_cancelled(self, job: int, number: int, error: BaseException | None = None) -> None:
        """The run's abort ended the attempt (``error``: what it raised meanwhile, if not its
        cancellation), or it never began."""
        if self._observers is not None:
            self._emit("attempt_cancelled", self._name(job), number, error=error)

    def attempt_self_cancelled(self, job: int, number: int, error: BaseException) -> None:
        """The attempt ended in a ``CancelledError`` none of ours caused: a failure."""
        if self._observers is not None:
            self._emit("attempt_failed", self._name(job), number, error=error)

    def retry_cancelled(self, job: int, attempts: int) -> None:
        """The core dropped the retry wait that followed attempt ``attempts``."""
        if self._observers is not None:
            self._emit("retry_cancelled", self._name(job), attempts)

    def input_rejected(self, job: int, error: BaseException) -> None:
        """The input check of ``job`` failed before its first attempt: nothing was called."""
        if self._observers is not None:
            self._emit("input_rejected", self._name(job), 0, error=error)

    def failed_for_good(self, job: int, error: BaseException, attempts: int | None) -> None:
        """``job`` failed for good after ``attempts`` attempts (``None``: before the first)."""
        if logger.isEnabledFor(logging.ERROR):
            if attempts is None:
                logger.error("%s failed before its first attempt", self._subject(job))
            else:
                logger.error(
                    "%s failed after %s with %s",
                    self._subject(job),
                    plural(attempts),
                    type(error).__qualname__,
                )

    # ---------------------------------------------------------------- helpers

    def _name(self, job: int) -> str:
        """The node a job belongs to (the owner, for a release job)."""
        n = self._n
        return self._names[job if job < n else job - n]

    def _subject(self, job: int) -> str:
        if job < self._n:
            return f"node {self._names[job]!r}"
        return f"release of {self._names[job - self._n]!r}"

    def _emit(
        self,
        kind: EventKind,
        node: str,
        attempt: int,
        delay: float | None = None,
        error: BaseException | None = None,
        nodes: tuple[str, ...] = (),
    ) -> None:
        """Call every observer with one event; an observer's exception never escapes."""
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
        if termination and self._on_termination is not None:
            self._on_termination(exc)
