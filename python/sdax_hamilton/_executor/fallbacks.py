"""A node's fallback at work in one run (docs/resilience.md): called once when the core
says FALLBACK (core/src/run.rs decides when), its value checked against the node's return
annotation; an async fallback is awaited in a task of its own, which the run waits for as
for an attempt.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Final, Protocol

from .. import _core
from .._failures import add_note_once
from .._types import checker, invalid_output
from .attempts import Attempt, AttemptState, EventKind
from .calls_seen import CallsSeen


class FallbackCalls(CallsSeen, Protocol):
    """What a fallback uses of the run's ``calls.Calls`` (a protocol, as ``guards.RunCalls``)."""

    def execute(self, commands: Sequence[_core.Command]) -> None: ...


class FallbackOutcomes(Protocol):
    """How a fallback's ending reaches the run's ``failures.Failures`` (a protocol, as
    ``FallbackCalls``)."""

    def fallback_used(self, attempt: Attempt, value: Any, original: BaseException) -> None: ...
    def fallback_failed(self, attempt: Attempt, error: BaseException) -> None: ...


logger = logging.getLogger("sdax_hamilton")

_FELL_BACK: Final = EventKind.FELL_BACK
_CANCELLED: Final = AttemptState.CANCELLED
_TERMINATION: Final = (KeyboardInterrupt, SystemExit)


class Fallbacks:
    """One run's fallbacks (made by ``guards.Guards`` when the core first says FALLBACK)."""

    __slots__ = ("_calls", "_loop")

    def __init__(self, calls: FallbackCalls, loop: asyncio.AbstractEventLoop) -> None:
        self._calls = calls  # the guards' proxy of the run's ``Calls``
        self._loop = loop

    def fall_back(
        self, attempt: Attempt, original: BaseException, outcomes: FallbackOutcomes
    ) -> None:
        """The core said FALLBACK: call the node's fallback once with its failure."""
        job = attempt.job
        fallback = job.node.fallback
        assert fallback is not None  # the core names only jobs that have one
        if logger.isEnabledFor(logging.WARNING):
            logger.warning(
                "%s failed for good with %s: %s; using its fallback",
                job.subject,
                type(original).__qualname__,
                original,
                extra={"run_id": self._calls.report().run_id, "node": job.name},
            )
        try:
            result = fallback(original)
        except BaseException as error:
            self.failed(attempt, original, error, outcomes)
            return
        if asyncio.iscoroutine(result) or asyncio.isfuture(result) or hasattr(result, "__await__"):
            running = Attempt(job, attempt.number, None)
            running.aw = result
            running.state = AttemptState.RUNNING
            self._calls.table.add(running)
            self._calls.table.live += 1
            running.task = self._loop.create_task(self._await(running, original))
            return
        self.returned(attempt, original, result, outcomes)

    async def _await(self, running: Attempt, original: BaseException) -> None:
        table = self._calls.table
        try:
            value = await running.aw
        except BaseException as error:  # never let anything escape a task
            table.live -= 1
            table.post((_FELL_BACK, running, (True, error, original)))
            del running  # error's traceback holds this frame: not the attempt and its task
        else:
            table.live -= 1
            table.post((_FELL_BACK, running, (False, value, original)))

    def fell_back(
        self, running: Attempt, outcome: tuple[bool, Any, BaseException], outcomes: FallbackOutcomes
    ) -> None:
        """An async fallback ended (``(raised, value or error, original failure)``)."""
        self._calls.table.end(running)
        raised, payload, original = outcome
        if running.state >= _CANCELLED:  # the run stopped meanwhile
            self._calls.report().attempt_cancelled(running.id, running.number + 1)
            self._calls.execute(self._calls.run.drained(running.id))
            return
        if raised:
            self.failed(running, original, payload, outcomes)
        else:
            self.returned(running, original, payload, outcomes)

    def returned(
        self, attempt: Attempt, original: BaseException, value: Any, outcomes: FallbackOutcomes
    ) -> None:
        """The fallback gave ``value``: the node's if it passes the node's output check."""
        node = attempt.job.node
        check = checker(node.output_type)
        try:
            ok = check is None or check(value)
        except BaseException as broken:
            self.failed(attempt, original, broken, outcomes)
            return
        if not ok:
            error: BaseException = invalid_output(node.name, node.origin, node.output_type, value)
            add_note_once(error, f"sdax_hamilton: node {node.name!r}: the value of its fallback")
            self.failed(attempt, original, error, outcomes)
            return
        outcomes.fallback_used(attempt, value, original)

    def failed(
        self,
        attempt: Attempt,
        original: BaseException,
        error: BaseException,
        outcomes: FallbackOutcomes,
    ) -> None:
        """The fallback raised ``error`` (or its value failed the check): the node fails
        with it, the original failure as its cause."""
        if error is not original and not isinstance(error, _TERMINATION):
            error.__cause__ = original
        outcomes.fallback_failed(attempt, error)
