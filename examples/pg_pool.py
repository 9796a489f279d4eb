"""The run's connection leased from a pool built once at startup, returned by its release.

Use with ``pg_graph``: ``Driver(pg_pool, pg_graph)``, the pool passed as the ``pool`` input
of every run. The lease is the owned resource; ``connection`` hands its connection to the
graph. A run waits for a free connection when every one is leased (``pool.acquire``), so a
pool smaller than the number of concurrent runs only makes runs queue; the ``POOL``
bulkhead bounds that queue.
"""

from __future__ import annotations

from pg_graph import Pool, PooledConnection

from sdax_hamilton import Acquisition, Bulkhead, execution, shutdown

POOL_SIZE = 4  # the pool's max_size: the service builds its pool with it

# Guards the pool for the whole process (docs/resilience.md): at most POOL_SIZE runs wait
# inside pool.acquire() at once and 4 x POOL_SIZE more queue here, in FIFO order; a request
# beyond those fails at once with BulkheadFull instead of piling up behind the pool. Its
# permit covers the lease's call (the wait for a connection), not the time the run then
# holds the connection: the pool caps that. Only the lease names it. A node that uses the
# leased connection must not: a run holding a connection would wait for a permit held by
# runs waiting for that connection.
POOL = Bulkhead(POOL_SIZE, max_waiting=4 * POOL_SIZE, name="pg-pool")


class Lease:
    """A connection taken from ``pool``; the release gives it back."""

    def __init__(self, pool: Pool, connection: PooledConnection) -> None:
        self.pool = pool
        self.connection = connection


@execution(timeout=30.0, bulkhead=POOL)  # the wait for a free connection included
async def lease(pool: Pool, application_name: str) -> Lease:
    leased = await pool.acquire()
    try:
        # Named after the run while leased; returning it to the pool resets the name.
        await leased.execute("SELECT set_config('application_name', $1, false)", application_name)
    except BaseException:
        await pool.release(leased)  # never reached the release: give it back here
        raise
    return Lease(pool, leased)


@shutdown(of=lease, timeout=10.0)
async def return_to_pool(acquired: Acquisition[Lease]) -> None:
    # Pool.release resets the session (ROLLBACK of anything left open, RESET ALL) and
    # terminates the connection if that fails; a connection the server dropped is replaced.
    if acquired.is_valid:
        await acquired.value.pool.release(acquired.value.connection, timeout=5.0)


def connection(lease: Lease) -> PooledConnection:
    """The leased connection, for pg_graph's nodes (the lease stays owned and released)."""
    return lease.connection
