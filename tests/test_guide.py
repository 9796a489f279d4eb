"""The lifecycle guide's promises, end to end through Driver -> prepare -> execute/open."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from sdax_hamilton import Acquisition, Driver, ExecutionError, RunEvent, failures
from sdax_hamilton.testing import jitter_seed

RESOURCES = """
from __future__ import annotations
import asyncio
from sdax_hamilton import Acquisition, execution, shutdown

EVENTS: list[str] = []


class Connection:
    def __init__(self) -> None:
        self.open = True


class Transaction:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.open = True


async def connection() -> Connection:
    EVENTS.append("acquire connection")
    await asyncio.sleep(0)
    return Connection()


async def transaction(connection: Connection) -> Transaction:
    EVENTS.append("acquire transaction")
    assert connection.open
    return Transaction(connection)


async def query(transaction: Transaction) -> str:
    EVENTS.append("query")
    assert transaction.open and transaction.connection.open
    return "rows"
"""

RELEASES_CONNECTION_FIRST = """
@shutdown(of=connection, timeout=2.0)
async def close_connection(acquired: Acquisition[Connection]) -> None:
    EVENTS.append("release connection")
    await asyncio.sleep(0)
    acquired.value.open = False


@shutdown(of=transaction, timeout=2.0)
async def end_transaction(acquired: Acquisition[Transaction]) -> None:
    assert acquired.value.connection.open, "connection released before its transaction"
    await asyncio.sleep(0)
    EVENTS.append("release transaction")
    acquired.value.open = False
"""

RELEASES_TRANSACTION_FIRST = """
@shutdown(of=transaction, timeout=2.0)
async def end_transaction(acquired: Acquisition[Transaction]) -> None:
    assert acquired.value.connection.open, "connection released before its transaction"
    await asyncio.sleep(0)
    EVENTS.append("release transaction")
    acquired.value.open = False


@shutdown(of=connection, timeout=2.0)
async def close_connection(acquired: Acquisition[Connection]) -> None:
    EVENTS.append("release connection")
    await asyncio.sleep(0)
    acquired.value.open = False
"""


@pytest.mark.parametrize("releases", [RELEASES_CONNECTION_FIRST, RELEASES_TRANSACTION_FIRST])
async def test_shutdown_follows_dependencies_not_declaration_order(
    make_module: Any, releases: str
) -> None:
    mod = make_module(RESOURCES + releases)
    plan = Driver(mod).prepare(["query"])
    assert await plan.execute() == {"query": "rows"}
    assert mod.EVENTS == [
        "acquire connection",
        "acquire transaction",
        "query",
        "release transaction",
        "release connection",
    ]


async def test_guide_retry_example_retries_selected_exceptions(make_module: Any) -> None:
    mod = make_module(
        """
        from sdax_hamilton import execution
        CALLS: list[int] = []

        @execution(timeout=5.0, retries=3, initial_delay=0.001, backoff_factor=2.0,
                   retryable_exceptions=(ConnectionError, TimeoutError))
        async def fetch_report(source: str) -> str:
            CALLS.append(len(CALLS))
            if len(CALLS) < 3:
                raise ConnectionResetError("flaky")  # subclass of ConnectionError
            return source.upper()
        """
    )
    plan = Driver(mod).prepare(["fetch_report"])
    assert await plan.execute(inputs={"source": "ok"}) == {"fetch_report": "OK"}
    assert mod.CALLS == [0, 1, 2]


async def test_retries_are_bounded_and_the_last_failure_is_reported(make_module: Any) -> None:
    mod = make_module(
        """
        from sdax_hamilton import execution
        CALLS: list[int] = []
        ERRORS: list[BaseException] = []

        @execution(retries=3, initial_delay=0.001)
        async def fetch() -> int:
            CALLS.append(1)
            error = ConnectionError(f"attempt {len(CALLS)}")
            ERRORS.append(error)
            raise error
        """
    )
    plan = Driver(mod).prepare(["fetch"])
    with pytest.raises(ExecutionError) as caught:
        await plan.execute()
    assert len(mod.CALLS) == 4  # one initial attempt plus three retries
    assert caught.value.exceptions == (mod.ERRORS[-1],)
    assert any("fetch" in note for note in getattr(mod.ERRORS[-1], "__notes__", ()))


async def test_non_retryable_exception_is_not_retried(make_module: Any) -> None:
    mod = make_module(
        """
        from sdax_hamilton import execution
        CALLS: list[int] = []

        @execution(retries=3, initial_delay=0.001)
        def parse() -> int:
            CALLS.append(1)
            raise OSError("not in the default set")
        """
    )
    with pytest.raises(ExecutionError) as caught:
        await Driver(mod).prepare(["parse"]).execute()
    assert len(mod.CALLS) == 1
    assert isinstance(caught.value.exceptions[0], OSError)


async def test_retry_waits_fall_within_the_jittered_backoff(make_module: Any) -> None:
    mod = make_module(
        """
        import time
        from sdax_hamilton import execution
        STARTS: list[float] = []

        @execution(retries=3, initial_delay=0.04, backoff_factor=2.0)
        async def fetch() -> int:
            STARTS.append(time.monotonic())
            if len(STARTS) < 4:
                raise TimeoutError("slow")
            return 1
        """
    )
    events: list[RunEvent] = []
    with jitter_seed(21):
        await Driver(mod).prepare(["fetch"]).execute(observer=events.append)
    delays = [e.delay for e in events if e.kind == "retry_scheduled"]
    gaps = [b - a for a, b in zip(mod.STARTS, mod.STARTS[1:], strict=False)]
    assert len(gaps) == len(delays) == 3
    for k, (delay, gap) in enumerate(zip(delays, gaps, strict=True)):
        base = 0.04 * 2.0**k
        assert delay is not None and 0.5 * base <= delay <= base, (k, delay)
        # The wait lasts at least the drawn delay by the monotonic clock (exact, up to
        # rounding); the upper slack is for a loaded machine, and still fails if the delay
        # were not the one announced (unjittered, doubled, in milliseconds).
        assert gap >= delay - 1e-9, (k, gap, delay)
        assert gap <= delay + 1.0, (k, gap, delay)


async def test_timed_out_attempt_drains_before_the_next_attempt(make_module: Any) -> None:
    mod = make_module(
        """
        import asyncio
        from sdax_hamilton import execution
        EVENTS: list[str] = []

        @execution(timeout=0.05, retries=1, initial_delay=0.0)
        async def slow() -> str:
            attempt = sum(1 for e in EVENTS if e == "start")
            EVENTS.append("start")
            if attempt == 0:
                try:
                    await asyncio.sleep(10)
                finally:
                    # Cleanup that itself takes time: the retry must wait for it.
                    await asyncio.shield(asyncio.sleep(0.05))
                    EVENTS.append("drained")
            return "done"
        """
    )
    assert await Driver(mod).prepare(["slow"]).execute() == {"slow": "done"}
    assert mod.EVENTS == ["start", "drained", "start"]


async def test_timeout_is_per_attempt_with_no_total_deadline(make_module: Any) -> None:
    mod = make_module(
        """
        import asyncio
        from sdax_hamilton import execution
        CALLS: list[int] = []

        @execution(timeout=0.5, retries=2, initial_delay=0.0)
        async def work() -> int:
            CALLS.append(1)
            await asyncio.sleep(0.2)
            if len(CALLS) < 3:
                raise ConnectionError("again")
            return len(CALLS)
        """
    )
    started = time.monotonic()
    assert await Driver(mod).prepare(["work"]).execute() == {"work": 3}
    # Three attempts of 0.2 s each exceed the 0.5 s per-attempt timeout in total (uvloop's
    # timers may fire a millisecond early, so each sleep lasts at least 0.199 s).
    assert time.monotonic() - started >= 3 * (0.2 - 0.001) > 0.5


async def test_timeout_exhausted_reports_builtin_timeout_error(make_module: Any) -> None:
    mod = make_module(
        """
        import asyncio
        from sdax_hamilton import execution

        @execution(timeout=0.01, retries=1, initial_delay=0.0)
        async def hang() -> int:
            await asyncio.sleep(10)
            return 1
        """
    )
    with pytest.raises(ExecutionError) as caught:
        await Driver(mod).prepare(["hang"]).execute()
    (leaf,) = caught.value.exceptions
    assert type(leaf) is TimeoutError


ACQUISITIONS = """
from __future__ import annotations
from sdax_hamilton import Acquisition, execution, shutdown

SEEN: list[tuple[bool, bool, object]] = []
MODE: list[str] = ["valid"]


class Resource:
    pass


async def resource() -> Resource:
    if MODE[0] == "raise":
        raise ConnectionRefusedError("cannot acquire")
    if MODE[0] == "invalid":
        return "not a resource"  # type: ignore[return-value]
    return Resource()


@shutdown(of=resource)
def release(acquired: Acquisition[Resource]) -> None:
    raw = acquired.raw_value if acquired.has_value else None
    SEEN.append((acquired.has_value, acquired.is_valid, raw))
    if not acquired.is_valid:
        try:
            acquired.value
        except TypeError:
            SEEN.append(("value refused",))  # type: ignore[arg-type]


def use(resource: Resource) -> str:
    return "used"
"""


async def test_acquisition_valid_value(make_module: Any) -> None:
    mod = make_module(ACQUISITIONS)
    async with Driver(mod).prepare(["use"]).open() as values:
        assert values == {"use": "used"}
        assert mod.SEEN == []  # released only after the body
    ((has_value, is_valid, raw),) = mod.SEEN
    assert has_value and is_valid and isinstance(raw, mod.Resource)


async def test_acquisition_failed_before_returning(make_module: Any) -> None:
    mod = make_module(ACQUISITIONS)
    mod.MODE[0] = "raise"
    with pytest.raises(ExecutionError) as caught:
        await Driver(mod).prepare(["use"]).execute()
    assert isinstance(caught.value.exceptions[0], ConnectionRefusedError)
    assert mod.SEEN == [(False, False, None), ("value refused",)]


async def test_acquisition_invalid_returned_value(make_module: Any) -> None:
    mod = make_module(ACQUISITIONS)
    mod.MODE[0] = "invalid"
    with pytest.raises(ExecutionError) as caught:
        await Driver(mod).prepare(["use"]).execute()
    (leaf,) = caught.value.exceptions
    assert isinstance(leaf, TypeError)
    assert "Invalid output from resource" in str(leaf)
    assert mod.SEEN == [(True, False, "not a resource"), ("value refused",)]


async def test_shutdown_has_its_own_policy(make_module: Any) -> None:
    mod = make_module(
        """
        from sdax_hamilton import Acquisition, shutdown
        RELEASES: list[int] = []

        class Handle:
            pass

        def handle() -> Handle:
            return Handle()

        @shutdown(of=handle, retries=2, initial_delay=0.001,
                  retryable_exceptions=(ConnectionError,))
        def release(acquired: Acquisition[Handle]) -> None:
            RELEASES.append(1)
            if len(RELEASES) < 3:
                raise ConnectionError("release blip")

        def name(handle: Handle) -> str:
            return "h"
        """
    )
    assert await Driver(mod).prepare(["name"]).execute() == {"name": "h"}
    assert mod.RELEASES == [1, 1, 1]


async def test_forward_retries_on_owned_acquisition_are_refused(make_module: Any) -> None:
    mod = make_module(
        """
        from sdax_hamilton import Acquisition, execution, shutdown

        class Handle:
            pass

        @execution(retries=2)
        def handle() -> Handle:
            return Handle()

        @shutdown(of=handle)
        def release(acquired: Acquisition[Handle]) -> None:
            pass
        """
    )
    with pytest.raises(ValueError, match="Acquisition retries require attempt cleanup: handle"):
        Driver(mod)


async def test_execute_refuses_resource_outputs_and_open_serves_them(make_module: Any) -> None:
    mod = make_module(RESOURCES + RELEASES_CONNECTION_FIRST)
    plan = Driver(mod).prepare(["transaction", "query"])
    with pytest.raises(ValueError, match="Use open"):
        await plan.execute()
    assert mod.EVENTS == []  # nothing ran
    async with plan.open() as values:
        assert values["query"] == "rows"
        assert values["transaction"].open and values["transaction"].connection.open
    assert not values["transaction"].open
    assert not values["transaction"].connection.open


async def test_body_failure_keeps_identity_and_runs_cleanup(make_module: Any) -> None:
    mod = make_module(RESOURCES + RELEASES_CONNECTION_FIRST)
    plan = Driver(mod).prepare(["query"])
    boom = RuntimeError("body failed")
    with pytest.raises(RuntimeError) as caught:
        async with plan.open():
            raise boom
    assert caught.value is boom
    assert mod.EVENTS[-2:] == ["release transaction", "release connection"]
    assert failures(boom) == ()
    assert not getattr(boom, "__notes__", None)


async def test_body_failure_with_failing_release_attaches_diagnostics(make_module: Any) -> None:
    mod = make_module(
        RESOURCES
        + """
@shutdown(of=connection)
def close_connection(acquired: Acquisition[Connection]) -> None:
    raise OSError("close failed")
"""
    )
    plan = Driver(mod).prepare(["query"])
    boom = KeyError("body")
    with pytest.raises(KeyError) as caught:
        async with plan.open():
            raise boom
    assert caught.value is boom
    (secondary,) = failures(boom)
    assert isinstance(secondary, OSError)
    assert any("failures(exception)" in note for note in boom.__notes__)


async def test_body_cancellation_runs_cleanup_and_propagates(make_module: Any) -> None:
    mod = make_module(RESOURCES + RELEASES_CONNECTION_FIRST)
    plan = Driver(mod).prepare(["query"])
    entered = asyncio.Event()

    async def caller() -> None:
        async with plan.open():
            entered.set()
            await asyncio.sleep(10)

    task = asyncio.create_task(caller())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert mod.EVENTS[-2:] == ["release transaction", "release connection"]


async def test_release_failure_after_success_is_raised(make_module: Any) -> None:
    mod = make_module(
        RESOURCES
        + """
@shutdown(of=connection)
def close_connection(acquired: Acquisition[Connection]) -> None:
    raise OSError("close failed")
"""
    )
    with pytest.raises(ExecutionError) as caught:
        await Driver(mod).prepare(["query"]).execute()
    (leaf,) = caught.value.exceptions
    assert isinstance(leaf, OSError)
    assert any("connection" in note for note in leaf.__notes__)


async def test_release_returning_a_value_is_an_error(make_module: Any) -> None:
    mod = make_module(
        RESOURCES
        + """
@shutdown(of=connection)
def close_connection(acquired: Acquisition[Connection]) -> None:
    return 1  # type: ignore[return-value]
"""
    )
    with pytest.raises(ExecutionError) as caught:
        await Driver(mod).prepare(["query"]).execute()
    (leaf,) = caught.value.exceptions
    assert isinstance(leaf, TypeError)
    assert "Shutdown must return None" in str(leaf)


async def test_concurrent_executions_are_isolated(make_module: Any) -> None:
    mod = make_module(
        """
        import asyncio
        from sdax_hamilton import Acquisition, shutdown
        ACQUIRED: list[object] = []
        RELEASED: list[object] = []

        class Handle:
            def __init__(self, label: str) -> None:
                self.label = label

        async def handle(label: str) -> Handle:
            h = Handle(label)
            ACQUIRED.append(h)
            await asyncio.sleep(0.001)
            return h

        @shutdown(of=handle)
        async def release(acquired: Acquisition[Handle]) -> None:
            await asyncio.sleep(0.001)
            RELEASED.append(acquired.value)

        async def label_of(handle: Handle) -> str:
            await asyncio.sleep(0.001)
            return handle.label
        """
    )
    plan = Driver(mod).prepare(["label_of"])
    results = await asyncio.gather(*(plan.execute(inputs={"label": f"run-{i}"}) for i in range(50)))
    assert [r["label_of"] for r in results] == [f"run-{i}" for i in range(50)]
    assert len(mod.ACQUIRED) == 50
    assert sorted(map(id, mod.RELEASED)) == sorted(map(id, mod.ACQUIRED))


def test_direct_calls_stay_plain(make_module: Any) -> None:
    mod = make_module(
        """
        from sdax_hamilton import execution
        CALLS: list[int] = []

        @execution(retries=5, timeout=0.001)
        def flaky() -> int:
            CALLS.append(1)
            raise ConnectionError("no retry on a direct call")
        """
    )
    with pytest.raises(ConnectionError):
        mod.flaky()
    assert mod.CALLS == [1]


def test_acquisition_is_exported_generic() -> None:
    from typing import get_args, get_origin

    assert get_origin(Acquisition[int]) is Acquisition
    assert get_args(Acquisition[int]) == (int,)
