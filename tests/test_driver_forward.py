"""Forward phase (docs/contract.md#forward-phase, #open-algorithm steps 2-4, #outcomes): calls,
values, checks, failures."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from support.driver import Journal, Node, clean_loop, execute, notes, opened, started

from sdax_hamilton._failures import ExecutionError, failures


async def test_chain_of_sync_and_async_nodes_stores_values_and_yields_outputs() -> None:
    async def a(x: int) -> int:
        return x + 1

    def b(a: int) -> int:
        return a * 10

    async def c(a: int, b: int) -> int:
        await asyncio.sleep(0)
        return a + b

    table: dict[str, Any] = {"x": 1}
    nodes = [Node("a", a, ("x",)), Node("b", b, ("a",)), Node("c", c, ("a", "b"))]
    with clean_loop():
        async with opened(nodes, ["c", "a"], table=table) as result:
            assert result == {"c": 22, "a": 2}
            assert list(result) == ["c", "a"]  # outputs order
            assert result is not table
            result["c"] = "mutated"
        assert table == {"x": 1, "a": 2, "b": 20, "c": 22}


async def test_outputs_may_name_plain_inputs_and_the_body_dict_is_fresh_each_run() -> None:
    def a(x: int) -> int:
        return x

    nodes = [Node("a", a, ("x",))]
    with clean_loop():
        first = await execute(nodes, ["a"], {"x": 1})
        second = await execute(nodes, ["a"], {"x": 2})
    assert first == {"a": 1} and second == {"a": 2}


async def test_defaults_fill_keywords_not_read_from_values() -> None:
    seen: list[tuple[int, str]] = []

    def a(x: int, label: str) -> int:
        seen.append((x, label))
        return x

    nodes = [Node("a", a, ("x",), defaults={"label": "dflt"})]
    with clean_loop():
        assert await execute(nodes, ["a"], {"x": 3}) == {"a": 3}
    assert seen == [(3, "dflt")]


async def test_sync_functions_run_on_the_loop_thread_and_awaitable_results_are_awaited() -> None:
    threads: list[int] = []
    loop = asyncio.get_running_loop()

    def makes_future() -> asyncio.Future[int]:
        threads.append(threading.get_ident())
        fut: asyncio.Future[int] = loop.create_future()
        loop.call_soon(fut.set_result, 7)
        return fut

    def makes_coroutine(makes_future: int) -> Any:
        threads.append(threading.get_ident())

        async def inner() -> int:
            return makes_future + 1

        return inner()

    nodes = [
        Node("makes_future", makes_future),
        Node("makes_coroutine", makes_coroutine, ("makes_future",)),
    ]
    with clean_loop():
        assert await execute(nodes, ["makes_coroutine"]) == {"makes_coroutine": 8}
    assert threads == [threading.get_ident()] * 2


async def test_independent_nodes_run_concurrently() -> None:
    # Each waits for the other to have started: only concurrent execution completes.
    left_in, right_in = asyncio.Event(), asyncio.Event()

    async def left() -> str:
        left_in.set()
        await started(right_in)
        return "l"

    async def right() -> str:
        right_in.set()
        await started(left_in)
        return "r"

    def join(left: str, right: str) -> str:
        return left + right

    nodes = [Node("left", left), Node("right", right), Node("join", join, ("left", "right"))]
    with clean_loop():
        assert await execute(nodes, ["join"]) == {"join": "lr"}


async def test_a_node_starts_only_after_all_its_inputs_produced() -> None:
    journal = Journal()
    gate = asyncio.Event()

    async def slow() -> int:
        journal("slow start")
        await started(gate)
        journal("slow end")
        return 1

    async def fast() -> int:
        journal("fast")
        gate.set()
        return 2

    def after(slow: int, fast: int) -> int:
        journal("after")
        return slow + fast

    nodes = [Node("slow", slow), Node("fast", fast), Node("after", after, ("slow", "fast"))]
    with clean_loop():
        assert await execute(nodes, ["after"]) == {"after": 3}
    assert journal.index("after") > journal.index("slow end")
    assert journal.count("after") == 1


async def test_node_failure_raises_execution_error_with_the_original_leaf_and_a_note() -> None:
    boom = ValueError("secret-value-123")
    body_ran = False

    async def a() -> int:
        raise boom

    nodes = [Node("a", a)]
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            async with opened(nodes, ["a"]):
                body_ran = True
    assert not body_ran
    group = info.value
    assert group.exceptions == (boom,)
    assert group.exceptions[0] is boom
    assert "sdax_hamilton: node 'a' failed after 1 attempt" in notes(boom)
    assert "secret-value-123" not in str(group)
    assert failures(group) == ()


async def test_failure_stops_later_nodes_and_drains_running_ones() -> None:
    journal = Journal()
    running = asyncio.Event()

    async def long() -> int:
        running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            journal("long cancelled")
            await asyncio.sleep(0)  # drains for a moment
            journal("long drained")
            raise
        return 0

    async def fails() -> int:
        await started(running)
        raise ConnectionResetError("nope")

    def later(fails: int) -> int:
        journal("later ran")
        return fails

    nodes = [Node("long", long), Node("fails", fails), Node("later", later, ("fails",))]
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await execute(nodes, ["long", "later"])
    (leaf,) = info.value.exceptions
    assert isinstance(leaf, ConnectionResetError)
    assert journal.entries == ["long cancelled", "long drained"]


async def test_exception_raised_while_draining_is_collected_too() -> None:
    running = asyncio.Event()
    cleanup_error = OSError("while cancelling")
    first = KeyError("first")

    async def victim() -> int:
        running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise cleanup_error from None
        return 0

    async def fails() -> int:
        await started(running)
        raise first

    nodes = [Node("victim", victim), Node("fails", fails)]
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await execute(nodes, ["victim", "fails"])
    assert info.value.exceptions == (first, cleanup_error)
    assert "sdax_hamilton: node 'victim' failed after 1 attempt" in notes(cleanup_error)


async def test_output_check_failure_is_a_type_error_never_retried() -> None:
    calls = 0

    async def a() -> object:
        nonlocal calls
        calls += 1
        return "not an int"

    nodes = [
        Node(
            "a",
            a,
            retries=3,
            retryable=(Exception,),
            output_type=int,
            output_check=lambda value: isinstance(value, int),
        )
    ]
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await execute(nodes, ["a"])
    (leaf,) = info.value.exceptions
    assert type(leaf) is TypeError
    assert str(leaf) == "Invalid output from a (tests.a) — output 'a' expects int, got str"
    assert calls == 1


async def test_input_check_failure_is_raised_before_the_first_attempt_and_never_retried() -> None:
    calls = 0

    def a() -> object:
        return "text"

    def b(a: object) -> int:
        nonlocal calls
        calls += 1
        return 0

    nodes = [
        Node("a", a),
        Node(
            "b",
            b,
            ("a",),
            retries=2,
            retryable=(Exception,),
            input_checks=(("a", lambda value: isinstance(value, int)),),
        ),
    ]
    with clean_loop():
        with pytest.raises(ExecutionError) as info:
            await execute(nodes, ["b"])
    (leaf,) = info.value.exceptions
    assert type(leaf) is TypeError
    assert str(leaf) == "Invalid input for b.a"
    assert "sdax_hamilton: node 'b' failed before its first attempt" in notes(leaf)
    assert calls == 0


async def test_a_node_cancelling_itself_fails_the_run_as_a_base_exception_group() -> None:
    own = asyncio.CancelledError()

    async def a() -> int:
        raise own

    for timeout in (None, 5.0):  # inline and as a task
        with clean_loop():
            with pytest.raises(BaseExceptionGroup) as info:
                await execute([Node("a", a, timeout=timeout)], ["a"])
        group = info.value
        assert not isinstance(group, ExceptionGroup)
        assert group.exceptions == (own,)
        assert "sdax_hamilton: node 'a' failed after 1 attempt" in notes(own)
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_self_cancellation_among_ordinary_failures_still_gives_a_base_group() -> None:
    running = asyncio.Event()
    other = ValueError("v")

    async def cancels() -> int:
        await started(running)
        raise asyncio.CancelledError

    async def fails() -> int:
        running.set()
        await asyncio.sleep(0)
        raise other

    nodes = [Node("cancels", cancels), Node("fails", fails)]
    with clean_loop():
        with pytest.raises(BaseExceptionGroup) as info:
            await execute(nodes, ["cancels", "fails"])
    assert not isinstance(info.value, ExceptionGroup)
    kinds = sorted(type(e).__name__ for e in info.value.exceptions)
    assert kinds == ["CancelledError", "ValueError"]
    assert other in info.value.exceptions


@pytest.mark.parametrize("kind", [KeyboardInterrupt, SystemExit])
@pytest.mark.parametrize("node_timeout", [None, 5.0])
async def test_process_termination_from_a_node_is_the_primary_after_cleanup(
    kind: type[BaseException], node_timeout: float | None
) -> None:
    journal = Journal()
    interrupt = kind()
    release_error = OSError("release failed")

    async def conn() -> str:
        return "c"

    async def stop(conn: str) -> int:
        raise interrupt

    async def close(acq: Any) -> None:
        journal("close")
        raise release_error

    nodes = [Node("conn", conn, release=close), Node("stop", stop, ("conn",), timeout=node_timeout)]
    with clean_loop():
        with pytest.raises(kind) as info:
            await execute(nodes, ["stop"])
    assert info.value is interrupt
    assert journal.entries == ["close"]
    assert failures(interrupt) == (release_error,)
    assert "sdax_hamilton: node 'stop' failed after 1 attempt" in notes(interrupt)


async def test_process_termination_without_other_failures_adds_no_diagnostics_note() -> None:
    interrupt = KeyboardInterrupt()

    def stop() -> int:
        raise interrupt

    with clean_loop():
        with pytest.raises(KeyboardInterrupt) as info:
            await execute([Node("stop", stop)], ["stop"])
    assert info.value is interrupt
    assert failures(interrupt) == ()
    assert notes(interrupt) == ["sdax_hamilton: node 'stop' failed after 1 attempt"]


async def test_nodes_outside_the_selection_never_run() -> None:
    journal = Journal()

    def a() -> int:
        journal("a")
        return 1

    def unused() -> int:
        journal("unused")
        return 2

    with clean_loop():
        assert await execute([Node("a", a), Node("unused", unused)], ["a"]) == {"a": 1}
    assert journal.entries == ["a"]


async def test_a_run_context_cannot_be_entered_twice() -> None:
    def a() -> int:
        return 1

    context = opened([Node("a", a)], ["a"])
    async with context:
        pass
    with pytest.raises(RuntimeError):
        async with context:
            pass


async def test_many_concurrent_runs_are_isolated() -> None:
    released: list[tuple[int, int]] = []
    gate = asyncio.Event()
    waiting = 0

    async def conn(x: int) -> dict[str, int]:
        nonlocal waiting
        waiting += 1
        if waiting == 50:
            gate.set()
        await started(gate)  # all 50 runs hold their resource at the same time
        return {"id": x}

    async def query(conn: dict[str, int], x: int) -> int:
        await asyncio.sleep(0)
        return conn["id"] * 100 + x

    async def close(acq: Any) -> None:
        await asyncio.sleep(0)
        released.append((acq.raw_value["id"], id(acq.raw_value)))

    nodes = [
        Node("conn", conn, ("x",), release=close),
        Node("query", query, ("conn", "x")),
    ]
    with clean_loop():
        results = await asyncio.gather(*(execute(nodes, ["query"], {"x": i}) for i in range(50)))
    assert results == [{"query": i * 101} for i in range(50)]
    assert sorted(r[0] for r in released) == list(range(50))
    assert len({r[1] for r in released}) == 50
