"""The lifecycle guide's graph: a query uses a transaction, which uses a connection.

Ordinary Hamilton functions; ``@execution`` and ``@shutdown`` only attach policies.
The releases are declared connection-first on purpose: declaration order does not set
shutdown order, the dependencies do.
"""

from __future__ import annotations

import asyncio
import sqlite3

from sdax_hamilton import Acquisition, execution, shutdown


class EventLog:
    """Collects what happened, in order, so the example can print it."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def record(self, event: str) -> None:
        self.events.append(event)


class FlakyNetwork:
    """Fails the first ``failures`` calls with ConnectionError, like a shaky link."""

    def __init__(self, failures: int) -> None:
        self.remaining = failures

    def check(self) -> None:
        if self.remaining > 0:
            self.remaining -= 1
            raise ConnectionError("network blip")


class Connection:
    """A SQLite connection used from worker threads, so the event loop never blocks."""

    def __init__(self, raw: sqlite3.Connection, log: EventLog) -> None:
        self.raw = raw
        self.log = log

    async def fetch(self, sql: str) -> list[tuple[object, ...]]:
        return await asyncio.to_thread(lambda: self.raw.execute(sql).fetchall())

    async def run(self, sql: str) -> None:
        await asyncio.to_thread(self.raw.execute, sql)

    async def close(self) -> None:
        await asyncio.to_thread(self.raw.close)
        self.log.record("connection closed")


class Transaction:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection


async def connection(database: str, log: EventLog) -> Connection:
    raw = await asyncio.to_thread(sqlite3.connect, database, check_same_thread=False)
    raw.isolation_level = None  # explicit BEGIN/COMMIT below
    log.record("connection opened")
    return Connection(raw, log)


@shutdown(of=connection, timeout=2.0)
async def close_connection(acquired: Acquisition[Connection]) -> None:
    if acquired.is_valid:
        await acquired.value.close()


async def transaction(connection: Connection, log: EventLog) -> Transaction:
    await connection.run("BEGIN")
    await connection.run("CREATE TABLE IF NOT EXISTS sales (region TEXT, amount REAL)")
    await connection.run(
        "INSERT INTO sales VALUES ('north', 120.5), ('south', 99.5), ('north', 30.0)"
    )
    log.record("transaction begun")
    return Transaction(connection)


@shutdown(of=transaction, timeout=2.0)
async def end_transaction(acquired: Acquisition[Transaction]) -> None:
    if acquired.is_valid:
        connection = acquired.value.connection
        await connection.run("ROLLBACK")  # the example only reads; leave the file untouched
        connection.log.record("transaction rolled back")


@execution(
    timeout=5.0,
    retries=3,
    initial_delay=0.05,
    backoff_factor=2.0,
    retryable_exceptions=(ConnectionError, TimeoutError),
)
async def report(transaction: Transaction, network: FlakyNetwork, log: EventLog) -> str:
    log.record("report attempt")
    network.check()
    rows = await transaction.connection.fetch(
        "SELECT region, SUM(amount) FROM sales GROUP BY region ORDER BY region"
    )
    return ", ".join(f"{region}={total:.1f}" for region, total in rows)
