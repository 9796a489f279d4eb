"""Hamilton lifecycle adapters on ``Driver(adapters=...)`` (docs/adapters.md).

Every adapter here is built on Hamilton's real ``hamilton.lifecycle`` classes; the plugins
(progress bars, OpenTelemetry) and the Hamilton UI tracker have tests of their own
(``test_adapters_plugins.py``, ``test_hamilton_ui.py``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from hamilton import base as hamilton_base
from hamilton.lifecycle import (
    EdgeConnectionHook,
    GraphConstructionHook,
    GraphExecutionHook,
    NodeExecutionHook,
    NodeExecutionMethod,
    ResultBuilder,
    StaticValidator,
    TaskExecutionHook,
    TaskGroupingHook,
)
from hamilton.lifecycle import base as lifecycle_base
from hamilton.lifecycle.base import ValidationException
from support import loops as loop_support

from sdax_hamilton import Driver, ExecutionError
from sdax_hamilton.testing import instant_retries

GRAPH = """
from sdax_hamilton import Acquisition, execution, shutdown
from hamilton.function_modifiers import tag

LOG = []
FAILURES = {"flaky": 1}

@tag(team="data")
def base(x: int) -> int:
    LOG.append("call base")
    return x + 1

@execution(retries=2, initial_delay=0.0)
async def flaky(base: int) -> int:
    LOG.append("call flaky")
    if FAILURES["flaky"] > 0:
        FAILURES["flaky"] -= 1
        raise ConnectionError("transient")
    return base * 10

class Pool:
    def __init__(self) -> None:
        self.closed = False

def pool(base: int) -> Pool:
    LOG.append("call pool")
    return Pool()

@shutdown(of=pool)
def close_pool(acq: Acquisition[Pool]) -> None:
    LOG.append("release pool")

def total(flaky: int, pool: Pool) -> int:
    LOG.append("call total")
    return flaky + 1
"""


class Recorder(NodeExecutionHook, GraphExecutionHook):
    """Hamilton's public hook classes; keeps every call with its arguments."""

    def __init__(self, log: list[Any] | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.log = log

    def _note(self, what: str, arguments: dict[str, Any]) -> None:
        self.calls.append((what, arguments))
        if self.log is not None:
            name = arguments.get("node_name")
            self.log.append(f"{what} {name}" if name else what)

    def run_before_graph_execution(self, **kwargs: Any) -> None:
        self._note("pre_graph", kwargs)

    def run_after_graph_execution(self, **kwargs: Any) -> None:
        self._note("post_graph", kwargs)

    def run_before_node_execution(self, **kwargs: Any) -> None:
        self._note("pre_node", kwargs)

    def run_after_node_execution(self, **kwargs: Any) -> None:
        self._note("post_node", kwargs)

    def of(self, what: str) -> list[dict[str, Any]]:
        return [arguments for name, arguments in self.calls if name == what]


@pytest.fixture
def graph(make_module: Any) -> Any:
    return make_module(GRAPH)


# ----------------------------------------------------------------------------- refusals


class Replaces(NodeExecutionMethod):
    def run_to_execute_node(self, **kwargs: Any) -> Any:
        raise AssertionError("never called")


class OnlyTasks(TaskExecutionHook, TaskGroupingHook):
    def run_before_task_execution(self, **kwargs: Any) -> None: ...
    def run_after_task_execution(self, **kwargs: Any) -> None: ...
    def run_after_task_grouping(self, **kwargs: Any) -> None: ...
    def run_after_task_expansion(self, **kwargs: Any) -> None: ...


class Edges(EdgeConnectionHook):
    def check_edge_types_match(self, type_from: type, type_to: type, **kwargs: Any) -> bool:
        return True

    def validate_input(self, node_type: type, input_value: Any, **kwargs: Any) -> bool:
        return True


class Builds(ResultBuilder):
    def build_result(self, **outputs: Any) -> Any:
        return outputs


@pytest.mark.parametrize(
    ("adapter", "reason"),
    [
        (Replaces(), "(hamilton.lifecycle.NodeExecutionMethod) is refused: it replaces node "),
        (Builds(), "(hamilton.lifecycle.ResultBuilder) is refused: it replaces the result"),
        (hamilton_base.DictResult(), "replaces the result (do_build_result)"),
        (hamilton_base.SimplePythonGraphAdapter(), "legacy Hamilton GraphAdapter"),
        (Edges(), "(hamilton.lifecycle.EdgeConnectionHook) is refused: it replaces"),
        (OnlyTasks(), "only task hooks"),
    ],
)
def test_adapters_replacing_execution_or_results_are_refused(
    graph: Any, adapter: object, reason: str
) -> None:
    with pytest.raises(ValueError, match="refused") as info:
        Driver(graph, adapters=[Recorder(), adapter])
    message = str(info.value)
    assert type(adapter).__qualname__ in message
    assert reason in message


def test_adapters_argument_is_checked(graph: Any) -> None:
    with pytest.raises(TypeError, match="sequence"):
        Driver(graph, adapters=Recorder())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="object is not a Hamilton lifecycle adapter"):
        Driver(graph, adapters=[object()])
    Driver(graph, adapters=[])  # an empty sequence is no adapter at all
    Driver(graph, adapters=None)


def test_adapter_with_task_hooks_and_node_hooks_is_accepted(graph: Any) -> None:
    class Mixed(NodeExecutionHook, TaskExecutionHook):
        def run_before_node_execution(self, **kwargs: Any) -> None: ...
        def run_after_node_execution(self, **kwargs: Any) -> None: ...
        def run_before_task_execution(self, **kwargs: Any) -> None:
            raise AssertionError("task hooks never fire here")

        def run_after_task_execution(self, **kwargs: Any) -> None:
            raise AssertionError("task hooks never fire here")

    plan = Driver(graph, adapters=[Mixed()]).prepare(["total"])
    assert loop_support.run(plan.execute(inputs={"x": 1})) == {"total": 21}


# ----------------------------------------------------------------------------- node hooks


async def test_node_hooks_fire_around_every_attempt_with_hamiltons_arguments(graph: Any) -> None:
    recorder = Recorder(graph.LOG)
    plan = Driver(graph, adapters=[recorder]).prepare(["total"])
    assert await plan.execute(inputs={"x": 1}) == {"total": 21}

    log = graph.LOG
    assert log[:4] == ["pre_graph", "pre_node base", "call base", "post_node base"]
    assert log[-2:] == ["release pool", "post_graph"]
    for node in ("pool", "total"):
        at = log.index(f"call {node}")
        assert log[at - 1] == f"pre_node {node}" and log[at + 1] == f"post_node {node}"
    flaky_steps = [step for step in graph.LOG if step.endswith("flaky")]
    assert flaky_steps == [
        "pre_node flaky",
        "call flaky",
        "post_node flaky",
        "pre_node flaky",
        "call flaky",
        "post_node flaky",
    ]
    assert not any("close_pool" in step for step in log)  # a release is not a node

    (pre_graph,) = recorder.of("pre_graph")
    run_id = pre_graph["run_id"]
    assert isinstance(run_id, str) and run_id
    before = [c for c in recorder.of("pre_node") if c["node_name"] == "flaky"]
    after = [c for c in recorder.of("post_node") if c["node_name"] == "flaky"]
    assert [c["attempt"] for c in before] == [1, 2]
    assert [c["attempt"] for c in after] == [1, 2]
    assert [c["success"] for c in after] == [False, True]
    assert isinstance(after[0]["error"], ConnectionError) and after[0]["result"] is None
    assert after[1]["error"] is None and after[1]["result"] == 20
    for call in (*before, *after):
        assert call["run_id"] == run_id
        assert call["task_id"] is None
        assert call["node_kwargs"] == {"base": 2}
        assert call["node_return_type"] is int
    (base_pre,) = (c for c in recorder.of("pre_node") if c["node_name"] == "base")
    assert base_pre["node_tags"]["team"] == "data"
    assert base_pre["node_input_types"] == {"x": int}


async def test_a_node_that_fails_for_good_is_reported_with_the_runs_exception(
    make_module: Any,
) -> None:
    module = make_module(
        """
        from sdax_hamilton import execution

        @execution(retries=1, initial_delay=0.0)
        def broken(x: int) -> int:
            raise ConnectionError("down")
        """
    )
    recorder = Recorder()
    plan = Driver(module, adapters=[recorder]).prepare(["broken"])
    with pytest.raises(ExecutionError) as info:
        await plan.execute(inputs={"x": 1})
    after = recorder.of("post_node")
    assert [c["success"] for c in after] == [False, False]
    (leaf,) = info.value.exceptions
    assert after[-1]["error"] is leaf  # the same object the run raises
    (post_graph,) = recorder.of("post_graph")
    assert post_graph["success"] is False
    assert post_graph["error"] is info.value
    assert post_graph["results"] is None


async def test_a_timed_out_attempt_reports_its_timeout_error(make_module: Any) -> None:
    module = make_module(
        """
        import asyncio
        from sdax_hamilton import execution

        CALLS = []

        @execution(timeout=0.05, retries=1, initial_delay=0.0)
        async def slow(x: int) -> int:
            CALLS.append(x)
            if len(CALLS) == 1:
                await asyncio.sleep(30)
            return x

        def other(x: int) -> int:
            return x

        async def sibling(x: int) -> int:
            await asyncio.sleep(0.01)
            return x
        """
    )
    for outputs in (["slow"], ["slow", "sibling"]):  # awaited inline / in tasks of its own
        module.CALLS.clear()
        recorder = Recorder()
        plan = Driver(module, adapters=[recorder]).prepare(outputs)
        result = await plan.execute(inputs={"x": 3})
        assert result["slow"] == 3
        after = [c for c in recorder.of("post_node") if c["node_name"] == "slow"]
        assert [c["success"] for c in after] == [False, True]
        assert type(after[0]["error"]) is TimeoutError
        assert [c["attempt"] for c in after] == [1, 2]


async def test_a_final_timeout_is_the_same_object_in_hook_and_run(make_module: Any) -> None:
    module = make_module(
        """
        import asyncio
        from sdax_hamilton import execution

        @execution(timeout=0.02)
        async def slow(x: int) -> int:
            await asyncio.sleep(30)
            return x
        """
    )
    recorder = Recorder()
    plan = Driver(module, adapters=[recorder]).prepare(["slow"])
    with pytest.raises(ExecutionError) as info:
        await plan.execute(inputs={"x": 3})
    (leaf,) = info.value.exceptions
    assert type(leaf) is TimeoutError
    (after,) = recorder.of("post_node")
    assert after["error"] is leaf


class BaseLevel(lifecycle_base.BasePreNodeExecute, lifecycle_base.BasePostNodeExecute):
    """Hamilton's base hooks (what HamiltonTracker uses): they get Hamilton's Node."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def pre_node_execute(
        self, *, run_id: str, node_: Any, kwargs: dict[str, Any], task_id: str | None = None
    ) -> None:
        self.calls.append(("pre", {"run_id": run_id, "node": node_, "kwargs": kwargs}))

    def post_node_execute(
        self,
        *,
        run_id: str,
        node_: Any,
        kwargs: dict[str, Any],
        success: bool,
        error: Exception | None,
        result: Any,
        task_id: str | None = None,
    ) -> None:
        self.calls.append(("post", {"node": node_, "success": success, "result": result}))


async def test_base_level_node_hooks_get_hamiltons_node(graph: Any) -> None:
    hook = BaseLevel()
    plan = Driver(graph, adapters=[hook]).prepare(["total"])
    await plan.execute(inputs={"x": 1})
    names = [(what, c["node"].name) for what, c in hook.calls]
    assert names.count(("pre", "flaky")) == 2
    assert names.count(("post", "flaky")) == 2
    (total,) = (c for what, c in hook.calls if what == "pre" and c["node"].name == "total")
    assert sorted(dep.name for dep in total["node"].dependencies) == ["flaky", "pool"]
    assert total["kwargs"]["flaky"] == 20


# ----------------------------------------------------------------------------- async hooks


class AsyncHooks(
    lifecycle_base.BasePreGraphExecuteAsync,
    lifecycle_base.BasePostGraphExecuteAsync,
    lifecycle_base.BasePreNodeExecuteAsync,
    lifecycle_base.BasePostNodeExecuteAsync,
):
    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.loops: set[int] = set()
        self.run_ids: list[str] = []

    async def pre_graph_execute(self, *, run_id: str, **kwargs: Any) -> None:
        self.loops.add(id(asyncio.get_running_loop()))
        await asyncio.sleep(0.001)
        self.run_ids.append(run_id)
        self.log.append("pre_graph")

    async def post_graph_execute(self, *, run_id: str, **kwargs: Any) -> None:
        await asyncio.sleep(0.001)
        self.log.append("post_graph")

    async def pre_node_execute(self, *, node_: Any, **kwargs: Any) -> None:
        self.loops.add(id(asyncio.get_running_loop()))
        await asyncio.sleep(0.001)  # the node must not start before this hook is done
        self.log.append(f"pre_node {node_.name}")

    async def post_node_execute(self, *, node_: Any, success: bool, **kwargs: Any) -> None:
        await asyncio.sleep(0.001)
        self.log.append(f"post_node {node_.name} {success}")


async def test_async_hooks_are_awaited_on_the_callers_loop(graph: Any) -> None:
    hooks = AsyncHooks(graph.LOG)
    plan = Driver(graph, adapters=[hooks]).prepare(["total"])
    assert await plan.execute(inputs={"x": 1}) == {"total": 21}
    assert hooks.loops == {id(asyncio.get_running_loop())}
    log = graph.LOG
    assert log[0] == "pre_graph" and log[-1] == "post_graph"
    for node in ("base", "pool", "total"):  # (nodes run concurrently: per node order)
        steps = [s for s in log if s.split(" ")[1:2] == [node] and "release" not in s]
        assert steps == [f"pre_node {node}", f"call {node}", f"post_node {node} True"]
    assert [s for s in log if "flaky" in s] == [
        "pre_node flaky",
        "call flaky",
        "post_node flaky False",
        "pre_node flaky",
        "call flaky",
        "post_node flaky True",
    ]
    assert log.index("release pool") < log.index("post_graph")


# ----------------------------------------------------------------------------- graph hooks


async def test_graph_hooks_fire_once_per_run_with_distinct_run_ids(make_module: Any) -> None:
    module = make_module(
        """
        import asyncio

        async def value(x: int) -> int:
            await asyncio.sleep(0.01)
            return x
        """
    )
    recorder = Recorder()
    plan = Driver(module, adapters=[recorder]).prepare(["value"])
    results = await asyncio.gather(*(plan.execute(inputs={"x": i}) for i in range(5)))
    assert [r["value"] for r in results] == list(range(5))
    pre = recorder.of("pre_graph")
    post = recorder.of("post_graph")
    assert len(pre) == len(post) == 5
    run_ids = {c["run_id"] for c in pre}
    assert len(run_ids) == 5
    assert {c["run_id"] for c in post} == run_ids
    for call in pre:
        assert call["final_vars"] == ["value"]
        assert call["overrides"] == {}
        assert list(call["execution_path"]) == ["value"]
    by_run = {c["run_id"]: c["inputs"]["x"] for c in pre}
    for call in recorder.of("post_node"):
        assert call["result"] == by_run[call["run_id"]]
    for call in post:
        assert call["success"] is True and call["error"] is None
        assert call["results"] == {"value": by_run[call["run_id"]]}


async def test_open_body_and_releases_sit_inside_the_graph_hooks(graph: Any) -> None:
    recorder = Recorder(graph.LOG)
    plan = Driver(graph, adapters=[recorder]).prepare(["total"])
    async with plan.open(inputs={"x": 1}) as results:
        graph.LOG.append("body")
        assert "post_graph" not in graph.LOG
    assert results == {"total": 21}
    log = graph.LOG
    assert log.index("post_node total") < log.index("body") < log.index("release pool")
    assert log[-1] == "post_graph"
    (post,) = recorder.of("post_graph")
    assert post["results"] == {"total": 21}


async def test_body_exception_is_the_runs_error_in_the_post_graph_hook(graph: Any) -> None:
    recorder = Recorder(graph.LOG)
    plan = Driver(graph, adapters=[recorder]).prepare(["total"])
    problem = LookupError("in the body")
    with pytest.raises(LookupError) as info:
        async with plan.open(inputs={"x": 1}):
            raise problem
    assert info.value is problem
    (post,) = recorder.of("post_graph")
    assert post["success"] is False and post["error"] is problem
    assert graph.LOG.index("release pool") < graph.LOG.index("post_graph")


def test_shape_errors_raise_before_any_hook(graph: Any) -> None:
    recorder = Recorder()
    plan = Driver(graph, adapters=[recorder]).prepare(["total"])
    with pytest.raises(ValueError, match="Input shape mismatch"):
        loop_support.run(plan.execute(inputs={}))
    assert recorder.calls == []


# ----------------------------------------------------------------------------- raising hooks


class Raising(NodeExecutionHook, GraphExecutionHook):
    def __init__(
        self, where: set[str], exc: type[BaseException] = RuntimeError, node: str | None = None
    ) -> None:
        self.where = where
        self.exc = exc
        self.node = node

    def _maybe(self, where: str, node: str | None = None) -> None:
        if where in self.where and (self.node is None or node == self.node):
            raise self.exc(f"hook {where} broke")

    def run_before_graph_execution(self, **kwargs: Any) -> None:
        self._maybe("pre_graph")

    def run_after_graph_execution(self, **kwargs: Any) -> None:
        self._maybe("post_graph")

    def run_before_node_execution(self, *, node_name: str, **kwargs: Any) -> None:
        self._maybe("pre_node", node_name)

    def run_after_node_execution(self, *, node_name: str, **kwargs: Any) -> None:
        self._maybe("post_node", node_name)


async def test_a_raising_hook_is_logged_and_ignored(
    graph: Any, caplog: pytest.LogCaptureFixture
) -> None:
    everywhere = {"pre_graph", "post_graph", "pre_node", "post_node"}
    recorder = Recorder()
    plan = Driver(graph, adapters=[Raising(everywhere), recorder]).prepare(["total"])
    with caplog.at_level(logging.ERROR, logger="sdax_hamilton"), instant_retries():
        assert await plan.execute(inputs={"x": 1}) == {"total": 21}
    # The other adapter still saw everything; the run's rules are untouched.
    assert len(recorder.of("pre_node")) == len(recorder.of("post_node")) == 5
    assert graph.LOG.count("call flaky") == 2
    assert graph.LOG.count("release pool") == 1
    messages = [r.getMessage() for r in caplog.records if "adapter" in r.getMessage()]
    assert any(
        "Raising raised RuntimeError in pre_node_execute of node 'base'" in m for m in messages
    )
    assert any("in pre_graph_execute" in m for m in messages)
    assert any("in post_graph_execute" in m for m in messages)


async def test_a_hook_raising_keyboard_interrupt_stops_the_run_after_releases(
    graph: Any,
) -> None:
    recorder = Recorder(graph.LOG)
    raising = Raising({"post_node"}, KeyboardInterrupt, node="total")
    plan = Driver(graph, adapters=[recorder, raising]).prepare(["total"])
    with pytest.raises(KeyboardInterrupt):
        await plan.execute(inputs={"x": 1})
    # Like a node raising it: the run stops, and the acquired resource is still released,
    # before the graph hook reports the end of the run.
    assert graph.LOG.count("call pool") == 1
    assert graph.LOG.count("release pool") == 1
    assert graph.LOG.index("call total") < graph.LOG.index("release pool")
    assert graph.LOG.index("release pool") < graph.LOG.index("post_graph")
    (post,) = recorder.of("post_graph")
    assert isinstance(post["error"], KeyboardInterrupt)


@pytest.mark.parametrize("later", ["sync", "async"])
@pytest.mark.parametrize("where", ["pre_node", "post_node"])
async def test_an_adapter_after_an_interrupting_one_still_sees_the_attempt(
    graph: Any, where: str, later: str
) -> None:
    # The first adapter raises KeyboardInterrupt in a node hook of `total`; the adapter after
    # it still sees that hook (sync hooks, or async hooks that are awaited), and the
    # interrupt reaches the caller once every hook of the attempt has run.
    raising = Raising({where}, KeyboardInterrupt, node="total")
    seen = Recorder(graph.LOG) if later == "sync" else AsyncHooks(graph.LOG)
    plan = Driver(graph, adapters=[raising, seen]).prepare(["total"])
    with pytest.raises(KeyboardInterrupt, match=f"hook {where} broke"):
        await plan.execute(inputs={"x": 1})
    if later == "sync":
        assert [a["node_name"] for a in seen.of(where)].count("total") == 1  # type: ignore[union-attr]
    else:
        assert any(s.startswith(f"{where} total") for s in graph.LOG)
    assert graph.LOG.count("release pool") == 1


async def test_release_order_holds_with_hooks_raising_everywhere(make_module: Any) -> None:
    module = make_module(
        """
        from sdax_hamilton import Acquisition, shutdown

        LOG = []

        def outer(x: int) -> int:
            return x

        def inner(outer: int) -> int:
            return outer + 1

        @shutdown(of=outer)
        def close_outer(acq: Acquisition[int]) -> None:
            LOG.append("outer")

        @shutdown(of=inner)
        def close_inner(acq: Acquisition[int]) -> None:
            LOG.append("inner")

        def use(inner: int) -> int:
            return inner
        """
    )
    raising = Raising({"pre_graph", "post_graph", "pre_node", "post_node"})
    plan = Driver(module, adapters=[raising]).prepare(["use"])
    assert await plan.execute(inputs={"x": 1}) == {"use": 2}
    assert module.LOG == ["inner", "outer"]


# ----------------------------------------------------------------------------- build time


def test_graph_construction_hook_runs_once_at_driver(graph: Any) -> None:
    seen: list[Any] = []

    class Construction(GraphConstructionHook):
        def run_after_graph_construction(self, *, graph: Any, config: Any, **kwargs: Any) -> None:
            seen.append((graph, config))

    driver = Driver(graph, config={"unused": 1}, adapters=[Construction()])
    assert len(seen) == 1
    hamilton_graph, config = seen[0]
    names = {node.name for node in hamilton_graph.nodes}
    assert {"base", "flaky", "pool", "total", "x"} <= names
    assert "close_pool" not in names  # a release is not a Hamilton node
    assert config == {"unused": 1}
    driver.prepare(["total"])
    assert len(seen) == 1


def test_static_validator_failures_raise_at_driver(graph: Any) -> None:
    class NeedsOwner(StaticValidator):
        def run_to_validate_node(self, *, node: Any, **kwargs: Any) -> tuple[bool, str | None]:
            if node.is_external_input or "team" in node.tags:
                return True, None
            return False, "has no team tag"

    with pytest.raises(ValidationException) as info:
        Driver(graph, adapters=[NeedsOwner()])
    message = str(info.value)
    assert "flaky: has no team tag" in message
    assert "base:" not in message
    assert "NeedsOwner" in message


def test_static_graph_validator_passing_lets_the_driver_build(graph: Any) -> None:
    calls: list[int] = []

    class Size(StaticValidator):
        def run_to_validate_graph(self, graph: Any, **kwargs: Any) -> tuple[bool, str | None]:
            calls.append(len(graph.nodes))
            return True, None

    Driver(graph, adapters=[Size()])
    assert calls and calls[0] >= 4


async def test_async_construction_and_ainit_are_awaited_once_before_the_first_run(
    graph: Any,
) -> None:
    log: list[str] = []

    class Async(lifecycle_base.BasePostGraphConstructAsync, lifecycle_base.BasePreGraphExecute):
        async def post_graph_construct(self, *, graph: Any, modules: Any, config: Any) -> None:
            await asyncio.sleep(0)
            log.append(f"construct {len(graph.nodes)}")

        async def ainit(self) -> None:
            log.append("ainit")

        def pre_graph_execute(self, **kwargs: Any) -> None:
            log.append("pre_graph")

    driver = Driver(graph, adapters=[Async()])
    assert log == []
    plan = driver.prepare(["total"])
    await asyncio.gather(plan.execute(inputs={"x": 1}), plan.execute(inputs={"x": 2}))
    await plan.execute(inputs={"x": 3})
    assert log[0].startswith("construct ")
    assert log[1:] == ["ainit", "pre_graph", "pre_graph", "pre_graph"]


def test_without_adapters_nodes_are_called_directly(graph: Any) -> None:
    """No adapter, no cost: the plan holds the node functions themselves, no wrapper."""
    plan = Driver(graph).prepare(["total"])
    program = plan._program
    assert program.adapters is None
    calls = {runtime.name: runtime.call for runtime in program.runtimes}
    # (the Driver holds copies of the functions: same code, no wrapper around them)
    assert calls["total"].__code__ is graph.total.__code__
    assert calls["base"].__code__ is graph.base.__code__
    hooked = Driver(graph, adapters=[Recorder()]).prepare(["total"])._program
    total = {runtime.name: runtime.call for runtime in hooked.runtimes}["total"]
    assert getattr(total, "__code__", None) is not graph.total.__code__


async def test_a_failing_ainit_fails_the_run_before_anything_ran_and_is_retried(
    graph: Any,
) -> None:
    attempts: list[str] = []

    class Flaky(lifecycle_base.BasePreGraphExecute):
        async def ainit(self) -> None:
            attempts.append("ainit")
            if len(attempts) == 1:
                raise ConnectionError("tracking server down")

        def pre_graph_execute(self, **kwargs: Any) -> None:
            attempts.append("pre_graph")

    plan = Driver(graph, adapters=[Flaky()]).prepare(["total"])
    with pytest.raises(ConnectionError):
        await plan.execute(inputs={"x": 1})
    assert graph.LOG == []  # nothing ran
    assert await plan.execute(inputs={"x": 1}) == {"total": 21}
    assert attempts == ["ainit", "ainit", "pre_graph"]


async def test_a_run_cancelled_in_a_pre_graph_hook_still_closes_the_graph_hooks(
    graph: Any,
) -> None:
    first = Recorder()
    inside = asyncio.Event()

    class Slow(lifecycle_base.BasePreGraphExecuteAsync):
        async def pre_graph_execute(self, **kwargs: Any) -> None:
            inside.set()
            await asyncio.sleep(30)

    plan = Driver(graph, adapters=[first, Slow()]).prepare(["total"])
    task = asyncio.ensure_future(plan.execute(inputs={"x": 1}))
    async with asyncio.timeout(5):
        await inside.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert graph.LOG == []  # no node started
    (post,) = first.of("post_graph")
    assert post["success"] is False and isinstance(post["error"], asyncio.CancelledError)


async def test_a_timeout_during_an_async_pre_node_hook_keeps_hooks_paired(
    make_module: Any,
) -> None:
    """The attempt's timeout lands in a slow async pre-node hook: the function is not
    called, every adapter sees the attempt start and end (with the TimeoutError), and the
    retry runs normally."""
    module = make_module(
        """
        from sdax_hamilton import execution

        CALLS = []

        @execution(timeout=0.05, retries=1, initial_delay=0.0)
        async def guarded(x: int) -> int:
            CALLS.append(x)
            return x
        """
    )
    slow_once: list[int] = []

    class Slow(lifecycle_base.BasePreNodeExecuteAsync):
        async def pre_node_execute(self, **kwargs: Any) -> None:
            slow_once.append(1)
            if len(slow_once) == 1:
                await asyncio.sleep(30)

    recorder = Recorder()
    plan = Driver(module, adapters=[Slow(), recorder]).prepare(["guarded"])
    assert await plan.execute(inputs={"x": 4}) == {"guarded": 4}
    assert module.CALLS == [4]  # the first attempt never reached the function
    before = recorder.of("pre_node")
    after = recorder.of("post_node")
    assert [c["attempt"] for c in before] == [c["attempt"] for c in after] == [1, 2]
    assert type(after[0]["error"]) is TimeoutError and after[1]["success"] is True


async def test_adapters_and_observers_see_the_same_attempts(graph: Any) -> None:
    from sdax_hamilton import RunReport

    recorder = Recorder()
    report = RunReport()
    plan = Driver(graph, adapters=[recorder]).prepare(["total"])
    await plan.execute(inputs={"x": 1}, observer=report)
    attempts = {name: node.attempts for name, node in report.nodes.items()}
    hooked: dict[str, int] = {}
    for call in recorder.of("post_node"):
        hooked[call["node_name"]] = hooked.get(call["node_name"], 0) + 1
    assert hooked == attempts == {"base": 1, "flaky": 2, "pool": 1, "total": 1}
