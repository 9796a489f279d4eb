"""``Driver``: compiles Hamilton modules once; ``prepare`` selects plans from it
(docs/api.md, "Driver")."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING, Any

from .. import _messages
from .._adapters import Adapters, check_adapters, pre_do_anything
from .._resilience import RetryBudget
from .._spec import NodeSpec
from .translator import translate
from .version import check_hamilton_version

if TYPE_CHECKING:
    from .. import _core
    from .._plan import PreparedPlan
    from .caching import Cache


def _config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    if config is not None and not isinstance(config, Mapping):
        raise TypeError(
            f"Configuration must be a mapping, not {_messages.type_name(config)}; pass "
            "config={'name': value}"
        )
    values: dict[str, Any] = dict(config) if config is not None else {}
    for key in values:
        if not isinstance(key, str) or not key:
            raise TypeError(
                "Configuration keys must be non-empty strings, got "
                + (_messages.name(key) if isinstance(key, str) else _messages.type_name(key))
                + "; key each config value by the input or node name it supplies"
            )
    return values


def _retry_budget(budget: object) -> RetryBudget | None:
    if budget is not None and not isinstance(budget, RetryBudget):
        raise TypeError(
            f"Invalid retry_budget: {_messages.type_name(budget)}; retry_budget must be a "
            "sdax_hamilton.RetryBudget or None"
        )
    return budget


def _check_fallbacks(nodes: Mapping[str, NodeSpec]) -> None:
    """A fallback cannot make up a resource (docs/resilience.md#fallback)."""
    for name, spec in nodes.items():
        if spec.fallback is None:
            continue
        if spec.release is not None or spec.ownership_required:
            raise ValueError(
                f"Node {name} ({spec.origin}) is an owned acquisition and cannot have a "
                "fallback: a resource cannot be made up; put the fallback on a node that "
                "takes the resource as an argument"
            )
        if spec.borrows:
            raise ValueError(
                f"Node {name} ({spec.origin}) borrows from "
                f"{_messages.names(spec.borrows)} and cannot have a fallback: a resource "
                "cannot be made up; put the fallback on a node that takes the resource as "
                "an argument"
            )


def _check_hedges(nodes: Mapping[str, NodeSpec]) -> None:
    """A resource is acquired once per run: a second call would acquire another
    (docs/hedging.md)."""
    for name, spec in nodes.items():
        if spec.hedge is None:
            continue
        if spec.release is not None or spec.ownership_required:
            raise ValueError(
                f"Node {name} ({spec.origin}) is an owned acquisition and cannot hedge: a "
                "second call would acquire a second resource; drop hedge_after, or hedge a "
                "node that takes the resource as an argument"
            )
        if spec.borrows:
            raise ValueError(
                f"Node {name} ({spec.origin}) borrows from "
                f"{_messages.names(spec.borrows)} and cannot hedge: its calls would share "
                "the run's resource; drop hedge_after, or hedge a node that takes the "
                "resource as an argument"
            )


def _modules(modules: tuple[ModuleType, ...]) -> tuple[ModuleType, ...]:
    if not modules or not all(isinstance(module, ModuleType) for module in modules):
        raise TypeError(
            "Driver requires one or more Python modules, e.g. Driver(my_module) or "
            "Driver(sys.modules[__name__])"
        )
    unique: list[ModuleType] = []
    for module in modules:
        if not any(module is seen for seen in unique):
            unique.append(module)
    return tuple(unique)


class Driver:
    """Compiles Hamilton modules once, with their ``execution``/``shutdown`` declarations.

    The Driver is a snapshot: declarations are copied when it is built, so rebinding module
    attributes afterwards does not change it. Build another Driver to change declarations.

    ``allow_module_overrides``: ``True`` lets a later module's function replace an earlier
    module's function of the same name, as Hamilton's ``Builder.allow_module_overrides()``
    (``False``: two nodes of one name are a ``ValueError``).

    ``executor``: the ``concurrent.futures.Executor`` whose threads run the attempts of
    ``execution(in_thread=True)`` nodes (``None``: the event loop's default executor).

    ``adapters``: Hamilton lifecycle adapters (progress bars, tracers, the Hamilton UI's
    tracker); their hooks run around every run and every attempt of its plans, and those
    that would replace execution or the result are refused (docs/adapters.md).

    ``retry_budget``: every retry of every run of this Driver's plans draws on it
    (docs/resilience.md).
    ``cache``: ``True`` (Hamilton's default directory), a directory path, or Hamilton's
    ``HamiltonCacheAdapter``: node values are kept across runs in Hamilton's own cache
    format, shared with Hamilton's ``Builder().with_cache()`` (docs/caching.md).
    """

    _nodes: dict[str, NodeSpec]
    _config: Mapping[str, Any]

    def __init__(
        self,
        *modules: ModuleType,
        config: Mapping[str, Any] | None = None,
        adapters: Sequence[object] | None = None,
        retry_budget: RetryBudget | None = None,
        cache: object = None,
        allow_module_overrides: bool = False,
        executor: Executor | None = None,
    ) -> None:
        values = _config(config)
        self._retry_budget = _retry_budget(retry_budget)
        check_hamilton_version()
        unique = _modules(modules)
        # Hamilton lifecycle adapters (docs/adapters.md): checked first, build hooks run here.
        accepted = check_adapters(adapters)
        if not isinstance(allow_module_overrides, bool):
            raise TypeError(
                "allow_module_overrides must be True or False, not "
                f"{_messages.type_name(allow_module_overrides)}"
            )
        if executor is not None and (
            not isinstance(executor, Executor) or isinstance(executor, ProcessPoolExecutor)
        ):
            raise TypeError(
                "executor must be a concurrent.futures.Executor running calls in threads of "
                "this process (e.g. a ThreadPoolExecutor) or None for the event loop's "
                f"default executor, not {_messages.type_name(executor)}"
            )
        self._executor = executor
        hamilton_nodes: dict[str, Any] | None = None
        if accepted:
            pre_do_anything(accepted)
        if accepted or cache is not None:
            hamilton_nodes = {}
        self._nodes = translate(
            unique, values, hamilton_nodes, allow_module_overrides=allow_module_overrides
        )
        _check_fallbacks(self._nodes)
        _check_hedges(self._nodes)
        self._cache: Cache | None = None
        if cache is not None:
            from .caching import build_cache

            assert hamilton_nodes is not None
            self._cache = build_cache(cache, hamilton_nodes, self._nodes)
        self._config = MappingProxyType(values)
        from .._plan import compile_graph

        # The core refuses what no plan could run (an owned node with forward retries),
        # so those errors surface here, when the Driver is built.
        self._graph: _core.Graph = compile_graph(self._nodes)
        self._adapters = (
            Adapters(accepted, hamilton_nodes, unique, values)
            if accepted and hamilton_nodes is not None
            else None
        )

    def prepare(
        self,
        final_vars: Iterable[str],
        *,
        optional_inputs: Iterable[str] = (),
        override_nodes: Iterable[str] = (),
        check_outputs: bool = True,
    ) -> PreparedPlan:
        """Select ``final_vars`` and compile a reusable ``PreparedPlan`` (docs/api.md,
        "prepare")."""
        from .._plan import build_plan

        return build_plan(
            self._nodes,
            self._config,
            final_vars,
            optional_inputs=optional_inputs,
            override_nodes=override_nodes,
            check_outputs=check_outputs,
            graph=self._graph,
            adapters=self._adapters,
            retry_budget=self._retry_budget,
            cache=self._cache,
            executor=self._executor,
        )
