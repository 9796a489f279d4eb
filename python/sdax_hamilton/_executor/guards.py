"""The shared objects at work in one run (docs/resilience.md): a guarded attempt is
admitted by its breaker, then by its bulkhead, before its call; it gives its permit back
and its outcome to the breaker once it has ended and drained. A node that has failed for
good falls back (``fallbacks.py``).

The rules are the core's: whether a breaker lets an attempt through and what an outcome
does to it, who gets a permit and in which order (core/src/shared/), whether a retry fits
the budget and when a fallback is called (core/src/run.rs). This module carries them
out: it parks a waiting attempt until its permit comes, and wakes the waiter a released
permit goes to, on whatever loop or thread it waits.

Most attempts are admitted at once (the breaker closed, a permit free): one call into the
node's ``_core.Guard`` admits such an attempt and one ends it, the clock read there; it
holds the shared ``AT_ONCE`` record. A lone first attempt admitted so is admitted, called
and, if it is over without the driver, ended by the core's ``Run`` itself (src/carry.rs);
the driver sees such an attempt only when it is handed back (``carried``), when a permit
it gave back went to a waiter (``wake``), or when its success changed its breaker's state
(``carried_transition``). Any other attempt is admitted by ``_admit``, which may queue
it, refuse it or let it through as a probe.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Sequence
from typing import Any, Final, Protocol

from .. import _core
from .._resilience import Bulkhead, BulkheadFull, CircuitBreaker, CircuitOpen
from .attempts import Attempt, AttemptState, EventKind
from .calls_seen import CallsSeen
from .fallbacks import FallbackOutcomes, Fallbacks
from .jobs import Job
from .permits import _lock, _wakers, give_back, wake
from .runtime import NodeRuntime


class RunCalls(CallsSeen, Protocol):
    """What the guards use of the run's ``calls.Calls``, which holds them (a protocol:
    neither module imports the other's, the package's imports have no cycle)."""

    @property
    def kwargs(self) -> list[dict[str, Any] | None]: ...
    def was_clipped(self, job: Job, attempt_number: int) -> bool: ...
    def execute(self, commands: Sequence[_core.Command]) -> None: ...
    def call(self, attempt: Attempt, job: Job, kwargs: dict[str, Any]) -> None: ...
    def returned(self, attempt: Attempt, result: Any) -> None: ...


logger = logging.getLogger("sdax_hamilton")

_RAISED: Final = EventKind.RAISED
_UNSTARTED: Final = EventKind.UNSTARTED
_PERMIT: Final = EventKind.PERMIT
_CANCELLED: Final = AttemptState.CANCELLED
_TIMED_OUT: Final = AttemptState.TIMED_OUT


def breaker_name(breaker: CircuitBreaker, nodes: Sequence[NodeRuntime]) -> str:
    """How logs and errors name a breaker: its ``name``, else the plan's nodes naming it."""
    if breaker.name is not None:
        return repr(breaker.name)
    return "of " + ", ".join(repr(node.name) for node in nodes if node.breaker is breaker)


def bulkhead_name(bulkhead: Bulkhead, attempt: Attempt) -> str:
    """How errors name a bulkhead: its ``name``, else the attempt's node."""
    if bulkhead.name is not None:
        return repr(bulkhead.name)
    return f"of node {attempt.job.name!r}"


class Held:
    """What one guarded attempt holds: a permit (or its place in the queue) and a probe."""

    __slots__ = ("bulkhead", "permit", "probe", "since", "state", "timer", "waited", "waiter")

    def __init__(self) -> None:
        self.bulkhead: Bulkhead | None = None
        self.state: str | None = None  # the breaker's state that admitted it
        self.waited = 0.0  # seconds it waited for its permit
        self.permit = False
        self.waiter: int | None = None  # queued for a permit under this id
        self.probe: int | None = None  # the breaker's probe ticket
        self.since = 0.0  # loop time the wait began
        self.timer: asyncio.TimerHandle | None = None  # the run's deadline, while waiting


AT_ONCE: Final = Held()
"""What an attempt admitted at once holds (``_core.Guard.admit``; shared, never changed): a
permit of its node's bulkhead, if any, and its node's closed breaker's admission, if any,
without a probe; its node's ``guard`` ends it (``Guard.end``)."""


class Guards:
    """One run's side of its shared objects (made when a guarded attempt first starts)."""

    __slots__ = ("_calls", "_fallbacks", "_loop", "held")

    def __init__(self, calls: RunCalls, loop: asyncio.AbstractEventLoop) -> None:
        # A proxy: the run's ``Calls`` holds its guards, which must not hold it back (a
        # run leaves no reference cycle, tests/test_driver_memory.py).
        self._calls: RunCalls = weakref.proxy(calls)
        self._loop = loop
        self._fallbacks: Fallbacks | None = None  # made when the core first says FALLBACK
        self.held: dict[Attempt, Held] = {}

    # ------------------------------------------------------------------ admission

    def admit(self, attempt: Attempt) -> bool:
        """Admit ``attempt`` before its call: ``True`` to call it now; ``False`` when it
        was rejected (its failure is queued) or waits for a permit (called when granted).
        At once (the breaker closed, a permit free) in one call into the core; otherwise
        nothing was taken and ``_admit`` asks again, the way that may queue it, refuse it
        or let it through as a probe (a node with hedging alone holds nothing)."""
        guard = attempt.job.node.guard
        if guard is None or guard.admit():
            self.held[attempt] = AT_ONCE
            return True
        return self._admit(attempt)

    def _admit(self, attempt: Attempt) -> bool:
        """``admit``, when not at once. An open breaker is asked first: a rejected attempt
        takes no permit."""
        node = attempt.job.node
        held = Held()
        breaker = node.breaker
        bulkhead = node.bulkhead
        if breaker is not None and node.guard is not None:
            admission, transition, state = node.guard.ask()
            if transition is not None:
                self._transition(breaker, transition)
            if isinstance(admission, float):
                error = CircuitOpen(
                    f"circuit breaker {self._breaker_name(breaker)} is open; "
                    f"retry after {admission:.3g} s",
                    admission,
                    breaker,
                )
                state = "half_open" if state == "half_open" else "open"
                self._reject(attempt, error, "circuit_rejected", None, state)
                return False
            held.probe = admission  # a probe ticket, or None
            held.state = "closed" if admission is None else "half_open"
        if bulkhead is not None:
            held.bulkhead = bulkhead
            with _lock:
                got = bulkhead._core.try_acquire()
                if type(got) is int:
                    post = self._calls.table.post
                    loop = self._loop
                    _wakers[(id(bulkhead._core), got)] = lambda: loop.call_soon_threadsafe(
                        post, (_PERMIT, attempt, True)
                    )
            if got == "rejected":
                self._forget_probe(attempt, held)
                full = BulkheadFull(
                    f"bulkhead {bulkhead_name(bulkhead, attempt)} is full: "
                    f"{bulkhead.max_concurrent} call(s) running, "
                    f"{bulkhead.max_waiting} waiting",
                    bulkhead,
                )
                self._reject(attempt, full, "bulkhead_rejected", 0.0, held.state)
                return False
            if got != "granted":
                assert type(got) is int
                held.waiter = got
                held.since = self._loop.time()
                self.held[attempt] = held
                deadline = self._deadline()
                if deadline is not None:
                    held.timer = self._loop.call_at(
                        deadline, self._calls.table.post, (_PERMIT, attempt, False)
                    )
                self._calls.report().bulkhead_waiting(attempt.id, attempt.number + 1)
                return False
            held.permit = True
        self.held[attempt] = held
        return True

    def carried(self, attempt: Attempt) -> None:
        """The core's ``Run`` admitted ``attempt`` and handed it back (src/carry.rs): it
        holds a permit of its node's bulkhead, if any, and its node's breaker, if any, let
        it through closed; it ends as one the driver admitted at once (``ended``)."""
        self.held[attempt] = AT_ONCE

    def carried_transition(self, job: int, transition: str) -> None:
        """The success of an attempt of ``job`` the core's ``Run`` carried out changed its
        breaker's state (src/carry.rs): log it."""
        breaker = self._calls.jobs[job].node.breaker
        if breaker is not None:
            self._transition(breaker, transition)

    def _reject(
        self,
        attempt: Attempt,
        error: BaseException,
        kind: str,
        wait: float | None,
        state: str | None,
    ) -> None:
        """The attempt fails at once with ``error``, without a call."""
        self._calls.report().rejected(attempt.id, attempt.number + 1, kind, error)
        self._rejected(attempt, error, wait, state)

    def _rejected(
        self, attempt: Attempt, error: BaseException, wait: float | None, state: str | None
    ) -> None:
        """The attempt fails with ``error``, without a call; Hamilton node hooks around the
        node's function see it fail so (docs/adapters.md)."""
        calls = self._calls
        job = attempt.job
        if calls.watching:
            calls.report().guarded_attempt_started(
                job.id, attempt.number + 1, calls.was_clipped(job, attempt.number), wait, state
            )
        rejected = getattr(job.node.call, "rejected", None)
        if rejected is None:
            calls.table.post((_RAISED, attempt, error))
            return
        try:
            result = rejected(calls.kwargs[job.id] or {}, error)
        except BaseException as exc:
            calls.table.post((_RAISED, attempt, exc))
            return
        calls.returned(attempt, result)

    def _call_admitted(self, attempt: Attempt, waited: float) -> None:
        """A waiting attempt got its permit after ``waited`` seconds: call it now, its
        timeout counted from now and cut to the run's deadline (the wait is the run's,
        not the attempt's)."""
        calls = self._calls
        job = attempt.job
        deadline = self._deadline()
        if deadline is not None:
            left = deadline - self._loop.time()
            if attempt.timeout is None or attempt.timeout > left:
                attempt.timeout = max(left, 0.0)
                self._mark_clipped(attempt)
        calls.report().bulkhead_waited(job.id, attempt.number + 1, waited)
        kwargs = calls.kwargs[job.id]
        assert kwargs is not None  # read before the attempt asked for a permit
        calls.call(attempt, job, kwargs)

    def _deadline(self) -> float | None:
        """The forward phase's deadline on the loop's clock, if the run has one."""
        return self._calls.run.deadline if self._calls.clipped is not None else None

    def _mark_clipped(self, attempt: Attempt) -> None:
        """The run's deadline cut this attempt short (its notes and events say so)."""
        clipped = self._calls.clipped
        if clipped is not None:
            clipped[attempt.id] = attempt.number

    def admitted(self, attempt: Attempt) -> tuple[float | None, str | None]:
        """What an admitted attempt's bulkhead and breaker did: the seconds it waited for
        its permit (``None``: no bulkhead), the breaker's state (``None``: no breaker)."""
        held = self.held.get(attempt)
        if held is None:  # pragma: no cover - admitted attempts are held
            return None, None
        if held is AT_ONCE:
            node = attempt.job.node
            return (
                None if node.bulkhead is None else 0.0,
                None if node.breaker is None else "closed",
            )
        return (None if held.bulkhead is None else held.waited), held.state

    def permit(self, attempt: Attempt, granted: bool) -> None:
        """A waiting attempt's permit came (``granted``), or the run's deadline passed
        while it waited."""
        held = self.held.get(attempt)
        if held is None or held.waiter is None:
            return  # it left meanwhile
        waiter, held.waiter = held.waiter, None
        timer, held.timer = held.timer, None
        if timer is not None:
            timer.cancel()
        bulkhead = held.bulkhead
        assert bulkhead is not None
        waited = self._loop.time() - held.since
        if granted:
            with _lock:
                claimed = bulkhead._core.claim(waiter)
            if claimed:
                held.permit = True
                held.waited = waited
                self._call_admitted(attempt, waited)
                return
        self._leave(bulkhead, waiter)
        self._forget_probe(attempt, held)
        del self.held[attempt]
        # The run's deadline passed before a permit came: the attempt ran out of time.
        attempt.state = _TIMED_OUT
        self._mark_clipped(attempt)
        self._calls.table.post((_RAISED, attempt, TimeoutError("the run's timeout expired")))

    def waiting(self, attempt: Attempt) -> bool:
        held = self.held.get(attempt)
        return held is not None and held.waiter is not None

    def cancel_waiting(self, attempt: Attempt) -> None:
        """The core CANCELled an attempt waiting for a permit: it leaves the queue (its
        permit, if one was on its way, passes on) and ends without a call."""
        held = self.held.pop(attempt)
        waiter, held.waiter = held.waiter, None
        if held.timer is not None:
            held.timer.cancel()
        if held.bulkhead is not None and waiter is not None:
            self._leave(held.bulkhead, waiter)
        self._forget_probe(attempt, held)
        attempt.state = _CANCELLED
        self._calls.table.post((_UNSTARTED, attempt, None))

    def _leave(self, bulkhead: Bulkhead, waiter: int) -> None:
        with _lock:
            _wakers.pop((id(bulkhead._core), waiter), None)
            passed = bulkhead._core.cancel_waiter(waiter)
        wake(bulkhead._core, passed)

    def abandon(self) -> None:
        """The run's bookkeeping failed: give back everything still held."""
        for attempt in list(self.held):
            held = self.held.pop(attempt)
            if held is AT_ONCE:
                guard = attempt.job.node.guard
                if guard is not None:
                    guard.end(None)
                continue
            if held.timer is not None:
                held.timer.cancel()
            if held.waiter is not None and held.bulkhead is not None:
                self._leave(held.bulkhead, held.waiter)
            elif held.permit and held.bulkhead is not None:
                give_back(held.bulkhead)
            self._forget_probe(attempt, held)

    # ------------------------------------------------------------------ outcomes

    def ended(self, attempt: Attempt, success: bool | None) -> None:
        """The attempt has ended and drained: its permit goes back; its outcome goes to
        the breaker (``success``: ``True``/``False``; ``None``: nothing to record, a
        cancellation or an exception the node's policy does not retry)."""
        held = self.held.pop(attempt, None)
        if held is AT_ONCE:  # one call into the core
            node = attempt.job.node
            guard = node.guard
            if guard is not None:
                transition = guard.end(success)
                if transition is not None and node.breaker is not None:
                    self._transition(node.breaker, transition)
            return
        if held is None:
            return  # rejected: it held nothing
        node = attempt.job.node
        if held.permit and held.bulkhead is not None:
            give_back(held.bulkhead)
        if node.breaker is None or node.guard is None:
            return
        if success is None:
            self._forget_probe(attempt, held)
            return
        transition = node.guard.record(success, held.probe)
        if transition is not None:
            self._transition(node.breaker, transition)

    def _forget_probe(self, attempt: Attempt, held: Held) -> None:
        probe, held.probe = held.probe, None
        breaker = attempt.job.node.breaker
        if probe is not None and breaker is not None:
            breaker._core.forget_probe(probe)

    def _transition(self, breaker: CircuitBreaker, transition: str) -> None:
        """Log a breaker's transition: open WARNING, closed INFO, half-open DEBUG."""
        name = self._breaker_name(breaker)
        if transition == "open":
            logger.warning(
                "circuit breaker %s opened: attempts fail with CircuitOpen for %s s",
                name,
                breaker.break_for,
                extra={"run_id": self._calls.report().run_id, "node": None},
            )
        elif transition == "closed":
            logger.info(
                "circuit breaker %s closed", name,
                extra={"run_id": self._calls.report().run_id, "node": None},
            )  # fmt: skip
        else:
            logger.debug(
                "circuit breaker %s half-open: letting %d probe(s) through", name,
                breaker.probes, extra={"run_id": self._calls.report().run_id, "node": None},
            )  # fmt: skip

    def _breaker_name(self, breaker: CircuitBreaker) -> str:
        return breaker_name(breaker, self._calls.jobs.nodes)

    # ------------------------------------------------------------------ fallback

    def fall_back(
        self, attempt: Attempt, original: BaseException, outcomes: FallbackOutcomes
    ) -> None:
        """The core said FALLBACK: the node's fallback is called (``fallbacks.py``)."""
        fallbacks = self._fallbacks
        if fallbacks is None:
            fallbacks = self._fallbacks = Fallbacks(self._calls, self._loop)
        fallbacks.fall_back(attempt, original, outcomes)

    def fell_back(
        self, running: Attempt, outcome: tuple[bool, Any, BaseException], outcomes: FallbackOutcomes
    ) -> None:
        """An async fallback ended (``Fallbacks.fell_back``)."""
        assert self._fallbacks is not None  # it was awaited by the run's ``Fallbacks``
        self._fallbacks.fell_back(running, outcome, outcomes)
