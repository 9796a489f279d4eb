"""The carrier's hand-back: a first attempt the core's ``Run`` carried out itself
(src/carry.rs) up to where the driver is needed, turned into the attempt the driver would
have had at that point.

The core hands it back as a ``CARRIED`` command whose ``HandBack`` says how it ended: an
input check refused it (nothing was called), the call raised, it returned a value the
driver checks and reports, or it returned an awaitable (a coroutine that suspended once
already is resumed where it stopped, ``attempts.resume``). docs/internals.md, "The inline
carrier", gives the reasons.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from .. import _core
from .._core import CARRIED_RAISED, CARRIED_REJECTED, CARRIED_RETURNED, CARRIED_SUSPENDED
from .._declarations import Acquisition
from .attempts import BAD_INPUT, RAISED, RETURNED, Attempt, resume
from .calls_seen import CallsSeen
from .guards import Guards
from .jobs import Job
from .record import FailureRecord


class RunCalls(CallsSeen, Protocol):
    """What picking up a hand-back uses of the run's ``calls.Calls`` (a protocol: ``calls``
    imports this module)."""

    @property
    def kwargs(self) -> list[dict[str, Any] | None]: ...
    @property
    def _acquisitions(self) -> list[Acquisition[Any] | None]: ...
    @property
    def task(self) -> asyncio.Task[Any]: ...
    def guards(self) -> Guards: ...
    def failures(self) -> FailureRecord: ...


def carried(calls: RunCalls, job: Job, number: int, hand: _core.HandBack) -> None:
    """Go on with attempt ``number`` (the first) of ``job``, which the core's ``Run``
    carried out up to where the driver is needed: ``hand`` says how it ended and carries
    what the driver needs to go on."""
    attempt = Attempt(job, number, hand.timeout)
    table = calls.table
    table.add(attempt)
    if hand.how == CARRIED_REJECTED:  # an input check raised: nothing was called
        table.post((BAD_INPUT, attempt, hand.payload))
        return
    if job.forward:
        calls.kwargs[job.id] = hand.kwargs  # read by its retries
        if hand.admitted:  # by its bulkhead and breaker: ended as the driver's are
            calls.guards().carried(attempt)
        acquisitions = calls._acquisitions
        if job.node.release is not None and acquisitions[job.id] is None:
            acquisitions[job.id] = Acquisition()
    else:
        before = hand.cancelling
        if before is not None and calls.task.cancelling() > before:
            # The release's coroutine cancelled its own task, as an inline release is
            # seen to: never the caller, whose cancellations land on its own wait.
            calls.failures().caller_cancelled(asyncio.CancelledError(), True)
    how = hand.how
    if how == CARRIED_RAISED:
        table.post((RAISED, attempt, hand.payload))
    elif how == CARRIED_RETURNED:
        table.post((RETURNED, attempt, hand.payload))
    else:  # awaited like any awaitable a call returned (a lone one: inline)
        payload = hand.payload
        attempt.aw = resume(payload, hand.yielded) if how == CARRIED_SUSPENDED else payload
        attempt.started = hand.started  # its timer counts from the call
        table.fresh.append(attempt)
