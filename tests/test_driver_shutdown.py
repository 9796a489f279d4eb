"""Shutdown phase (docs/contract.md#shutdown-phase; acquisition records: #forward-phase;
#open-algorithm steps 6-8; #outcomes)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support.driver import Journal, Node, clean_loop, execute, notes, opened, started

from sdax_hamilton._failures import ExecutionError, failures


class Conn:
    def __init__(self, name: str) -> None:
        self.name = name


async def test_release_receives_the_returned_value_after_the_body() -> None:
    journal = Journal()
    records: list[Any] = []

    async def conn() -> Conn:
        return Conn("c")

    async def close(acq: Any) -> None:
        records.append(acq)
        journal("close")

    nodes = [Node("conn", conn, output_type=Conn, release=close)]
    with clean_loop():
        async with opened(nodes, ["conn"]) as result:
            journal("body")
            resource = result["conn"]
    assert journal.entries == ["body", "close"]
    (acq,) = records
    assert acq.has_value and acq.is_valid
    assert acq.raw_value is resource
    assert acq.value is resource


async def test_sync_release_is_called_on_the_loop_and_may_return_none() -> None:
    closed: list[str] = []

    def conn() -> Conn:
        return Conn("c")

    def close(acq: Any) -> None:
        closed.append(acq.raw_value.name)

    with clean_loop():
        await execute([Node("conn", conn, release=close)], ["conn"])
    assert closed == ["c"]


async def test_release_runs_once_with_an_empty_record_when_the_acquisition_raised() -> None:
    records: list[Any] = []
    error = ConnectionRefusedError()

    async def conn() -> Conn:
        raise error

    async def close(acq: Any) -> None:
        records.append(acq)

    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await execute([Node("conn", conn, release=close)], ["conn"])
    assert info.value.exceptions == (error,)
    (acq,) = records
    assert not acq.has_value and not acq.is_valid
    with pytest.raises(ValueError):
        acq.raw_value  # noqa: B018


async def test_release_runs_once_with_an_empty_record_after_a_timeout() -> None:
    records: list[Any] = []

    async def conn() -> Conn:
        await asyncio.Event().wait()
        return Conn("never")

    async def close(acq: Any) -> None:
        records.append(acq)

    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await execute([Node("conn", conn, timeout=0.005, release=close)], ["conn"])
    assert type(info.value.exceptions[0]) is TimeoutError
    assert len(records) == 1 and not records[0].has_value


async def test_release_runs_for_an_acquisition_cancelled_by_another_failure() -> None:
    records: list[Any] = []
    acquiring = asyncio.Event()

    async def conn() -> Conn:
        acquiring.set()
        await asyncio.Event().wait()
        return Conn("never")

    async def boom() -> int:
        await started(acquiring)
        raise ValueError("boom")

    async def close(acq: Any) -> None:
        records.append(acq)

    nodes = [Node("conn", conn, release=close), Node("boom", boom)]
    with clean_loop():
        with pytest.raises(ExecutionError):
            await execute(nodes, ["conn", "boom"])
    assert len(records) == 1 and not records[0].has_value


async def test_an_acquisition_swallowing_its_cancellation_records_its_value() -> None:
    records: list[Any] = []
    acquiring = asyncio.Event()

    async def conn() -> Conn:
        acquiring.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            pass
        return Conn("late")

    async def boom() -> int:
        await started(acquiring)
        raise ValueError("boom")

    async def close(acq: Any) -> None:
        records.append(acq)

    nodes = [Node("conn", conn, output_type=Conn, release=close), Node("boom", boom)]
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await execute(nodes, ["conn", "boom"])
    assert [type(e) for e in info.value.exceptions] == [ValueError]
    (acq,) = records
    assert acq.is_valid and acq.value.name == "late"


async def test_release_gets_the_raw_value_when_the_output_fails_its_check() -> None:
    records: list[Any] = []

    async def conn() -> object:
        return "not a Conn"

    async def close(acq: Any) -> None:
        records.append(acq)

    node = Node(
        "conn",
        conn,
        output_type=Conn,
        output_check=lambda value: isinstance(value, Conn),
        release=close,
    )
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await execute([node], ["conn"])
    assert str(info.value.exceptions[0]) == (
        "Invalid output from conn (tests.conn) — output 'conn' expects Conn, got str"
    )
    (acq,) = records
    assert acq.has_value and not acq.is_valid
    assert acq.raw_value == "not a Conn"


async def test_no_release_for_acquisitions_that_never_started() -> None:
    journal = Journal()

    def boom() -> int:
        raise ValueError("boom")

    async def downstream(boom: int) -> Conn:
        journal("downstream called")
        return Conn("d")

    async def sibling_body() -> Conn:
        journal("sibling ran")
        return Conn("s")

    def sibling() -> Any:  # START'ed in the same batch as boom; its coroutine never runs
        journal("sibling called")
        return sibling_body()

    async def close(acq: Any) -> None:
        journal("close " + ("value" if acq.has_value else "empty"))

    nodes = [
        Node("sibling", sibling, release=close),
        Node("boom", boom),
        Node("downstream", downstream, ("boom",), release=close),
    ]
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await execute(nodes, ["downstream", "sibling"])
    assert [type(e) for e in info.value.exceptions] == [ValueError]
    assert journal.entries == ["sibling called"]


async def test_releases_follow_dependencies_query_transaction_connection() -> None:
    journal = Journal()

    async def connection() -> Conn:
        journal("connect")
        return Conn("connection")

    async def transaction(connection: Conn) -> Conn:
        journal("begin")
        return Conn("transaction")

    async def query(transaction: Conn) -> int:
        await asyncio.sleep(0.001)
        journal("query")
        return 1

    def release(label: str) -> Any:
        async def close(acq: Any) -> None:
            assert acq.value.name == label
            await asyncio.sleep(0.001)
            journal(f"release {label}")

        return close

    # Declared in the "wrong" order on purpose: order comes from dependencies.
    nodes = [
        Node("query", query, ("transaction",)),
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
        assert await execute(nodes, ["query"]) == {"query": 1}
    assert journal.entries == [
        "connect",
        "begin",
        "query",
        "release transaction",
        "release connection",
    ]


async def test_unrelated_releases_may_run_concurrently() -> None:
    a_in, b_in = asyncio.Event(), asyncio.Event()

    async def make() -> Conn:
        return Conn("x")

    async def close_a(acq: Any) -> None:
        a_in.set()
        await started(b_in)

    async def close_b(acq: Any) -> None:
        b_in.set()
        await started(a_in)

    nodes = [Node("a", make, release=close_a), Node("b", make, release=close_b)]
    with clean_loop():
        await execute(nodes, ["a", "b"])
    assert a_in.is_set() and b_in.is_set()


async def test_release_retries_under_its_own_policy() -> None:
    calls = 0

    async def conn() -> Conn:
        return Conn("c")

    async def close(acq: Any) -> None:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ConnectionError("flaky close")

    node = Node("conn", conn, release=close, release_retries=2)
    with clean_loop():
        assert (await execute([node], ["conn"]))["conn"].name == "c"
    assert calls == 3


async def test_release_timeout_is_retried_and_finally_reported() -> None:
    calls = 0

    async def conn() -> Conn:
        return Conn("c")

    async def close(acq: Any) -> None:
        nonlocal calls
        calls += 1
        await asyncio.Event().wait()

    node = Node("conn", conn, release=close, release_timeout=0.005, release_retries=1)
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await execute([node], ["conn"])
    (leaf,) = info.value.exceptions
    assert type(leaf) is TimeoutError
    assert "sdax_hamilton: release of 'conn' failed after 2 attempts" in notes(leaf)
    assert calls == 2


async def test_release_returning_a_value_is_a_type_error_not_retried() -> None:
    calls = 0

    async def conn() -> Conn:
        return Conn("c")

    async def close(acq: Any) -> object:
        nonlocal calls
        calls += 1
        return "oops"

    node = Node("conn", conn, release=close, release_retries=3, release_retryable=(Exception,))
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await execute([node], ["conn"])
    (leaf,) = info.value.exceptions
    assert type(leaf) is TypeError
    assert str(leaf) == "Shutdown must return None: conn"
    assert calls == 1


async def test_a_failing_release_does_not_stop_the_others() -> None:
    journal = Journal()
    first, second = OSError("a"), OSError("b")

    async def make(label: str) -> Conn:
        return Conn(label)

    def closer(error: BaseException, label: str) -> Any:
        async def close(acq: Any) -> None:
            journal(label)
            raise error

        return close

    nodes = [
        Node("a", lambda: make("a"), release=closer(first, "close a")),
        Node("b", lambda: make("b"), release=closer(second, "close b")),
        Node("c", lambda a: make("c"), ("a",), release=closer(second, "close c")),
    ]
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await execute(nodes, ["b", "c"])
    assert sorted(journal.entries) == ["close a", "close b", "close c"]
    assert journal.index("close c") < journal.index("close a")
    assert set(map(id, info.value.exceptions)) == {id(first), id(second)}


async def test_release_failure_after_a_successful_forward_run_is_raised_after_the_body() -> None:
    journal = Journal()
    error = OSError("close failed")

    async def conn() -> Conn:
        return Conn("c")

    async def close(acq: Any) -> None:
        journal("close")
        raise error

    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            async with opened([Node("conn", conn, release=close)], ["conn"]):
                journal("body")
    assert journal.entries == ["body", "close"]
    assert info.value.exceptions == (error,)


async def test_a_release_cancelling_itself_gives_a_base_exception_group() -> None:
    own = asyncio.CancelledError()

    async def conn() -> Conn:
        return Conn("c")

    async def close(acq: Any) -> None:
        raise own

    with clean_loop():
        with pytest.raises(BaseExceptionGroup) as info:
            await execute([Node("conn", conn, release=close)], ["conn"])
    assert not isinstance(info.value, ExceptionGroup)
    assert info.value.exceptions == (own,)
    assert "sdax_hamilton: release of 'conn' failed after 1 attempt" in notes(own)


async def test_release_failures_join_node_failures_in_one_group() -> None:
    node_error, release_error = ValueError("node"), OSError("release")

    async def conn() -> Conn:
        return Conn("c")

    async def use(conn: Conn) -> int:
        raise node_error

    async def close(acq: Any) -> None:
        raise release_error

    nodes = [Node("conn", conn, release=close), Node("use", use, ("conn",))]
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await execute(nodes, ["use"])
    assert info.value.exceptions == (node_error, release_error)
    assert failures(info.value) == ()


async def test_body_exception_is_raised_as_itself_with_cleanup_failures_attached() -> None:
    body_error = LookupError("body")
    release_error = OSError("release")

    async def conn() -> Conn:
        return Conn("c")

    async def close(acq: Any) -> None:
        raise release_error

    with clean_loop():
        with pytest.raises(LookupError) as info:
            async with opened([Node("conn", conn, release=close)], ["conn"]):
                raise body_error
    assert info.value is body_error
    assert failures(body_error) == (release_error,)
    assert notes(body_error) == [
        "Additional execution/cleanup diagnostics: sdax_hamilton.failures(exception)"
    ]


async def test_body_exception_without_cleanup_failures_gets_no_note() -> None:
    body_error = LookupError("body")
    closed = False

    async def conn() -> Conn:
        return Conn("c")

    async def close(acq: Any) -> None:
        nonlocal closed
        closed = True

    with clean_loop():
        with pytest.raises(LookupError) as info:
            async with opened([Node("conn", conn, release=close)], ["conn"]):
                raise body_error
    assert info.value is body_error
    assert closed
    assert failures(body_error) == ()
    assert notes(body_error) == []


async def test_process_termination_from_the_body_propagates_after_cleanup() -> None:
    interrupt = KeyboardInterrupt()
    release_error = OSError("release")
    journal = Journal()

    async def conn() -> Conn:
        return Conn("c")

    async def close(acq: Any) -> None:
        journal("close")
        raise release_error

    with clean_loop():
        with pytest.raises(KeyboardInterrupt) as info:
            async with opened([Node("conn", conn, release=close)], ["conn"]):
                raise interrupt
    assert info.value is interrupt
    assert journal.entries == ["close"]
    assert failures(interrupt) == (release_error,)


async def test_an_owned_node_failing_its_input_check_owes_no_release() -> None:
    journal = Journal()

    def source() -> object:
        return "text"

    async def conn(source: object) -> Conn:
        journal("conn called")
        return Conn("c")

    async def close(acq: Any) -> None:
        journal("close")

    nodes = [
        Node("source", source),
        Node(
            "conn",
            conn,
            ("source",),
            input_checks=(("source", lambda value: isinstance(value, int)),),
            release=close,
        ),
    ]
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await execute(nodes, ["conn"])
    assert str(info.value.exceptions[0]) == "Invalid input for conn.source"
    assert journal.entries == []
