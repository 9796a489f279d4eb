"""Test mode (docs/contract.md#test-mode): ``sdax_hamilton.testing.jitter_seed`` /
``instant_retries``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from sdax_hamilton import Driver, PreparedPlan, RunEvent, RunReport
from sdax_hamilton.testing import instant_retries, jitter_seed

GRAPH = """
from sdax_hamilton import Acquisition, execution, shutdown

class Handle:
    def __init__(self) -> None:
        self.closes = 0

async def handle() -> Handle:
    return Handle()

@shutdown(of=handle, retries=3, initial_delay={delay})
async def close(acquired: Acquisition[Handle]) -> None:
    acquired.value.closes += 1
    if acquired.value.closes <= 3:
        raise ConnectionError("close")

@execution(retries=5, initial_delay={delay}, backoff_factor=2.0)
async def flaky(handle: Handle, calls: list[int], failures: int) -> int:
    calls.append(1)
    if len(calls) <= failures:
        raise ConnectionError("again")
    return len(calls)
"""


@pytest.fixture
def plan_with_delay(make_module: Any) -> Any:
    def build(delay: float) -> PreparedPlan:
        return Driver(make_module(GRAPH.format(delay=delay))).prepare(["flaky"])

    return build


class Delays:
    """Observer collecting the delays of ``retry_scheduled`` events, per kind."""

    def __init__(self) -> None:
        self.forward: list[float] = []
        self.release: list[float] = []

    def __call__(self, event: RunEvent) -> None:
        if event.delay is not None:
            target = self.forward if event.kind == "retry_scheduled" else self.release
            target.append(event.delay)


async def delays_of(plan: PreparedPlan, failures: int = 3) -> list[float]:
    observer = Delays()
    await plan.execute(inputs={"calls": [], "failures": failures}, observer=observer)
    return observer.forward


async def test_the_same_seed_gives_the_same_delays_in_every_run(plan_with_delay: Any) -> None:
    plan = plan_with_delay(0.002)
    with jitter_seed(1234):
        first = await delays_of(plan)
        second = await delays_of(plan)
    with jitter_seed(1234):
        third = await delays_of(plan)
    assert len(first) == 3
    assert first == second == third
    for retry, delay in enumerate(first):
        assert 0.001 * 2**retry <= delay <= 0.002 * 2**retry


async def test_different_seeds_give_different_delays(plan_with_delay: Any) -> None:
    plan = plan_with_delay(0.002)
    with jitter_seed(1):
        first = await delays_of(plan)
    with jitter_seed(2):
        second = await delays_of(plan)
    assert first != second


async def test_without_a_seed_runs_draw_fresh_jitter(plan_with_delay: Any) -> None:
    plan = plan_with_delay(0.002)
    runs = [await delays_of(plan) for _ in range(3)]
    assert len({tuple(run) for run in runs}) == 3  # 64-bit draws: a repeat would be a bug


async def test_the_seed_is_read_when_the_run_is_opened(plan_with_delay: Any) -> None:
    plan = plan_with_delay(0.002)
    with jitter_seed(99):
        expected = await delays_of(plan)
    observer = Delays()
    with jitter_seed(99):
        opened = plan.open(inputs={"calls": [], "failures": 3}, observer=observer)
    async with opened:  # entered outside the block: still seeded
        pass
    assert observer.forward == expected
    outer, inner = Delays(), Delays()
    with jitter_seed(5):
        late = plan.open(inputs={"calls": [], "failures": 3}, observer=outer)
        with jitter_seed(99):  # the innermost block wins, for runs opened inside it
            async with plan.open(inputs={"calls": [], "failures": 3}, observer=inner):
                pass
        async with late:  # opened under seed 5, entered under 5 again
            pass
    assert inner.forward == expected
    assert len(outer.forward) == 3 and outer.forward != expected


async def test_tasks_started_inside_the_block_inherit_the_seed(plan_with_delay: Any) -> None:
    plan = plan_with_delay(0.002)
    with jitter_seed(7):
        expected = await delays_of(plan)
        task = asyncio.create_task(delays_of(plan))
    assert await task == expected


async def test_instant_retries_skip_the_waits_but_keep_every_attempt(
    plan_with_delay: Any,
) -> None:
    plan = plan_with_delay(10.0)  # real waits would total 10 * (1 + 2 + 4 + 8 + 16) / 2 s
    calls: list[int] = []
    report = RunReport()
    observer = Delays()
    loop = asyncio.get_running_loop()
    with instant_retries():
        begin = loop.time()
        result = await plan.execute(
            inputs={"calls": calls, "failures": 5}, observer=[report, observer]
        )
        elapsed = loop.time() - begin
    assert result == {"flaky": 6}
    assert len(calls) == 6
    assert report.nodes["flaky"].attempts == 6
    assert elapsed < 2.0  # generous: no 10-second wait happened
    assert observer.forward == [0.0] * 5
    # Release retries are instant too (three failures, initial_delay=10.0 as well).
    assert observer.release == [0.0] * 3
    assert report.releases["handle"].attempts == 4
    assert report.releases["handle"].outcome == "succeeded"


async def test_instant_retries_still_fail_after_the_last_attempt(plan_with_delay: Any) -> None:
    plan = plan_with_delay(10.0)
    calls: list[int] = []
    report = RunReport()
    with instant_retries(), pytest.raises(Exception) as info:
        await plan.execute(inputs={"calls": calls, "failures": 99}, observer=report)
    assert type(info.value).__name__ == "ExecutionError"
    assert len(calls) == 6
    assert report.nodes["flaky"].outcome == "failed"


async def test_an_instant_retry_still_yields_to_the_event_loop(make_module: Any) -> None:
    module = make_module(
        """
        from sdax_hamilton import execution

        @execution(retries=1, initial_delay=10.0)
        async def a(log: list[str]) -> int:
            log.append("a")
            if len(log) == 1:
                raise ConnectionError("once")
            return 1
        """
    )
    plan = Driver(module).prepare(["a"])
    log: list[str] = []
    loop = asyncio.get_running_loop()

    def tick_on_retry(event: RunEvent) -> None:
        if event.kind == "retry_scheduled":
            loop.call_soon(log.append, "tick")  # runs before the next attempt starts

    with instant_retries():
        assert await plan.execute(inputs={"log": log}, observer=tick_on_retry) == {"a": 1}
    assert log == ["a", "tick", "a"]


async def test_instant_retries_log_the_wait_actually_taken(
    plan_with_delay: Any, caplog: pytest.LogCaptureFixture
) -> None:
    plan = plan_with_delay(10.0)
    with caplog.at_level(logging.WARNING, logger="sdax_hamilton"), instant_retries():
        await plan.execute(inputs={"calls": [], "failures": 1})
    [record] = [r for r in caplog.records if "node 'flaky'" in r.getMessage()]
    assert "retry 1 in 0.000 s" in record.getMessage()


async def test_instant_retries_false_restores_real_waits_inside_a_block(
    plan_with_delay: Any,
) -> None:
    plan = plan_with_delay(0.002)
    with instant_retries(), instant_retries(False):
        delays = await delays_of(plan, failures=1)
    assert delays and delays[0] > 0.0
    with instant_retries():
        assert await delays_of(plan, failures=1) == [0.0]
    assert (await delays_of(plan, failures=1))[0] > 0.0  # the block has ended


@pytest.mark.parametrize("seed", [True, 1.5, "1", None])
def test_jitter_seed_needs_an_int(seed: Any) -> None:
    with pytest.raises(TypeError, match="jitter_seed"):
        with jitter_seed(seed):
            pass


def test_instant_retries_needs_a_bool() -> None:
    with pytest.raises(TypeError, match="instant_retries"):
        with instant_retries(1):  # type: ignore[arg-type]
            pass


async def test_large_and_negative_seeds_seed_the_runs(plan_with_delay: Any) -> None:
    # Any int is taken modulo 2**64: -1 seeds like 2**64 - 1, and 2**80 like 0.
    plan = plan_with_delay(0.002)

    async def waits_under(seed: int) -> tuple[list[float], list[float]]:
        observer = Delays()
        with jitter_seed(seed):
            await plan.execute(inputs={"calls": [], "failures": 3}, observer=observer)
        return observer.forward, observer.release

    top = await waits_under(2**64 - 1)
    assert [len(delays) for delays in top] == [3, 3]  # node and release retries
    assert await waits_under(2**64 - 1) == top  # the same seed: the same waits
    assert await waits_under(-1) == top
    zero = await waits_under(0)
    assert await waits_under(2**80) == zero
    assert zero[0] != top[0] and zero[1] != top[1]  # another seed: other waits
    assert (await waits_under(2**63))[0] != zero[0]  # all 64 bits count


@pytest.fixture
def no_waits() -> Iterator[None]:
    """The documented fixture pattern: instant retries for a whole test."""
    with instant_retries():
        yield


async def test_a_fixture_can_turn_waits_off_for_a_whole_test(
    no_waits: None, plan_with_delay: Any
) -> None:
    plan = plan_with_delay(10.0)
    loop = asyncio.get_running_loop()
    begin = loop.time()
    assert await delays_of(plan, failures=5) == [0.0] * 5
    assert loop.time() - begin < 2.0
