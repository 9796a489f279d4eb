"""sdax_hamilton.testing.retry_waits (docs/testing.md): the bounds of the waits a node's
policy makes, from the core, matching the waits real runs take."""

from __future__ import annotations

from typing import Any

import pytest

from sdax_hamilton import Driver, ExecutionError, RunEvent
from sdax_hamilton.testing import instant_retries, jitter_seed, retry_waits

GRAPH = """
from sdax_hamilton import Acquisition, execution, shutdown


class Conn:
    pass


def conn() -> Conn:
    return Conn()


@shutdown(of=conn, retries=2, initial_delay=0.5, backoff_factor=3.0)
def close(acquired: Acquisition[Conn]) -> None:
    pass


@execution(retries=4, initial_delay=0.004, backoff_factor=2.0, max_delay=0.01)
def fetch(conn: Conn, calls: list) -> int:
    calls.append(1)
    raise ConnectionError("down")


def plain(fetch: int) -> int:
    return fetch
"""


@pytest.fixture
def plan(make_module: Any) -> Any:
    return Driver(make_module(GRAPH)).prepare(["plain"])


def test_the_bounds_follow_the_policy_of_the_node_and_of_its_release(plan: Any) -> None:
    assert retry_waits(plan, "fetch") == (
        (0.002, 0.004),
        (0.004, 0.008),
        (0.005, 0.01),  # capped by max_delay
        (0.005, 0.01),
    )
    assert retry_waits(plan, "conn", release=True) == ((0.25, 0.5), (0.75, 1.5))
    assert retry_waits(plan, "plain") == ()


async def test_a_run_waits_within_the_bounds(plan: Any) -> None:
    waits: list[float] = []

    def observe(event: RunEvent) -> None:
        if event.kind == "retry_scheduled":
            waits.append(event.delay or 0.0)

    with jitter_seed(3), pytest.raises(ExecutionError):
        await plan.execute(inputs={"calls": []}, observer=observe)
    bounds = retry_waits(plan, "fetch")
    assert len(waits) == len(bounds)
    assert all(low <= wait <= high for wait, (low, high) in zip(waits, bounds, strict=True))
    with instant_retries(), pytest.raises(ExecutionError):  # the same retries, no waits
        calls: list[int] = []
        await plan.execute(inputs={"calls": calls})
    assert len(calls) == len(bounds) + 1


def test_a_wrong_name_or_a_node_without_release_says_what_to_do(plan: Any) -> None:
    with pytest.raises(ValueError, match="no node 'fetc'; did you mean 'fetch'"):
        retry_waits(plan, "fetc")
    with pytest.raises(ValueError, match="node 'fetch' has no release"):
        retry_waits(plan, "fetch", release=True)
