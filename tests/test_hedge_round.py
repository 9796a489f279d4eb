"""The core's hedged round through its binding (docs/contract.md#hedged-rounds), driven as a
driver will drive it: real asyncio tasks for the calls, the round deciding when a hedge is
due, who won, what to cancel, and when the round is complete (every loser drained).
core/tests/hedge.rs holds the property tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from sdax_hamilton import _core

Call = Callable[[int], Awaitable[str]]


async def hedged(call: Call, hedge_after: float, hedges: int) -> tuple[str, list[str]]:
    """Run one hedged round of ``call`` (given its call number); returns the winning value
    and a log of what happened, in order. Raises call 0's exception when every call failed."""
    loop = asyncio.get_running_loop()
    log: list[str] = []
    round_ = _core.HedgeRound(loop.time(), hedges)
    tasks = {0: asyncio.ensure_future(call(0))}
    errors: dict[int, BaseException] = {}
    value: str | None = None
    told: set[int] = set()  # calls whose ending the round has been told
    while round_.completion() is None:
        # Every ended call not yet told, whenever it ended: under an eager task factory a
        # call may end inside ensure_future() and never be among asyncio.wait's ``done``.
        ended = [number for number, task in tasks.items() if task.done() and number not in told]
        if not ended:
            due = round_.next_due(hedge_after)
            pending = [task for task in tasks.values() if not task.done()]
            timeout = None if due is None else max(due - loop.time(), 0.0)
            done, _ = await asyncio.wait(
                pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                number = round_.start_hedge(loop.time(), hedge_after)
                if number is not None:
                    log.append(f"hedge {number}")
                    tasks[number] = asyncio.ensure_future(call(number))
            continue
        for number in ended:
            told.add(number)
            task = tasks[number]
            if task.cancelled():
                round_.drained(number)
                log.append(f"drained {number}")
            elif task.exception() is not None:
                errors[number] = task.exception()  # type: ignore[assignment]
                round_.failed(number)
                log.append(f"failed {number}")
            else:
                kind, cancel = round_.succeeded(number)
                log.append(f"{kind} {number}")
                if kind == "won":
                    value = task.result()
                    for loser in cancel:
                        tasks[loser].cancel()
                        log.append(f"cancel {loser}")
    completion = round_.completion()
    assert completion is not None
    log.append(f"complete {completion[0]}")
    assert all(task.done() for task in tasks.values())  # nothing left running
    if completion[0] == "failed":
        raise errors[0]
    assert value is not None
    return value, log


async def test_a_slow_first_call_is_hedged_the_hedge_wins_and_the_first_is_drained() -> None:
    release = asyncio.Event()
    drained = asyncio.Event()

    async def call(number: int) -> str:
        if number == 0:
            try:
                await release.wait()  # the slow one: never returns by itself
            finally:
                drained.set()
        return f"value of {number}"

    value, log = await hedged(call, hedge_after=0.01, hedges=2)
    assert value == "value of 1"
    assert log == ["hedge 1", "won 1", "cancel 0", "drained 0", "complete won"]
    assert drained.is_set()


async def test_never_more_than_one_plus_hedges_calls() -> None:
    calls: list[int] = []
    gate = asyncio.Event()

    async def call(number: int) -> str:
        calls.append(number)
        if len(calls) == 3:
            gate.set()
        await gate.wait()
        await asyncio.sleep(0.05 if number else 0)
        return f"value of {number}"

    value, log = await hedged(call, hedge_after=0.001, hedges=2)
    assert calls == [0, 1, 2]
    assert value == "value of 0"
    assert log[:2] == ["hedge 1", "hedge 2"] and log[-1] == "complete won"


async def test_when_every_call_fails_the_round_raises_the_first_calls_exception() -> None:
    async def call(number: int) -> str:
        await asyncio.sleep(0.02 if number == 0 else 0)
        raise (LookupError if number == 0 else KeyError)(f"call {number}")

    with pytest.raises(LookupError, match="call 0"):
        await hedged(call, hedge_after=0.005, hedges=1)


async def test_a_failure_while_another_call_runs_ends_nothing() -> None:
    hedge_running = asyncio.Event()
    first_failed = asyncio.Event()

    async def call(number: int) -> str:
        if number == 0:
            await hedge_running.wait()
            first_failed.set()
            raise ConnectionResetError("dropped")
        hedge_running.set()
        await first_failed.wait()
        return "late but valid"

    value, log = await hedged(call, hedge_after=0.005, hedges=1)
    assert value == "late but valid"
    assert log == ["hedge 1", "failed 0", "won 1", "complete won"]


def test_the_binding_answers_as_the_core() -> None:
    round_ = _core.HedgeRound(0.0, 1)
    assert (round_.started, round_.winner, round_.next_due(0.25)) == (1, None, 0.25)
    assert round_.start_hedge(0.125, 0.25) is None and not round_.skip_hedge(0.125, 0.25)
    assert round_.skip_hedge(0.25, 0.25) and round_.next_due(0.25) == 0.5
    assert round_.start_hedge(0.5, 0.25) == 1 and round_.next_due(0.25) is None
    assert round_.failed(7) == ("ignored", [])
    assert round_.succeeded(1) == ("won", [0])
    assert round_.succeeded(0) == ("recorded", [])
    assert round_.completion() == ("won", [1])
    assert repr(round_) == "<HedgeRound started=2 winner=1>"
    aborted = _core.HedgeRound(0.0, 0)
    assert aborted.abort() == [0] and aborted.completion() is None
    assert aborted.drained(0) == ("recorded", []) and aborted.completion() == ("aborted", [])
    with pytest.raises(OverflowError):
        _core.HedgeRound(0.0, -1)
