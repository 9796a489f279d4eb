"""A lone release is awaited in the shutdown task itself (docs/internals.md, "How the driver
carries out STARTs"); one that is not alone gets a task of its own, as before."""

from __future__ import annotations

import asyncio
from typing import Any

from support.driver import Node, clean_loop, execute


class Conn:
    def __init__(self, name: str) -> None:
        self.name = name


async def test_releases_in_dependency_order_run_in_the_shutdown_task() -> None:
    tasks: dict[str, asyncio.Task[Any] | None] = {}

    async def connection() -> Conn:
        tasks["connection"] = asyncio.current_task()
        return Conn("connection")

    async def transaction(connection: Conn) -> Conn:
        tasks["transaction"] = asyncio.current_task()
        return Conn("transaction")

    def release(label: str) -> Any:
        async def close(acq: Any) -> None:
            await asyncio.sleep(0)
            tasks[f"release {label}"] = asyncio.current_task()

        return close

    nodes = [
        Node("connection", connection, release=release("connection"), output_type=Conn),
        Node(
            "transaction",
            transaction,
            ("connection",),
            release=release("transaction"),
            output_type=Conn,
        ),
    ]
    with clean_loop():
        caller = asyncio.current_task()
        await execute(nodes, ["transaction"])
    # Forward nodes share the forward task; both releases share the shutdown task.
    assert tasks["connection"] is tasks["transaction"]
    assert tasks["release transaction"] is tasks["release connection"]
    assert tasks["release connection"] is not tasks["connection"]
    assert caller not in tasks.values()


async def test_a_release_is_not_awaited_inline_while_another_waits_for_its_retry() -> None:
    """close_1 becomes ready alone while close_2 waits for its retry, and needs that retry:
    awaited inline it would hold the coordinator, so the retry could never start."""
    first_failed, retried = asyncio.Event(), asyncio.Event()
    closed: list[str] = []

    async def make() -> Conn:
        return Conn("x")

    async def txn(conn_1: Conn) -> Conn:
        return Conn("t")

    async def end_1(acq: Any) -> None:
        await first_failed.wait()  # close_2 is waiting for its retry from here on
        closed.append("end_1")

    async def close_1(acq: Any) -> None:
        await asyncio.wait_for(retried.wait(), 5.0)
        closed.append("close_1")

    async def close_2(acq: Any) -> None:
        if not first_failed.is_set():
            first_failed.set()
            raise ConnectionError("flaky close")
        retried.set()
        closed.append("close_2")

    nodes = [
        Node("conn_1", make, release=close_1, output_type=Conn),
        Node("txn_1", txn, ("conn_1",), release=end_1, output_type=Conn),
        Node(
            "conn_2",
            make,
            release=close_2,
            output_type=Conn,
            release_retries=1,
            release_initial_delay=0.4,  # jittered to at least 0.2 s
        ),
    ]
    with clean_loop():
        await execute(nodes, ["txn_1", "conn_2"])
    assert closed == ["end_1", "close_2", "close_1"]
