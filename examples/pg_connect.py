"""The run's connection opened from a DSN: one connection per run, closed by its release.

Use with ``pg_graph``: ``Driver(pg_connect, pg_graph)``. For a service, prefer ``pg_pool``.
"""

from __future__ import annotations

import asyncpg
from pg_graph import Connection

from sdax_hamilton import Acquisition, execution, shutdown


@execution(timeout=10.0)  # an owned acquisition is not retried; its consumers can be
async def connection(dsn: str, application_name: str) -> Connection:
    return await asyncpg.connect(
        dsn, timeout=5.0, server_settings={"application_name": application_name}
    )


@shutdown(of=connection, timeout=5.0)
async def close_connection(acquired: Acquisition[Connection]) -> None:
    if not acquired.has_value:
        return  # connect failed or was cancelled: asyncpg closed its own socket
    opened = acquired.raw_value
    try:
        await opened.close(timeout=2.0)  # ends the session politely (and its transaction)
    except BaseException:
        opened.terminate()  # the close failed or was cancelled: drop the socket at once
        raise
