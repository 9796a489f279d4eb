"""Logging on the ``sdax_hamilton`` logger (docs/contract.md#logging): levels, names, never
values."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from support.driver import Node, clean_loop, execute

from sdax_hamilton._failures import ExecutionError

SECRET = "s3cr3t-payload"


def messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "sdax_hamilton" and r.levelno == level
    ]


async def test_attempts_retries_timeouts_and_failures_are_logged_by_level(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = 0

    async def fetch(token: str) -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            await asyncio.Event().wait()  # times out
        if calls == 2:
            raise ConnectionError(token)
        return token

    async def conn() -> str:
        return SECRET

    async def close(acq: Any) -> None:
        raise OSError(acq.raw_value)

    nodes = [
        Node("fetch", fetch, ("token",), timeout=0.01, retries=2),
        Node("conn", conn, release=close),
    ]
    with caplog.at_level(logging.DEBUG, logger="sdax_hamilton"), clean_loop():
        with pytest.raises(ExecutionError):
            await execute(nodes, ["fetch", "conn"], {"token": SECRET})

    debug = messages(caplog, logging.DEBUG)
    warning = messages(caplog, logging.WARNING)
    error = messages(caplog, logging.ERROR)
    assert "node 'fetch': attempt 1 started" in debug
    assert "node 'fetch': attempt 3 started" in debug
    assert "release of 'conn': attempt 1 started" in debug
    assert any(m.startswith("node 'fetch': attempt 1 timed out after 0.01 s") for m in warning)
    retries = [m for m in warning if "retry" in m]
    assert len(retries) == 2
    assert retries[0].startswith("node 'fetch': attempt 1 failed with TimeoutError; retry 1 in ")
    assert retries[1].startswith("node 'fetch': attempt 2 failed with ConnectionError; retry 2 in ")
    assert error == ["release of 'conn' failed after 1 attempt with OSError"]
    everything = [r.getMessage() for r in caplog.records]
    assert not any(SECRET in m for m in everything)


async def test_a_final_node_failure_is_logged_as_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def a() -> int:
        raise ValueError(SECRET)

    with caplog.at_level(logging.DEBUG, logger="sdax_hamilton"), clean_loop():
        with pytest.raises(ExecutionError):
            await execute([Node("a", a, retries=1, retryable=(ValueError,))], ["a"])
    assert messages(caplog, logging.ERROR) == ["node 'a' failed after 2 attempts with ValueError"]
    assert not any(SECRET in r.getMessage() for r in caplog.records)


async def test_nothing_is_logged_above_debug_for_a_clean_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def a() -> int:
        return 1

    with caplog.at_level(logging.DEBUG, logger="sdax_hamilton"), clean_loop():
        await execute([Node("a", a)], ["a"])
    assert [r.levelno for r in caplog.records if r.name == "sdax_hamilton"] == [
        logging.DEBUG,
        logging.DEBUG,
    ]


async def test_debug_logging_is_seen_as_soon_as_it_is_turned_on_or_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Each run asks whether DEBUG is on (``Reporter.wants_attempts``, which reads
    # logging's memo of the answer): runs in between level changes see each change at once.
    async def a() -> int:
        return 1

    logger = logging.getLogger("sdax_hamilton")

    def started() -> int:
        found = sum("attempt 1 started" in m for m in messages(caplog, logging.DEBUG))
        caplog.clear()
        return found

    with clean_loop():
        caplog.set_level(logging.INFO, logger="sdax_hamilton")
        await execute([Node("a", a)], ["a"])
        assert started() == 0
        caplog.set_level(logging.DEBUG, logger="sdax_hamilton")
        await execute([Node("a", a)], ["a"])
        assert started() == 1
        logger.disabled = True
        try:
            await execute([Node("a", a)], ["a"])
            assert started() == 0
        finally:
            logger.disabled = False
        await execute([Node("a", a)], ["a"])
        assert started() == 1
        caplog.set_level(logging.WARNING, logger="sdax_hamilton")
        await execute([Node("a", a)], ["a"])
        assert started() == 0
