"""Hedged rounds carried out (docs/hedging.md): one START of a hedged node is one round.

The core's ``Run`` sees a round as one attempt of the job (its retries start new rounds,
docs/contract.md#retry-loop); the round's own state machine, ``_core.HedgeRound``
(core/src/hedge.rs), decides when a hedge is due, which call won and when the round has
failed or drained. This module only carries those decisions out: each call of the round is a
task of its own, with its own timeout (clipped by the run's deadline), its own bulkhead
permit (call 0 holds the attempt's), and its own events (each call is an attempt, numbered
across the node's rounds). The round hands the executor the winner's value, or call 0's
exception when every call failed; the attempt's ``number`` is set to the call whose ending
the executor reports.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import weakref
from typing import Any, Final, Protocol, cast

from .. import _core
from .attempts import Attempt
from .calls_seen import CallsSeen
from .guards import Guards
from .jobs import Job
from .permits import give_back
from .runtime import TIMEOUT_MESSAGE
from .verdicts import is_retryable


class RunCalls(CallsSeen, Protocol):
    """What hedged rounds use of the run's ``calls.Calls``, which holds them (a protocol:
    ``calls`` imports this module, which imports nothing that imports it)."""

    def guards(self) -> Guards: ...


_monotonic: Final = time.monotonic
_isawaitable: Final = inspect.isawaitable


class Member:
    """One call of a round."""

    __slots__ = (
        "deadline",
        "due",
        "ended",
        "index",
        "number",
        "outcome",
        "permit",
        "started",
        "stopped",
        "task",
        "timed_out",
        "timer",
    )

    def __init__(self, index: int, number: int, permit: bool) -> None:
        self.index = index  # its number in the round (0: the call that started it)
        self.number = number  # 0-based attempt number across the node's rounds
        self.permit = permit  # holds a bulkhead permit of its own (hedges only)
        self.task: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.deadline = 0.0  # loop time its timeout ends
        self.due = 0.0  # monotonic time its timeout ends
        self.started = 0.0
        self.ended = 0.0
        self.timed_out = False
        self.stopped = False  # told to stop (it lost, or the round was aborted)
        self.outcome: tuple[bool, Any] | None = None  # (raised, exception or value)


class Hedger:
    """One run's hedged rounds (made when a hedged node first starts)."""

    __slots__ = ("_calls", "_loop", "started")

    def __init__(self, calls: RunCalls, loop: asyncio.AbstractEventLoop) -> None:
        # A proxy: the run's ``Calls`` holds its hedger, which must not hold it back.
        self._calls: RunCalls = cast("RunCalls", weakref.proxy(calls))
        self._loop = loop
        self.started: dict[int, int] = {}  # job -> calls started so far, every round

    def number(self, attempt: Attempt) -> None:
        """Give a round's first call its attempt number (calls count across rounds) before
        anything reports it."""
        job = attempt.id
        base = self.started.get(job, 0)
        if base != attempt.number:
            clipped = self._calls.clipped
            if clipped is not None and clipped[job] == attempt.number:
                clipped[job] = base
            attempt.number = base
        self.started[job] = base + 1

    def begin(self, attempt: Attempt, kwargs: dict[str, Any]) -> None:
        """The admitted ``attempt`` of a hedged job is a round: awaited as its awaitable,
        which times each call itself."""
        timeout = attempt.timeout
        attempt.timeout = None
        attempt.aw = self._round(attempt, kwargs, timeout)
        self._calls.table.fresh.append(attempt)

    # ------------------------------------------------------------------ the round

    async def _round(self, attempt: Attempt, kwargs: dict[str, Any], limit: float | None) -> Any:
        job = attempt.job
        hedge = job.node.hedge
        assert hedge is not None
        after = hedge.delay()
        round_ = _core.HedgeRound(self._loop.time(), hedge.hedges)
        members = [Member(0, attempt.number, False)]
        self._launch(members[0], job, kwargs, limit)
        told: set[int] = set()
        try:
            winner = await self._drive(round_, after, members, told, job, kwargs)
        except BaseException:
            # The run stops this node (the caller's cancellation, another node's failure):
            # every call is cancelled and drained before the round's cancellation goes on.
            await self._aborted(round_, attempt, members, told)
            raise
        completion = round_.completion()
        assert completion is not None
        if completion[0] == "won" and winner is not None:
            attempt.number = winner.number
            outcome = winner.outcome
            assert outcome is not None
            if hedge.window is not None:
                hedge.window.record(winner.ended - winner.started)
            return outcome[1]
        attempt.number = members[0].number
        error = self._failure(job, members, completion[1])
        # The error's traceback holds this frame: not the attempt, the round's calls and
        # their tasks.
        del members, told, attempt
        raise error

    async def _drive(
        self,
        round_: _core.HedgeRound,
        after: float,
        members: list[Member],
        told: set[int],
        job: Job,
        kwargs: dict[str, Any],
    ) -> Member | None:
        """Run the round until it is complete; its winner, if any."""
        loop = self._loop
        winner: Member | None = None
        while round_.completion() is None:
            # Under an eager task factory a call may end inside create_task: look at every
            # call, not only what asyncio.wait hands back.
            ended = [m for m in members if self._over(m) and m.index not in told]
            if not ended:
                due = round_.next_due(after)
                pending = [m.task for m in members if not self._over(m) and m.task]
                wait = None if due is None else max(due - loop.time(), 0.0)
                await asyncio.wait(pending, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                if due is not None and loop.time() >= due and round_.completion() is None:
                    member = self._hedge(round_, after, len(members), job, kwargs)
                    if member is not None:
                        members.append(member)
                continue
            for member in ended:
                told.add(member.index)
                if self._ended(round_, member, members, winner, job):
                    winner = member
        return winner

    async def _aborted(
        self,
        round_: _core.HedgeRound,
        attempt: Attempt,
        members: list[Member],
        told: set[int],
    ) -> None:
        """Cancel every running call, wait for each to end, report them; the executor
        reports one of them (the attempt's cancellation)."""
        for index in round_.abort():
            self._stop(members[index])
        await self._drain(members)
        kept = self._kept(members, told)
        for member in members:
            if member.index not in told:
                told.add(member.index)
                self._ended(round_, member, members, None, attempt.job, quiet=member is kept)
        if kept is not None:
            attempt.number = kept.number
            if kept.index:
                self._first_failed(members[0], attempt.job)

    def _failure(self, job: Job, members: list[Member], others: list[int]) -> BaseException:
        """Every call failed: call 0's exception is the round's; the others are noted."""
        first = members[0].outcome
        assert first is not None
        error: BaseException = first[1]
        for index in others:
            other = members[index].outcome
            if other is not None and other[0]:
                error.add_note(
                    f"{job.subject}: hedged attempt {members[index].number + 1} failed too, "
                    f"with {type(other[1]).__qualname__}"
                )
        return error

    def _over(self, member: Member) -> bool:
        """Whether the call has ended; one cancelled before its first step never ran its
        body: it ended with that cancellation."""
        if member.outcome is not None:
            return True
        task = member.task
        if task is None or not task.done():
            return False
        member.outcome = (True, asyncio.CancelledError())
        member.ended = self._loop.time()
        return True

    def _kept(self, members: list[Member], told: set[int]) -> Member | None:
        """The stopped call whose cancellation the executor reports (call 0 if it was
        stopped, else the first other one)."""
        for member in members:
            if member.index not in told and member.stopped:
                return member
        return None

    async def _drain(self, members: list[Member]) -> None:
        """Wait until every call has ended; a further cancellation meanwhile is absorbed
        (the round is already stopping)."""
        while True:
            pending = [m.task for m in members if not self._over(m) and m.task]
            if not pending:
                return
            try:
                await asyncio.wait(pending)
            except asyncio.CancelledError:
                continue

    def _ended(
        self,
        round_: _core.HedgeRound,
        member: Member,
        members: list[Member],
        winner: Member | None,
        job: Job,
        quiet: bool = False,
    ) -> bool:
        """Tell the round how ``member`` ended, carry out its answer and report the call;
        ``True`` when it won."""
        report = self._calls.report()
        outcome = member.outcome
        assert outcome is not None
        raised, payload = outcome
        node = job.node
        if member.permit and node.bulkhead is not None:
            member.permit = False
            give_back(node.bulkhead)
        if member.stopped:
            round_.drained(member.index)
            if not quiet:
                error = payload if raised and not _cancelled(payload) else None
                reason = None if winner is None else f"lost to attempt {winner.number + 1}"
                report.attempt_cancelled(job.id, member.number + 1, error, reason)
            return False
        if raised and member.timed_out and _cancelled(payload):
            payload = TimeoutError()
            member.outcome = (True, payload)
        if not raised:
            check = node.output_check
            if check is not None and not check(payload):
                raised = True
                payload = TypeError(f"Invalid output from {node.name} ({node.origin})")
                member.outcome = (True, payload)
        if raised:
            round_.failed(member.index)
            self._record(job, member, payload)
            if member.index:  # call 0's failure is reported once the round is decided
                report.attempt_failed(
                    job.id, member.number + 1, payload, timed_out=member.timed_out, retry_delay=None
                )
            return False
        kind, cancel = round_.succeeded(member.index)
        if kind != "won":
            return False
        self._record(job, member, None)
        self._first_failed(members[0], job)
        if member.index and self._calls.watching:
            report.attempt_returned(job.id, member.number + 1, member.timed_out)
        for index in cancel:
            self._stop(members[index])
        return True

    def _first_failed(self, first: Member, job: Job) -> None:
        """The round did not fail, yet call 0 did (earlier): report it now."""
        outcome = first.outcome
        if outcome is not None and outcome[0] and not first.stopped:
            self._calls.report().attempt_failed(
                job.id, first.number + 1, outcome[1], timed_out=first.timed_out, retry_delay=None
            )

    def _record(self, job: Job, member: Member, error: BaseException | None) -> None:
        """A hedge's outcome goes to the node's breaker as an attempt's would (call 0's is
        the attempt's, ``guards.py``): a success, or a failure the policy retries."""
        breaker = job.node.breaker
        if not member.index or breaker is None:
            return
        if error is not None and not is_retryable(error, job.retryable):
            return
        transition = breaker._core.record(_monotonic(), error is None, None)
        if transition is not None:
            self._calls.guards()._transition(breaker, transition)

    def _stop(self, member: Member) -> None:
        """Tell a running call to stop (it lost, or the round is aborted)."""
        if member.outcome is not None or member.stopped:
            return
        member.stopped = True
        timer = member.timer
        if timer is not None:
            member.timer = None
            timer.cancel()
        if member.task is not None and not member.timed_out:
            member.task.cancel()

    # ------------------------------------------------------------------ calls

    def _hedge(
        self,
        round_: _core.HedgeRound,
        after: float,
        index: int,
        job: Job,
        kwargs: dict[str, Any],
    ) -> Member | None:
        """A hedge is due now: start it, or skip it when the run's deadline has passed, the
        breaker is not closed, no bulkhead permit is free or the retry budget refuses it (a
        skipped hedge is never an attempt: no event)."""
        loop = self._loop
        now = loop.time()
        calls = self._calls
        node = job.node
        hedge = node.hedge
        assert hedge is not None
        timeout = hedge.timeout
        clipped = False
        deadline = calls.run.deadline
        if deadline is not None:
            left = deadline - now
            if left <= 0.0:
                round_.skip_hedge(now, after)
                return None
            if timeout is None or left < timeout:
                timeout, clipped = left, True
        bulkhead = node.bulkhead
        guard = node.guard
        # Its breaker closed and a permit free, or no hedge: never a probe, never queued
        # (the core's admission at once, which takes nothing when it refuses).
        if guard is not None and not guard.admit():
            round_.skip_hedge(now, after)
            return None
        permit = bulkhead is not None
        shared = calls.jobs.shared
        budget = None if shared is None else shared[0]
        if budget is not None and not budget._core.try_take(_monotonic()):
            if permit and bulkhead is not None:
                give_back(bulkhead)
            round_.skip_hedge(now, after)
            return None
        if round_.start_hedge(now, after) is None:  # pragma: no cover - due was checked
            if permit and bulkhead is not None:
                give_back(bulkhead)
            return None
        started = self.started.get(job.id, 0)
        self.started[job.id] = started + 1
        member = Member(index, started, permit)
        report = calls.report()
        report.hedge_started(job.id, started + 1)
        report.attempt_started(job.id, started + 1, clipped)
        self._launch(member, job, kwargs, timeout)
        return member

    def _launch(
        self, member: Member, job: Job, kwargs: dict[str, Any], timeout: float | None
    ) -> None:
        loop = self._loop
        member.started = loop.time()
        if timeout is not None:
            member.deadline = member.started + timeout
            member.due = _monotonic() + timeout
        member.task = loop.create_task(self._call(member, job, kwargs))
        if timeout is not None and member.outcome is None:
            member.timer = loop.call_at(member.deadline, self._time_out, member, job, timeout)

    async def _call(self, member: Member, job: Job, kwargs: dict[str, Any]) -> None:
        try:
            result = job.node.call(**kwargs)
            if _isawaitable(result):
                result = await result
        except BaseException as exc:  # never let anything escape a task
            member.outcome = (True, exc)
        else:
            member.outcome = (False, result)
        member.ended = self._loop.time()
        timer = member.timer
        if timer is not None:
            member.timer = None
            timer.cancel()
        # A failure's traceback holds this frame: not the call's member (its task), the
        # hedger or the arguments.
        del member, job, kwargs, self

    def _time_out(self, member: Member, job: Job, timeout: float) -> None:
        """A call's time is up (checked on both clocks, as ``timers.py`` does)."""
        member.timer = None
        if member.outcome is not None or member.stopped:
            return
        loop = self._loop
        if loop.time() < member.deadline or _monotonic() < member.due:
            rest = max(member.deadline - loop.time(), member.due - _monotonic(), 0.0)
            member.timer = loop.call_later(rest, self._time_out, member, job, timeout)
            return
        member.timed_out = True
        task = member.task
        if task is not None:
            task.cancel(TIMEOUT_MESSAGE)
        self._calls.report().attempt_timed_out(job.id, member.number + 1, timeout)


def _cancelled(error: BaseException) -> bool:
    return isinstance(error, asyncio.CancelledError)
