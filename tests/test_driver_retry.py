"""Retry loop and per-attempt timeouts (docs/contract.md#retry-loop, #timeouts)."""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

import pytest
from support.driver import (
    MODES,
    Journal,
    Mode,
    Node,
    clean_loop,
    coordinator_of,
    execute,
    notes,
    running_task,
    started,
)

from sdax_hamilton import _core
from sdax_hamilton._failures import ExecutionError, RetryableException, failures


def flaky(errors: list[BaseException], result: Any = "ok") -> tuple[Any, list[int]]:
    """An async callable raising ``errors`` in turn, then returning ``result``."""
    calls: list[int] = []

    async def call() -> Any:
        calls.append(len(calls))
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return result

    return call, calls


def logged_retry_delays(caplog: pytest.LogCaptureFixture) -> list[float]:
    """The drawn delays of the retry waits logged since the last call (the last argument of
    each "retry k in D s" record), in order; clears the captured records."""
    found: list[float] = []
    for record in caplog.records:
        if "retry" in str(record.msg):
            assert isinstance(record.args, tuple)
            delay = record.args[-1]
            assert isinstance(delay, float)
            found.append(delay)
    caplog.clear()
    return found


def policy_minimum(node: Node, waits: int) -> float:
    """The least total the first ``waits`` retry waits of ``node`` can last: the lower
    jitter bound of each (half the backoff), whatever the seed."""
    return sum(node.policy().delay_bounds(k)[0] for k in range(waits))


async def test_retryable_failures_are_retried_up_to_retries_then_succeed() -> None:
    call, calls = flaky([ConnectionError(), TimeoutError(), RetryableException()])
    with clean_loop():
        assert await execute([Node("a", call, retries=3)], ["a"]) == {"a": "ok"}
    assert len(calls) == 4


async def test_attempts_are_one_plus_retries_and_the_last_failure_is_the_leaf() -> None:
    errors: list[BaseException] = [ConnectionError(i) for i in range(3)]
    call, calls = flaky(errors)
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await execute([Node("a", call, retries=2)], ["a"])
    assert len(calls) == 3
    assert info.value.exceptions == (errors[2],)
    assert "sdax_hamilton: node 'a' failed after 3 attempts" in notes(errors[2])
    assert notes(errors[0]) == []  # retried failures are not reported


async def test_non_retryable_failure_is_not_retried() -> None:
    error = ValueError("v")
    call, calls = flaky([error])
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await execute([Node("a", call, retries=5)], ["a"])
    assert len(calls) == 1
    assert info.value.exceptions == (error,)


@pytest.mark.parametrize(
    ("error", "attempts"),
    [
        (ConnectionResetError(), 2),  # subclass of a listed class: retried
        (OSError(), 1),  # superclass: not retried
        (ExceptionGroup("g", [ConnectionError(), ConnectionResetError()]), 2),
        (ExceptionGroup("g", [ConnectionError(), ValueError()]), 1),
    ],
)
async def test_retryable_test_uses_isinstance_and_group_leaves(
    error: BaseException, attempts: int
) -> None:
    call, calls = flaky([error, error])
    with clean_loop():
        with pytest.raises(ExecutionError):
            await execute([Node("a", call, retries=1, retryable=(ConnectionError,))], ["a"])
    assert len(calls) == attempts


async def test_a_sync_node_is_retried_too() -> None:
    calls = 0

    def a() -> int:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ConnectionError
        return calls

    with clean_loop():
        assert await execute([Node("a", a, retries=2)], ["a"]) == {"a": 3}


async def test_retry_delays_stay_within_their_jitter_bounds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = asyncio.get_running_loop()
    times: list[float] = []

    async def a() -> str:
        times.append(loop.time())
        if len(times) < 4:
            raise ConnectionError
        return "ok"

    node = Node("a", a, retries=3, initial_delay=0.02, backoff_factor=2.0)
    policy = node.policy()
    with clean_loop(), caplog.at_level(logging.WARNING, logger="sdax_hamilton"):
        assert await execute([node], ["a"], seed=3) == {"a": "ok"}
    delays = logged_retry_delays(caplog)
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert len(delays) == len(gaps) == 3
    for retry, (delay, gap) in enumerate(zip(delays, gaps, strict=True)):
        low, high = policy.delay_bounds(retry)
        assert (low, high) == pytest.approx((0.01 * 2**retry, 0.02 * 2**retry))
        assert low <= delay <= high, (retry, delay)  # the jitter stays within its bounds
        # The next attempt starts no earlier than the drawn delay after this one failed
        # (the driver re-arms a timer that fires early); the upper slack is for a loaded
        # machine, and still fails if the wait were, say, in milliseconds.
        assert gap >= delay - 1e-9, (retry, gap, delay)
        assert gap <= delay + 1.0, (retry, gap, delay)


async def test_seed_makes_the_delays_reproducible(caplog: pytest.LogCaptureFixture) -> None:
    async def delays_of_one_run(seed: int) -> list[float]:
        call, _ = flaky([ConnectionError()] * 3)
        await execute([Node("a", call, retries=3, initial_delay=0.001)], ["a"], seed=seed)
        return logged_retry_delays(caplog)

    with caplog.at_level(logging.WARNING, logger="sdax_hamilton"):
        first = await delays_of_one_run(7)
        second = await delays_of_one_run(7)
        third = await delays_of_one_run(8)
    assert len(first) == 3
    assert first == second
    assert first != third
    for retry, delay in enumerate(first):
        low, high = _core.Policy(initial_delay=0.001).delay_bounds(retry)
        assert low <= delay <= high


@pytest.mark.parametrize("mode_name", MODES)
async def test_timeout_cancels_the_attempt_and_waits_for_it_to_drain_before_retrying(
    mode_name: str,
) -> None:
    mode = Mode(mode_name)
    journal = Journal()

    async def a() -> str:
        mode.seen()
        attempt = journal.count("start")
        journal("start")
        if attempt == 0:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                journal("cancelled")
                for _ in range(5):  # a slow, cooperative drain
                    await asyncio.sleep(0.002)
                journal("drained")
                raise
        mode.finish.set()
        return "second"

    nodes, outputs = mode.nodes(Node("a", a, timeout=0.01, retries=1))
    with clean_loop():
        result = await execute(nodes, outputs)
    assert result["a"] == "second"
    assert journal.entries == ["start", "cancelled", "drained", "start"]
    mode.check()


@pytest.mark.parametrize("mode_name", MODES)
async def test_timeout_without_retries_left_is_a_builtin_timeout_error_leaf(
    mode_name: str,
) -> None:
    mode = Mode(mode_name)
    calls = 0

    async def a() -> int:
        nonlocal calls
        mode.seen()
        calls += 1
        await asyncio.Event().wait()
        return 0

    nodes, outputs = mode.nodes(Node("a", a, timeout=0.005, retries=2))
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await execute(nodes, outputs)
    (leaf,) = info.value.exceptions
    assert type(leaf) is TimeoutError
    assert calls == 3
    assert "sdax_hamilton: node 'a' failed after 3 attempts" in notes(leaf)
    mode.check()


@pytest.mark.parametrize("mode_name", MODES)
async def test_timeout_is_not_retried_when_timeout_error_is_not_in_the_set(
    mode_name: str,
) -> None:
    mode = Mode(mode_name)
    calls = 0

    async def a() -> int:
        nonlocal calls
        mode.seen()
        calls += 1
        await asyncio.Event().wait()
        return 0

    node = Node("a", a, timeout=0.005, retries=2, retryable=(ConnectionError,))
    nodes, outputs = mode.nodes(node)
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await execute(nodes, outputs)
    assert calls == 1
    assert type(info.value.exceptions[0]) is TimeoutError
    mode.check()


@pytest.mark.parametrize("mode_name", MODES)
async def test_an_attempt_that_swallows_its_timeout_and_returns_is_a_success(
    mode_name: str,
) -> None:
    mode = Mode(mode_name)
    calls = 0

    async def a() -> str:
        nonlocal calls
        mode.seen()
        calls += 1
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            mode.finish.set()
            return "swallowed"
        return "never"

    nodes, outputs = mode.nodes(Node("a", a, timeout=0.005, retries=2))
    with clean_loop():
        result = await execute(nodes, outputs)
    assert result["a"] == "swallowed"
    assert calls == 1
    mode.check()


@pytest.mark.parametrize("mode_name", MODES)
async def test_an_exception_raised_while_draining_a_timeout_is_reported_as_itself(
    mode_name: str,
) -> None:
    mode = Mode(mode_name)
    converted = ConnectionAbortedError("closed while cancelling")

    async def a() -> int:
        mode.seen()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise converted from None
        return 0

    nodes, outputs = mode.nodes(Node("a", a, timeout=0.005, retryable=(ValueError,)))
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await execute(nodes, outputs)
    assert info.value.exceptions == (converted,)
    mode.check()


@pytest.mark.parametrize("mode_name", MODES)
async def test_a_timeout_inside_the_node_itself_is_the_nodes_own_timeout_error(
    mode_name: str,
) -> None:
    # asyncio.timeout inside the node uses the same cancel/uncancel counting as ours.
    mode = Mode(mode_name)
    calls = 0

    async def a() -> str:
        nonlocal calls
        mode.seen()
        calls += 1
        if calls == 1:
            async with asyncio.timeout(0.001):
                await asyncio.Event().wait()
        mode.finish.set()
        return "ok"

    nodes, outputs = mode.nodes(Node("a", a, timeout=5.0, retries=1))
    with clean_loop():
        result = await execute(nodes, outputs)
    assert result["a"] == "ok"
    assert calls == 2
    mode.check()


async def test_there_is_no_total_deadline_only_per_attempt_timeouts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = asyncio.get_running_loop()
    calls = 0

    async def a() -> str:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.03)  # each attempt fits its 0.1 s timeout...
        if calls < 3:
            raise ConnectionError
        return "done"

    node = Node("a", a, timeout=0.1, retries=2, initial_delay=0.25, backoff_factor=1.0)
    begin = loop.time()
    with clean_loop(), caplog.at_level(logging.WARNING, logger="sdax_hamilton"):
        assert await execute([node], ["a"], seed=5) == {"a": "done"}
    elapsed = loop.time() - begin
    assert calls == 3
    delays = logged_retry_delays(caplog)
    assert len(delays) == 2
    # ...while the run as a whole takes its three attempts and both waits: at least the
    # drawn delays plus three sleeps of 0.03 s (uvloop's timers may fire a millisecond early)
    assert elapsed >= sum(delays) + 3 * (0.03 - 0.001)
    # Whatever the jitter draws, each wait is at least half of 0.25 s, so the run outlasts
    # the three attempts' timeouts together (3 x 0.1 s < 3 x 0.029 s + 2 x 0.125 s).
    assert policy_minimum(node, 2) + 3 * (0.03 - 0.001) > 3 * 0.1
    assert elapsed > 3 * 0.1


async def test_a_failure_elsewhere_stops_a_pending_retry_wait() -> None:
    loop = asyncio.get_running_loop()
    waiting_calls = 0
    first_failed = asyncio.Event()

    async def waits() -> int:
        nonlocal waiting_calls
        waiting_calls += 1
        first_failed.set()
        raise ConnectionError

    async def fails() -> int:
        await started(first_failed)
        await asyncio.sleep(0)
        raise ValueError("final")

    nodes = [Node("waits", waits, retries=3, initial_delay=30.0), Node("fails", fails)]
    begin = loop.time()
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await execute(nodes, ["waits", "fails"])
    assert loop.time() - begin < 10.0  # the 15-30 s wait was dropped, not served
    assert waiting_calls == 1
    assert [type(e) for e in info.value.exceptions] == [ValueError]
    assert failures(info.value) == ()


async def test_no_new_attempt_starts_after_a_retryable_failure_races_a_final_one() -> None:
    # Both fail in the same loop iteration: one retryable, one final. The retryable one
    # must not get another attempt.
    gate = asyncio.Event()
    calls = {"retryable": 0, "final": 0}

    async def retryable() -> int:
        calls["retryable"] += 1
        await started(gate)
        raise ConnectionError

    async def final() -> int:
        calls["final"] += 1
        gate.set()
        raise ValueError

    nodes = [
        Node("retryable", retryable, retries=3, timeout=1.0),
        Node("final", final, timeout=1.0),
    ]
    with clean_loop():
        with pytest.raises(ExecutionError):
            await execute(nodes, ["retryable", "final"])
    assert calls == {"retryable": 1, "final": 1}


async def test_inline_timeouts_stay_per_attempt_along_a_chain() -> None:
    # One timer serves the inline attempts of a run: an early deadline left over from a
    # finished attempt must not cut a later, longer one, and a later, shorter deadline
    # must not wait for an earlier, longer one.
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    ran_in: list[asyncio.Task[Any] | None] = []

    async def quick() -> int:
        ran_in.append(running_task())
        return 1

    async def slow(quick: int) -> int:
        ran_in.append(running_task())
        await asyncio.sleep(0.03)  # well past quick's 0.005 s deadline
        return 2

    async def stuck(slow: int) -> int:
        ran_in.append(running_task())
        await asyncio.Event().wait()
        return 3

    nodes = [
        Node("quick", quick, timeout=0.005),
        Node("slow", slow, ("quick",), timeout=30.0),
        Node("stuck", stuck, ("slow",), timeout=0.01),
    ]
    begin = loop.time()
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await execute(nodes, ["stuck"])
    assert loop.time() - begin < 5.0  # cut at its own 0.01 s, not at slow's 30 s
    (leaf,) = info.value.exceptions
    assert type(leaf) is TimeoutError
    assert "sdax_hamilton: node 'stuck' failed after 1 attempt" in notes(leaf)
    assert len(ran_in) == 3 and len(set(ran_in)) == 1  # inline: all in the forward task
    assert ran_in[0] is not me and coordinator_of(ran_in[0]) == "coordinate"
    assert me is not None and me.cancelling() == 0


RETRIED_BESIDE_FINISHED = """
import asyncio
from sdax_hamilton import execution

SEEN = []


async def src(x: int) -> int:
    return x


async def quick(src: int) -> int:
    return src + 1


@execution(retries=2, initial_delay=0.0, retryable_exceptions=(ConnectionError,))
async def flaky(src: int, quick: int) -> int:
    SEEN.append((src, quick))
    await asyncio.sleep(0)
    if len(SEEN) < 3:
        raise ConnectionError("again")
    return src + quick


async def slow(src: int) -> int:
    await asyncio.sleep(0)
    return src * 10
"""


async def test_a_retry_gets_the_arguments_of_the_first_attempt_after_its_siblings_finished(
    make_module: Any,
) -> None:
    # A node's arguments are dropped once it has succeeded (what an open run holds,
    # tests/test_open_memory.py); a node still retrying keeps its own.
    from sdax_hamilton import Driver

    module = make_module(RETRIED_BESIDE_FINISHED)
    plan = Driver(module).prepare(["flaky", "slow"])
    async with plan.open(inputs={"x": 4}) as values:
        assert values == {"flaky": 9, "slow": 40}
    assert module.SEEN == [(4, 5)] * 3
