"""A PostgreSQL outage under load, with the shared objects (docs/resilience.md).

A real server (tests/support/postgres_server.py) is stopped with ``pg_ctl stop -m fast``
while runs keep arriving, then started again. The runs' connection and query nodes share a
``Bulkhead`` and a ``CircuitBreaker``. What must hold: the breaker opens and runs then fail
fast with ``CircuitOpen``; once the server is back the breaker closes and runs succeed;
nothing is left in the bulkhead; and the database, as judge, finds no session of any run.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from support import loops as loop_support
from support.postgres_server import ServerUnavailable, start_server, unavailable

from sdax_hamilton import CircuitOpen, Driver, ExecutionError

asyncpg = pytest.importorskip("asyncpg")

GRAPH = """
import asyncpg
from sdax_hamilton import Acquisition, Bulkhead, CircuitBreaker, execution, shutdown

DATABASE = Bulkhead(4, max_waiting=200, name="postgres")
BREAKER = CircuitBreaker(failure_ratio=0.5, min_calls=5, window=1.0, break_for=0.5,
                         name="postgres")
RETRYABLE = (OSError, TimeoutError, asyncpg.PostgresConnectionError,
             asyncpg.AdminShutdownError, asyncpg.CannotConnectNowError)


@execution(timeout=2.0, bulkhead=DATABASE, breaker=BREAKER, retryable_exceptions=RETRYABLE)
async def connection(dsn: str, application_name: str) -> asyncpg.Connection:
    return await asyncpg.connect(
        dsn, timeout=1.0, server_settings={"application_name": application_name}
    )


@shutdown(of=connection, timeout=5.0)
async def close(acquired: Acquisition[asyncpg.Connection]) -> None:
    if acquired.is_valid:
        await acquired.value.close(timeout=2.0)


@execution(timeout=2.0, bulkhead=DATABASE, breaker=BREAKER, retryable_exceptions=RETRYABLE)
async def value(connection: asyncpg.Connection, n: int) -> int:
    return int(await connection.fetchval("SELECT $1::int + 1", n))
"""

PREFIX = "sdax-outage"


async def _load(plan: Any, server: Any, module: Any) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    outcomes: list[tuple[str, float, Any]] = []
    states: set[str] = set()
    runs: set[asyncio.Task[None]] = set()

    async def one(i: int) -> None:
        inputs = {"dsn": server.dsn, "application_name": f"{PREFIX}-{i}", "n": i}
        try:
            result = await plan.execute(inputs=inputs)
        except ExecutionError as error:
            outcomes.append(("failed", loop.time(), error))
        else:
            assert result == {"value": i + 1}
            outcomes.append(("ok", loop.time(), None))

    async def arrive(until: Any) -> None:
        i = len(outcomes) + len(runs) + 1000 * len(states)
        while not until():
            task = asyncio.ensure_future(one(i))
            runs.add(task)
            task.add_done_callback(runs.discard)
            i += 1
            states.add(module.BREAKER.state)
            await asyncio.sleep(0.02)  # 50 runs per second

    started = loop.time()
    await arrive(lambda: loop.time() - started > 0.3)
    stopping = asyncio.ensure_future(asyncio.to_thread(server.interrupt))
    await arrive(lambda: stopping.done() and loop.time() - started > 3.0)
    await stopping
    stopped_until = loop.time()
    resuming = asyncio.ensure_future(asyncio.to_thread(server.resume))
    await arrive(resuming.done)
    await resuming
    back = loop.time()
    # Until the breaker has closed and a few runs in a row have succeeded.
    await arrive(
        lambda: (
            (
                module.BREAKER.state == "closed"
                and len(outcomes) >= 5
                and all(o[0] == "ok" for o in outcomes[-5:])
            )
            or loop.time() - back > 20
        )
    )
    await asyncio.gather(*runs)
    return {"outcomes": outcomes, "states": states, "stopped_until": stopped_until, "back": back}


def test_an_outage_opens_the_breaker_and_leaves_nothing_behind(make_module: Any) -> None:
    try:
        server = start_server({"client_connection_check_interval": "100ms"})
    except ServerUnavailable as error:
        unavailable(error)
    try:
        module = make_module(GRAPH)
        plan = Driver(module).prepare(["value"])
        seen = loop_support.run(_load(plan, server, module))
        outcomes = seen["outcomes"]
        assert "open" in seen["states"]
        rejected = [
            o
            for o in outcomes
            if o[0] == "failed" and any(isinstance(e, CircuitOpen) for e in o[2].exceptions)
        ]
        assert rejected, "no run failed fast with CircuitOpen"
        assert module.BREAKER.state == "closed"
        assert [o[0] for o in outcomes[-5:]] == ["ok"] * 5
        assert (module.DATABASE.in_use, module.DATABASE.waiting) == (0, 0)

        async def sessions() -> list[str]:
            judge = await asyncpg.connect(server.dsn)
            try:
                deadline = time.monotonic() + 10
                while True:
                    rows = await judge.fetch(
                        "SELECT application_name FROM pg_stat_activity "
                        "WHERE application_name LIKE $1",
                        f"{PREFIX}-%",
                    )
                    if not rows or time.monotonic() > deadline:
                        return [row["application_name"] for row in rows]
                    await asyncio.sleep(0.05)
            finally:
                await judge.close()

        assert loop_support.run(sessions()) == []
    finally:
        server.stop()
