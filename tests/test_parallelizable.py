"""``Parallelizable`` / ``Collect`` (docs/fanout.md): each item of a ``Parallelizable`` node
runs the nodes up to its ``Collect`` node as a branch of its own, named ``node[i]``, with
every policy applied per item and node; ``max_concurrency`` bounds the branches at once and
items are drawn lazily; a final failure cancels and drains the other branches, closes the
source and releases every acquisition in dependency order.

Values are compared with Hamilton's own dynamic execution on the same module wherever
Hamilton can run it (its local executor runs sync functions only).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hamilton import driver as hamilton_driver
from hamilton.execution import executors
from support import loops as loop_support
from support.modules import BRANCH_OF_TWO, fanout_pool

from sdax_hamilton import Driver, RunEvent, RunReport, execution, failures
from sdax_hamilton._failures import ExecutionError

SYNC = """
from hamilton.htypes import Collect, Parallelizable

def offset(base: int) -> int:
    return base * 1000

def items(n: int) -> Parallelizable[int]:
    for i in range(n):
        yield i

def doubled(items: int) -> int:
    return items * 2

def shifted(doubled: int, offset: int) -> int:
    return doubled + offset

def collected(shifted: Collect[int]) -> list[int]:
    return list(shifted)

def summary(collected: list[int], offset: int) -> int:
    return sum(collected) - offset
"""

ITERABLE = """
from hamilton.htypes import Collect, Parallelizable

def words(text: str) -> Parallelizable[str]:
    return text.split()

def length(words: str) -> int:
    return len(words)

def lengths(length: Collect[int]) -> list[int]:
    return list(length)
"""


def hamilton_values(module: Any, outputs: list[str], inputs: dict[str, Any]) -> dict[str, Any]:
    dr = (
        hamilton_driver.Builder()
        .with_modules(module)
        .enable_dynamic_execution(allow_experimental_mode=True)
        .with_local_executor(executors.SynchronousLocalTaskExecutor())
        .build()
    )
    return dict(dr.execute(outputs, inputs=inputs))


@pytest.mark.parametrize("n", [0, 1, 7])
async def test_sync_generator_values_equal_hamiltons(make_module: Any, n: int) -> None:
    mod = make_module(SYNC)
    inputs = {"n": n, "base": 3}
    ours = await Driver(mod).prepare(["collected", "summary"]).execute(inputs=inputs)
    assert ours == hamilton_values(mod, ["collected", "summary"], inputs)
    assert ours["collected"] == [2 * i + 3000 for i in range(n)]


async def test_iterable_source_values_equal_hamiltons(make_module: Any) -> None:
    mod = make_module(ITERABLE)
    inputs = {"text": "a quick brown fox"}
    ours = await Driver(mod).prepare(["lengths"]).execute(inputs=inputs)
    assert ours == hamilton_values(mod, ["lengths"], inputs) == {"lengths": [1, 5, 5, 3]}


ASYNC = """
import asyncio
from hamilton.htypes import Collect, Parallelizable

async def items(n: int) -> Parallelizable[int]:
    for i in range(n):
        await asyncio.sleep(0)
        yield i

DONE = {}

async def slow(items: int, n: int) -> int:
    # each item waits for the next one: the last finishes first, the collected list must
    # still be in item order
    mine = DONE.setdefault(items, asyncio.Event())
    if items + 1 < n:
        await DONE.setdefault(items + 1, asyncio.Event()).wait()
    mine.set()
    return items * items

def squares(slow: Collect[int]) -> list[int]:
    return list(slow)
"""

ASYNC_TWIN = """
from hamilton.htypes import Collect, Parallelizable

def items(n: int) -> Parallelizable[int]:
    yield from range(n)

def slow(items: int, n: int) -> int:
    return items * items

def squares(slow: Collect[int]) -> list[int]:
    return list(slow)
"""


async def test_async_generator_results_in_item_order(make_module: Any) -> None:
    mod = make_module(ASYNC)
    finished: list[str] = []

    def observe(event: RunEvent) -> None:
        if event.kind == "attempt_succeeded" and event.node.startswith("slow["):
            finished.append(event.node)

    ours = await Driver(mod).prepare(["squares"]).execute(inputs={"n": 6}, observer=observe)
    twin = make_module(ASYNC_TWIN)
    assert ours == hamilton_values(twin, ["squares"], {"n": 6})
    assert ours == {"squares": [0, 1, 4, 9, 16, 25]}
    assert finished == [f"slow[{i}]" for i in reversed(range(6))]


BOUNDED = """
import asyncio
from hamilton.htypes import Collect, Parallelizable
from sdax_hamilton import execution

DRAWN = []

@execution(max_concurrency=3)
def items(n: int) -> Parallelizable[int]:
    for i in range(n):
        DRAWN.append(i)
        yield i

async def first(items: int) -> int:
    await asyncio.sleep(0)
    return items

async def second(first: int) -> int:
    for _ in range(first % 4):
        await asyncio.sleep(0)
    return first + 100

def gathered(second: Collect[int]) -> list[int]:
    return list(second)
"""


def branch_spans(events: list[RunEvent]) -> list[tuple[float, int, int]]:
    """(time, +1/-1, item) for each branch's first start and last end, in event order."""
    marks = []
    for order, event in enumerate(events):
        if event.kind == "attempt_started" and event.node.startswith("first["):
            marks.append((order, 1, int(event.node[6:-1])))
        elif event.kind == "attempt_succeeded" and event.node.startswith("second["):
            marks.append((order, -1, int(event.node[7:-1])))
    return marks


async def test_max_concurrency_bounds_the_branches_at_once(make_module: Any) -> None:
    mod = make_module(BOUNDED)
    events: list[RunEvent] = []
    result = (
        await Driver(mod).prepare(["gathered"]).execute(inputs={"n": 12}, observer=events.append)
    )
    assert result == {"gathered": [i + 100 for i in range(12)]}
    running = peak = 0
    for _order, step, _item in branch_spans(events):
        running += step
        peak = max(peak, running)
        assert running <= 3
    assert peak == 3
    assert running == 0


ENDLESS = """
import asyncio
from hamilton.htypes import Collect, Parallelizable
from sdax_hamilton import execution

DRAWN = []
CLOSED = []

@execution(max_concurrency=2)
def items() -> Parallelizable[int]:
    i = 0
    try:
        while True:
            DRAWN.append(i)
            yield i
            i += 1
    finally:
        CLOSED.append(len(DRAWN))

async def work(items: int) -> int:
    await asyncio.sleep(0)
    if items == 9:
        raise ValueError(f"item {items} is bad")
    return items

def gathered(work: Collect[int]) -> list[int]:
    return list(work)
"""


async def test_an_endless_source_is_drawn_lazily_and_closed_by_a_failure(make_module: Any) -> None:
    mod = make_module(ENDLESS)
    with pytest.raises(ExecutionError) as caught:
        await Driver(mod).prepare(["gathered"]).execute()
    (error,) = caught.value.exceptions
    assert str(error) == "item 9 is bad"
    assert "sdax_hamilton: node 'work[9]' failed after 1 attempt" in error.__notes__
    # Never more than one item ahead of a free place: item 9 failed while at most one
    # other branch (item 10) was running.
    assert mod.DRAWN == list(range(len(mod.DRAWN)))
    assert len(mod.DRAWN) <= 11
    assert mod.CLOSED == [len(mod.DRAWN)], "the generator's finally ran before the run raised"


ASYNC_ENDLESS = """
import asyncio
from hamilton.htypes import Collect, Parallelizable
from sdax_hamilton import execution

DRAWN = []
CLOSED = []
CANCELLED = []
STARTED = asyncio.Event()

@execution(max_concurrency=4)
async def items() -> Parallelizable[int]:
    i = 0
    try:
        while True:
            DRAWN.append(i)
            yield i
            i += 1
    finally:
        CLOSED.append(len(DRAWN))

async def work(items: int) -> int:
    if items == 3:
        await STARTED.wait()
        raise ValueError("item three")
    if items == 1:
        STARTED.set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        CANCELLED.append(items)
        raise
    return items

def gathered(work: Collect[int]) -> list[int]:
    return list(work)
"""


async def test_a_failure_cancels_drains_and_closes_an_async_source(make_module: Any) -> None:
    mod = make_module(ASYNC_ENDLESS)
    events: list[RunEvent] = []
    with pytest.raises(ExecutionError) as caught:
        await Driver(mod).prepare(["gathered"]).execute(observer=events.append)
    (error,) = caught.value.exceptions
    assert str(error) == "item three"
    assert sorted(mod.CANCELLED) == [0, 1, 2]
    assert mod.DRAWN == [0, 1, 2, 3]
    assert mod.CLOSED == [4], "aclose() ran before the run raised"
    cancelled = sorted(e.node for e in events if e.kind == "attempt_cancelled")
    assert cancelled == ["work[0]", "work[1]", "work[2]"]
    assert events[-1].kind == "run_finished"


RESOURCES = (
    """
import asyncio
from hamilton.htypes import Collect, Parallelizable
from sdax_hamilton import Acquisition, execution, shutdown

LOG = []
"""
    + fanout_pool(sync_release=False)
    + """
def items(n: int) -> Parallelizable[int]:
    yield from range(n)

async def session(items: int, pool: Pool) -> str:
    LOG.append(f"open session {items}")
    return f"session {items}"

@shutdown(of=session)
async def close_session(acquired: Acquisition[str]) -> None:
    LOG.append(f"close {acquired.value}")

async def query(session: str, items: int, fail: int) -> int:
    await asyncio.sleep(0)
    if items == fail:
        raise ValueError(f"query {items} failed")
    return items * 10

def rows(query: Collect[int]) -> list[int]:
    return list(query)
"""
)


def _closes_before_pool(log: list[str], opened: int) -> None:
    sessions = [entry for entry in log if entry.startswith("close session")]
    assert sorted(sessions) == sorted(f"close session {i}" for i in range(opened))
    assert log.index("close pool") > max(log.index(entry) for entry in sessions)
    assert log[-1] == "close pool"


async def test_branch_acquisitions_are_released_after_the_forward_phase_in_order(
    make_module: Any,
) -> None:
    mod = make_module(RESOURCES)
    result = await Driver(mod).prepare(["rows"]).execute(inputs={"n": 4, "fail": -1})
    assert result == {"rows": [0, 10, 20, 30]}
    first_close = next(i for i, e in enumerate(mod.LOG) if e.startswith("close"))
    assert all(not e.startswith("open") for e in mod.LOG[first_close:])
    _closes_before_pool(mod.LOG, 4)


async def test_a_failure_releases_every_branch_acquisition_then_the_outer_one(
    make_module: Any,
) -> None:
    mod = make_module(RESOURCES)
    with pytest.raises(ExecutionError) as caught:
        await Driver(mod).prepare(["rows"]).execute(inputs={"n": 4, "fail": 2})
    (error,) = caught.value.exceptions
    assert "sdax_hamilton: node 'query[2]' failed after 1 attempt" in error.__notes__
    opened = sum(1 for entry in mod.LOG if entry.startswith("open session"))
    _closes_before_pool(mod.LOG, opened)


async def test_open_keeps_branch_resources_alive_through_the_body(make_module: Any) -> None:
    mod = make_module(RESOURCES)
    async with Driver(mod).prepare(["rows"]).open(inputs={"n": 3, "fail": -1}) as outputs:
        assert outputs == {"rows": [0, 10, 20]}
        assert not any(entry.startswith("close") for entry in mod.LOG)
    _closes_before_pool(mod.LOG, 3)


RETRIED = """
from hamilton.htypes import Collect, Parallelizable
from sdax_hamilton import execution

CALLS = {}

def items(n: int) -> Parallelizable[int]:
    yield from range(n)

@execution(retries=2, initial_delay=0.0, retryable_exceptions=(ConnectionError,))
def fetch(items: int) -> int:
    CALLS[items] = CALLS.get(items, 0) + 1
    if items == 1 and CALLS[items] < 3:
        raise ConnectionError("flaky")
    return items + 1

def fetched(fetch: Collect[int]) -> list[int]:
    return list(fetch)
"""


async def test_policies_apply_per_item_and_events_name_the_item(make_module: Any) -> None:
    mod = make_module(RETRIED)
    events: list[RunEvent] = []
    report = RunReport()
    result = (
        await Driver(mod)
        .prepare(["fetched"])
        .execute(inputs={"n": 3}, observer=[events.append, report])
    )
    assert result == {"fetched": [1, 2, 3]}
    assert mod.CALLS == {0: 1, 1: 3, 2: 1}
    retried = [e.node for e in events if e.kind == "retry_scheduled"]
    assert retried == ["fetch[1]", "fetch[1]"]
    started = {e.node for e in events if e.kind == "attempt_started"}
    assert started == {"items", "fetch[0]", "fetch[1]", "fetch[2]", "fetched"}
    text = report.format()
    assert "fetch[1]" in text and "\n  fetch " not in text


async def test_an_item_failure_names_the_item_in_the_error(make_module: Any) -> None:
    mod = make_module(RETRIED.replace("CALLS[items] < 3", "True"))
    with pytest.raises(ExecutionError) as caught:
        await Driver(mod).prepare(["fetched"]).execute(inputs={"n": 3})
    (error,) = caught.value.exceptions
    assert isinstance(error, ConnectionError)
    assert "sdax_hamilton: node 'fetch[1]' failed after 3 attempts" in error.__notes__
    assert "fetch[1]" in str(caught.value)
    assert failures(caught.value) == (error,) or error in caught.value.exceptions


SOURCE_FAILS = """
from hamilton.htypes import Collect, Parallelizable

def items(n: int) -> Parallelizable[int]:
    yield 0
    yield 1
    raise OSError("source broke")

def same(items: int) -> int:
    return items

def out(same: Collect[int]) -> list[int]:
    return list(same)
"""


async def test_a_failing_source_fails_the_run_naming_the_source(make_module: Any) -> None:
    mod = make_module(SOURCE_FAILS)
    with pytest.raises(ExecutionError) as caught:
        await Driver(mod).prepare(["out"]).execute(inputs={"n": 3})
    (error,) = caught.value.exceptions
    assert isinstance(error, OSError)
    assert "sdax_hamilton: node 'items' failed: its source raised drawing item 2" in (
        error.__notes__
    )


# ----------------------------------------------------------------- errors early


def test_max_concurrency_is_checked_at_the_decorator() -> None:
    with pytest.raises(TypeError, match="max_concurrency must be an int >= 1 or None"):
        execution(max_concurrency=2.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="max_concurrency"):
        execution(max_concurrency=True)
    with pytest.raises(ValueError, match="max_concurrency must be >= 1"):
        execution(max_concurrency=0)


def test_max_concurrency_on_another_node_is_refused_at_driver(make_module: Any) -> None:
    mod = make_module(
        SYNC.replace(
            "def doubled(",
            "from sdax_hamilton import execution\n@execution(max_concurrency=2)\ndef doubled(",
        )
    )
    with pytest.raises(ValueError, match=r"doubled.*not a Parallelizable node"):
        Driver(mod)


def test_a_branch_node_alone_is_refused_at_prepare(make_module: Any) -> None:
    dr = Driver(make_module(SYNC))
    with pytest.raises(
        ValueError, match="'shifted' runs once per item of Parallelizable node 'items'"
    ):
        dr.prepare(["shifted"])
    with pytest.raises(ValueError, match="'doubled' runs once per item"):
        dr.prepare(["collected", "doubled"])
    with pytest.raises(ValueError, match="'items' is a Parallelizable node"):
        dr.prepare(["items"])


NESTED = """
from hamilton.htypes import Collect, Parallelizable

def outer(n: int) -> Parallelizable[int]:
    yield from range(n)

def inner(outer: int) -> Parallelizable[int]:
    yield from range(outer)

def leaf(inner: int) -> int:
    return inner

def inner_all(leaf: Collect[int]) -> int:
    return sum(leaf)

def outer_all(inner_all: Collect[int]) -> list[int]:
    return list(inner_all)
"""


def test_nested_parallelizable_is_refused_at_prepare(make_module: Any) -> None:
    dr = Driver(make_module(NESTED))
    with pytest.raises(ValueError, match="nested Parallelizable nodes are not supported"):
        dr.prepare(["outer_all"])


async def test_a_plan_without_fan_out_keeps_its_shared_job_table(make_module: Any) -> None:
    plan = Driver(make_module("def a(x: int) -> int:\n    return x\n")).prepare(["a"])
    jobs = plan._program.jobs
    assert jobs is not None and jobs.fan_outs is None and isinstance(jobs, tuple)
    assert await plan.execute(inputs={"x": 1}) == {"a": 1}


async def test_concurrent_runs_of_one_plan_are_isolated(make_module: Any) -> None:
    plan = Driver(make_module(SYNC)).prepare(["collected"])
    results = await asyncio.gather(*(plan.execute(inputs={"n": n, "base": 0}) for n in (2, 5, 3)))
    assert [r["collected"] for r in results] == [[0, 2], [0, 2, 4, 6, 8], [0, 2, 4]]


GUARDED = """
import asyncio
from hamilton.htypes import Collect, Parallelizable
from sdax_hamilton import Bulkhead, execution

PERMITS = Bulkhead(2, max_waiting=100, name="api")
AT_ONCE = [0]
PEAK = [0]

def items(n: int) -> Parallelizable[int]:
    yield from range(n)

@execution(
    timeout=0.05,
    retries=1,
    initial_delay=0.0,
    bulkhead=PERMITS,
    fallback=lambda exc: -1,
)
async def call(items: int) -> int:
    AT_ONCE[0] += 1
    PEAK[0] = max(PEAK[0], AT_ONCE[0])
    try:
        if items == 2:
            await asyncio.Event().wait()  # times out, twice: its fallback's value is used
        await asyncio.sleep(0)
        return items * 3
    finally:
        AT_ONCE[0] -= 1

def answers(call: Collect[int]) -> list[int]:
    return list(call)
"""


async def test_timeouts_bulkheads_and_fallbacks_apply_per_item(make_module: Any) -> None:
    mod = make_module(GUARDED)
    events: list[RunEvent] = []
    result = await Driver(mod).prepare(["answers"]).execute(inputs={"n": 5}, observer=events.append)
    assert result == {"answers": [0, 3, -1, 9, 12]}
    assert mod.PEAK[0] <= 2
    timed_out = [e.node for e in events if e.kind == "attempt_timed_out"]
    assert timed_out == ["call[2]", "call[2]"]
    assert [e.node for e in events if e.kind == "fallback_used"] == ["call[2]"]


CANCELLABLE = """
import asyncio
from hamilton.htypes import Collect, Parallelizable
from sdax_hamilton import Acquisition, execution, shutdown

LOG = []
STARTED = asyncio.Event()

@execution(max_concurrency=3)
async def items() -> Parallelizable[int]:
    i = 0
    try:
        while True:
            yield i
            i += 1
    finally:
        LOG.append("source closed")

async def lease(items: int) -> int:
    LOG.append(f"lease {items}")
    return items

@shutdown(of=lease)
def give_back(acquired: Acquisition[int]) -> None:
    LOG.append(f"give back {acquired.value}")

async def work(lease: int) -> int:
    if lease == 2:
        STARTED.set()
    await asyncio.Event().wait()
    return lease

def done(work: Collect[int]) -> list[int]:
    return list(work)
"""


async def test_caller_cancellation_mid_fan_out_drains_closes_and_releases(
    make_module: Any,
) -> None:
    mod = make_module(CANCELLABLE)
    task = asyncio.ensure_future(Driver(mod).prepare(["done"]).execute())
    await mod.STARTED.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert "source closed" in mod.LOG
    leased = sorted(e for e in mod.LOG if e.startswith("lease"))
    given = sorted(e.replace("give back", "lease") for e in mod.LOG if e.startswith("give"))
    assert leased == given == ["lease 0", "lease 1", "lease 2"]
    assert mod.LOG.index("source closed") < min(
        mod.LOG.index(e) for e in mod.LOG if e.startswith("give")
    ), "releases come after the forward phase, which ends when the source is closed"


ITERATORS = """
from hamilton.htypes import Collect, Parallelizable

class Countdown:
    # an iterator object with close(): closed when the run stops early
    def __init__(self, n):
        self.n = n
        self.closed = False
    def __iter__(self):
        return self
    def __next__(self):
        if self.n == 0:
            raise StopIteration
        self.n -= 1
        return self.n
    def close(self):
        self.closed = True

SOURCES = []

def items(n: int) -> Parallelizable[int]:
    source = Countdown(n)
    SOURCES.append(source)
    return source

class Letters:
    def __init__(self, text):
        self.text = text
    def __aiter__(self):
        return self.gen()
    async def gen(self):
        for ch in self.text:
            yield ch

async def letters(text: str) -> Parallelizable[str]:
    return Letters(text)

def upper(letters: str) -> str:
    return letters.upper()

def word(upper: Collect[str]) -> str:
    return "".join(upper)

def twice(items: int, fail_at: int) -> int:
    if items == fail_at:
        raise KeyError(items)
    return items * 2

def all_twice(twice: Collect[int]) -> list[int]:
    return list(twice)
"""


async def test_iterator_objects_and_async_iterables_are_sources(make_module: Any) -> None:
    mod = make_module(ITERATORS)
    plan = Driver(mod).prepare(["word", "all_twice"])
    result = await plan.execute(inputs={"text": "abc", "n": 4, "fail_at": -1})
    assert result == {"word": "ABC", "all_twice": [6, 4, 2, 0]}
    with pytest.raises(ExecutionError):
        await plan.execute(inputs={"text": "abc", "n": 4, "fail_at": 2})
    assert mod.SOURCES[-1].closed


async def test_a_wrong_item_fails_the_source_with_a_type_error(make_module: Any) -> None:
    mod = make_module(ITERABLE.replace("return text.split()", "return [*text.split(), 3]"))
    with pytest.raises(ExecutionError) as caught:
        await Driver(mod).prepare(["lengths"]).execute(inputs={"text": "a b"})
    (error,) = caught.value.exceptions
    assert isinstance(error, TypeError)
    assert str(error) == "Invalid item from words: item 2"


DEADLINE = """
import asyncio
from hamilton.htypes import Collect, Parallelizable

HANG = asyncio.Event()

def items(n: int) -> Parallelizable[int]:
    yield from range(n)

async def wait(items: int) -> int:
    if items == 3:
        await HANG.wait()  # never set: the run's timeout ends it
    return items

def waited(wait: Collect[int]) -> list[int]:
    return list(wait)
"""


async def test_a_run_timeout_clips_the_attempts_of_items(make_module: Any) -> None:
    plan = Driver(make_module(DEADLINE)).prepare(["waited"], check_outputs=False)
    assert await plan.execute(inputs={"n": 3}, timeout=30.0) == {"waited": [0, 1, 2]}
    with pytest.raises(ExecutionError) as caught:
        await plan.execute(inputs={"n": 5}, timeout=0.05)
    (error,) = caught.value.exceptions
    assert isinstance(error, TimeoutError)
    assert "sdax_hamilton: node 'wait[3]': attempt 1 was cut short by the run's timeout" in (
        error.__notes__
    )


async def test_node_hooks_see_each_items_node(make_module: Any) -> None:
    from hamilton.lifecycle import NodeExecutionHook

    class Hooks(NodeExecutionHook):
        def __init__(self) -> None:
            self.seen: list[tuple[str, int]] = []

        def run_before_node_execution(self, *, node_name: str, **kwargs: Any) -> None:
            self.seen.append((node_name, kwargs.get("attempt", 0)))

        def run_after_node_execution(self, **kwargs: Any) -> None:
            pass

    hooks = Hooks()
    mod = make_module(RETRIED)
    plan = Driver(mod, adapters=[hooks]).prepare(["fetched"])
    assert await plan.execute(inputs={"n": 2}) == {"fetched": [1, 2]}
    names = [name for name, _ in hooks.seen]
    assert names.count("fetch[1]") == 3 and names.count("fetch[0]") == 1
    assert "fetch" not in names


SEVERAL = """
from hamilton.htypes import Collect, Parallelizable

def p1(n: int) -> Parallelizable[int]:
    yield from range(n)

def a(p1: int) -> int:
    return p1 + 1

def c1(a: Collect[int]) -> list[int]:
    return list(a)

def p2(c1: list[int]) -> Parallelizable[int]:
    yield from c1

def b(p2: int, n: int) -> int:
    return p2 * n

def c2(b: Collect[int]) -> list[int]:
    return list(b)

def q(m: int) -> Parallelizable[str]:
    return ["x", "y"][:m]

def r(q: str) -> str:
    return q + "!"

def s(r: Collect[str]) -> str:
    return "".join(r)

def both(c2: list[int], s: str) -> str:
    return f"{c2}{s}"
"""


async def test_fan_outs_in_sequence_and_side_by_side_equal_hamiltons(make_module: Any) -> None:
    mod = make_module(SEVERAL)
    inputs = {"n": 3, "m": 2}
    ours = await Driver(mod).prepare(["both", "c1"]).execute(inputs=inputs)
    assert ours == hamilton_values(mod, ["both", "c1"], inputs)
    assert ours == {"both": "[3, 6, 9]x!y!", "c1": [1, 2, 3]}


@pytest.mark.parametrize(
    ("source", "inputs"),
    [
        (RESOURCES, {"n": 3, "fail": -1}),
        (RESOURCES, {"n": 3, "fail": 1}),
        (SOURCE_FAILS, {"n": 3}),
        (ENDLESS, {}),
    ],
)
def test_fan_out_runs_leave_no_reference_cycles(
    make_module: Any, source: str, inputs: dict[str, Any]
) -> None:
    from test_driver_memory import _cyclic_garbage

    mod = make_module(source)
    plan = Driver(mod).prepare([next(n for n in ("rows", "out", "gathered") if hasattr(mod, n))])

    async def scenario(module: Any) -> None:
        try:
            await plan.execute(inputs=inputs)
        except ExecutionError:
            pass

    assert _cyclic_garbage(scenario, mod) == (0, [])


DROPPED = """
import weakref
from hamilton.htypes import Collect, Parallelizable
from sdax_hamilton import execution

class Page:
    def __init__(self, n):
        self.n = n

PAGES = []
ALIVE_AT_COLLECT = []

@execution(max_concurrency=2)
def items(n: int) -> Parallelizable[int]:
    yield from range(n)

async def page(items: int) -> Page:
    p = Page(items)
    PAGES.append(weakref.ref(p))
    return p

async def size(page: Page) -> int:
    return page.n * 10

def sizes(size: Collect[int]) -> list[int]:
    ALIVE_AT_COLLECT.append(sum(ref() is not None for ref in PAGES))
    return list(size)
"""


async def test_an_items_intermediate_values_are_dropped_once_read(make_module: Any) -> None:
    # A long source keeps only what the Collect node receives, not every page it fetched.
    mod = make_module(DROPPED)
    result = await Driver(mod).prepare(["sizes"]).execute(inputs={"n": 20})
    assert result == {"sizes": [i * 10 for i in range(20)]}
    assert len(mod.PAGES) == 20
    assert mod.ALIVE_AT_COLLECT == [0]


UNBOUNDED = """
import asyncio
from hamilton.htypes import Collect, Parallelizable

DRAWN = []

def items() -> Parallelizable[int]:
    i = 0
    while True:
        DRAWN.append(i)
        yield i
        i += 1

async def work(items: int) -> int:
    await asyncio.sleep(0)
    if items == 5:
        raise ValueError("stop")
    return items

def gathered(work: Collect[int]) -> list[int]:
    return list(work)
"""


async def test_an_endless_sync_source_without_a_bound_lets_its_branches_run(
    make_module: Any,
) -> None:
    # Without max_concurrency every item may start at once, but each draw waits for a turn
    # of the loop: the branches started so far run meanwhile, and a failure stops the source.
    mod = make_module(UNBOUNDED)
    with pytest.raises(ExecutionError):
        await asyncio.wait_for(Driver(mod).prepare(["gathered"]).execute(), 30)
    assert len(mod.DRAWN) < 1000


BROKEN = """
from hamilton.htypes import Collect, Parallelizable
from sdax_hamilton import CircuitBreaker, execution

BREAKER = CircuitBreaker(failure_ratio=0.5, min_calls=2, window=60.0, break_for=60.0)
CALLED = []

@execution(max_concurrency=1)
def items(n: int) -> Parallelizable[int]:
    yield from range(n)

@execution(breaker=BREAKER, fallback=lambda exc: type(exc).__name__)
def lookup(items: int) -> str:
    CALLED.append(items)
    raise ConnectionError("service down")

def looked_up(lookup: Collect[str]) -> list[str]:
    return list(lookup)
"""


async def test_a_breaker_opened_by_earlier_items_rejects_later_ones(make_module: Any) -> None:
    mod = make_module(BROKEN)
    events: list[RunEvent] = []
    result = (
        await Driver(mod).prepare(["looked_up"]).execute(inputs={"n": 4}, observer=events.append)
    )
    # One branch at a time: items 0 and 1 fail and open the breaker; 2 and 3 are refused
    # without a call, and each item's fallback names what it got.
    assert result == {
        "looked_up": ["ConnectionError", "ConnectionError", "CircuitOpen", "CircuitOpen"]
    }
    assert mod.CALLED == [0, 1]
    rejected = [e.node for e in events if e.kind == "circuit_rejected"]
    assert rejected == ["lookup[2]", "lookup[3]"]


HEDGED = """
import asyncio
from hamilton.htypes import Collect, Parallelizable
from sdax_hamilton import execution

CALLS = {}
SLOW = asyncio.Event()  # never set: the first call of item 1 stays slow

@execution(max_concurrency=3)
def items(n: int) -> Parallelizable[int]:
    yield from range(n)

@execution(hedge_after=0.01, hedges=1)
async def answer(items: int) -> int:
    CALLS[items] = CALLS.get(items, 0) + 1
    if items == 1 and CALLS[items] == 1:
        await SLOW.wait()
    return items * 7

def answers(answer: Collect[int]) -> list[int]:
    return list(answer)
"""


async def test_hedging_applies_per_item(make_module: Any) -> None:
    mod = make_module(HEDGED)
    events: list[RunEvent] = []
    result = await Driver(mod).prepare(["answers"]).execute(inputs={"n": 4}, observer=events.append)
    assert result == {"answers": [0, 7, 14, 21]}
    assert [e.node for e in events if e.kind == "hedge_started"] == ["answer[1]"]
    assert mod.CALLS == {0: 1, 1: 2, 2: 1, 3: 1}


SALVAGED = """
import asyncio
from hamilton.htypes import Collect, Parallelizable
from sdax_hamilton import Acquisition, shutdown

LOG = []


class _Hostile(type):
    # The item check of ``Parallelizable[Item]`` is the driver's own bookkeeping: what it
    # raises is not a node's failure, and the run is salvaged (coordinator.salvage).
    def __instancecheck__(cls, value):
        if value == 3:
            raise MemoryError("the item check ran out of memory")
        return isinstance(value, int)


class Item(metaclass=_Hostile):
    pass


def conn() -> str:
    LOG.append("acquired conn")
    return "conn"


@shutdown(of=conn)
def close_conn(acquired: Acquisition[str]) -> None:
    LOG.append("released conn")


{source}


async def work(items: Item, conn: str) -> int:
    await asyncio.sleep(0.01)
    return items


def total(work: Collect[int]) -> int:
    return sum(work)
"""

SALVAGED_SYNC = """
def items(conn: str) -> Parallelizable[Item]:
    try:
        yield from range(10)
    finally:
        LOG.append("source closed")
"""

SALVAGED_ASYNC = """
async def items(conn: str) -> Parallelizable[Item]:
    try:
        for i in range(10):
            yield i
    finally:
        await asyncio.sleep(0)
        LOG.append("source closed")
"""


@pytest.mark.parametrize("source", [SALVAGED_SYNC, SALVAGED_ASYNC], ids=["sync", "async"])
async def test_a_salvaged_run_closes_the_source_before_it_raises(
    make_module: Any, source: str
) -> None:
    mod = make_module(SALVAGED.replace("{source}", source))
    plan = Driver(mod).prepare(["total"])
    with pytest.raises(ExecutionError) as raised:
        await plan.execute()
    (memory,) = raised.value.exceptions
    assert isinstance(memory, MemoryError)
    assert any("could not go on" in note for note in memory.__notes__), memory.__notes__
    # The source was closed (its ``finally`` ran) and the outer resource released, before
    # the run raised.
    assert mod.LOG.count("source closed") == 1, mod.LOG
    assert mod.LOG[0] == "acquired conn" and mod.LOG[-1] == "released conn", mod.LOG


ONE_TASK = """
import asyncio
from hamilton.htypes import Collect, Parallelizable
from sdax_hamilton import execution

TASKS = {}

@execution(max_concurrency=3)
def items(n: int) -> Parallelizable[int]:
    yield from range(n)

async def first(items: int) -> int:
    TASKS.setdefault(items, []).append(asyncio.current_task())
    async with asyncio.timeout(5):  # entered in the node's first step
        await asyncio.sleep(0)
    return items

async def second(first: int) -> int:
    TASKS[first].append(asyncio.current_task())
    try:
        # Its first step, too, runs in the task that goes on with it: this timeout cancels
        # that task, not the run's.
        async with asyncio.timeout(0.01):
            await asyncio.Event().wait()
    except TimeoutError:
        return first * 10
    return -1

def collected(second: Collect[int]) -> list[int]:
    return list(second)
"""


async def test_an_items_async_nodes_run_one_after_the_other_in_one_task(
    make_module: Any,
) -> None:
    mod = make_module(ONE_TASK)
    caller = asyncio.current_task()
    result = await Driver(mod).prepare(["collected"]).execute(inputs={"n": 6})
    assert result == {"collected": [0, 10, 20, 30, 40, 50]}
    tasks = {item: set(seen) for item, seen in mod.TASKS.items()}
    assert all(len(seen) == 1 for seen in tasks.values()), tasks  # both nodes, one task
    assert len({next(iter(seen)) for seen in tasks.values()}) == 6  # a task per item
    assert caller not in {next(iter(seen)) for seen in tasks.values()}


CARRIED_RETRIES = """
import asyncio
from hamilton.htypes import Collect, Parallelizable
from sdax_hamilton import execution

CALLS = {}

@execution(max_concurrency=2)
def items(n: int) -> Parallelizable[int]:
    yield from range(n)

@execution(retries=2, initial_delay=0.0, retryable_exceptions=(ConnectionError,))
async def fetch(items: int) -> int:
    CALLS[items] = CALLS.get(items, 0) + 1
    await asyncio.sleep(0)
    if items % 2 and CALLS[items] < 3:
        raise ConnectionError(f"item {items} flaked")
    return items

def checked(fetch: int) -> str:
    if fetch == 4:
        return 4  # not a str: its output check fails
    return f"<{fetch}>"

def pages(checked: Collect[str]) -> list[str]:
    return list(checked)
"""


@pytest.mark.parametrize("watched", [False, True], ids=["carried", "observed"])
async def test_carried_items_hand_failures_retries_and_bad_values_to_the_driver(
    make_module: Any, watched: bool
) -> None:
    # Observed, every attempt is the driver's; carried, an item's nodes run in its task
    # until something needs the driver: the caller sees the same either way.
    mod = make_module(CARRIED_RETRIES)
    plan = Driver(mod).prepare(["pages"])
    events: list[RunEvent] = []
    assert await plan.execute(inputs={"n": 4}, observer=events.append if watched else None) == {
        "pages": ["<0>", "<1>", "<2>", "<3>"]
    }
    assert mod.CALLS == {0: 1, 1: 3, 2: 1, 3: 3}
    mod.CALLS.clear()
    with pytest.raises(ExecutionError) as raised:
        await plan.execute(inputs={"n": 6})
    (error,) = raised.value.exceptions
    assert isinstance(error, TypeError) and "checked[4]" in str(error), error


HANDED_VALUE_RETRIED = """
from hamilton.htypes import Collect, Parallelizable
from sdax_hamilton import execution

SEEN = []

@execution(max_concurrency=3)
def items(n: int) -> Parallelizable[int]:
    yield from range(n)

async def double(items: int) -> int:
    return items * 2

@execution(retries=1, initial_delay=0.0, retryable_exceptions=(ConnectionError,))
{kind} flaky(double: int) -> int:
    SEEN.append(double)
    if double % 4 == 2 and SEEN.count(double) == 1:
        raise ConnectionError(f"{{double}} flaked")
    return double + 1

def total(flaky: Collect[int]) -> list[int]:
    return flaky
"""


@pytest.mark.parametrize("kind", ["async def", "def"])
async def test_a_value_handed_to_the_items_next_node_reaches_its_retries(
    make_module: Any, kind: str
) -> None:
    # ``double``'s value goes to ``flaky`` alone, its only argument: an item's task hands
    # it over without storing it; a failed first attempt handed to the driver is retried
    # with the same argument.
    mod = make_module(HANDED_VALUE_RETRIED.format(kind=kind))
    plan = Driver(mod).prepare(["total"])
    assert await plan.execute(inputs={"n": 8}) == {"total": [2 * i + 1 for i in range(8)]}
    assert sorted(mod.SEEN) == sorted([2 * i for i in range(8)] + [2 * i for i in range(1, 8, 2)])


def test_a_carried_run_keeps_no_record_per_item_beyond_its_result(make_module: Any) -> None:
    import gc
    import tracemalloc

    mod = make_module(
        BRANCH_OF_TWO.format(limit=8)
        + """
import tracemalloc

SEEN = []

def total(second: Collect[int]) -> int:
    SEEN.append(tracemalloc.get_traced_memory()[0])
    return len(second)
"""
    )
    plan = Driver(mod).prepare(["total"])

    async def main() -> float:
        await plan.execute(inputs={"n": 100})  # first-run caches
        held = []
        for n in (2000, 8000):
            gc.collect()
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                assert await plan.execute(inputs={"n": n}) == {"total": n}
                held.append(mod.SEEN[-1] - base)
            finally:
                tracemalloc.stop()
        return (held[1] - held[0]) / 6000

    # What the Python heap holds per item when the Collect node runs: its result (an int
    # and its place in the list and in the run's values) and a few table slots; a record
    # per grown job (a Job and a NodeRuntime each) was over a kilobyte per item.
    # The least of three: tracemalloc counts what other threads allocate meanwhile.
    per_item = min(loop_support.run(main()) for _ in range(3))
    assert per_item < 400, per_item


UNSTARTED = """
import asyncio
from hamilton.htypes import Collect, Parallelizable
from sdax_hamilton import execution

STARTED = []
CLOSED = []

@execution(max_concurrency=4)
def items(n: int) -> Parallelizable[int]:
    try:
        yield from range(3)
        raise OSError("the source broke at item 3")
    finally:
        CLOSED.append(True)

async def work(items: int) -> int:
    STARTED.append(items)
    await asyncio.sleep(0)
    return items

def done(work: Collect[int]) -> list[int]:
    return list(work)
"""


async def test_carried_items_stopped_before_their_first_step_never_run(
    make_module: Any,
) -> None:
    import gc
    import warnings

    # Items 0-2 are drawn and their tasks made in the same step of the run as the draw of
    # item 3 fails: each item's task is cancelled before it ran, its node's coroutine is
    # closed without running, and the source is closed before the run raises. (Under an
    # eager task factory a task's first step runs as it is made: the items have started,
    # and are cancelled at their first suspension.)
    mod = make_module(UNSTARTED)
    plan = Driver(mod).prepare(["done"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ExecutionError) as raised:
            await plan.execute(inputs={"n": 0})
        gc.collect()
    (error,) = raised.value.exceptions
    assert isinstance(error, OSError)
    assert mod.STARTED == ([0, 1, 2] if loop_support.NAME == "eager" else [])
    assert mod.CLOSED == [True]
    assert not [w for w in caught if "never awaited" in str(w.message)], caught
