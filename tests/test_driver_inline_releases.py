"""A lone release is awaited in the shutdown task itself (docs/internals.md, "How the driver
carries out STARTs"); one that is not alone gets a task of its own, as before."""

from __future__ import annotations

import asyncio
from typing import Any

from support.driver import Node, Runner, clean_loop, execute, prepare, started, yield_a_few

from sdax_hamilton._driver import open_run
from sdax_hamilton._failures import failures


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


# execute(): the forward task goes on with the shutdown phase (``RunContext.execute``).


def _execute(nodes: list[Node], outputs: list[str]) -> Any:
    plan, runtimes = prepare(nodes, outputs)
    return open_run(plan, runtimes, {}, outputs).execute()


async def test_execute_runs_nodes_and_releases_in_one_task_not_the_callers() -> None:
    tasks: list[asyncio.Task[Any] | None] = []

    async def conn() -> Conn:
        tasks.append(asyncio.current_task())
        return Conn("c")

    async def close(acq: Any) -> None:
        await asyncio.sleep(0)
        tasks.append(asyncio.current_task())

    with clean_loop():
        result = await _execute([Node("conn", conn, release=close, output_type=Conn)], ["conn"])
        caller = asyncio.current_task()
    assert result["conn"].name == "c"
    assert len(tasks) == 2 and tasks[0] is tasks[1] and tasks[0] is not caller


async def test_execute_repeated_cancels_during_cleanup_never_abandon_a_release() -> None:
    releasing, gate = asyncio.Event(), asyncio.Event()
    journal: list[str] = []
    release_error = OSError("close failed")

    async def conn() -> Conn:
        return Conn("c")

    async def close(acq: Any) -> None:
        releasing.set()
        try:
            await gate.wait()
        except asyncio.CancelledError:
            journal.append("release cancelled")
            raise
        journal.append("release finished")
        raise release_error

    with clean_loop():
        runner = Runner(lambda: _execute([Node("conn", conn, release=close)], ["conn"]))
        await started(releasing)
        for _ in range(3):
            runner.task.cancel()
            await yield_a_few()
        assert not runner.task.done()
        gate.set()
        raised = await runner.outcome()
    assert journal == ["release finished"]
    assert isinstance(raised, asyncio.CancelledError)
    assert failures(raised) == (release_error,)


async def test_execute_passes_the_first_forward_cancel_on_once_then_releases() -> None:
    querying = asyncio.Event()
    draining = asyncio.Event()
    drain = asyncio.Event()
    journal: list[str] = []

    async def conn() -> Conn:
        return Conn("c")

    async def query(conn: Conn) -> int:
        querying.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            journal.append("query cancelled")
            draining.set()
            await drain.wait()  # drains while the caller is cancelled again
            journal.append("query drained")
            raise
        return 1

    async def close(acq: Any) -> None:
        await asyncio.sleep(0)
        journal.append("close")

    nodes = [Node("conn", conn, release=close, output_type=Conn), Node("query", query, ("conn",))]
    with clean_loop():
        runner = Runner(lambda: _execute(nodes, ["query"]))
        await started(querying)
        runner.task.cancel()
        await started(draining)
        runner.task.cancel()
        await yield_a_few()  # the second cancel has reached the run, not the query
        assert not runner.task.done()  # the run waits for the query to drain
        drain.set()
        raised = await runner.outcome()
    assert journal == ["query cancelled", "query drained", "close"]
    assert isinstance(raised, asyncio.CancelledError)
