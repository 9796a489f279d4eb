"""The lifecycle guide's graph on PostgreSQL with asyncpg: the work of one request.

A transaction on the run's connection, a write in it, a commit node, and a read on a
short-lived connection of its own, retried on connection errors. The ``connection`` node
comes from one of two modules, whichever the service uses:

* ``pg_connect``: one connection per run, opened from ``dsn`` and closed by its release;
* ``pg_pool``: one connection per run leased from a pool built once at startup (an input),
  returned to the pool by its release.

``Driver(pg_connect, pg_graph)`` or ``Driver(pg_pool, pg_graph)`` compiles the graph;
``examples/postgres.py`` runs both, and docs/postgres.md walks through them. Each run gets
its own ``application_name``, so ``pg_stat_activity`` shows which sessions belong to it.

The releases only end what the run acquired, in dependency order: the transaction is
rolled back (unless the commit node committed it) while its connection is still open, and
only then is the connection closed or returned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import asyncpg
import asyncpg.pool
import asyncpg.transaction

from sdax_hamilton import Acquisition, CircuitBreaker, execution, shutdown

if TYPE_CHECKING:  # asyncpg's classes are generic for type checkers only
    Connection = asyncpg.Connection[asyncpg.Record]
    PooledConnection = asyncpg.pool.PoolConnectionProxy[asyncpg.Record]
    Pool = asyncpg.Pool[asyncpg.Record]
else:
    Connection = asyncpg.Connection
    PooledConnection = asyncpg.pool.PoolConnectionProxy
    Pool = asyncpg.Pool

# The run's connection: a plain one (pg_connect) or a pool's proxy (pg_pool).
Session = Connection | PooledConnection

SCHEMA = "CREATE TABLE IF NOT EXISTS entries (id bigint PRIMARY KEY, note text NOT NULL)"

# What a user retries for asyncpg: failures of the connection, never of the SQL. A fresh
# attempt opens a fresh connection, so these can succeed the next time; a constraint
# violation or a syntax error would fail again and is not in the set.
RETRYABLE_CONNECTION_ERRORS: tuple[type[Exception], ...] = (
    OSError,  # refused, reset, unreachable (ConnectionError and its subclasses included)
    TimeoutError,  # an attempt over its timeout; asyncpg's own connect timeout
    asyncpg.PostgresConnectionError,  # SQLSTATE class 08: lost mid-query, cannot connect
    asyncpg.AdminShutdownError,  # 57P01: pg_terminate_backend(), a fast server shutdown
    asyncpg.CrashShutdownError,  # 57P02: another backend crashed, the server restarts
    asyncpg.CannotConnectNowError,  # 57P03: the server is starting up or shutting down
    asyncpg.TooManyConnectionsError,  # 53300: max_connections reached for the moment
)


# Shared by every run of the process (docs/resilience.md): when at least half of the read
# attempts of the last 10 s (20 at least) failed on the connection, the database is taken
# to be down, and reads fail at once with CircuitOpen for 2 s instead of each waiting out
# its timeouts and retries; then one read goes through as a probe. A missing row is not
# a connection failure (not in the retryable set) and is not counted.
READS = CircuitBreaker(failure_ratio=0.5, min_calls=20, window=10.0, break_for=2.0, name="pg-reads")


class Transaction:
    """An open transaction: ``committed`` commits it, its release rolls back the rest."""

    def __init__(self, connection: Session, handle: asyncpg.transaction.Transaction) -> None:
        self.connection = connection
        self.handle = handle
        self.commit_sent = False


async def transaction(connection: Session) -> Transaction:
    handle = connection.transaction()
    await handle.start()
    return Transaction(connection, handle)


@shutdown(of=transaction, timeout=5.0)
async def roll_back_unless_committed(acquired: Acquisition[Transaction]) -> None:
    # No value: BEGIN failed or was cancelled. Closing or returning the connection (its
    # own release, which runs after this one) ends whatever the server had started.
    if not acquired.is_valid:
        return
    ended = acquired.value
    # Committed, or the COMMIT was interrupted and its outcome is unknown (asyncpg then
    # refuses a rollback): the connection's release ends the session's transaction, if any.
    if ended.commit_sent:
        return
    try:
        gone = ended.connection.is_closed()
    except asyncpg.InterfaceError:  # a pool's proxy, detached by asyncpg when it closed
        gone = True
    # A closed connection's session is gone, and the server rolled its transaction back.
    if not gone and ended.connection.is_in_transaction():
        await ended.handle.rollback()


@execution(timeout=5.0)
async def entry(transaction: Transaction, entry_id: int, note: str) -> int:
    """Writes the run's row inside the transaction; its id is the result."""
    await transaction.connection.execute(
        "INSERT INTO entries (id, note) VALUES ($1, $2)", entry_id, note
    )
    return entry_id


@execution(timeout=5.0)
async def committed(transaction: Transaction, entry: int) -> int:
    """Commits the transaction (no retries: a lost COMMIT's outcome is unknown)."""
    transaction.commit_sent = True
    await transaction.handle.commit()
    return entry


async def _close_or_terminate(connection: Connection) -> None:
    """Closes politely; when that fails or is cancelled, drops the socket at once."""
    try:
        await connection.close(timeout=2.0)
    except BaseException:
        connection.terminate()
        raise


@execution(
    timeout=1.0,
    retries=4,
    initial_delay=0.1,
    backoff_factor=2.0,
    retryable_exceptions=RETRYABLE_CONNECTION_ERRORS,
    breaker=READS,  # CircuitOpen is not retried: the run fails fast after its commit
)
async def stored_note(committed: int, dsn: str, application_name: str) -> str:
    """Reads the committed row back, each attempt on a short-lived connection of its own."""
    reader = await asyncpg.connect(
        dsn, timeout=1.0, server_settings={"application_name": application_name}
    )
    try:
        note = await reader.fetchval("SELECT note FROM entries WHERE id = $1", committed)
    finally:
        await _close_or_terminate(reader)
    if not isinstance(note, str):
        raise LookupError(f"entry {committed} is not visible after its commit")
    return note
