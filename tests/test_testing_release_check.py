"""sdax_hamilton.testing.assert_all_released / ReleaseCheck (docs/testing.md): an observer
that fails a test when a run it saw did not release what it acquired."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from sdax_hamilton import Driver, ExecutionError, RunEvent
from sdax_hamilton.testing import ReleaseCheck, assert_all_released, instant_retries

GRAPH = """
from sdax_hamilton import Acquisition, execution, shutdown


class Conn:
    def __init__(self, fail_close: int) -> None:
        self.fail_close = fail_close


async def conn(fail_close: int) -> Conn:
    return Conn(fail_close)


@shutdown(of=conn, retries=1, initial_delay=0, retryable_exceptions=(OSError,))
async def close_conn(acquired: Acquisition[Conn]) -> None:
    connection = acquired.value
    if connection.fail_close > 0:
        connection.fail_close -= 1
        raise OSError("close failed")


async def rows(conn: Conn, fail: bool) -> int:
    if fail:
        raise LookupError("no rows")
    return 3
"""


@pytest.fixture
def plan(make_module: Any) -> Any:
    return Driver(make_module(GRAPH)).prepare(["rows"])


async def test_runs_that_release_everything_pass_also_when_a_node_fails(plan: Any) -> None:
    with instant_retries(), assert_all_released(plan) as released:
        assert await plan.execute(inputs={"fail_close": 0, "fail": False}, observer=released)
        # a close that fails once and succeeds on its retry is released
        await plan.execute(inputs={"fail_close": 1, "fail": False}, observer=released)
        with pytest.raises(ExecutionError):
            await plan.execute(inputs={"fail_close": 0, "fail": True}, observer=released)
        await asyncio.gather(
            *(
                plan.execute(inputs={"fail_close": 0, "fail": False}, observer=released)
                for _ in range(5)
            )
        )
    assert released.runs == 8


async def test_a_release_that_fails_for_good_fails_the_check(plan: Any) -> None:
    with instant_retries(), pytest.raises(AssertionError) as raised:
        with assert_all_released(plan) as released:
            with pytest.raises(ExecutionError):
                await plan.execute(inputs={"fail_close": 2, "fail": False}, observer=released)
    message = str(raised.value)
    assert "not every acquisition was released" in message
    assert "the release of 'conn' failed with OSError" in message


async def test_an_open_block_still_open_fails_the_check(plan: Any) -> None:
    check = ReleaseCheck(plan)
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(
            plan.open(inputs={"fail_close": 0, "fail": False}, observer=check)
        )
        with pytest.raises(AssertionError, match="has not finished: an open"):
            check.assert_all_released()
    check.assert_all_released()  # the block exited: released


def test_an_owner_that_succeeded_without_a_release_fails_the_check(plan: Any) -> None:
    check = ReleaseCheck(plan)
    for kind, node in [
        ("run_started", ""),
        ("attempt_succeeded", "conn"),
        ("attempt_succeeded", "rows"),
        ("run_finished", ""),
    ]:
        check(RunEvent(kind, node, 1, 0.0, run="r1"))  # type: ignore[arg-type]
    assert check.problems() == ["run r1: 'conn' acquired its resource, never released"]
    # without the plan, only releases that started are checked
    blind = ReleaseCheck()
    blind(RunEvent("run_finished", "", 0, 0.0, run="r1"))
    blind.assert_all_released()


def test_a_check_no_run_reported_to_fails() -> None:
    with pytest.raises(AssertionError, match="pass it to each run as observer="):
        with assert_all_released():
            pass
