"""The timing and cancellation rules on every loop: asyncio's, uvloop's, eager tasks.

* uvloop's timers fire up to a millisecond early against ``loop.time()`` (libuv's clock
  has millisecond resolution and is read once per iteration): every retry wait must still
  last at least its delay, and every attempt timeout at least its policy.
* With ``asyncio.eager_task_factory`` (Python 3.12+) a phase may complete inside
  ``create_task``, in the step in which the caller is cancelled: the caller's
  ``CancelledError`` must stay the primary.
* On loops without a task factory (asyncio's and uvloop's), a phase's task starts eagerly
  on every Python (3.12's ``eager_start``; on 3.11 the driver runs the task's first step
  itself): a run whose nodes never suspend takes no loop iteration, and its nodes run in
  the phase's task from their first step.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
import uvloop

from sdax_hamilton import Driver, ExecutionError, RunEvent, failures
from sdax_hamilton._executor import eager
from sdax_hamilton.testing import jitter_seed

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def _asyncio_loop() -> asyncio.AbstractEventLoop:
    # asyncio's own loop, whatever loop policy the test session installed (under
    # SDAX_TEST_LOOP=uvloop, asyncio.new_event_loop() would make a uvloop loop)
    return asyncio.SelectorEventLoop()


def _eager_loop() -> asyncio.AbstractEventLoop:
    loop = _asyncio_loop()
    loop.set_task_factory(asyncio.eager_task_factory)  # type: ignore[attr-defined,unused-ignore]
    return loop


EAGER = hasattr(asyncio, "eager_task_factory")
LOOPS: dict[str, LoopFactory] = {
    "asyncio": _asyncio_loop,
    "uvloop": uvloop.new_event_loop,
    "asyncio-eager": _eager_loop,
}
# No uvloop with eager tasks: uvloop 0.23 passes ``eager_start`` to the task factory on
# Python 3.13, which asyncio's eager factory refuses (a TypeError in create_task).


def _run(loop: str, main: Callable[[], Any]) -> Any:
    if loop.endswith("eager") and not EAGER:
        pytest.skip(f"asyncio.eager_task_factory needs Python 3.12+ (this is {sys.version})")
    with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
        return runner.run(main())


TIMING = """
import asyncio
import time

from sdax_hamilton import Acquisition, execution, shutdown

STARTS: list[tuple[str, float]] = []
FAILS: list[tuple[str, float]] = []


class Conn:
    pass


def conn() -> Conn:
    return Conn()


@shutdown(of=conn, retries=3, initial_delay=0.0037, backoff_factor=1.3)
async def close_conn(acquired: Acquisition[Conn]) -> None:
    STARTS.append(("close_conn", time.monotonic()))
    await asyncio.sleep(0)
    FAILS.append(("close_conn", time.monotonic()))
    raise ConnectionError("release failed")


@execution(retries=3, initial_delay=0.0023, backoff_factor=1.7)
async def flaky(conn: Conn) -> int:
    STARTS.append(("flaky", time.monotonic()))
    await asyncio.sleep(0)
    FAILS.append(("flaky", time.monotonic()))
    raise ConnectionError("flaky failed")


@execution(timeout=0.0031)
async def slow_alone() -> int:
    await asyncio.sleep(1)
    return 1


@execution(timeout=0.0029)
async def slow_beside(conn: Conn) -> int:
    await asyncio.sleep(1)
    return 1


async def sibling(conn: Conn) -> int:
    await asyncio.sleep(0.02)
    return 1
"""


def _waits(events: list[RunEvent]) -> list[tuple[str, float, float]]:
    """``(node, computed delay, waited by the loop's clock)`` for every retry wait."""
    scheduled: dict[tuple[str, bool], RunEvent] = {}
    waits = []
    for event in events:
        if event.kind in ("retry_scheduled", "release_retry_scheduled"):
            scheduled[(event.node, event.kind == "retry_scheduled")] = event
        elif event.kind in ("attempt_started", "release_started"):
            before = scheduled.pop((event.node, event.kind == "attempt_started"), None)
            if before is not None:
                assert before.delay is not None
                waits.append((event.node, before.delay, event.time - before.time))
    return waits


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_every_retry_wait_lasts_at_least_its_delay(loop: str, make_module: Any) -> None:
    module = make_module(TIMING)
    plan = Driver(module).prepare(["flaky"])

    async def main() -> list[tuple[str, float, float]]:
        waits: list[tuple[str, float, float]] = []
        for seed in range(25):
            events: list[RunEvent] = []
            module.STARTS.clear()
            module.FAILS.clear()
            with jitter_seed(seed), pytest.raises(ExecutionError):
                await plan.execute(observer=events.append)
            found = _waits(events)
            assert len(found) == 6  # three node retries, three release retries
            waits.extend(found)
            # By the monotonic clock too: from the failure to the next attempt's start.
            for name in ("flaky", "close_conn"):
                starts = [t for n, t in module.STARTS if n == name]
                fails = [t for n, t in module.FAILS if n == name]
                delays = [d for n, d, _ in found if n == ("conn" if name == "close_conn" else name)]
                for failed, started, delay in zip(fails[:-1], starts[1:], delays, strict=True):
                    assert started - failed >= delay, (name, started - failed, delay)
        return waits

    waits = _run(loop, main)
    short = [(node, delay, waited) for node, delay, waited in waits if waited < delay]
    assert not short, short


@pytest.mark.parametrize("loop", sorted(LOOPS))
@pytest.mark.parametrize("outputs", [["slow_alone"], ["slow_beside", "sibling"]])
def test_every_timeout_lasts_at_least_its_policy(
    loop: str, outputs: list[str], make_module: Any
) -> None:
    plan = Driver(make_module(TIMING)).prepare(outputs)
    timeout = {"slow_alone": 0.0031, "slow_beside": 0.0029}[outputs[0]]

    async def main() -> list[float]:
        lasted = []
        for _ in range(25):
            events: list[RunEvent] = []
            with pytest.raises(ExecutionError):
                await plan.execute(observer=events.append)
            started = next(e.time for e in events if e.kind == "attempt_started")
            timed_out = next(e.time for e in events if e.kind == "attempt_timed_out")
            lasted.append(timed_out - started)
        return lasted

    lasted = _run(loop, main)
    assert min(lasted) >= timeout, (min(lasted), timeout)


CANCEL_IN_RELEASE = """
import asyncio

from sdax_hamilton import Acquisition, shutdown

CALLER: list[asyncio.Task] = []
RELEASED: list[str] = []


class Conn:
    pass


def conn() -> Conn:
    return Conn()


@shutdown(of=conn)
def close_conn(acquired: Acquisition[Conn]) -> None:
    RELEASED.append("conn")
    CALLER[0].cancel()  # the caller is cancelled just as the release runs


def boom(conn: Conn) -> int:
    raise ValueError("node failed")
"""


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_cancellation_during_an_eager_cleanup_stays_primary(loop: str, make_module: Any) -> None:
    module = make_module(CANCEL_IN_RELEASE)
    plan = Driver(module).prepare(["boom"])

    async def main() -> None:
        caller = asyncio.current_task()
        assert caller is not None
        module.CALLER[:] = [caller]
        with pytest.raises(asyncio.CancelledError) as caught:
            await plan.execute()
        assert module.RELEASED == ["conn"]
        [secondary] = failures(caught.value)
        assert isinstance(secondary, ValueError)
        assert caller.uncancel() == 0  # exactly one cancellation, and it was delivered
        await asyncio.sleep(0)  # nothing pending any more

    _run(loop, main)


CANCEL_IN_NODE = """
import asyncio

CALLER: list[asyncio.Task] = []


def cancels_caller() -> int:
    CALLER[0].cancel()  # the caller is cancelled while the forward phase runs eagerly
    return 1
"""


@pytest.mark.parametrize("loop", sorted(LOOPS))
@pytest.mark.parametrize("how", ["execute", "open"])
def test_a_cancellation_during_an_eager_forward_phase_stays_primary(
    loop: str, how: str, make_module: Any
) -> None:
    module = make_module(CANCEL_IN_NODE)
    plan = Driver(module).prepare(["cancels_caller"])
    body: list[str] = []

    async def main() -> None:
        caller = asyncio.current_task()
        assert caller is not None
        module.CALLER[:] = [caller]
        with pytest.raises(asyncio.CancelledError):
            if how == "execute":
                await plan.execute()
            else:
                async with plan.open():
                    body.append("ran")
        assert body == []  # the body never runs once the caller is cancelled
        assert caller.uncancel() == 0
        await asyncio.sleep(0)

    _run(loop, main)


QUICK = """
import asyncio
import contextvars

SEEN = contextvars.ContextVar("SEEN", default="unset")


async def first() -> int:
    SEEN.set("node")
    return 1


async def second(first: int) -> int:
    return first + 1
"""


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_an_eager_phase_takes_no_loop_iteration(loop: str, make_module: Any) -> None:
    module = make_module(QUICK)
    plan = Driver(module).prepare(["second"])

    async def main() -> None:
        ran: list[str] = []
        running = asyncio.get_running_loop()
        running.call_soon(ran.append, "callback")
        assert await plan.execute() == {"second": 2}
        # The callback queued before the run has not run yet, unless this process takes
        # the public-asyncio fallback (a queued first step, one loop iteration).
        assert ran == ([] if eager.EAGER_PHASES else ["callback"])
        assert module.SEEN.get() == "unset"  # the node set it in the run's context copy
        assert "call_soon" not in getattr(running, "__dict__", {})

    _run(loop, main)


IN_TASK = """
import asyncio

CALLER: list[asyncio.Task] = []
TASKS: list[object] = []


async def guarded() -> str:
    TASKS.append(asyncio.current_task())
    try:
        async with asyncio.timeout(0.01):  # entered before the node's first suspension
            await asyncio.sleep(5)
    except TimeoutError:
        TASKS.append(asyncio.current_task())
        return "timed out"
    return "slept"
"""


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_node_runs_in_the_phase_task_from_its_first_step(loop: str, make_module: Any) -> None:
    module = make_module(IN_TASK)
    plan = Driver(module).prepare(["guarded"])

    async def main() -> None:
        caller = asyncio.current_task()
        assert await plan.execute() == {"guarded": "timed out"}
        before, after = module.TASKS
        assert isinstance(before, asyncio.Task) and before is after
        assert before is not caller  # its asyncio.timeout cancelled the phase's task
        assert caller is not None and caller.cancelling() == 0
        assert before.get_name() == "sdax_hamilton run"  # in a task dump, say

    _run(loop, main)


def test_the_catcher_of_a_first_step_keeps_one_call() -> None:
    # Python 3.11's eager phase tasks (_executor/eager.py) use it.
    from sdax_hamilton._core import StepCatcher

    catcher = StepCatcher()
    assert catcher.take() is None
    step, context = object(), object()
    catcher(step, context=context)
    assert catcher.take() == (step, context)
    assert catcher.take() is None  # emptied
    catcher(step)
    with pytest.raises(TypeError, match="expected one call_soon"):
        catcher(step)  # a second step before the first was taken
    assert catcher.take() == (step, None)
    with pytest.raises(TypeError):
        catcher(step, 1)  # arguments: not a task's step
    assert catcher.take() is None


def test_a_loop_whose_call_soon_is_replaced_keeps_it(make_module: Any) -> None:
    module = make_module(QUICK)
    plan = Driver(module).prepare(["second"])
    queued: list[object] = []

    async def main() -> None:
        running = asyncio.get_running_loop()
        original = running.call_soon

        def call_soon(callback: Any, *args: Any, context: Any = None) -> asyncio.Handle:
            queued.append(callback)
            return original(callback, *args, context=context)

        running.call_soon = call_soon  # type: ignore[method-assign]
        try:
            assert await plan.execute() == {"second": 2}
            assert running.call_soon is call_soon  # never replaced, never removed
        finally:
            del running.call_soon
        # 3.11: the phase task's first step went the usual way, through it; 3.12+ starts
        # the task eagerly without it.
        assert bool(queued) == (sys.version_info < (3, 12))

    _run("asyncio", main)


def test_the_monotonic_clock_is_the_one_nodes_see() -> None:
    # The monotonic checks above compare time.monotonic() readings taken in nodes.
    assert time.get_clock_info("monotonic").monotonic


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_loops_in_threads_run_eager_phases_side_by_side(loop: str, make_module: Any) -> None:
    # Each thread's phase tasks catch their own first steps (3.11's catcher is one per
    # thread, _executor/eager.py): runs on loops in several threads at once all finish.
    import threading

    module = make_module(QUICK)
    plan = Driver(module).prepare(["second"])
    results: list[object] = []
    errors: list[BaseException] = []

    async def many() -> None:
        for _ in range(300):
            results.append(await plan.execute())

    def worker() -> None:
        try:
            _run(loop, many)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns often, inside task constructors too
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    assert results == [{"second": 2}] * 1200


_SWITCH_PROBE = """
import asyncio, sys
from sdax_hamilton._executor import eager
print(eager.USES_PRIVATE_ASYNCIO, eager.EAGER_PHASES, eager.current_task is asyncio.current_task)
"""


@pytest.mark.parametrize("value", ["1", "0", ""])
def test_the_public_asyncio_switch_rules_out_private_calls(value: str) -> None:
    # SDAX_HAMILTON_PUBLIC_ASYNCIO (read at import, _executor/eager.py): set, no private
    # asyncio call is taken; the fallback queues a phase task's first step (3.11), or
    # starts it eagerly with public API (3.12+). CI runs the whole suite with it set.
    import os
    import subprocess

    env = {**os.environ, "SDAX_HAMILTON_PUBLIC_ASYNCIO": value}
    out = subprocess.run(
        [sys.executable, "-c", _SWITCH_PROBE], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    private, eager_phases, public_current_task = (word == "True" for word in out)
    switched = value not in ("", "0")
    if sys.version_info >= (3, 12):
        assert (private, eager_phases, public_current_task) == (False, True, True)
    elif switched:
        assert (private, eager_phases, public_current_task) == (False, False, True)
    else:
        assert (private, eager_phases, public_current_task) == (True, True, False)


def test_the_fallback_runs_a_plan_with_a_queued_phase_task(
    make_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The public-API path, taken in this process as the switch would: same results, the
    # phase in a task of its own, the caller's queued callback run first.
    module = make_module(QUICK)
    plan = Driver(module).prepare(["second"])

    async def main() -> None:
        ran: list[str] = []
        running = asyncio.get_running_loop()
        running.call_soon(ran.append, "callback")
        assert await plan.execute() == {"second": 2}
        assert ran == ["callback"]  # the phase's first step waited its turn

    from sdax_hamilton._executor import context

    monkeypatch.setattr(context, "phase_task", eager._queued_phase_task)
    _run("asyncio", main)
