"""Resolution with Hamilton's own lifecycle, and the interceptors that record provenance.

Each declaration is resolved on a private clone (``signatures.clone``) whose modifier
objects are shallow copies; an interceptor wraps the lifecycle method Hamilton calls on
such a copy and records what its outputs are, relative to the node(s) it received. The
interceptors are removed once the declaration has been resolved; user objects are never
mutated.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import replace
from types import FunctionType
from typing import Any

from . import admitted, bindings
from .names import is_release
from .provenance import (
    ALIAS,
    CALL,
    IO,
    STATIC,
    Generated,
    Prov,
    Resolution,
    profile_type,
    sync_stand_in,
    validation_gate,
)
from .signatures import Facts, plain_node
from .snapshot import clone, modifier_snapshot

_POWER_USER_MODE = "hamilton.enable_power_user_mode"


class Resolver:
    """Expands declarations with Hamilton's lifecycle, recording each node's provenance."""

    def __init__(self, facts: dict[int, Facts], helpers: Iterable[FunctionType] = ()) -> None:
        self.facts = facts
        # A step's function is resolved as a clone sharing code and closure with the
        # user's function (snapshot.clone): that pair finds the helper it copies.
        self.helpers: dict[tuple[int, int], FunctionType] = {
            (id(fn.__code__), id(fn.__closure__)): fn for fn in helpers
        }

    def helper_of(self, fn: Any) -> FunctionType | None:
        """The step function carrying a declaration that ``fn`` is a copy of, if any."""
        if not self.helpers or not isinstance(fn, FunctionType):
            return None
        found = self.helpers.get((id(fn.__code__), id(fn.__closure__)))
        return found if found is not None and found.__code__ is fn.__code__ else None

    def resolve(
        self, fn: FunctionType, config: dict[str, Any], mount: tuple[str, ...]
    ) -> list[Generated]:
        """Expand one declaration with Hamilton's lifecycle, recording provenance."""
        fn_clone = clone(fn)
        facts = self.facts.get(id(fn))
        if facts is not None and facts.fn is fn and facts.plain:
            node_ = plain_node(fn_clone, facts)
            if node_ is not None:
                return [Generated(node_, Prov(CALL, fn, mount), True)]
        base = admitted.fm("base")
        resolution = Resolution(fn, mount, config)
        try:
            for _lifecycle, modifier in admitted.modifiers(fn_clone):
                self.intercept(modifier, resolution)
            nodes = base.resolve_nodes(fn_clone, config)
            return [
                Generated(node_, resolution.role(node_.name), sources=resolution.sources_of(node_))
                for node_ in nodes
            ]
        finally:
            resolution.remove_interceptors()

    def intercept(self, modifier: object, res: Resolution) -> None:
        handler = _INTERCEPTORS.get(admitted.kind_of(modifier))
        if handler is not None:
            handler(self, modifier, res)

    def mount_nodes(
        self,
        functions: Iterable[Any],
        config: dict[str, Any],
        mount: tuple[str, ...],
        inner: dict[str, Prov],
        non_final: bool,
    ) -> list[Any]:
        """Resolve the functions of a subdag mount (recursively), recording provenance."""
        non_final_tags = admitted.fm("recursive").NON_FINAL_TAGS
        nodes: list[Any] = []
        for function in functions:
            if is_release(function):
                continue
            for item in self.resolve(function, config, mount):
                node_ = item.node
                if non_final:
                    node_ = node_.copy_with(tags={**node_.tags, **non_final_tags})
                inner[node_.name] = item.prov
                nodes.append(node_)
        return nodes


def _parameterize(_resolver: Resolver, modifier: Any, res: Resolution) -> None:
    original = modifier.expand_node
    how = f"@{type(modifier).__name__}"

    def expand_node(node_: Any, config: dict[str, Any], fn: Any) -> Any:
        bindings.check_parameterization(modifier, node_, how)
        bound = bindings.sources_of(modifier, node_)
        out = list(original(node_, config, fn))
        source = res.role(node_.name)
        for produced in out:
            res.roles[produced.name] = source
            res.record_sources(produced, bound.get(produced.name, {}))
        return out

    res.install(modifier, "expand_node", expand_node)


def _parameterize_extract(_resolver: Resolver, modifier: Any, res: Resolution) -> None:
    original = modifier.expand_node
    columns: set[str] = set()
    for extract in modifier.extract_config:
        for column in extract.outputs:
            columns.add(column[0] if isinstance(column, tuple) else column)

    def expand_node(node_: Any, config: dict[str, Any], fn: Any) -> Any:
        how = f"@{type(modifier).__name__}"
        for index, extract in enumerate(modifier.extract_config):
            output = f"{node_.name}__{index}"
            internals = bindings.PARAMETERIZE_INTERNALS | bindings.EXTRACT_INTERNALS
            bindings.check_mapping(output, extract.input_mapping, node_, how, internals)
        out = list(original(node_, config, fn))
        source = res.role(node_.name)
        for produced in out:
            res.roles[produced.name] = res.made(ALIAS) if produced.name in columns else source
        return out

    res.install(modifier, "expand_node", expand_node)


def _transform(modifier: Any, res: Resolution, new_role: str) -> None:
    """A ``transform_node`` modifier: the transformed node keeps its role, every node it
    adds gets ``new_role``."""
    original = modifier.transform_node

    def transform_node(node_: Any, config: dict[str, Any], fn: Any) -> Any:
        source = res.role(node_.name)
        out = list(original(node_, config, fn))
        for produced in out:
            res.roles[produced.name] = source if produced.name == node_.name else res.made(new_role)
        return out

    res.install(modifier, "transform_node", transform_node)


def _extract(_resolver: Resolver, modifier: Any, res: Resolution) -> None:
    _transform(modifier, res, ALIAS)


def _save_to(_resolver: Resolver, modifier: Any, res: Resolution) -> None:
    original = modifier.transform_node
    resolve_adapter_class = admitted.fm("adapters").resolve_adapter_class

    def transform_node(node_: Any, config: dict[str, Any], fn: Any) -> Any:
        saver = resolve_adapter_class(node_.type, modifier.saver_classes)
        if saver is not None:
            bindings.check_adapter_kwargs(saver, modifier.kwargs, node_.name, "@save_to")
        return original(node_, config, fn)

    res.install(modifier, "transform_node", transform_node)
    _transform(modifier, res, IO)


def _pipe_input(resolver: Resolver, modifier: Any, res: Resolution) -> None:
    original = modifier.inject_nodes
    original_mapping = modifier._create_valid_parameters_transforms_mapping
    mapped: list[dict[str, list[Any]]] = []

    def create_mapping(mapping: Any, fn: Any, params: Any) -> Any:
        found = original_mapping(mapping=mapping, fn=fn, params=params)
        mapped.append(found)
        return found

    def inject_nodes(params: Any, config: dict[str, Any], fn: Any) -> Any:
        bindings.check_steps(modifier.transforms, config, fn.__name__, "step(...) in @pipe_input")
        mapped.clear()
        nodes, renames = original(params, config, fn)
        for produced in nodes:
            res.roles[produced.name] = res.made(ALIAS)
        # each target parameter's chain holds the steps the configuration enables, in order
        steps = [
            applicable
            for transforms in (mapped[-1].values() if mapped else ())
            for applicable in transforms
            if applicable.resolves(config)
        ]
        _step_sources(resolver, res, fn.__name__, steps, nodes)
        return nodes, renames

    res.install(modifier, "_create_valid_parameters_transforms_mapping", create_mapping)
    res.install(modifier, "inject_nodes", inject_nodes)


def _pipe_output(resolver: Resolver, modifier: Any, res: Resolution) -> None:
    original = modifier.transform_node
    original_filter = modifier._filter_individual_target
    selected: list[tuple[Any, ...]] = []

    def filter_individual_target(node_: Any) -> Any:
        found = original_filter(node_)
        selected.append(tuple(found))
        return found

    def transform_node(node_: Any, config: dict[str, Any], fn: Any) -> Any:
        bindings.check_steps(modifier.transforms, config, node_.name, "step(...) in @pipe_output")
        source = res.role(node_.name)
        if inspect.iscoroutinefunction(fn):
            # Hamilton 1.90 builds the chain's final identity for an async declaration
            # as an unannotated async function (its expansion fails) that would await a
            # plain value. Only the name and the async-ness of ``fn`` are consulted, so
            # expand with a synchronous stand-in: the final node is a plain identity.
            fn = sync_stand_in(fn.__name__)
        selected.clear()
        out = list(original(node_, config, fn))
        if len(out) == 1:
            return out
        raw, *steps, final = out
        res.roles[raw.name] = source
        for produced in steps:
            res.roles[produced.name] = res.made(ALIAS)
        res.roles[final.name] = res.made(ALIAS)
        enabled = [t for t in (selected[-1] if selected else ()) if t.resolves(config)]
        _step_sources(resolver, res, node_.name, enabled, steps)
        return out

    res.install(modifier, "_filter_individual_target", filter_individual_target)
    res.install(modifier, "transform_node", transform_node)


def _step_sources(
    resolver: Resolver, res: Resolution, node: str, steps: list[Any], produced: list[Any]
) -> None:
    """Record, for each step node, the step parameter bound to each source (with its
    default: Hamilton keeps it under the parameter's name, the node's input is the
    source's). Steps of one decorator binding parameters to one source with different
    defaults are refused, as parameters of one node are (docs/bindings.md). A step whose
    function carries an ``execution`` or a ``shutdown`` is a call of that function."""
    if len(steps) != len(produced):  # pragma: no cover - Hamilton changed its chaining
        raise RuntimeError(f"unexpected pipeline expansion of {node}")
    merged: dict[str, list[bindings.Bound]] = {}
    for applicable, step_node in zip(steps, produced, strict=True):
        helper = resolver.helper_of(applicable.fn)
        if helper is not None:
            res.roles[step_node.name] = Prov(CALL, helper, res.mount, helper=True)
        found = bindings.step_sources(applicable, step_node)
        res.record_sources(step_node, found)
        for source, bound in found.items():
            merged.setdefault(source, []).extend(bound)
    for source, every in merged.items():
        if len(every) > 1:
            bindings.merged_default(node, source, tuple(every))


def _check_output(_resolver: Resolver, modifier: Any, res: Resolution) -> None:
    original_validators = modifier.get_validators
    original = modifier.transform_node
    captured: list[list[Any]] = []
    profile = admitted.profile_of(modifier)

    def get_validators(node_to_validate: Any) -> Any:
        validators = original_validators(node_to_validate)
        captured.append(list(validators))
        return validators

    def transform_node(node_: Any, config: dict[str, Any], fn: Any) -> Any:
        source = res.role(node_.name)
        captured.clear()
        out = list(original(node_, config, fn))
        validators = captured[-1] if captured else []
        *validator_nodes, gate, raw = out
        if len(validator_nodes) != len(validators):  # pragma: no cover - Hamilton changed
            raise RuntimeError(f"unexpected check_output expansion of {node_.name}")
        checks = tuple(
            (validator_node.name, validator.name(), validator.importance.value)
            for validator_node, validator in zip(validator_nodes, validators, strict=True)
        )
        gate = gate.copy_with(callabl=validation_gate(gate.name, raw.name, checks))
        if profile is not None:
            validated = profile_type(profile, node_.type)
            raw = raw.copy_with(typ=validated)
            gate = gate.copy_with(
                typ=validated,
                input_types={
                    **gate.input_types,
                    raw.name: (validated, gate.input_types[raw.name][1]),
                },
            )
            validator_nodes = [
                v.copy_with(input_types={raw.name: (validated, v.input_types[raw.name][1])})
                for v in validator_nodes
            ]
        res.roles[raw.name] = replace(source, internal=True, gate=gate.name)
        for validator_node in validator_nodes:
            res.roles[validator_node.name] = res.made(ALIAS, internal=True, gate=gate.name)
        res.roles[gate.name] = res.made(ALIAS)
        return [*validator_nodes, gate, raw]

    res.install(modifier, "get_validators", get_validators)
    res.install(modifier, "transform_node", transform_node)


def _load_from(_resolver: Resolver, modifier: Any, res: Resolution) -> None:
    required = admitted.hamilton_module("node").DependencyType.REQUIRED
    original = modifier.inject_nodes

    def inject_nodes(params: Any, config: dict[str, Any], fn: Any) -> Any:
        (loader, selector), renames = original(params, config, fn)
        adapter = admitted.fm("adapters").resolve_adapter_class(
            selector.type, modifier.loader_classes
        )
        if adapter is not None:
            bindings.check_adapter_kwargs(adapter, modifier.kwargs, loader.name, "@load_from")
        # Hamilton 1.90 annotates the loader as tuple[metadata, data] while it returns
        # (data, metadata); the selector takes element 0.
        fixed = tuple[selector.type, dict[str, Any]]  # type: ignore[name-defined]
        loader = loader.copy_with(typ=fixed)
        selector = selector.copy_with(input_types={loader.name: (fixed, required)})
        res.roles[loader.name] = res.made(IO)
        res.roles[selector.name] = res.made(ALIAS)
        return [loader, selector], renames

    res.install(modifier, "inject_nodes", inject_nodes)


def _dataloader(_resolver: Resolver, modifier: Any, res: Resolution) -> None:
    original = modifier.generate_nodes

    def generate_nodes(fn: Any, config: dict[str, Any]) -> Any:
        loader, selector = original(fn, config)
        res.roles[loader.name] = res.made(CALL)
        res.roles[selector.name] = res.made(ALIAS)
        return [loader, selector]

    res.install(modifier, "generate_nodes", generate_nodes)


def _model(_resolver: Resolver, modifier: Any, res: Resolution) -> None:
    original = modifier.generate_nodes

    def generate_nodes(fn: Any, config: dict[str, Any]) -> Any:
        # Hamilton 1.90's dynamic_transform declares its config key through a misspelt
        # hook (``require_config``), so the lifecycle filters it out; give it the
        # configuration it reads.
        return original(fn, {**config, **res.config})

    res.install(modifier, "generate_nodes", generate_nodes)


def _dynamic(resolver: Resolver, modifier: Any, res: Resolution) -> None:
    original = modifier.resolve

    def resolve(config: dict[str, Any], fn: Any) -> Any:
        if _POWER_USER_MODE not in config:
            config = {**config, _POWER_USER_MODE: False}
        decorator = original(config, fn)
        if admitted.kind_of(decorator) == "dynamic":
            raise ValueError(
                f"unsupported Hamilton decorator {type(decorator).__name__} (produced by "
                "resolve); have resolve return one of the decorators the README lists"
            )
        decorator = modifier_snapshot(decorator)
        resolver.intercept(decorator, res)
        return decorator

    res.install(modifier, "resolve", resolve)


def _adopt_mount(
    produced: Iterable[Any], namespace: str, inner: dict[str, Prov], res: Resolution
) -> None:
    prefix = namespace + "."
    for node_ in produced:
        name = node_.name
        found = inner.get(name[len(prefix) :]) if name.startswith(prefix) else None
        if found is not None:
            res.roles[name] = found
        elif name not in res.roles:
            res.roles[name] = res.made(ALIAS if node_.input_types else STATIC)


def _subdag(resolver: Resolver, modifier: Any, res: Resolution) -> None:
    original = modifier.generate_nodes

    def generate_nodes(fn: Any, configuration: dict[str, Any]) -> Any:
        namespace = modifier._derive_namespace(fn)
        inner: dict[str, Prov] = {}

        def collect_nodes(config: dict[str, Any], subdag_functions: Any) -> list[Any]:
            return resolver.mount_nodes(
                subdag_functions, config, (*res.mount, namespace), inner, True
            )

        res.install(modifier, "collect_nodes", collect_nodes)
        out = list(original(fn, configuration))
        *rest, final = out
        res.roles[final.name] = res.made(CALL)
        _adopt_mount(rest, namespace, inner, res)
        return out

    res.install(modifier, "generate_nodes", generate_nodes)


def _parameterized_subdag(resolver: Resolver, modifier: Any, res: Resolution) -> None:
    original = modifier._gather_subdag_generators

    def gather_subdag_generators() -> Any:
        generators = original()
        for generator in generators:
            _subdag(resolver, generator, res)
        return generators

    res.install(modifier, "_gather_subdag_generators", gather_subdag_generators)


def _with_columns(resolver: Resolver, modifier: Any, res: Resolution) -> None:
    original = modifier.inject_nodes

    def inject_nodes(params: Any, config: dict[str, Any], fn: Any) -> Any:
        namespace = fn.__name__ if modifier.namespace is None else modifier.namespace
        inner: dict[str, Prov] = {}

        def get_subdag_nodes(fn: Any, config: dict[str, Any]) -> list[Any]:
            return resolver.mount_nodes(
                modifier.subdag_functions, config, (*res.mount, namespace), inner, True
            )

        res.install(modifier, "get_subdag_nodes", get_subdag_nodes)
        nodes, renames = original(params, config, fn)
        _adopt_mount(nodes, namespace, inner, res)
        return nodes, renames

    res.install(modifier, "inject_nodes", inject_nodes)


def _opaque(_resolver: Resolver, modifier: Any, res: Resolution) -> None:
    """Plugin decorators whose added nodes are treated as generated projections."""
    if "inject_nodes" in dir(modifier):
        original_inject = modifier.inject_nodes

        def inject_nodes(params: Any, config: dict[str, Any], fn: Any) -> Any:
            nodes, renames = original_inject(params, config, fn)
            for produced in nodes:
                res.roles.setdefault(produced.name, res.made(ALIAS))
            return nodes, renames

        res.install(modifier, "inject_nodes", inject_nodes)
    if "transform_node" in dir(modifier):
        _transform(modifier, res, ALIAS)


_INTERCEPTORS: dict[str, Callable[[Resolver, Any, Resolution], None]] = {
    "parameterize": _parameterize,
    "parameterize_extract": _parameterize_extract,
    "extract": _extract,
    "pipe_input": _pipe_input,
    "pipe_output": _pipe_output,
    "check_output": _check_output,
    "load_from": _load_from,
    "save_to": _save_to,
    "dataloader": _dataloader,
    "model": _model,
    "dynamic": _dynamic,
    "subdag": _subdag,
    "parameterized_subdag": _parameterized_subdag,
    "with_columns": _with_columns,
    "opaque": _opaque,
}
"""Translation kind -> interceptor; kinds without one (``decorate``, ``resolver``,
``does``, ``creator``) keep Hamilton's default provenance: the node calls the declaration."""
