"""Run the guide's graph on PostgreSQL the way a service does (docs/postgres.md).

python examples/postgres.py postgresql://user@host:5432/database

Creates the ``entries`` table if needed and writes a few rows to it. At startup: one pool
(as large as the bulkhead that guards it) and two compiled plans. Per request: one run,
with its own ``application_name``.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time

import asyncpg
import pg_connect  # the example's Hamilton modules; Python puts this folder on sys.path
import pg_graph
import pg_pool

from sdax_hamilton import Driver, ExecutionError

# Startup, once: compile the plans (the graph is the same, only the connection differs).
POOLED = Driver(pg_pool, pg_graph).prepare(["stored_note"])
DEDICATED = Driver(pg_connect, pg_graph).prepare(["stored_note"])


async def handle(pool: pg_graph.Pool, dsn: str, entry_id: int) -> str:
    """One request: a run on a connection leased from the pool."""
    result = await POOLED.execute(
        inputs={
            "pool": pool,
            "dsn": dsn,  # the retried read opens a short-lived connection of its own
            "application_name": f"example-request-{entry_id}",
            "entry_id": entry_id,
            "note": f"request {entry_id}",
        }
    )
    note: str = result["stored_note"]
    return note


async def main(dsn: str) -> None:
    first = time.time_ns() // 1000  # ids apart from earlier runs of this program
    # The pool's size is the one its bulkhead (pg_pool.POOL) is sized to; fewer than requests.
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=pg_pool.POOL_SIZE)
    try:
        async with pool.acquire() as connection:
            await connection.execute(pg_graph.SCHEMA)
        requests = range(2 * pg_pool.POOL_SIZE)
        notes = await asyncio.gather(*(handle(pool, dsn, first + n) for n in requests))
        print("pooled runs read back:", notes)

        # The same id again: the duplicate key is not retried, the transaction is rolled
        # back and the connection goes back to the pool.
        try:
            await handle(pool, dsn, first)
        except ExecutionError as error:
            print("duplicate:", *(type(leaf).__name__ for leaf in error.exceptions))
        print("pool connections:", pool.get_size(), "idle:", pool.get_idle_size())
        print(
            f"{pg_pool.POOL.name}: {pg_pool.POOL.in_use} in use, {pg_pool.POOL.waiting} waiting;",
            f"{pg_graph.READS.name}: {pg_graph.READS.state}",
        )
    finally:
        await pool.close()

    one = await DEDICATED.execute(
        inputs={
            "dsn": dsn,
            "application_name": "example-dedicated",
            "entry_id": first + 100,
            "note": "on a connection of its own",
        }
    )
    print("dedicated run read back:", one["stored_note"])


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    asyncio.run(main(sys.argv[1]))
