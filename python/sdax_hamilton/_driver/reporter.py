"""The reporter: the one place where a run tells the outside world what happens.

Logs (logger ``sdax_hamilton``) and observers (``observer=``, docs/api.md "Observing runs")
sit behind it; so can other listeners (Hamilton lifecycle adapters, say): each moment of a
run is one method here, called once, by the driver, in causal order.

Adding a kind of listener: call it from these methods, make :meth:`Reporter.wants_attempts`
say yes when it is present, and widen the run's ``self._observers is not None`` tests
around the whole-run calls (``context.py``) to it.

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
from .runtime import NodeRuntime

logger = logging.getLogger("sdax_hamilton")

_TERMINATION: Final = (KeyboardInterrupt, SystemExit)

_run_ids = itertools.count(1)


def plural(count: int) -> str:
    return f"{count} attempt" if count == 1 else f"{count} attempts"


class Reporter:
    """Logs and observers of one run.

    A run creates its reporter on first use. It asks :meth:`wants_attempts` once and skips
    the per-attempt calls of a successful run (``attempt_started``, ``attempt_returned``,
    ``attempt_succeeded``) when nobody wants them, and the whole-run calls
    (``run_started``, ``shutdown_started``, ``run_finished``) when there are no observers
    (nothing logs them): a run that nobody watches and that does not fail never creates
    one. Every other call is made whenever its moment happens (failures, retries,
    timeouts: they log).

    An observer's ``Exception`` (or ``CancelledError``) is logged and ignored. A
    ``KeyboardInterrupt`` / ``SystemExit`` is logged and handed to ``on_termination``,
    which stops the run like the same exception out of a node would.
    """

    __slots__ = (
        "_debug",
        "_loop",
        "_n",
        "_nodes",
        "_observers",
        "_on_termination",
        "_run_id",
    )

    def __init__(
        self,
        nodes: Sequence[NodeRuntime],
        observers: tuple[Observer, ...] | None,
        loop: asyncio.AbstractEventLoop,
        on_termination: Callable[[BaseException], None] | None,
    ) -> None:
        self._nodes = nodes  # names are looked up when needed: nothing per node per run
        self._n = len(nodes)
        self._observers = observers
        self._loop = loop
        # Only observers can raise into the run; without them, no way back into it.
        self._on_termination = on_termination if observers is not None else None
        self._run_id = next(_run_ids) if observers is not None else 0
        self._debug = logger.isEnabledFor(logging.DEBUG)

    @staticmethod
    def wants_attempts(observers: tuple[Observer, ...] | None) -> bool:
        """Whether anyone wants every attempt of a run: an observer, or DEBUG logging."""
        return observers is not None or logger.isEnabledFor(logging.DEBUG)

    def close(self) -> None:
        """The run is over: drop the way back into it and the listeners (which may keep
        the run's failures), so no reference cycle outlives the run. Nothing is reported
        afterwards."""
        self._on_termination = None
        self._observers = None

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
        return self._nodes[job if job < n else job - n].name

    def _subject(self, job: int) -> str:
        if job < self._n:
            return f"node {self._nodes[job].name!r}"
        return f"release of {self._nodes[job - self._n].name!r}"

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
