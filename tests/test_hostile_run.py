"""Hostile input and the interpreter's limits, on the run's side (docs/contract.md,
"Hostile input and interpreter limits", "The run").

* A run started near the recursion limit leaves nothing of it behind: the next run in the
  same thread, on the same loop or a new one, works (the per-thread step catcher of
  Python 3.11's eager phase tasks is emptied on every path).
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import warnings
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hamilton.lifecycle import GraphExecutionHook
from support import loops as loop_support

from sdax_hamilton import Driver, ExecutionError, PreparedPlan
from sdax_hamilton._executor import eager

QUICK = """
from sdax_hamilton import Acquisition, execution, shutdown

def a(x: int) -> int:
    return x + 1

async def b(a: int) -> int:
    return a * 2
"""

Call = Callable[[], Awaitable[Any]]
# At the very edge of the recursion limit CPython 3.12+ with uvloop can lose a wake-up and a
# wait never ends (see _sweep; with or without this package): there the sweep stays clear of
# the edge, and so cannot require a RecursionError.
EDGE_UNSAFE = sys.version_info >= (3, 12) and os.environ.get("SDAX_TEST_LOOP") == "uvloop"
EDGE = 40 if EDGE_UNSAFE else 5


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
    # Up to a few frames short of the limit: at its very edge, CPython 3.12 with uvloop
    # can lose a future's wake-up (with or without this package), and a wait never ends.
    for depth in range(top - 120, top - EDGE):
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

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seen = loop_support.run(main())
        gc.collect()
    # The sweep reached the limit (some runs could not start) and runs below it worked;
    # a run that failed part way says so as a run does (never a KeyError of an output).
    assert (seen["RecursionError"] > 0 or EDGE_UNSAFE) and seen["ok"] > 0, seen
    # A run refused at the limit left no phase coroutine or task behind, never to run.
    left = [str(w.message) for w in caught if "never awaited" in str(w.message)]
    assert left == [], left
    assert set(seen) <= {"ok", "RecursionError", "ExecutionError"}, seen
    # A new loop in the same thread: the per-thread helpers were restored.
    loop_support.run(normal())


def test_the_step_catcher_is_empty_after_a_run_near_the_limit(make_module: Any) -> None:
    # Python 3.11's eager phase tasks use one per thread (3.12+ has none to check).
    from sdax_hamilton._executor import eager

    plan = _plans(make_module)
    catchers = getattr(eager, "_catchers", None)

    async def check() -> None:
        catcher = getattr(catchers, "catcher", None)
        assert catcher is None or catcher.take() is None

    async def main() -> Counter[str]:
        return await _sweep(lambda: plan.execute(inputs={"x": 1}), check)

    seen = loop_support.run(main())
    assert seen["RecursionError"] > 0 or EDGE_UNSAFE, seen


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


# A run inside a run's node starts its phase eagerly, one stack deeper each time, so a plan
# run recursively meets the recursion limit. On the public-asyncio fallback
# (SDAX_HAMILTON_PUBLIC_ASYNCIO on 3.11, _executor/eager.py) each run's phase starts in a
# task of its own, on a fresh stack: the recursion never meets the limit, and these tests,
# about that limit, have nothing to test.
NESTED_ON_ONE_STACK = pytest.mark.skipif(
    not eager.EAGER_PHASES, reason="runs nest on one stack only with eager phase tasks"
)


@NESTED_ON_ONE_STACK
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

    async def main() -> list[BaseException]:
        errors: list[BaseException] = []
        # Each level of the recursion is several frames deep: starting it from each of
        # that many depths, every level meets the limit at each point of its course.
        for extra in range(18):
            module.ACQUIRED.clear()
            module.RELEASED.clear()
            with pytest.raises(BaseException) as caught:
                await _at_depth(extra, lambda: run(0))
            errors.append(caught.value)
            # Every run that acquired released exactly once, whatever depth it failed at.
            assert len(module.ACQUIRED) > 20
            assert sorted(module.RELEASED) == sorted(module.ACQUIRED), extra
        return errors

    for error in loop_support.run(main()):
        # A clear failure: the node's failure all the way down to the RecursionError.
        assert isinstance(error, ExecutionError), repr(error)
        leaves = _leaves(error)
        assert leaves and all(isinstance(leaf, RecursionError) for leaf in leaves), leaves
    # The thread is usable afterwards.
    module.RUN = lambda x: asyncio.sleep(0, x)
    assert loop_support.run(plan.execute(inputs={"x": 5})) == {"again": 6}


@NESTED_ON_ONE_STACK
def test_a_nested_run_too_close_to_the_limit_is_refused_before_anything_runs(
    make_module: Any,
) -> None:
    module = make_module(RECURSIVE)
    plan = Driver(module).prepare(["again"])
    refused: list[BaseException] = []

    async def run(x: int) -> Any:
        try:
            return await plan.execute(inputs={"x": x})
        except RecursionError as error:
            if "nothing ran" in str(error):
                refused.append(error)
            raise

    module.RUN = run
    with pytest.raises(ExecutionError):
        loop_support.run(run(0))
    (error,) = refused  # the innermost run, refused; every enclosing one failed with it
    assert "too deep to carry it out" in str(error)
    # The refused run acquired nothing: every acquisition is one of a run that started.
    assert sorted(module.RELEASED) == sorted(module.ACQUIRED) == list(range(len(module.ACQUIRED)))


# ------------------------------------------- BaseExceptions from user code the driver calls

HOSTILE = """
from typing import Any
from sdax_hamilton import Acquisition, execution, shutdown

class H:
    where = None  # the place that raises next, once
    kind = KeyboardInterrupt
    fail = None  # what fails: "node", "retry", "output", "describe", "release"
    raised = []
    acquired = []
    released = []

def _raise(place):
    if H.where == place:
        H.where = None
        exc = H.kind(place)
        H.raised.append(exc)
        raise exc

class Meta(type):
    def __instancecheck__(cls, obj):
        _raise(cls.tag)
        return type(obj) is int

class In(metaclass=Meta):
    tag = "input check"

class Out(metaclass=Meta):
    tag = "output check"

class NamedMeta(type):
    def __getattribute__(cls, name):
        if name == "__qualname__":
            _raise("type name")
        return super().__getattribute__(name)

class Named(metaclass=NamedMeta):
    pass

class RetryMeta(type):
    def __instancecheck__(cls, obj):
        _raise("retryable check")
        return False

class Retry(Exception, metaclass=RetryMeta):
    pass

class Noted(Exception):
    def add_note(self, note):
        _raise("note")
        super().add_note(note)

def conn(x: int) -> int:
    H.acquired.append(("conn", x))
    return x

@shutdown(of=conn)
def close_conn(acquired: Acquisition[int]) -> None:
    H.released.append(("conn", acquired.value))

def session(conn: int) -> int:
    H.acquired.append(("session", conn))
    return conn

@shutdown(of=session)
async def close_session(acquired: Acquisition[int]) -> None:
    H.released.append(("session", acquired.value))
    if H.fail == "release":
        raise Noted("release failed")

def loose(session: int) -> Any:
    return session

@execution(retries=1, retryable_exceptions=(Retry,), initial_delay=0.0)
async def checked(loose: In) -> Out:
    if H.fail == "node":
        raise Noted("checked failed")
    if H.fail == "retry":
        raise ValueError("checked failed")
    return loose

def described(checked: Any) -> list[Out]:
    return Named() if H.fail == "describe" else [checked]
"""

# place -> what fails so that the driver runs that user code
PLACES = {
    "input check": None,  # a metaclass __instancecheck__ checking a node's argument
    "output check": None,  # ... checking a node's value
    "type name": "describe",  # naming the class of a value that failed its check
    "note": "node",  # an exception's add_note, noting the node's failure on it
    "release note": "release",  # ... noting a release's failure on it (shutdown phase)
    "retryable check": "retry",  # a retryable class's metaclass __instancecheck__
}
KINDS = (KeyboardInterrupt, SystemExit, RecursionError, MemoryError)


def _notes_everywhere(exc: BaseException) -> list[str]:
    from sdax_hamilton import failures

    found: list[str] = []
    for item in [exc, *_leaves(exc), *failures(exc)]:
        found.extend(getattr(item, "__notes__", []))
    return found


@pytest.mark.parametrize("watched", [False, True], ids=["carried", "observed"])
@pytest.mark.parametrize("mode", ["execute", "open"])
@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.__name__)
@pytest.mark.parametrize("place", sorted(PLACES))
def test_a_base_exception_from_user_code_the_driver_calls_releases_everything(
    make_module: Any, place: str, kind: type[BaseException], mode: str, watched: bool
) -> None:
    module = make_module(HOSTILE)
    # Inputs are checked where outputs are not (docs/contract.md#run-checks).
    plan = Driver(module).prepare(["described"], check_outputs=place != "input check")
    state = module.H
    state.where, state.kind, state.fail = place.replace("release note", "note"), kind, PLACES[place]
    events: list[object] = []

    async def main() -> BaseException | None:
        observer = events.append if watched else None
        try:
            if mode == "execute":
                await plan.execute(inputs={"x": 7}, observer=observer)
            else:
                async with plan.open(inputs={"x": 7}, observer=observer):
                    pass
        except BaseException as exc:
            return exc
        return None

    outcome = loop_support.run(main())
    # The module outlives the test (the type checker's memo keeps its classes): what was
    # raised, and the run's frames in its traceback, are this test's only.
    raised, state.raised = state.raised, []
    # Every acquisition released exactly once, whatever was raised and where.
    assert sorted(state.released) == sorted(state.acquired) == [("conn", 7), ("session", 7)]
    (hostile,) = raised
    if kind in (KeyboardInterrupt, SystemExit):
        # It stops the run as out of a node, and propagates as the primary, itself.
        assert outcome is hostile
        return
    if place in ("input check", "output check") and not watched:
        # The carrier takes an Exception out of a check for a failed check and hands the
        # value to the driver, which checks again: the user code raised only once.
        assert outcome is None
        return
    assert isinstance(outcome, ExecutionError), repr(outcome)
    # Handled where it was raised: the run never had to be salvaged.
    assert outcome is not None
    assert not any("could not go on" in note for note in _notes_everywhere(outcome))


# ------------------------------------------------------------ open() contexts misused

DROPPED = """
from sdax_hamilton import Acquisition, shutdown

ACQUIRED = []
RELEASED = []

def conn(x: int) -> int:
    ACQUIRED.append(x)
    return x

@shutdown(of=conn)
async def close_conn(acquired: Acquisition[int]) -> None:
    RELEASED.append(acquired.value)

def out(conn: int) -> int:
    return conn
"""


class _GraphHooks(GraphExecutionHook):
    """A real Hamilton lifecycle adapter: counts its graph hooks."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def run_before_graph_execution(self, **kwargs: Any) -> None:
        self.calls.append("before")

    def run_after_graph_execution(self, **kwargs: Any) -> None:
        self.calls.append("after")


@pytest.mark.parametrize("adapted", [False, True], ids=["plain", "adapters"])
async def test_exiting_an_open_context_never_entered_says_what_to_do(
    make_module: Any, adapted: bool
) -> None:
    module = make_module(DROPPED)
    hooks = _GraphHooks()
    plan = Driver(module, adapters=[hooks] if adapted else None).prepare(["out"])
    context = plan.open(inputs={"x": 1})
    with pytest.raises(RuntimeError, match=r"never entered: use it as `async with plan\.open"):
        await context.__aexit__(None, None, None)
    assert module.ACQUIRED == [] and hooks.calls == []  # nothing ran
    async with context as values:  # still usable as intended
        assert values == {"out": 1}
    assert module.RELEASED == [1]


async def _spin(times: int = 10) -> None:
    for _ in range(times):
        await asyncio.sleep(0)


@pytest.mark.parametrize("adapted", [False, True], ids=["plain", "adapters"])
async def test_an_open_context_dropped_while_entered_warns_and_is_released(
    make_module: Any, adapted: bool
) -> None:
    module = make_module(DROPPED)
    hooks = _GraphHooks()
    plan = Driver(module, adapters=[hooks] if adapted else None).prepare(["out"])
    context = plan.open(inputs={"x": 5})
    assert await context.__aenter__() == {"out": 5}
    assert module.RELEASED == []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del context
        gc.collect()
        await _spin()
    (warning,) = [w for w in caught if issubclass(w.category, ResourceWarning)]
    message = str(warning.message)
    assert "dropped while entered, never exited" in message
    assert "async with plan.open(...) as values:" in message
    if not adapted:
        assert "held ['conn']" in message  # the owned nodes still held, by name
    # Released once, in a task of its own (as asyncio closes a dropped async generator).
    assert module.RELEASED == [5]
    if adapted:
        assert hooks.calls == ["before", "after"]


def test_an_open_context_dropped_after_its_loop_closed_only_warns(make_module: Any) -> None:
    module = make_module(DROPPED)
    plan = Driver(module).prepare(["out"])
    held: list[Any] = []

    async def enter() -> None:
        context = plan.open(inputs={"x": 9})
        await context.__aenter__()
        held.append(context)

    loop_support.run(enter())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        held.clear()
        gc.collect()
    (warning,) = [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert "held ['conn']" in str(warning.message)
    assert "releases run now" not in str(warning.message)  # no loop left to run them
    assert module.RELEASED == []
