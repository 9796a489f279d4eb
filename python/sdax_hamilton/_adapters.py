"""Hamilton lifecycle adapters on this package's ``Driver`` (see docs/adapters.md).

``Driver(*modules, adapters=[...])`` accepts objects built on ``hamilton.lifecycle``. This
module sorts them once, at ``Driver(...)``, by the lifecycle hooks, methods and validators
Hamilton itself finds on them (``hamilton.lifecycle.base.LifecycleAdapterSet``):

* build-time hooks and validators (``pre_do_anything``, ``validate_node``,
  ``validate_graph``, ``post_graph_construct``) run while the Driver is built, over a
  Hamilton ``FunctionGraph`` of the Driver's nodes, as Hamilton's own driver runs them;
  an ``async`` ``post_graph_construct`` and the adapters' ``ainit`` are awaited once, on the
  caller's loop, before the first run's graph hooks (as Hamilton's ``AsyncDriver.ainit``);
* graph execution hooks bracket each ``execute()`` / ``open()`` run (:class:`Adapters.open`);
* node execution hooks run around every call of a node's function, that is each attempt
  (:func:`Adapters.runtimes_for` wraps the calls of one run);
* lifecycle *methods* (they replace node execution, type checks or the result) are
  refused with a ``ValueError`` naming the adapter class and the reason; task hooks never
  fire (this Driver runs no Hamilton tasks), so an adapter made of task hooks only is
  refused too.

Hooks of a run never change the run: an ``Exception`` a run hook raises is logged on the
``sdax_hamilton`` logger and ignored. ``KeyboardInterrupt`` / ``SystemExit`` /
``CancelledError`` are not caught; inside an attempt they act exactly as if the node had
raised them. Build-time hooks and validators are different: nothing runs yet, so what they
raise (or a failed validation) propagates out of ``Driver(...)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextvars import ContextVar
from types import CoroutineType, FunctionType, ModuleType
from typing import Any, Final

from ._executor import TIMEOUT_MESSAGE, NodeRuntime
from ._observe import GIVEN_RUN_ID, new_run_id

__all__ = ["Adapters", "check_adapters", "pre_do_anything"]

logger = logging.getLogger("sdax_hamilton")

# Lifecycle methods replace part of what this Driver does itself: refused, with the reason.
_REFUSED_METHODS: Final[Mapping[str, str]] = {
    "do_node_execute": (
        "it replaces node execution (do_node_execute), while this Driver calls every node "
        "itself under its execution policy (retries, timeouts, releases)"
    ),
    "do_remote_execute": (
        "it replaces node execution (do_remote_execute), while this Driver calls every node "
        "itself under its execution policy (retries, timeouts, releases)"
    ),
    "do_build_result": (
        "it replaces the result (do_build_result), while execute() returns the requested "
        "outputs as a dict and open() yields them"
    ),
    "do_validate_input": (
        "it replaces input type checks (do_validate_input), while this Driver checks inputs "
        "and outputs itself"
    ),
    "do_check_edge_types_match": (
        "it replaces edge type checks (do_check_edge_types_match), while this Driver checks "
        "edges itself"
    ),
}
# Hooks of Hamilton's task-based execution (Parallelizable/Collect): never fire here.
_TASK_HOOKS: Final = frozenset(
    {
        "post_task_group",
        "post_task_expand",
        "pre_task_submission",
        "pre_task_execute",
        "post_task_execute",
        "post_task_return",
    }
)
_BUILD_HOOKS: Final = frozenset({"pre_do_anything", "post_graph_construct"})
_RUN_HOOKS: Final = frozenset(
    {"pre_graph_execute", "post_graph_execute", "pre_node_execute", "post_node_execute"}
)


def _class_name(obj: object) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _accepts_extra_keywords(fn: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def _lifecycle_set(adapters: Sequence[object]) -> Any:
    from hamilton.lifecycle.base import LifecycleAdapterSet  # type: ignore[import-untyped, unused-ignore]

    return LifecycleAdapterSet(*adapters)


def _refused_kinds() -> tuple[type, ...]:
    """Hamilton's public adapter classes whose methods replace what this Driver does."""
    from hamilton.lifecycle import api  # type: ignore[import-untyped, unused-ignore]

    return (api.NodeExecutionMethod, api.ResultBuilder, api.EdgeConnectionHook)


def check_adapters(adapters: object) -> tuple[object, ...]:
    """Validate ``Driver(adapters=...)``: ``None`` or a sequence of lifecycle adapters.

    Returns the adapters in order, duplicates (by identity) dropped, as Hamilton does.
    ``TypeError`` for anything that is not a Hamilton lifecycle adapter; ``ValueError``
    naming the class and the reason for an adapter that would replace execution or the
    result, or of which nothing would ever run here.
    """
    if adapters is None:
        return ()
    if isinstance(adapters, (str, bytes, bytearray)) or not isinstance(adapters, Sequence):
        raise TypeError(
            "adapters must be a sequence (e.g. a list) of Hamilton lifecycle adapters, "
            f"not {type(adapters).__name__}"
        )
    from hamilton.lifecycle.api import GraphAdapter  # type: ignore[import-untyped, unused-ignore]

    unique: list[object] = []
    for adapter in adapters:
        if any(adapter is seen for seen in unique):
            continue
        found = _lifecycle_set([adapter])
        hooks = set(found.sync_hooks) | set(found.async_hooks)
        methods = set(found.sync_methods) | set(found.async_methods)
        validators = set(found.sync_validators)
        if not (hooks or methods or validators):
            raise TypeError(
                f"adapters: {type(adapter).__name__} is not a Hamilton lifecycle adapter "
                "(it implements no hamilton.lifecycle hook, method or validator)"
            )
        name = _class_name(adapter)
        if name == "hamilton.caching.adapter.HamiltonCacheAdapter":
            raise ValueError(
                f"Adapter {name} is refused as an adapter: its node execution is Hamilton's "
                "synchronous one; pass it as Driver(..., cache=adapter), which uses its "
                "stores and behaviours in async runs (docs/caching.md)"
            )
        if isinstance(adapter, GraphAdapter):
            raise ValueError(
                f"Adapter {name} is refused: it is a legacy Hamilton GraphAdapter, which "
                "replaces node execution and result building; this Driver calls every node "
                "itself under its execution policy and returns the outputs as a dict"
            )
        if methods:
            reasons = [
                _REFUSED_METHODS.get(method, f"it replaces Hamilton's {method} step")
                for method in sorted(methods)
            ]
            kinds = [
                f"hamilton.lifecycle.{kind.__name__}"
                for kind in _refused_kinds()
                if isinstance(adapter, kind)
            ]
            what = f" ({', '.join(kinds)})" if kinds else ""
            raise ValueError(f"Adapter {name}{what} is refused: {'; '.join(reasons)}")
        if not (hooks - _TASK_HOOKS) and not validators:
            raise ValueError(
                f"Adapter {name} is refused: it has only task hooks "
                f"({', '.join(sorted(hooks))}), which fire in Hamilton's task-based "
                "(Parallelizable/Collect) execution; this Driver runs no tasks, so none of "
                "it would ever run"
            )
        unknown = hooks - _TASK_HOOKS - _BUILD_HOOKS - _RUN_HOOKS
        if unknown:
            raise ValueError(
                f"Adapter {name} is refused: its hooks {sorted(unknown)} are unknown to this Driver"
            )
        unique.append(adapter)
    return tuple(unique)


def pre_do_anything(adapters: Sequence[object]) -> None:
    """Hamilton's first hook, run before anything else when a Driver is built."""
    lifecycle = _lifecycle_set(adapters)
    if lifecycle.does_hook("pre_do_anything", is_async=False):
        lifecycle.call_all_lifecycle_hooks_sync("pre_do_anything")


@dataclasses.dataclass(frozen=True, slots=True)
class _Hook:
    """One hook of one adapter, with how to call it."""

    adapter: object
    name: str
    """The lifecycle hook (``pre_node_execute`` ...), for logs."""
    call: Callable[..., Any]
    """The bound method to call (the user-facing one for Hamilton's public hook classes)."""
    public: bool
    """``call`` is ``run_before_node_execution`` & co., which take the public arguments."""
    extra: bool
    """``call`` accepts extra keyword arguments: it is also given ``attempt``."""
    is_async: bool
    """``call`` is a coroutine function: awaited."""


def _node_hooks(adapters: Sequence[object], hook: str, public: str, base: Any) -> list[_Hook]:
    """The ``hook`` of every adapter implementing it, calling ``public`` where it can.

    Hamilton's public hook classes (``NodeExecutionHook``, ``GraphExecutionHook``) bridge
    their base hook to a public method without the extra arguments; calling the public
    method directly lets a hook that accepts ``**kwargs`` be given the attempt number.
    """
    found = _lifecycle_set(adapters)
    hooks: list[_Hook] = []
    implementers = [*found.sync_hooks.get(hook, ()), *found.async_hooks.get(hook, ())]
    for adapter in adapters:  # in the order given
        if not any(adapter is item for item in implementers):
            continue
        bridged = (
            isinstance(adapter, base)
            and getattr(type(adapter), hook, None) is getattr(base, hook)
            and callable(getattr(adapter, public, None))
        )
        call = getattr(adapter, public if bridged else hook)
        hooks.append(
            _Hook(
                adapter,
                hook,
                call,
                bridged,
                _accepts_extra_keywords(call),
                inspect.iscoroutinefunction(call),
            )
        )
    return hooks


def _log_hook_error(
    hook: _Hook, exc: Exception, subject: str, run_id: str, node: str | None = None
) -> None:
    logger.error(
        "adapter %s raised %s in %s%s; ignored",
        _class_name(hook.adapter),
        type(exc).__qualname__,
        hook.name,
        subject,
        exc_info=exc,
        extra={"run_id": run_id, "node": node},
    )


def _reported(exc: BaseException) -> BaseException:
    """The exception an attempt ends with, as node hooks (and the driver) see it.

    The driver cancels a timed-out attempt with ``TIMEOUT_MESSAGE``; the attempt then ends
    with a ``TimeoutError``, so the post-node hooks and the run's failure record hold the
    same ``TimeoutError`` object.
    """
    if isinstance(exc, asyncio.CancelledError) and exc.args == (TIMEOUT_MESSAGE,):
        return TimeoutError()
    return exc


@dataclasses.dataclass(slots=True)
class _RunState:
    """What the node hooks of one run share: its id and the attempts made per node."""

    run_id: str
    attempts: dict[str, int] = dataclasses.field(default_factory=dict)


_RUN: Final[ContextVar[_RunState]] = ContextVar("sdax_hamilton_adapter_run")
"""Set by :meth:`Adapters.open` around a run; node tasks see it (they run in copies of the
caller's context), so a plan's wrapped calls are built once, not per run."""


class NodeHooks:
    """The node hooks of one Driver's adapters around each attempt (``_NodeCall``): the
    pre-node hooks, the call, the post-node hooks (also after a failure), in the order the
    adapters were given. ``attempt`` is an attempt as a coroutine (an async function or
    async hooks); ``before_sync`` / ``after_sync`` serve attempts that stay synchronous."""

    __slots__ = ("post_node", "pre_node", "sync")

    def __init__(self, pre_node: list[_Hook], post_node: list[_Hook]) -> None:
        self.pre_node = pre_node
        self.post_node = post_node
        self.sync = not any(h.is_async for h in (*pre_node, *post_node))
        """No node hook needs awaiting."""

    async def attempt(
        self, run_id: str, node: _NodeCall, kwargs: dict[str, Any], attempt: int
    ) -> Any:
        """One attempt: pre-node hooks, the call, post-node hooks (also after a failure)."""
        sync = self.sync  # then no hook needs awaiting: no coroutine for them
        try:
            if sync:
                self.before_sync(run_id, node, kwargs, attempt)
            else:
                await self.before(run_id, node, kwargs, attempt)
            result = node._call(**kwargs)
            if type(result) is CoroutineType or inspect.isawaitable(result):
                result = await result
        except BaseException as exc:
            error = _reported(exc)
            if sync:
                self.after_sync(run_id, node, kwargs, attempt, False, error, None)
            else:
                await self.after(run_id, node, kwargs, attempt, False, error, None)
            if error is not exc:
                raise error from None
            raise
        if sync:
            self.after_sync(run_id, node, kwargs, attempt, True, None, result)
        else:
            await self.after(run_id, node, kwargs, attempt, True, None, result)
        return result

    async def finish(
        self, run_id: str, node: _NodeCall, kwargs: dict[str, Any], attempt: int, aw: Any
    ) -> Any:
        try:
            result = await aw
        except BaseException as exc:
            error = _reported(exc)
            self.after_sync(run_id, node, kwargs, attempt, False, error, None)
            if error is not exc:
                raise error from None
            raise
        self.after_sync(run_id, node, kwargs, attempt, True, None, result)
        return result

    @staticmethod
    def _pre_arguments(
        hook: _Hook, run_id: str, node: _NodeCall, kwargs: dict[str, Any], attempt: int
    ) -> dict[str, Any]:
        if hook.public:
            arguments: dict[str, Any] = {
                "node_name": node._name,
                "node_tags": node._tags,
                "node_kwargs": kwargs,
                "node_return_type": node._type,
                "task_id": None,
                "run_id": run_id,
                "node_input_types": node._input_types,
            }
        else:
            arguments = {"run_id": run_id, "node_": node._node, "kwargs": kwargs, "task_id": None}
        if hook.extra:
            arguments["attempt"] = attempt
        return arguments

    @staticmethod
    def _post_arguments(
        hook: _Hook,
        run_id: str,
        node: _NodeCall,
        kwargs: dict[str, Any],
        attempt: int,
        success: bool,
        error: BaseException | None,
        result: Any,
    ) -> dict[str, Any]:
        if hook.public:
            arguments: dict[str, Any] = {
                "node_name": node._name,
                "node_tags": node._tags,
                "node_kwargs": kwargs,
                "node_return_type": node._type,
                "result": result,
                "error": error,
                "success": success,
                "task_id": None,
                "run_id": run_id,
            }
        else:
            arguments = {
                "run_id": run_id,
                "node_": node._node,
                "kwargs": kwargs,
                "success": success,
                "error": error,
                "result": result,
                "task_id": None,
            }
        if hook.extra:
            arguments["attempt"] = attempt
        return arguments

    def before_sync(
        self, run_id: str, node: _NodeCall, kwargs: dict[str, Any], attempt: int
    ) -> None:
        errors = _HookErrors(run_id, node._name, attempt)
        for hook in self.pre_node:
            with errors.of(hook):
                hook.call(**self._pre_arguments(hook, run_id, node, kwargs, attempt))
        errors.raise_first()

    async def before(
        self, run_id: str, node: _NodeCall, kwargs: dict[str, Any], attempt: int
    ) -> None:
        errors = _HookErrors(run_id, node._name, attempt)
        for hook in self.pre_node:
            with errors.of(hook):
                outcome = hook.call(**self._pre_arguments(hook, run_id, node, kwargs, attempt))
                if hook.is_async:
                    await outcome
        errors.raise_first()

    def after_sync(
        self,
        run_id: str,
        node: _NodeCall,
        kwargs: dict[str, Any],
        attempt: int,
        success: bool,
        error: BaseException | None,
        result: Any,
    ) -> None:
        errors = _HookErrors(run_id, node._name, attempt)
        for hook in self.post_node:
            arguments = self._post_arguments(
                hook, run_id, node, kwargs, attempt, success, error, result
            )
            with errors.of(hook):
                hook.call(**arguments)
        errors.raise_first()

    async def after(
        self,
        run_id: str,
        node: _NodeCall,
        kwargs: dict[str, Any],
        attempt: int,
        success: bool,
        error: BaseException | None,
        result: Any,
    ) -> None:
        errors = _HookErrors(run_id, node._name, attempt)
        for hook in self.post_node:
            arguments = self._post_arguments(
                hook, run_id, node, kwargs, attempt, success, error, result
            )
            with errors.of(hook):
                outcome = hook.call(**arguments)
                if hook.is_async:
                    await outcome
        errors.raise_first()


class _HookErrors:
    """What the node hooks of one attempt raised: an ``Exception`` is logged and ignored; the
    first other exception (a cancellation such as the attempt's timeout, a
    ``KeyboardInterrupt``) is kept and re-raised once every hook has run, so that each adapter
    that saw the start of an attempt sees its end too."""

    __slots__ = ("_attempt", "_hook", "_interrupted", "_node", "_run_id")

    def __init__(self, run_id: str, node: str, attempt: int) -> None:
        self._run_id = run_id
        self._node = node
        self._attempt = attempt
        self._hook: _Hook | None = None
        self._interrupted: BaseException | None = None

    def of(self, hook: _Hook) -> _HookErrors:
        self._hook = hook
        return self

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> bool:
        hook, self._hook = self._hook, None
        if exc is None:
            return False
        if isinstance(exc, Exception):
            if hook is not None:
                where = f" of node {self._node!r} (attempt {self._attempt})"
                _log_hook_error(hook, exc, where, self._run_id, self._node)
        elif self._interrupted is None:
            self._interrupted = exc
        return True

    def raise_first(self) -> None:
        interrupted, self._interrupted = self._interrupted, None
        if interrupted is not None:
            try:
                raise interrupted
            finally:
                # The traceback holds this frame: no cycle back to the exception.
                del interrupted


class _NodeCall:
    """The call of one node, wrapped in the node hooks (built once per plan and node).

    Every hook of an attempt runs where the node's function runs: in the attempt's task (or
    inline in the run's forward task), so a hook that sets context (an OpenTelemetry span)
    sees the same context before and after, and the function runs inside it. When the
    function is synchronous and every node hook is too, the attempt stays synchronous.
    """

    __slots__ = ("_call", "_hooks", "_input_types", "_name", "_node", "_sync", "_tags", "_type")

    def __init__(self, hooks: NodeHooks, node: Any, call: Callable[..., Any]) -> None:
        self._hooks = hooks
        self._node = node
        self._name: str = node.name
        self._call = call
        self._input_types = {key: value[0] for key, value in node.input_types.items()}
        self._tags: dict[str, Any] = node.tags
        self._type: Any = node.type
        # Synchronous attempts only for plain functions that are not coroutine functions
        # (a ``functools.partial`` or another callable may return a coroutine).
        self._sync = (
            hooks.sync and type(call) is FunctionType and not inspect.iscoroutinefunction(call)
        )

    def renamed(self, name: str) -> _NodeCall:
        """The same call for the node ``name``: a fan-out item's node (``node[i]``,
        docs/fanout.md), whose hooks and attempts are its own."""
        other = copy.copy(self)
        other._name = name
        return other

    def __call__(self, **kwargs: Any) -> Any:
        state = _RUN.get()
        name = self._name
        attempt = state.attempts[name] = state.attempts.get(name, 0) + 1
        if not self._sync:
            return self._hooks.attempt(state.run_id, self, kwargs, attempt)
        hooks = self._hooks
        run_id = state.run_id
        hooks.before_sync(run_id, self, kwargs, attempt)
        try:
            result = self._call(**kwargs)
        except BaseException as exc:
            hooks.after_sync(run_id, self, kwargs, attempt, False, exc, None)
            raise
        if type(result) is CoroutineType or inspect.isawaitable(result):
            # A plain function returning an awaitable: this attempt ends when it does, and
            # later attempts run as coroutines, hooks and all, where the awaitable runs.
            self._sync = False
            return hooks.finish(run_id, self, kwargs, attempt, result)
        hooks.after_sync(run_id, self, kwargs, attempt, True, None, result)
        return result

    def rejected(self, kwargs: dict[str, Any], error: BaseException) -> Any:
        """An attempt a bulkhead or a circuit breaker refused without calling the function
        (docs/resilience.md): the node hooks see it as an attempt that failed with
        ``error``. Raises ``error`` (or returns an awaitable that does, with async hooks)."""

        def refuse(**_: Any) -> Any:
            raise error

        return _NodeCall(self._hooks, self._node, refuse)(**kwargs)

    def replay(self, value: Any, kwargs: dict[str, Any]) -> Any:
        """A cache hit (docs/caching.md): the node hooks run around a call that returns the
        stored ``value`` without calling the function, as Hamilton's own driver runs its
        hooks around a cached node; returns ``value``, or an awaitable of it."""
        hit = _NodeCall(self._hooks, self._node, lambda **_: value)
        return hit(**kwargs)


class Adapters:
    """The accepted adapters of one Driver, bound to a ``FunctionGraph`` of its nodes."""

    __slots__ = (
        "_async_init",
        "_graph_view",
        "_init",
        "adapters",
        "graph",
        "modules",
        "node_hooks",
        "post_graph",
        "pre_graph",
    )

    def __init__(
        self,
        adapters: tuple[object, ...],
        hamilton_nodes: Mapping[str, Any],
        modules: Sequence[ModuleType],
        config: Mapping[str, Any],
    ) -> None:
        from hamilton import graph as hamilton_graph  # type: ignore[import-untyped, unused-ignore]
        from hamilton import node as hamilton_node  # type: ignore[import-untyped, unused-ignore]
        from hamilton.lifecycle.api import (  # type: ignore[import-untyped, unused-ignore]
            GraphExecutionHook,
            NodeExecutionHook,
        )

        self.adapters = adapters
        self.modules = list(modules)
        lifecycle = _lifecycle_set(adapters)
        # The graph Hamilton's driver would have built: the Driver's nodes (config replaces
        # nodes of the same name), linked, with external inputs and config as input nodes.
        nodes = {
            name: node_.copy(include_refs=False)
            for name, node_ in hamilton_nodes.items()
            if name not in config
        }
        nodes = hamilton_graph.update_dependencies(
            nodes, _lifecycle_set([]), reset_dependencies=False
        )
        for key in config:
            if key not in nodes:
                nodes[key] = hamilton_node.Node(
                    key, Any, node_source=hamilton_node.NodeType.EXTERNAL
                )
        config_dict = dict(config)
        self.graph = hamilton_graph.FunctionGraph(nodes, config_dict, lifecycle)
        self._graph_view: Any = None
        self._build(lifecycle, config_dict)
        self.pre_graph = _node_hooks(
            adapters, "pre_graph_execute", "run_before_graph_execution", GraphExecutionHook
        )
        self.post_graph = _node_hooks(
            adapters, "post_graph_execute", "run_after_graph_execution", GraphExecutionHook
        )
        self.node_hooks = NodeHooks(
            _node_hooks(
                adapters, "pre_node_execute", "run_before_node_execution", NodeExecutionHook
            ),
            _node_hooks(
                adapters, "post_node_execute", "run_after_node_execution", NodeExecutionHook
            ),
        )
        self._async_init = lifecycle.does_hook("post_graph_construct", is_async=True) or any(
            callable(getattr(adapter, "ainit", None)) for adapter in adapters
        )
        self._init: asyncio.Future[None] | None = None

    # ----------------------------------------------------------------- build time

    def _build(self, lifecycle: Any, config: dict[str, Any]) -> None:
        """What Hamilton's driver does with adapters while it builds a graph."""
        from hamilton.lifecycle.base import ValidationException  # type: ignore[import-untyped, unused-ignore]

        graph = self.graph
        if lifecycle.does_validation("validate_node"):
            failures: dict[str, list[str]] = {}
            for node_ in graph.nodes.values():
                for result in lifecycle.call_all_validators_sync(
                    "validate_node", output_only_failures=True, created_node=node_
                ):
                    failures.setdefault(node_.name, []).append(
                        f"{result.error} ({_class_name(result.validator)})"
                    )
            if failures:
                errors = [f"{name}: " + "; ".join(failures[name]) for name in sorted(failures)]
                raise ValidationException(
                    f"Node validation failed! {len(errors)} errors encountered:\n  "
                    + "\n  ".join(errors)
                )
        if lifecycle.does_validation("validate_graph"):
            results = lifecycle.call_all_validators_sync(
                "validate_graph",
                output_only_failures=True,
                graph=graph,
                modules=self.modules,
                config=config,
            )
            if results:
                errors = sorted(
                    f"{result.error} ({_class_name(result.validator)})" for result in results
                )
                raise ValidationException(
                    f"Graph validation failed! {len(errors)} errors encountered: "
                    + "; ".join(errors)
                )
        if lifecycle.does_hook("post_graph_construct", is_async=False):
            lifecycle.call_all_lifecycle_hooks_sync(
                "post_graph_construct", graph=graph, modules=self.modules, config=config
            )

    async def _ensure_initialised(self) -> None:
        """Async build-time work, awaited once before the first run (Hamilton's ``ainit``)."""
        init = self._init
        if init is None:
            init = self._init = asyncio.ensure_future(self._initialise())
        try:
            await asyncio.shield(init)
        except BaseException:
            # Failed (or cancelled): this run raises it before anything ran; the next run
            # tries again.
            if init.done() and self._init is init:
                self._init = None
            raise

    async def _initialise(self) -> None:
        lifecycle = _lifecycle_set(self.adapters)
        if lifecycle.does_hook("post_graph_construct", is_async=True):
            await lifecycle.call_all_lifecycle_hooks_async(
                "post_graph_construct",
                graph=self.graph,
                modules=self.modules,
                config=self.graph.config,
            )
        await lifecycle.ainit()

    # ----------------------------------------------------------------- run time

    def _hamilton_graph(self) -> Any:
        view = self._graph_view
        if view is None:
            from hamilton.graph_types import HamiltonGraph  # type: ignore[import-untyped, unused-ignore]

            view = self._graph_view = HamiltonGraph.from_graph(self.graph)
        return view

    def wrap(self, runtimes: tuple[NodeRuntime, ...]) -> tuple[NodeRuntime, ...]:
        """A plan's node runtimes with every call wrapped in the node hooks (once per plan)."""
        hooks = self.node_hooks
        if not hooks.pre_node and not hooks.post_node:
            return runtimes
        nodes = self.graph.nodes
        return tuple(
            dataclasses.replace(rt, call=_NodeCall(hooks, nodes[rt.name], rt.call))
            for rt in runtimes
        )

    async def _graph_hooks(self, hooks: Sequence[_Hook], run_id: str, **public: Any) -> None:
        for hook in hooks:
            if hook.public:
                arguments = {"graph": self._hamilton_graph(), "run_id": run_id, **public}
            else:
                arguments = {"graph": self.graph, "run_id": run_id, **public}
                arguments.pop("execution_path", None)
            try:
                outcome = hook.call(**arguments)
                if hook.is_async or inspect.isawaitable(outcome):
                    await outcome
            except Exception as exc:
                _log_hook_error(hook, exc, "", run_id)

    @contextlib.asynccontextmanager
    async def open(
        self,
        run: Callable[[], contextlib.AbstractAsyncContextManager[Any]],
        *,
        final_vars: Sequence[str],
        inputs: Mapping[str, Any],
        overrides: Mapping[str, Any],
        execution_path: Sequence[str],
    ) -> AsyncIterator[dict[str, Any]]:
        """One run with graph hooks around it: pre-graph hooks, then the whole run (forward
        phase, the ``open()`` body, every release), then post-graph hooks."""
        if self._async_init:
            await self._ensure_initialised()
        run_id = new_run_id()
        results: dict[str, Any] | None = None
        error: BaseException | None = None
        token = _RUN.set(_RunState(run_id))  # seen by the run's tasks, created meanwhile
        try:
            # Inside the try: an adapter whose pre-graph hook ran always gets its post-graph
            # hook, even when a later one is cancelled (a tracer's span stack stays balanced).
            await self._graph_hooks(
                self.pre_graph,
                run_id,
                final_vars=list(final_vars),
                inputs=dict(inputs),
                overrides=dict(overrides),
                execution_path=list(execution_path),
            )
            # The run takes the hooks' id (its events and log records carry it); only while
            # it is constructed, so runs opened inside its nodes make their own.
            given = GIVEN_RUN_ID.set(run_id)
            try:
                context = run()
            finally:
                GIVEN_RUN_ID.reset(given)
            async with context as outputs:
                results = outputs
                yield outputs
        except BaseException as exc:
            error = exc
            raise
        finally:
            try:
                _RUN.reset(token)
            except ValueError:  # closed from another context: an open() dropped unexited
                pass
            await self._graph_hooks(
                self.post_graph,
                run_id,
                success=error is None,
                error=error,
                results=results if error is None else None,
            )
