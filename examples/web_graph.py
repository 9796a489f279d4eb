"""The Hamilton module the web service runs for each request (``examples/web_service.py``).

Each request opens a ``Session`` (a SQLite connection of its own, the per-request resource),
prices an item with it and closes it. ``Ledger`` records every open and close, by request id,
so the service can show that each acquisition was released exactly once (docs/web.md).
"""

from __future__ import annotations

import asyncio
import sqlite3

from sdax_hamilton import Acquisition, execution, shutdown

PRICES = {"apple": 0.5, "bread": 2.25, "cheese": 7.0}


class Ledger:
    """Request ids of the sessions opened and closed, in order (one ledger per service)."""

    def __init__(self) -> None:
        self.opened: list[str] = []
        self.closed: list[str] = []

    def snapshot(self) -> dict[str, list[str]]:
        return {"opened": list(self.opened), "closed": list(self.closed)}


class Session:
    """A request's own database connection."""

    def __init__(self, request_id: str, ledger: Ledger) -> None:
        self.request_id = request_id
        self.ledger = ledger
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE TABLE prices (item TEXT PRIMARY KEY, price REAL NOT NULL)")
        self.db.executemany("INSERT INTO prices VALUES (?, ?)", PRICES.items())
        ledger.opened.append(request_id)

    def price(self, item: str) -> float:
        row = self.db.execute("SELECT price FROM prices WHERE item = ?", (item,)).fetchone()
        if row is None:
            raise LookupError(f"no price for {item!r}")
        return float(row[0])

    def close(self) -> None:
        self.db.close()
        self.ledger.closed.append(self.request_id)


@execution(timeout=2.0)
async def session(request_id: str, ledger: Ledger) -> Session:
    await asyncio.sleep(0)  # a real client would connect here
    return Session(request_id, ledger)


@shutdown(of=session, timeout=2.0)
async def close_session(acquired: Acquisition[Session]) -> None:
    if acquired.is_valid:
        acquired.value.close()


@execution(timeout=10.0, retries=2, initial_delay=0.01)
async def unit_price(session: Session, item: str, work_seconds: float) -> float:
    await asyncio.sleep(work_seconds)  # stands in for a slow query
    return session.price(item)


def total(unit_price: float, quantity: int) -> float:
    return unit_price * quantity
