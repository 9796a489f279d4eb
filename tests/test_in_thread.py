"""``execution(in_thread=True)``: a sync node's attempts run in a worker thread, so a
blocking call leaves the event loop free; a thread cannot be cancelled, so a timed-out or
cancelled attempt drains (the next attempt, the node's completion and the releases wait
for the thread) and what the thread returns afterwards is discarded, except by an owned
acquisition's release, which closes it (docs/lifecycle.md, "Blocking functions"). Real
threads throughout; orderings are made by events, not sleeps. Timeouts are long enough for
a loaded machine to have started the thread: a call the executor has not started when its
attempt is cancelled is abandoned, never run.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

import pytest
from hamilton.lifecycle import NodeExecutionHook

from sdax_hamilton import Driver, RunEvent, execution
from sdax_hamilton._failures import ExecutionError

HEADER = """
import threading
from sdax_hamilton import Acquisition, execution, shutdown

LOG = []
GATE = threading.Event()
"""

LOOP_FREE = """
@execution(in_thread=True)
def blocking(x: int) -> str:
    LOG.append(("blocking", threading.current_thread().name))
    if not GATE.wait(30):  # only a loop left free can set it
        raise RuntimeError("the loop never ran the async node")
    return "opened"

async def opener(x: int) -> int:
    GATE.set()
    return x

def both(blocking: str, opener: int) -> str:
    return f"{blocking}{opener}"
"""


async def test_a_blocking_node_leaves_the_loop_free(make_module: Any) -> None:
    mod = make_module(HEADER + LOOP_FREE)
    result = await Driver(mod).prepare(["both"]).execute(inputs={"x": 1})
    assert result == {"both": "opened1"}
    (_, thread_name), *_ = mod.LOG
    assert thread_name != threading.current_thread().name


async def test_the_drivers_executor_runs_the_attempts(make_module: Any) -> None:
    mod = make_module(HEADER + LOOP_FREE)
    with ThreadPoolExecutor(2, thread_name_prefix="sdax-test-pool") as pool:
        result = await Driver(mod, executor=pool).prepare(["both"]).execute(inputs={"x": 1})
    assert result == {"both": "opened1"}
    assert mod.LOG[0][1].startswith("sdax-test-pool")


async def test_without_an_executor_the_loops_default_executor_runs_them(
    make_module: Any,
) -> None:
    mod = make_module(HEADER + LOOP_FREE)
    pool = ThreadPoolExecutor(2, thread_name_prefix="sdax-loop-default")
    asyncio.get_running_loop().set_default_executor(pool)
    result = await Driver(mod).prepare(["both"]).execute(inputs={"x": 1})
    assert result == {"both": "opened1"}
    assert mod.LOG[0][1].startswith("sdax-loop-default")


def test_in_thread_on_an_async_function_is_a_type_error() -> None:
    with pytest.raises(TypeError, match=r"execution\(in_thread=True\) on async function"):

        @execution(in_thread=True)
        async def fetch(x: int) -> int:
            return x


def test_in_thread_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="in_thread must be True or False, not int"):
        execution(in_thread=1)  # type: ignore[arg-type]


def test_the_executor_must_be_an_executor(make_module: Any) -> None:
    mod = make_module(HEADER + LOOP_FREE)
    with pytest.raises(TypeError, match=r"executor must be a concurrent\.futures\.Executor"):
        Driver(mod, executor=object())  # type: ignore[arg-type]
    with ProcessPoolExecutor(1) as processes, pytest.raises(TypeError, match="in threads"):
        Driver(mod, executor=processes)


def test_a_direct_call_is_unchanged(make_module: Any) -> None:
    mod = make_module(HEADER + LOOP_FREE)
    mod.GATE.set()
    assert mod.blocking(1) == "opened"  # sync stays sync, no thread


# ------------------------------------------------------------------ the drain rule

SLOW = """
RELEASE_THREAD = threading.Event()

@execution(in_thread=True, timeout=0.5, retries={retries}, initial_delay=0.0)
def slow(x: int) -> str:
    number = sum(1 for entry in LOG if entry == "start")
    LOG.append("start")
    if number == 0:
        RELEASE_THREAD.wait(30)  # released once the timeout has been reported
        LOG.append("end")
        return "late"
    return "fresh"
"""


def _release_on_timeout(mod: Any, loop: asyncio.AbstractEventLoop) -> Any:
    """An observer that lets the first attempt's thread return a little after its timeout
    was reported: a driver that did not wait for it would start the retry meanwhile."""

    def observe(event: RunEvent) -> None:
        if event.kind == "attempt_timed_out":
            mod.LOG.append("timed out")
            loop.call_later(0.05, mod.RELEASE_THREAD.set)

    return observe


async def test_the_next_attempt_waits_for_a_timed_out_thread(make_module: Any) -> None:
    mod = make_module(HEADER + SLOW.format(retries=1))
    observe = _release_on_timeout(mod, asyncio.get_running_loop())
    plan = Driver(mod).prepare(["slow"])
    result = await plan.execute(inputs={"x": 1}, observer=observe)
    assert result == {"slow": "fresh"}  # "late", returned after the timeout, is discarded
    assert mod.LOG == ["start", "timed out", "end", "start"]


async def test_a_timed_out_thread_fails_the_attempt_and_the_run_waits_for_it(
    make_module: Any,
) -> None:
    mod = make_module(HEADER + SLOW.format(retries=0))
    observe = _release_on_timeout(mod, asyncio.get_running_loop())
    with pytest.raises(ExecutionError) as info:
        await Driver(mod).prepare(["slow"]).execute(inputs={"x": 1}, observer=observe)
    assert [type(leaf) for leaf in info.value.exceptions] == [TimeoutError]
    assert mod.LOG == ["start", "timed out", "end"]  # the run ended after the thread


RELEASED = """
@execution(in_thread=True, timeout=0.5)
def slow(connection: list) -> str:
    LOG.append("start")
    RELEASE_THREAD.wait(30)
    LOG.append("end")
    return "late"

def connection() -> list:
    return ["open"]

@shutdown(of=connection)
def close(acquired: Acquisition[list]) -> None:
    LOG.append("released")
"""


async def test_releases_wait_for_a_timed_out_thread(make_module: Any) -> None:
    mod = make_module(HEADER + "RELEASE_THREAD = threading.Event()\n" + RELEASED)
    observe = _release_on_timeout(mod, asyncio.get_running_loop())
    with pytest.raises(ExecutionError):
        await Driver(mod).prepare(["slow"]).execute(observer=observe)
    assert mod.LOG == ["start", "timed out", "end", "released"]


CANCELLED = """
STARTED = threading.Event()

@execution(in_thread=True)
def slow(x: int) -> str:
    STARTED.set()
    GATE.wait(30)
    LOG.append("end")
    return "late"
"""


async def test_a_cancelled_run_waits_for_its_thread(make_module: Any) -> None:
    mod = make_module(HEADER + CANCELLED)
    loop = asyncio.get_running_loop()
    run = asyncio.ensure_future(Driver(mod).prepare(["slow"]).execute(inputs={"x": 1}))
    await loop.run_in_executor(None, mod.STARTED.wait, 30)
    run.cancel()
    loop.call_later(0.05, mod.GATE.set)
    with pytest.raises(asyncio.CancelledError):
        await run
    assert mod.LOG == ["end"]  # the cancellation reached the caller after the thread


class _Hooks(NodeExecutionHook):
    """Hamilton's node hooks: where they run, and what they are told."""

    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def run_before_node_execution(self, **kwargs: Any) -> None:
        self.log.append(("before", kwargs["node_name"], threading.current_thread().name))

    def run_after_node_execution(self, **kwargs: Any) -> None:
        error = kwargs.get("error")
        self.log.append(("after", kwargs["node_name"], type(error).__name__ if error else None))


async def test_node_hooks_stay_on_the_loop_and_see_a_timed_out_thread_end(
    make_module: Any,
) -> None:
    mod = make_module(HEADER + SLOW.format(retries=0))
    observe = _release_on_timeout(mod, asyncio.get_running_loop())
    driver = Driver(mod, adapters=[_Hooks(mod.LOG)])
    with pytest.raises(ExecutionError):
        await driver.prepare(["slow"]).execute(inputs={"x": 1}, observer=observe)
    loop_thread = threading.current_thread().name
    assert mod.LOG == [
        ("before", "slow", loop_thread),
        "start",
        "timed out",
        "end",
        ("after", "slow", "TimeoutError"),  # once the thread has returned
    ]


RUN_DEADLINE = """
RELEASE_THREAD = threading.Event()

@execution(in_thread=True)
def slow(x: int) -> str:
    LOG.append("start")
    RELEASE_THREAD.wait(30)
    LOG.append("end")
    return "late"
"""


async def test_a_run_deadline_ends_the_run_only_once_the_thread_has_returned(
    make_module: Any,
) -> None:
    mod = make_module(HEADER + RUN_DEADLINE)
    observe = _release_on_timeout(mod, asyncio.get_running_loop())
    with pytest.raises(ExecutionError) as info:
        await Driver(mod).prepare(["slow"]).execute(inputs={"x": 1}, observer=observe, timeout=0.5)
    (leaf,) = info.value.exceptions
    assert isinstance(leaf, TimeoutError)
    assert any("cut short by the run's timeout" in note for note in leaf.__notes__)
    assert mod.LOG == ["start", "timed out", "end"]


QUEUED = """
@execution(in_thread=True, timeout=0.05)
def queued(x: int) -> str:
    LOG.append("ran")
    return "never"
"""


async def test_a_call_still_queued_when_its_attempt_times_out_never_runs(
    make_module: Any,
) -> None:
    mod = make_module(HEADER + QUEUED)
    busy = threading.Event()
    pool = ThreadPoolExecutor(1, thread_name_prefix="sdax-test-busy")
    occupied = pool.submit(busy.wait, 30)  # the only worker is taken
    try:
        with pytest.raises(ExecutionError) as info:
            await Driver(mod, executor=pool).prepare(["queued"]).execute(inputs={"x": 1})
        assert [type(leaf) for leaf in info.value.exceptions] == [TimeoutError]
    finally:
        busy.set()
        occupied.result()
        pool.shutdown(wait=True)  # the queued call is taken up now, and skipped
    assert mod.LOG == []


# ------------------------------------------------------------------ a late resource

LATE_RESOURCE = """
RELEASE_THREAD = threading.Event()

class Connection:
    def __init__(self) -> None:
        self.closed = False

@execution(in_thread=True, timeout=0.5)
def connection(x: int) -> Connection:
    LOG.append("connecting")
    RELEASE_THREAD.wait(30)  # released once the timeout has been reported
    return Connection()

@shutdown(of=connection)
def close(record: Acquisition[Connection]) -> None:
    LOG.append(("release", record.is_valid))
    if record.is_valid:
        record.value.closed = True
        LOG.append(record.value)

def query(connection: Connection) -> int:
    return 1
"""


async def test_a_resource_a_timed_out_thread_returns_late_reaches_the_release(
    make_module: Any,
) -> None:
    mod = make_module(HEADER + LATE_RESOURCE)
    observe = _release_on_timeout(mod, asyncio.get_running_loop())
    with pytest.raises(ExecutionError) as info:
        await Driver(mod).prepare(["query"]).execute(inputs={"x": 1}, observer=observe)
    (failure,) = info.value.exceptions
    assert isinstance(failure, TimeoutError)  # the node failed: the value is not its own
    assert mod.LOG[:3] == ["connecting", "timed out", ("release", True)]
    (connection,) = mod.LOG[3:]
    assert isinstance(connection, mod.Connection) and connection.closed


async def test_a_thread_that_raises_after_its_timeout_leaves_an_empty_record(
    make_module: Any,
) -> None:
    mod = make_module(
        HEADER + LATE_RESOURCE.replace("    return Connection()", "    raise OSError('refused')")
    )
    observe = _release_on_timeout(mod, asyncio.get_running_loop())
    with pytest.raises(ExecutionError):
        await Driver(mod).prepare(["query"]).execute(inputs={"x": 1}, observer=observe)
    assert mod.LOG == ["connecting", "timed out", ("release", False)]
