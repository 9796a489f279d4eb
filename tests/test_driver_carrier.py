"""The inline carrier: the core's ``Run`` carries out lone STARTs itself (src/carry.rs).

Without observers, DEBUG logging or a run timeout, a START that is the only command, the
only pending job and a first attempt, with or without a timeout of its own, is carried out
inside the ``Run``: arguments, call, one step of the coroutine, value stored, next START (a
timeout cannot expire while nothing suspends; a call that suspends is handed back with the
clocks read before it, and its timer counts from there). Whatever needs the driver (a failure,
a suspension, an awaitable that is not a coroutine, a value to refuse) is handed back to
it. Each case runs the same plan carried (no observer) and driver-only (an observer makes
the driver carry out every attempt, to report it): what the caller sees must not differ,
and the carried run must not have gone through the driver's own call path where it need
not.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import time
from typing import Any

import pytest
from support import loops as loop_support
from support.campaign import VirtualTimeLoop

from sdax_hamilton import Driver, ExecutionError, RunEvent, _core, failures
from sdax_hamilton._executor.calls import Calls
from sdax_hamilton._executor.jobs import Job

SOURCE = """
import asyncio
import contextvars

from sdax_hamilton import Acquisition, execution, shutdown

LOG: list[object] = []
TASKS: list[object] = []
SEEN = contextvars.ContextVar("SEEN", default="unset")
CALLS: dict[str, int] = {}


class Conn:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn


async def conn(dsn: str) -> Conn:
    return Conn(dsn)


@shutdown(of=conn)
async def close_conn(acquired: Acquisition[Conn]) -> None:
    LOG.append(("close_conn", acquired.value.dsn, acquired.is_valid))


def txn(conn: Conn) -> str:
    SEEN.set("txn")
    return conn.dsn + "/txn"


@shutdown(of=txn)
def close_txn(acquired: Acquisition[str]) -> None:
    LOG.append(("close_txn", acquired.value))


async def query(txn: str) -> str:
    return txn + "/query:" + SEEN.get()


async def suspends(query: str) -> str:
    TASKS.append(asyncio.current_task())
    await asyncio.sleep(0)
    TASKS.append(asyncio.current_task())
    return query + "/later"


def future(query: str) -> int:
    done = asyncio.get_running_loop().create_future()
    done.set_result(len(query))
    return done  # type: ignore[return-value]


@execution(retries=2, initial_delay=0.0, retryable_exceptions=(ConnectionError,))
async def flaky(query: str) -> str:
    CALLS["flaky"] = CALLS.get("flaky", 0) + 1
    if CALLS["flaky"] < 3:
        raise ConnectionError("flaky " + query)
    return "ok after " + str(CALLS["flaky"])


def sync_boom(query: str) -> int:
    raise LookupError("sync boom")


async def async_boom(query: str) -> int:
    raise LookupError("async boom")


async def wrong_type(query: str) -> int:
    return "not an int"  # type: ignore[return-value]


async def self_cancelling(query: str) -> int:
    task = asyncio.current_task()
    assert task is not None
    task.cancel()
    await asyncio.sleep(0)
    return 1


def consumer(wrong_type: int) -> int:
    return wrong_type


def interrupted(query: str) -> int:
    raise KeyboardInterrupt


def handle(dsn: str) -> str:
    return "h"


@shutdown(of=handle)
async def release_returns(acquired: Acquisition[str]) -> None:
    return "something"  # type: ignore[return-value]


def uses_handle(handle: str) -> str:
    return handle


def self_cancelled_handle(dsn: str) -> str:
    return "s"


@shutdown(of=self_cancelled_handle)
def release_cancels_its_task(acquired: Acquisition[str]) -> None:
    task = asyncio.current_task()
    assert task is not None
    task.cancel()


def uses_self_cancelled(self_cancelled_handle: str) -> str:
    return self_cancelled_handle


def async_cancelled_handle(dsn: str) -> str:
    return "a"


@shutdown(of=async_cancelled_handle)
async def async_release_cancels_its_task(acquired: Acquisition[str]) -> None:
    task = asyncio.current_task()
    assert task is not None
    task.cancel()


def uses_async_cancelled(async_cancelled_handle: str) -> str:
    return async_cancelled_handle
"""

INPUTS = {"dsn": "db"}


def _ignore(event: RunEvent) -> None:
    pass


class _Counted:
    """Counts the driver's own calls of node functions (``Calls._start``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.starts = 0
        original = Calls._start

        def counting(calls: Calls, job: Job, attempt: int, timeout: Any) -> None:
            self.starts += 1
            original(calls, job, attempt, timeout)

        monkeypatch.setattr(Calls, "_start", counting)


async def _both(module: Any, outputs: list[str], **prepare: Any) -> tuple[Any, Any]:
    """The outcome (a result or the exception) carried and driver-only, module state reset
    in between."""
    plan = Driver(module).prepare(outputs, **prepare)
    outcomes = []
    for observer in (None, _ignore):
        module.LOG.clear()
        module.TASKS.clear()
        module.CALLS.clear()
        try:
            outcomes.append(("result", await plan.execute(inputs=INPUTS, observer=observer)))
        except BaseException as exc:  # compared below, whatever it is
            outcomes.append(("raised", exc))
        outcomes[-1] = (*outcomes[-1], list(module.LOG))
    return outcomes[0], outcomes[1]


def _same(carried: Any, driven: Any) -> None:
    """Both runs ended alike: result or exception (type, message, leaves, notes), releases."""
    assert carried[0] == driven[0]
    if carried[0] == "raised":
        assert _describe(carried[1]) == _describe(driven[1])
    else:
        assert carried[1] == driven[1]
    assert carried[2] == driven[2]


def _describe(exc: BaseException) -> Any:
    leaves = exc.exceptions if isinstance(exc, BaseExceptionGroup) else ()
    return (
        type(exc),
        str(exc),
        [(type(leaf), str(leaf), getattr(leaf, "__notes__", [])) for leaf in leaves],
        [type(f) for f in failures(exc)],
    )


async def test_a_quick_run_is_carried_by_the_core(
    make_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = make_module(SOURCE)
    counted = _Counted(monkeypatch)
    carried, driven = await _both(module, ["query"])
    _same(carried, driven)
    assert carried[1] == {"query": "db/txn/query:txn"}  # txn's context var seen by query
    assert carried[2] == [("close_txn", "db/txn"), ("close_conn", "db", True)]
    # The driver called every function of the observed run (conn, txn, query, close_txn,
    # close_conn) and none of the carried one.
    assert counted.starts == 5


async def test_a_suspending_node_is_handed_back_and_awaited_in_the_phase_task(
    make_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = make_module(SOURCE)
    plan = Driver(module).prepare(["suspends"])
    caller = asyncio.current_task()
    counted = _Counted(monkeypatch)
    assert await plan.execute(inputs=INPUTS) == {"suspends": "db/txn/query:txn/later"}
    before, after = module.TASKS
    assert before is after and before is not caller
    assert counted.starts == 0
    assert module.LOG == [("close_txn", "db/txn"), ("close_conn", "db", True)]


async def test_an_awaitable_that_is_not_a_coroutine_is_awaited(make_module: Any) -> None:
    module = make_module(SOURCE)
    carried, driven = await _both(module, ["future"])
    _same(carried, driven)
    assert carried[1] == {"future": len("db/txn/query:txn")}


async def test_failures_are_handed_back_and_retried_with_the_same_arguments(
    make_module: Any,
) -> None:
    module = make_module(SOURCE)
    carried, driven = await _both(module, ["flaky"])
    _same(carried, driven)
    assert carried[1] == {"flaky": "ok after 3"}


@pytest.mark.parametrize("node", ["sync_boom", "async_boom", "wrong_type", "self_cancelling"])
async def test_a_failing_node_fails_the_run_the_same_way(node: str, make_module: Any) -> None:
    module = make_module(SOURCE)
    (kind, carried, released), (kind2, driven, released2) = await _both(module, [node])
    assert kind == kind2 == "raised"
    assert _describe(carried) == _describe(driven)
    assert released == released2 == [("close_txn", "db/txn"), ("close_conn", "db", True)]
    if node != "self_cancelling":
        assert isinstance(carried, ExecutionError)
    else:
        assert isinstance(carried, BaseExceptionGroup)
        assert not isinstance(carried, ExecutionError)


async def test_a_node_interrupted_by_keyboard_interrupt_propagates_it(make_module: Any) -> None:
    module = make_module(SOURCE)
    (kind, carried, released), (_, driven, _) = await _both(module, ["interrupted"])
    assert kind == "raised" and type(carried) is type(driven) is KeyboardInterrupt
    assert released == [("close_txn", "db/txn"), ("close_conn", "db", True)]


async def test_a_release_returning_a_value_is_refused(make_module: Any) -> None:
    module = make_module(SOURCE)
    (kind, carried, _), (_, driven, _) = await _both(module, ["uses_handle"])
    assert kind == "raised" and _describe(carried) == _describe(driven)
    assert isinstance(carried, ExecutionError)
    assert "Shutdown must return None: handle" in str(carried.exceptions[0])


@pytest.mark.parametrize("output", ["uses_self_cancelled", "uses_async_cancelled"])
async def test_a_release_cancelling_its_own_task_ends_alike(output: str, make_module: Any) -> None:
    module = make_module(SOURCE)
    carried, driven = await _both(module, [output])
    _same(carried, driven)
    if output == "uses_async_cancelled":
        # awaited in the shutdown task, which it cancelled: recorded as a cancellation
        assert carried[0] == "raised" and type(carried[1]) is asyncio.CancelledError
    else:  # a plain function's result is not awaited: the run's own result stands
        assert carried[1] == {"uses_self_cancelled": "s"}
    caller = asyncio.current_task()
    assert caller is not None and caller.cancelling() == 0  # never the caller's


async def test_an_input_failing_its_check_is_reported_by_the_driver(make_module: Any) -> None:
    module = make_module(SOURCE)
    # Outputs unchecked: the consumer's input is checked before its first attempt.
    (kind, carried, _), (_, driven, _) = await _both(module, ["consumer"], check_outputs=False)
    assert kind == "raised" and _describe(carried) == _describe(driven)
    assert isinstance(carried, ExecutionError)
    assert str(carried.exceptions[0]) == "Invalid input for consumer.wrong_type"


async def test_a_caller_cancellation_reaches_a_handed_back_node_once(make_module: Any) -> None:
    module = make_module(
        SOURCE
        + """

CANCELS: list[str] = []
STARTED = asyncio.Event()
DRAINING = asyncio.Event()
DRAIN = asyncio.Event()


async def hangs(query: str) -> int:
    STARTED.set()
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        CANCELS.append("cancelled")
        DRAINING.set()
        await DRAIN.wait()  # drains while the caller is cancelled again
        CANCELS.append("drained")
        raise
    return 1
"""
    )
    plan = Driver(module).prepare(["hangs"])
    runner = asyncio.ensure_future(plan.execute(inputs=INPUTS))
    async with asyncio.timeout(5):
        await module.STARTED.wait()
        runner.cancel()
        await module.DRAINING.wait()
    for _ in range(2):
        runner.cancel()
        await asyncio.sleep(0)
    assert not runner.done()  # the run waits for the node to drain
    module.DRAIN.set()
    with pytest.raises(asyncio.CancelledError):
        await runner
    assert module.CANCELS == ["cancelled", "drained"]
    assert module.LOG == [("close_txn", "db/txn"), ("close_conn", "db", True)]


TIMED = """
import asyncio

from sdax_hamilton import execution

ENDED: list[float] = []


@execution(timeout=0.2)
async def slow_start() -> int:
    loop = asyncio.get_running_loop()
    loop._virtual_now += 0.15  # type: ignore[attr-defined] - 0.15 s of work before suspending
    try:
        await asyncio.sleep(10)
    finally:
        ENDED.append(loop.time())
    return 1
"""


@pytest.mark.parametrize("observer", [None, _ignore], ids=["carried", "driven"])
def test_a_timeout_counts_from_the_call(observer: Any, make_module: Any) -> None:
    # On a virtual clock: the node's first step takes 0.15 s, then it waits; its 0.2 s
    # timeout ends it 0.2 s after it was called, carried out by the core or not.
    module = make_module(TIMED)
    plan = Driver(module).prepare(["slow_start"])

    async def main() -> BaseException:
        with pytest.raises(ExecutionError) as caught:
            await plan.execute(observer=observer)
        return caught.value

    error = loop_support.run(main(), VirtualTimeLoop)
    assert [type(leaf) for leaf in error.exceptions] == [TimeoutError]
    assert module.ENDED == [pytest.approx(0.2)]


async def test_the_collector_sees_what_carriers_and_runs_refer_to(make_module: Any) -> None:
    # A plan or run in a reference cycle (a plan kept in its own module's globals, a run
    # whose phase task refers back to it) is freed by the collector, in one collection.
    module = make_module(SOURCE)
    plan = Driver(module).prepare(["query"])
    carrier = plan._program.jobs.carrier
    assert carrier is not None and gc.is_tracked(carrier)
    names = {getattr(f, "__name__", None) for f in gc.get_referents(carrier)}
    assert {"conn", "txn", "query", "close_conn", "close_txn"} <= names
    run = _core.Run(plan._program.plan)
    task = asyncio.current_task()
    values: dict[str, Any] = {}
    run.carry_with((carrier, values, [None] * len(carrier), task, time.monotonic))
    referents = gc.get_referents(run)
    assert any(r is task for r in referents) and any(r is values for r in referents)
    run.carry_with(None)
    assert not any(r is task for r in gc.get_referents(run))


INTERRUPTING_CHECK = """
CHECKS: list[object] = []


class Meta(type):
    def __instancecheck__(cls, obj: object) -> bool:
        if obj == "interrupt":
            CHECKS.append(obj)
            if len(CHECKS) == 1:  # once, as a signal arriving during the check
                raise KeyboardInterrupt
        return isinstance(obj, str)


class Checked(metaclass=Meta):
    pass


async def checked() -> Checked:
    return "interrupt"  # type: ignore[return-value]
"""


@pytest.mark.parametrize("observer", [None, _ignore], ids=["carried", "driven"])
async def test_an_interrupt_in_a_check_is_never_swallowed(observer: Any, make_module: Any) -> None:
    module = make_module(INTERRUPTING_CHECK)
    plan = Driver(module).prepare(["checked"])
    with pytest.raises(KeyboardInterrupt):
        await plan.execute(observer=observer)


INNER = """
import asyncio


async def a(x: int) -> int:
    return x + 1


async def b(a: int) -> int:
    await asyncio.sleep(0)
    return a * 10
"""

OUTER = """
PLANS: list = []


async def o1(y: int) -> int:
    return (await PLANS[0].execute(inputs={"x": y}))["a"]  # a quick run inside a call


async def o2(o1: int) -> int:
    return (await PLANS[1].execute(inputs={"x": o1}))["b"]  # one that suspends
"""


async def test_a_node_may_run_a_plan_itself(make_module: Any) -> None:
    # The outer Run is carrying out o1 when the inner run (a Run of its own, in an eager
    # task of its own) carries out its nodes: runs nest, concurrently too.
    inner = Driver(make_module(INNER))
    outer = make_module(OUTER)
    outer.PLANS[:] = [inner.prepare(["a"]), inner.prepare(["b"])]
    plan = Driver(outer).prepare(["o2"])
    assert await plan.execute(inputs={"y": 1}) == {"o2": 30}
    results = await asyncio.gather(*(plan.execute(inputs={"y": y}) for y in range(3)))
    assert results == [{"o2": 20}, {"o2": 30}, {"o2": 40}]


async def test_a_carrier_of_another_plan_is_refused(make_module: Any) -> None:
    module = make_module(SOURCE)
    driver = Driver(module)
    small, large = driver.prepare(["conn"]), driver.prepare(["query"])
    run = _core.Run(large._program.plan)
    carrier = small._program.jobs.carrier
    assert carrier is not None and len(carrier) != len(large._program.plan)
    with pytest.raises(ValueError, match=r"the carrier has 1 node\(s\), the plan 3"):
        run.carry_with((carrier, {}, [None], asyncio.current_task(), time.monotonic))


SHAPES = """
import abc
import functools
from sdax_hamilton import execution

CALLS: dict[str, int] = {}


def base(dsn: str) -> str:
    return dsn


def other(base: str) -> int:  # after base: every START is a lone one
    return len(base)


def in_order(base: str, other: int) -> str:
    return f"{base}:{other}"


def keyword_only(base: str, *, other: int) -> str:
    return f"{base}/{other}"


def tail_default(base: str, other: int, suffix: str = "!") -> str:
    return base + str(other) + suffix


def _logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        assert not args, "called positionally"
        return fn(**kwargs)

    return wrapper


@_logged
def wrapped(base: str, other: int) -> str:
    return base * other


def as_bool(other: int) -> bool:
    return other > 1


def takes_int(as_bool: int) -> int:  # a bool is an int
    return as_bool + 1


def as_list(base: str) -> list[str]:  # checked element by element: a predicate
    return [base]


class Meta(abc.ABCMeta):
    pass


class Marked(metaclass=Meta):
    pass


Marked.register(str)


def marked(base: str) -> Marked:
    return base  # type: ignore[return-value]


@execution(retries=1, initial_delay=0.0, retryable_exceptions=(ConnectionError,))
async def retried(base: str, other: int) -> str:
    CALLS["retried"] = CALLS.get("retried", 0) + 1
    if CALLS["retried"] == 1:
        raise ConnectionError("once")
    return f"{base}#{other}"
"""


@pytest.mark.parametrize(
    "output",
    [
        "in_order",
        "keyword_only",
        "tail_default",
        "wrapped",
        "takes_int",
        "as_list",
        "marked",
        "retried",
    ],
)
async def test_every_signature_is_called_as_the_driver_calls_it(
    output: str, make_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Positionally where that is the same call, by keyword otherwise (src/carry.rs,
    # ``NodeCall``): the outcome of the carried run is the driven one's.
    module = make_module(SHAPES)
    plan = Driver(module).prepare([output])
    outcomes = []
    for observer in (None, _ignore):
        module.CALLS.clear()
        counted = _Counted(monkeypatch)
        outcomes.append((await plan.execute(inputs=INPUTS, observer=observer), counted.starts))
    (carried, carried_starts), (driven, _) = outcomes
    assert carried == driven
    expected = {
        "in_order": "db:2",
        "keyword_only": "db/2",
        "tail_default": "db2!",
        "wrapped": "dbdb",
        "takes_int": 2,
        "as_list": ["db"],
        "marked": "db",
        "retried": "db#2",
    }
    assert carried == {output: expected[output]}
    # Only the retry is the driver's own call.
    assert carried_starts == (1 if output == "retried" else 0)


def test_a_call_is_positional_only_where_it_means_the_same(make_module: Any) -> None:
    from sdax_hamilton._executor.runtime import _takes_positionally
    from sdax_hamilton._types import split_check

    module = make_module(SHAPES)
    args = (("base", "base"), ("other", "other"))
    assert _takes_positionally(module.in_order, args)
    assert _takes_positionally(module.tail_default, args)
    assert not _takes_positionally(module.in_order, args[::-1])
    assert not _takes_positionally(module.keyword_only, args)
    assert not _takes_positionally(module.wrapped, args)  # (*args, **kwargs)

    def posonly(base: str, other: int, /) -> str:
        return base

    assert not _takes_positionally(posonly, args)
    assert not _takes_positionally(functools.partial(module.in_order), args)
    # Classes of the plain metaclass are checked with isinstance; anything else is called.
    assert split_check(int.__instancecheck__) == (int, True)
    assert split_check(module.Marked.__instancecheck__)[1] is False
    assert split_check(callable)[1] is False


async def test_a_run_carried_alone_ends_in_one_call_and_lets_its_task_go(
    make_module: Any,
) -> None:
    # ``start_carried`` attaches and starts; ``begin_shutdown_or_finish`` answers None
    # once nothing is left, detached from the task, and the commands otherwise.
    module = make_module(SOURCE)
    plan = Driver(module).prepare(["query"])
    carrier = plan._program.jobs.carrier
    assert carrier is not None
    task = asyncio.current_task()
    values: dict[str, Any] = {"dsn": "db"}
    acquisitions: list[Any] = [None] * len(carrier)
    run = _core.Run(plan._program.plan)
    module.LOG.clear()
    assert run.start_carried((carrier, values, acquisitions, task, time.monotonic)) == []
    assert values["query"] == "db/txn/query:txn"  # every node carried out
    assert any(r is task for r in gc.get_referents(run))
    assert run.begin_shutdown_or_finish() is None  # both releases carried out too
    assert module.LOG == [("close_txn", "db/txn"), ("close_conn", "db", True)]
    assert run.finished
    assert not any(r is task for r in gc.get_referents(run))
    # Releases the Run does not carry out (no carrier attached) come back as commands.
    run = _core.Run(plan._program.plan)
    fresh = {"dsn": "db"}
    assert run.start_carried((carrier, fresh, [None] * len(carrier), task, time.monotonic)) == []
    run.carry_with(None)
    commands = run.begin_shutdown_or_finish()
    assert commands is not None and [c[0] for c in commands] == [_core.START]
    assert not run.finished


def _guarded_source() -> str:
    """``SOURCE`` with every node (releases aside) admitted by one shared bulkhead and one
    shared breaker that never opens: the carried run admits its lone first attempts in the
    core, the observed one in the driver (``guards.py``)."""
    lines = SOURCE.replace(
        "from sdax_hamilton import Acquisition, execution, shutdown",
        "from sdax_hamilton import Acquisition, Bulkhead, CircuitBreaker, execution, shutdown\n\n"
        "BULKHEAD = Bulkhead(2, max_waiting=4)\n"
        "BREAKER = CircuitBreaker(min_calls=1000)",
    ).splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        previous = lines[i - 1] if i else ""
        if line.startswith(("def ", "async def ")) and not previous.startswith("@"):
            out.append("@execution(bulkhead=BULKHEAD, breaker=BREAKER)")
        elif line.startswith("@execution("):
            line = line.replace("@execution(", "@execution(bulkhead=BULKHEAD, breaker=BREAKER, ")
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize(
    ("output", "prepare"),
    [
        ("query", {}),
        ("suspends", {}),
        ("future", {}),
        ("flaky", {}),
        ("sync_boom", {}),
        ("async_boom", {}),
        ("wrong_type", {}),
        ("self_cancelling", {}),
        ("interrupted", {}),
        ("uses_handle", {}),
        ("uses_self_cancelled", {}),
        ("uses_async_cancelled", {}),
        ("consumer", {"check_outputs": False}),
    ],
)
async def test_guarded_nodes_end_alike_carried_or_driven(
    output: str, prepare: dict[str, Any], make_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = make_module(_guarded_source())
    counted = _Counted(monkeypatch)
    breaker, bulkhead = module.BREAKER, module.BULKHEAD
    outcomes: list[tuple[int, int]] = []
    plan = Driver(module).prepare([output], **prepare)
    runs = []
    for observer in (None, _ignore):
        module.LOG.clear()
        module.CALLS.clear()
        before = breaker._core.outcomes(time.monotonic())
        try:
            runs.append(("result", await plan.execute(inputs=INPUTS, observer=observer)))
        except BaseException as exc:  # compared below, whatever it is
            runs.append(("raised", exc))
        runs[-1] = (*runs[-1], list(module.LOG))
        after = breaker._core.outcomes(time.monotonic())
        outcomes.append((after[0] - before[0], after[1] - before[1]))
        # Every permit back, whichever way the attempts were admitted and ended.
        assert (bulkhead.in_use, bulkhead.waiting) == (0, 0)
    _same(runs[0], runs[1])
    # The breaker heard the same outcomes from both runs.
    assert outcomes[0] == outcomes[1]
    assert breaker.state == "closed"
    if output == "query":  # the driver called the observed run's five functions only
        assert counted.starts == 5
