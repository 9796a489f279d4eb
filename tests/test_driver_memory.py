"""Failed runs leave nothing for the cyclic garbage collector.

A failure's traceback refers to the frames of the run (the coordinator, the attempt), so
any reference from the run back to an exception would make a cycle that only the cyclic
collector frees: under a failure storm a service would grow between collections. The run
drops those references when it finishes (the way asyncio's TaskGroup does); these tests
count what ``gc.collect()`` finds after failed runs of every kind, with the collector off.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import types
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from support import loops as loop_support

from sdax_hamilton import Driver, RunReport

SOURCE = """
import asyncio

from sdax_hamilton import Acquisition, execution, shutdown

HANGING = asyncio.Event()
RELEASING = asyncio.Event()
IN_BODY = asyncio.Event()


class Conn:
    pass


def conn() -> Conn:
    return Conn()


@shutdown(of=conn, retries=1, initial_delay=0.0)
def close_conn(acquired: Acquisition[Conn]) -> None:
    pass


@execution(retries=1, initial_delay=0.0, retryable_exceptions=(ValueError,))
async def fetch(conn: Conn) -> int:
    await asyncio.sleep(0)
    raise ValueError("fetch failed")


async def left(conn: Conn) -> int:
    await asyncio.sleep(0)
    raise KeyError("left failed")


async def right(conn: Conn) -> int:
    await asyncio.sleep(0.5)
    return 1


def sync_boom(conn: Conn) -> int:
    raise RuntimeError("sync failed")


@execution(timeout=0.001)
async def slow_alone() -> int:
    await asyncio.sleep(1)
    return 1


@execution(timeout=0.001)
async def slow_beside(conn: Conn) -> int:
    await asyncio.sleep(1)
    return 1


async def sibling(conn: Conn) -> int:
    await asyncio.sleep(0.01)
    return 2


async def hang(conn: Conn) -> int:
    HANGING.set()
    await asyncio.sleep(10)
    return 1


def bad_conn() -> Conn:
    return Conn()


@shutdown(of=bad_conn, retries=1, initial_delay=0.0)
def close_bad(acquired: Acquisition[Conn]) -> None:
    raise OSError("release failed")


def uses_bad(bad_conn: Conn) -> int:
    return 1


async def slow_release_owner() -> Conn:
    return Conn()


@shutdown(of=slow_release_owner)
async def close_slowly(acquired: Acquisition[Conn]) -> None:
    RELEASING.set()
    await asyncio.sleep(0.01)
    raise OSError("slow release failed")


def uses_slow_release(slow_release_owner: Conn) -> int:
    return 1


from sdax_hamilton import Bulkhead, CircuitBreaker

GUARD = Bulkhead(1, max_waiting=5)
BREAKER = CircuitBreaker(min_calls=1000)


@execution(bulkhead=GUARD, breaker=BREAKER, retries=1, initial_delay=0.0)
async def guarded(conn: Conn) -> int:
    await asyncio.sleep(0.001)
    raise ConnectionError("guarded failed")


@execution(bulkhead=GUARD, breaker=BREAKER)
async def queued(conn: Conn) -> int:
    await asyncio.sleep(0)
    return 1


async def no_value(exc: BaseException) -> int:
    await asyncio.sleep(0)
    return 0


@execution(fallback=no_value)
async def falls_back(conn: Conn) -> int:
    await asyncio.sleep(0)
    raise LookupError("falls back")


def after_fallback(falls_back: int, fetch: int) -> int:
    return falls_back
"""

Scenario = Callable[[Any], Awaitable[None]]


async def _execute(plan: Any, **kwargs: Any) -> None:
    try:
        await plan.execute(**kwargs)
    except Exception:
        pass
    else:  # pragma: no cover - every scenario fails
        raise AssertionError("the run was expected to fail")


async def _open(plan: Any, body_raises: bool = False) -> None:
    try:
        async with plan.open():
            if body_raises:
                raise LookupError("body failed")
    except Exception:
        pass
    else:  # pragma: no cover - every scenario fails
        raise AssertionError("the run was expected to fail")


async def _cancel_when(run: Awaitable[Any], reached: asyncio.Event) -> None:
    """Run ``run`` in a task and cancel it once it has ``reached`` a point (an event the
    graph's module sets there)."""
    reached.clear()
    task = asyncio.ensure_future(run)
    async with asyncio.timeout(5):
        await reached.wait()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    else:  # pragma: no cover
        raise AssertionError("the run was expected to be cancelled")
    del task


async def _open_and_wait(plan: Any, entered: asyncio.Event) -> None:
    async with plan.open():
        entered.set()
        await asyncio.sleep(10)


SCENARIOS: dict[str, Callable[[Driver], Scenario]] = {
    "execute-inline-retried-failure": lambda d: lambda _: _execute(d.prepare(["fetch"])),
    "execute-parallel-failure": lambda d: lambda _: _execute(d.prepare(["left", "right"])),
    "execute-sync-failure": lambda d: lambda _: _execute(d.prepare(["sync_boom", "right"])),
    "execute-inline-timeout": lambda d: lambda _: _execute(d.prepare(["slow_alone"])),
    "execute-parallel-timeout": lambda d: lambda _: _execute(d.prepare(["slow_beside", "sibling"])),
    "execute-release-failure": lambda d: lambda _: _execute(d.prepare(["uses_bad"])),
    "execute-with-observer": lambda d: (
        lambda _: _execute(d.prepare(["left", "right", "uses_bad"]), observer=RunReport())
    ),
    "open-node-failure": lambda d: lambda _: _open(d.prepare(["fetch"])),
    # A waiter leaves the queue when the holder's node fails; a fallback's value is used
    # before another node fails (docs/resilience.md).
    "execute-guarded-failure": lambda d: lambda _: _execute(d.prepare(["guarded", "queued"])),
    "execute-fallback-then-failure": lambda d: (
        lambda _: _execute(d.prepare(["after_fallback"]), observer=RunReport())
    ),
    "open-body-failure": lambda d: lambda _: _open(d.prepare(["conn"]), body_raises=True),
    "open-release-failure": lambda d: lambda _: _open(d.prepare(["uses_bad"])),
    "execute-caller-cancelled-inline": lambda d: (
        lambda m: _cancel_when(d.prepare(["hang"]).execute(), m.HANGING)
    ),
    "execute-caller-cancelled-parallel": lambda d: (
        lambda m: _cancel_when(d.prepare(["hang", "right"]).execute(), m.HANGING)
    ),
    "execute-caller-cancelled-in-cleanup": lambda d: (
        lambda m: _cancel_when(d.prepare(["uses_slow_release"]).execute(), m.RELEASING)
    ),
    "open-caller-cancelled-in-body": lambda d: (
        lambda m: _cancel_when(_open_and_wait(d.prepare(["conn"]), m.IN_BODY), m.IN_BODY)
    ),
}


_RUN_MODULES = ("sdax_hamilton", "asyncio", "_asyncio", "uvloop", "hamilton")


def _the_runs(garbage: list[Any], module: Any) -> list[Any]:
    """The cycles in ``garbage`` a run could have made: each group of objects joined by
    references that holds a frame, a traceback, an exception, a coroutine, or an object or
    function of the run's modules. The collector sees every thread's garbage; a cycle of
    only foreign objects (``importlib.metadata`` builds some on a cache miss in whatever
    thread asks) is no run's."""
    index = {id(obj): at for at, obj in enumerate(garbage)}
    parent = list(range(len(garbage)))

    def root(at: int) -> int:
        while parent[at] != at:
            parent[at] = parent[parent[at]]
            at = parent[at]
        return at

    for at, obj in enumerate(garbage):
        for referent in gc.get_referents(obj):
            other = index.get(id(referent))
            if other is not None:
                parent[root(other)] = root(at)
    modules = (*_RUN_MODULES, module.__name__)

    def of_the_run(obj: Any) -> bool:
        if isinstance(obj, (types.FrameType, types.TracebackType, BaseException)):
            return True
        if isinstance(obj, (types.CoroutineType, types.GeneratorType, types.FunctionType)):
            return str(getattr(obj, "__module__", "")).startswith(modules)
        return type(obj).__module__.startswith(modules)

    runs = {root(at) for at, obj in enumerate(garbage) if of_the_run(obj)}
    return [obj for at, obj in enumerate(garbage) if root(at) in runs]


def _cyclic_garbage(scenario: Scenario, module: Any) -> tuple[int, list[str]]:
    """Run ``scenario(module)`` (warmed up once) three times; what the cyclic collector
    finds: its count and the type names of the objects it saved."""

    async def main() -> tuple[int, list[str]]:
        await scenario(module)  # first-run caches and lazily created objects
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for _ in range(3):
                await scenario(module)
            gc.collect()
            found = _the_runs(gc.garbage, module)
            return len(found), sorted(type(obj).__qualname__ for obj in found)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()

    enabled = gc.isenabled()
    gc.disable()
    try:
        return loop_support.run(main())
    finally:
        if enabled:
            gc.enable()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_failed_runs_leave_no_reference_cycles(name: str, make_module: Any) -> None:
    module = make_module(SOURCE)
    assert _cyclic_garbage(SCENARIOS[name](Driver(module)), module) == (0, [])


def test_the_check_sees_cycles_when_there_are_some(make_module: Any) -> None:
    # The measurement itself: an exception kept by a frame it passed through is a cycle.
    module = make_module(SOURCE)
    plan = Driver(module).prepare(["fetch"])
    kept: list[BaseException] = []

    async def keeps_its_failure(_: Any) -> None:
        try:
            await plan.execute()
        except Exception as exc:
            failure = exc  # this frame -> failure -> traceback -> this frame
            kept.append(failure)
            kept.clear()

    found, names = _cyclic_garbage(keeps_its_failure, module)
    assert found > 0 and "ValueError" in names


def test_the_check_leaves_out_cycles_another_thread_makes(make_module: Any) -> None:
    # The collector also finds what other threads dropped meanwhile (a log handler's,
    # a metrics exporter's): such a cycle is no run's, and one the run keeps still counts.
    module = make_module(SOURCE)
    plan = Driver(module).prepare(["fetch"])

    def foreign_cycle() -> None:
        box: dict[str, Any] = {}
        box["self"] = lambda: box

    async def run_beside_a_thread(_: Any) -> None:
        thread = threading.Thread(target=foreign_cycle)
        thread.start()
        thread.join()
        await _execute(plan)

    assert _cyclic_garbage(run_beside_a_thread, module) == (0, [])

    async def keeps_its_failure_beside_a_thread(_: Any) -> None:
        await run_beside_a_thread(_)
        try:
            await plan.execute()
        except Exception as exc:
            failure = exc  # this frame -> failure -> traceback -> this frame
            assert failure is exc

    found, names = _cyclic_garbage(keeps_its_failure_beside_a_thread, module)
    assert found > 0 and "ValueError" in names and "dict" in names


# ------------------------------------------- a kept failure keeps no task of the run alive

TASKS_SOURCE = """
import asyncio
import weakref

TASKS = []  # weak references to every task a node or release of the run ran in


def _seen() -> None:
    TASKS.append(weakref.ref(asyncio.current_task()))


async def source() -> int:
    _seen()
    return 1


async def ok(source: int) -> int:
    _seen()
    await asyncio.sleep(0)
    return source


async def fails(source: int) -> int:
    _seen()
    await asyncio.sleep(0)
    raise ValueError("fails")
"""


@pytest.mark.parametrize("outputs", [["ok", "fails"], ["fails"]], ids=["tasks", "inline"])
@pytest.mark.parametrize("mode", ["execute", "open"])
def test_a_failure_kept_by_the_caller_keeps_no_task_of_the_run_alive(
    mode: str, outputs: list[str], make_module: Any
) -> None:
    # The failure's traceback holds the run's frames, so the run itself stays reachable as
    # long as the caller keeps the failure (a log handler, a list of errors): the run's
    # phase task and its attempts' tasks must not stay with it. ``tasks``: the two nodes
    # run in tasks of their own; ``inline``: the failing node is awaited in the phase's.
    module = make_module(TASKS_SOURCE)
    plan = Driver(module).prepare(outputs)
    kept: list[BaseException] = []

    async def main() -> None:
        try:
            if mode == "execute":
                await plan.execute()
            else:
                async with plan.open():
                    pass  # pragma: no cover - the forward phase fails
        except Exception as exc:
            kept.append(exc)

    loop_support.run(main())
    gc.collect()
    (failure,) = kept
    assert failure.__traceback__ is not None
    # source and an inline node run in the phase's task; the others in tasks of their own.
    assert len(module.TASKS) == len(outputs) + 1
    alive = [ref() for ref in module.TASKS if ref() is not None]
    assert alive == [], f"tasks kept alive by the kept failure: {alive}"
