"""A run's observers (``observer=``, docs/api.md "Observing runs"): each called with every
event the run's ``reporter.Reporter`` emits, in causal order, and kept from breaking the
run. An observer's ``Exception`` (or ``CancelledError``) is logged, once per observer and
run (the rest counted and summed up when the run finishes), and ignored; a
``KeyboardInterrupt`` / ``SystemExit`` is logged and handed to ``on_termination``, which
stops the run like the same exception out of a node would.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from .._observe import EventKind, Observer, RunEvent

logger = logging.getLogger("sdax_hamilton")

_TERMINATION: Final = (KeyboardInterrupt, SystemExit)


class Observers:
    """The observers of one run (made with its ``Reporter``, when the run has any)."""

    __slots__ = ("_loop", "_observers", "_on_termination", "_raised", "_run_id")

    def __init__(
        self,
        observers: tuple[Observer, ...],
        loop: asyncio.AbstractEventLoop,
        on_termination: Callable[[BaseException], None] | None,
        run_id: str,
    ) -> None:
        self._observers = observers
        self._loop = loop
        self._on_termination = on_termination
        self._run_id = run_id
        # Observers that raised in this run: name and how many times (one record each).
        self._raised: dict[int, tuple[str, int]] | None = None

    def close(self) -> None:
        """The run is over: drop the observers (which may keep the run's failures) and the
        way back into the run; nobody is called afterwards."""
        self._observers = ()
        self._on_termination = None

    def sum_up(self) -> None:
        """The run has finished: log how many more times each observer that raised did."""
        if self._raised is not None:
            for name, times in self._raised.values():
                if times > 1:
                    logger.error(
                        "observer %s raised %d more times in this run; ignored",
                        name,
                        times - 1,
                        extra={"run_id": self._run_id, "node": None},
                    )

    def emit(
        self,
        kind: EventKind,
        node: str,
        attempt: int,
        delay: float | None = None,
        error: BaseException | None = None,
        nodes: tuple[str, ...] = (),
        deadline: float | None = None,
        clipped: bool = False,
        at: float | None = None,
        reason: str | None = None,
        bulkhead_wait: float | None = None,
        breaker_state: str | None = None,
    ) -> None:
        """Call every observer with one event; an observer's exception never escapes."""
        event = RunEvent(
            kind,
            node,
            attempt,
            self._loop.time() if at is None else at,
            delay,
            error,
            self._run_id,
            nodes,
            deadline,
            clipped,
            reason,
            bulkhead_wait,
            breaker_state,
        )
        for observer in self._observers:
            try:
                observer(event)
            except BaseException as exc:
                self._observer_raised(observer, event, exc)

    def _observer_raised(self, observer: Observer, event: RunEvent, exc: BaseException) -> None:
        """Log an observer's exception once per observer and run (with its traceback); later
        ones are counted and summed up when the run finishes: one misuse, one record."""
        termination = isinstance(exc, _TERMINATION)
        name = getattr(observer, "__qualname__", None) or type(observer).__qualname__
        raised = self._raised
        if raised is None:
            raised = self._raised = {}
        _, times = raised.get(id(observer), (name, 0))
        raised[id(observer)] = (name, times + 1)
        if times and not termination:
            return
        subject = f" of {event.node!r}" if event.node else ""
        logger.error(
            "observer %s raised %s on the %s event%s; %s",
            name,
            type(exc).__qualname__,
            event.kind,
            subject,
            "stopping the run" if termination else "ignored",
            exc_info=exc,
            extra={"run_id": self._run_id, "node": event.node or None},
        )
        if termination and self._on_termination is not None:
            self._on_termination(exc)
