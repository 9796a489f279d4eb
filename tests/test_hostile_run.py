"""Hostile input and the interpreter's limits, on the run's side (docs/contract.md,
"Hostile input and interpreter limits", "The run").

* A run started near the recursion limit leaves nothing of it behind: the next run in the
  same thread, on the same loop or a new one, works (the per-thread step catcher of
  Python 3.11's eager phase tasks is emptied on every path).
"""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from support import loops as loop_support

from sdax_hamilton import Driver, ExecutionError, PreparedPlan

QUICK = """
from sdax_hamilton import Acquisition, execution, shutdown

def a(x: int) -> int:
    return x + 1

async def b(a: int) -> int:
    return a * 2
"""

Call = Callable[[], Awaitable[Any]]


async def _at_depth(depth: int, call: Call) -> Any:
    """``call()`` awaited ``depth`` coroutine frames down (each ``await`` of a coroutine
    nests one frame: the recursion limit counts them)."""
    if depth == 0:
        return await call()
    return await _at_depth(depth - 1, call)


def _depth_here() -> int:
    frame = sys._getframe()
    depth = 0
    while frame is not None:
        depth += 1
        frame = frame.f_back  # type: ignore[assignment]
    return depth


async def _sweep(
    call: Callable[[], Awaitable[Any]], after: Callable[[], Awaitable[Any]]
) -> Counter[str]:
    """Run ``call()`` at every depth from well below the recursion limit up to it, and
    ``after()`` at the top after each: what ``call()`` ended with, counted."""
    top = sys.getrecursionlimit() - _depth_here()
    seen: Counter[str] = Counter()
    for depth in range(top - 120, top):
        try:
            await _at_depth(depth, call)
        except RecursionError:
            seen["RecursionError"] += 1
        except BaseException as exc:
            seen[type(exc).__name__] += 1
        else:
            seen["ok"] += 1
        await after()
    return seen


def _plans(make_module: Any) -> PreparedPlan:
    return Driver(make_module(QUICK)).prepare(["b"])


@pytest.mark.parametrize("path", ["execute", "open", "observed"])
def test_a_run_near_the_recursion_limit_leaves_the_thread_usable(
    make_module: Any, path: str
) -> None:
    plan = _plans(make_module)
    events: list[object] = []

    async def one() -> Any:
        if path == "execute":
            return await plan.execute(inputs={"x": 1})
        if path == "observed":
            return await plan.execute(inputs={"x": 1}, observer=events.append)
        async with plan.open(inputs={"x": 1}) as values:
            return values

    async def normal() -> None:
        assert await plan.execute(inputs={"x": 1}) == {"b": 4}
        async with plan.open(inputs={"x": 2}) as values:
            assert values == {"b": 6}

    async def main() -> Counter[str]:
        return await _sweep(one, normal)

    seen = loop_support.run(main())
    # The sweep reached the limit (some runs could not start) and runs below it worked;
    # a run that failed part way says so as a run does (never a KeyError of an output).
    assert seen["RecursionError"] > 0 and seen["ok"] > 0, seen
    assert set(seen) <= {"ok", "RecursionError", "ExecutionError"}, seen
    # A new loop in the same thread: the per-thread helpers were restored.
    loop_support.run(normal())


def test_the_step_catcher_is_empty_after_a_run_near_the_limit(make_module: Any) -> None:
    # Python 3.11's eager phase tasks use one per thread (3.12+ has none to check).
    from sdax_hamilton._driver import context

    plan = _plans(make_module)
    catchers = getattr(context, "_catchers", None)

    async def check() -> None:
        catcher = getattr(catchers, "catcher", None)
        assert catcher is None or catcher.take() is None

    async def main() -> Counter[str]:
        return await _sweep(lambda: plan.execute(inputs={"x": 1}), check)

    seen = loop_support.run(main())
    assert seen["RecursionError"] > 0, seen


# ----------------------------------------------------------------------- a recursive plan

RECURSIVE = """
from sdax_hamilton import Acquisition, shutdown

ACQUIRED = []
RELEASED = []
RUN = None

def conn(x: int) -> int:
    ACQUIRED.append(x)
    return x

@shutdown(of=conn)
def close_conn(acquired: Acquisition[int]) -> None:
    RELEASED.append(acquired.value)

async def again(conn: int) -> int:
    return await RUN(conn + 1)
"""


def _leaves(exc: BaseException) -> list[BaseException]:
    """The leaves of nested groups (iteratively: the nesting is as deep as the recursion)."""
    found: list[BaseException] = []
    stack = [exc]
    while stack:
        item = stack.pop()
        if isinstance(item, BaseExceptionGroup):
            stack.extend(item.exceptions)
        else:
            found.append(item)
    return found


@pytest.mark.parametrize("path", ["execute", "open"])
def test_a_plan_run_recursively_to_the_limit_releases_every_acquisition_once(
    make_module: Any, path: str
) -> None:
    module = make_module(RECURSIVE)
    plan = Driver(module).prepare(["again"])

    async def run(x: int) -> Any:
        if path == "execute":
            return await plan.execute(inputs={"x": x})
        async with plan.open(inputs={"x": x}) as values:
            return values

    module.RUN = run

    async def main() -> BaseException:
        with pytest.raises(BaseException) as caught:
            await run(0)
        return caught.value

    error = loop_support.run(main())
    # Every run that acquired released exactly once, whatever depth it failed at.
    assert len(module.ACQUIRED) > 50
    assert sorted(module.RELEASED) == sorted(module.ACQUIRED)
    assert len(set(module.RELEASED)) == len(module.RELEASED)
    # A clear failure: the node's failure all the way down to the RecursionError.
    assert isinstance(error, ExecutionError), repr(error)
    leaves = _leaves(error)
    assert leaves and all(isinstance(leaf, RecursionError) for leaf in leaves), leaves
    assert not any(isinstance(leaf, KeyError) for leaf in leaves)
    # The thread is usable afterwards.
    module.RUN = lambda x: asyncio.sleep(0, x)
    assert loop_support.run(plan.execute(inputs={"x": 5})) == {"again": 6}
