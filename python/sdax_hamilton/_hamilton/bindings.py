"""Bound values: every literal a decorator binds is checked against the parameter it feeds,
and every parameter bound to a source keeps its requirement (docs/bindings.md).

Hamilton binds values to parameters in several ways (``value(...)`` and ``group(...)`` in
``inject`` and the ``parameterize`` family, ``step(...)`` keyword and positional bindings in
``pipe_input``/``pipe_output``/``mutate``, keyword arguments of ``load_from``/``save_to``),
and checks none of them. These checks run while the Driver is built, before any user code
(or data adapter) runs; their errors name the node, the parameter and the expected type,
never the value.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .._types import accepts, describe, validate_type
from . import admitted
from .names import hints, origin

# Keyword names of the function Hamilton 1.90's ``parameterize`` family wraps a node in
# (``expanders.parameterize.expand_node``): a parameter or source of the same name would be
# taken for the wrapper's own argument.
PARAMETERIZE_INTERNALS = frozenset(
    {
        "upstream_dependencies",
        "literal_dependencies",
        "grouped_list_dependencies",
        "grouped_dict_dependencies",
        "former_inputs",
    }
)
# The name a step's chained (first) parameter is bound to while its bindings are read.
_CHAINED = "__sdax_chained__"
# ``parameterize_extract_columns`` wraps the function again, with this keyword.
EXTRACT_INTERNALS = frozenset({"_output_columns"})


@dataclass(frozen=True, slots=True)
class Bound:
    """One parameter of a node's function, fed from a source."""

    parameter: str
    type: Any
    has_default: bool
    default: Any = None


def _literal_error(node: str, parameter: str, expected: Any, value: Any, how: str) -> TypeError:
    return TypeError(
        f"node {node!r}: parameter {parameter!r} expects {describe(expected)}, got "
        f"{describe(type(value))} (bound by {how})"
    )


def _check_literal(node: str, parameter: str, expected: Any, value: Any, how: str) -> None:
    if not accepts(value, expected):
        raise _literal_error(node, parameter, expected, value, how)


def _is(binding: Any, name: str) -> bool:
    return isinstance(binding, getattr(admitted.fm("dependencies"), name))


def _mappings(parameterization: Mapping[str, Any], default_name: str) -> Iterable[tuple[str, Any]]:
    placeholder = admitted.fm("expanders").parameterize.PLACEHOLDER_PARAM_NAME
    for output, entry in parameterization.items():
        mapping = entry[0] if isinstance(entry, tuple) else entry
        yield (default_name if output == placeholder else output), mapping


def check_parameterization(modifier: Any, node_: Any, how: str) -> None:
    """Literal and grouped literal bindings of an ``inject``/``parameterize`` family
    decorator fit their parameters; no parameter or source takes a wrapper's name."""
    for output, mapping in _mappings(modifier.parameterization, node_.name):
        check_mapping(output, mapping, node_, how, PARAMETERIZE_INTERNALS)


def check_mapping(
    output: str, mapping: Mapping[str, Any], node_: Any, how: str, internals: frozenset[str]
) -> None:
    """One parameterization of ``node_`` into ``output``."""
    _refuse_internal_names(output, node_, mapping, how, internals)
    for parameter, binding in mapping.items():
        found = node_.input_types.get(parameter)
        if found is None:
            continue  # Hamilton reports a binding of an unknown parameter itself
        expected = found[0]
        if _is(binding, "ConfigDependency"):
            raise ValueError(
                f"node {output!r}: parameter {parameter!r} is bound with configuration(...), "
                f"which Hamilton 1.90's {how} does not apply (the parameter would silently "
                "become an input); bind value(...) or source(...) instead"
            )
        if _is(binding, "LiteralDependency"):
            _check_literal(output, parameter, expected, binding.value, how)
        elif _is(binding, "GroupedListDependency") or _is(binding, "GroupedDictDependency"):
            element = binding.resolve_dependency_type(expected, parameter)
            validate_type(element, where=f"node {output!r}: parameter {parameter!r} element")
            items = binding.sources
            for item in items.values() if isinstance(items, Mapping) else items:
                if _is(item, "LiteralDependency"):
                    _check_literal(output, parameter, element, item.value, f"group(...) in {how}")


def _refuse_internal_names(
    output: str, node_: Any, mapping: Mapping[str, Any], how: str, internals: frozenset[str]
) -> None:
    sources = {binding.source for binding in mapping.values() if _is(binding, "UpstreamDependency")}
    clash = sorted((set(node_.input_types) | sources) & internals)
    if clash:
        raise ValueError(
            f"node {output!r}: parameter or source name {clash[0]!r} is reserved by Hamilton's "
            f"{how} wrapper; rename it"
        )


def sources_of(modifier: Any, node_: Any) -> dict[str, dict[str, tuple[Bound, ...]]]:
    """Output node -> source -> every parameter bound to it (with type and default)."""
    defaults = node_.default_parameter_values
    found: dict[str, dict[str, tuple[Bound, ...]]] = {}
    for output, mapping in _mappings(modifier.parameterization, node_.name):
        by_source: dict[str, list[Bound]] = {}
        for parameter, binding in mapping.items():
            declared = node_.input_types.get(parameter)
            if declared is None or not _is(binding, "UpstreamDependency"):
                continue
            bound = (
                Bound(parameter, declared[0], True, defaults[parameter])
                if parameter in defaults
                else Bound(parameter, declared[0], False)
            )
            by_source.setdefault(binding.source, []).append(bound)
        for source, items in by_source.items():
            # a parameter left unbound keeps its own name: it shares the source's value
            declared = node_.input_types.get(source)
            if declared is not None and source not in mapping:
                items.append(
                    Bound(source, declared[0], True, defaults[source])
                    if source in defaults
                    else Bound(source, declared[0], False)
                )
        found[output] = {source: tuple(items) for source, items in by_source.items()}
    return found


def step_sources(applicable: Any, step_node: Any) -> dict[str, tuple[Bound, ...]]:
    """Source -> the parameter of a pipeline step bound to it (``step(fn, p=source(...))``),
    with the step function's default for that parameter."""
    try:
        upstream, _literal = applicable.bind_function_args(_CHAINED)
    except TypeError:
        return {}  # Hamilton reports bindings the step function cannot take itself
    defaults = step_node.default_parameter_values
    found: dict[str, tuple[Bound, ...]] = {}
    for parameter, source in upstream.items():
        declared = step_node.input_types.get(source)
        if source == _CHAINED or declared is None:
            continue
        found[source] = (
            Bound(parameter, declared[0], True, defaults[parameter])
            if parameter in defaults
            else Bound(parameter, declared[0], False),
        )
    return found


def merged_default(node: str, source: str, bound: tuple[Bound, ...]) -> tuple[bool, Any]:
    """Whether the input ``source`` has a default, and which: only when every parameter
    bound to it has one and they are the same; different defaults are an error."""
    if not all(item.has_default for item in bound):
        return False, None
    first = bound[0].default
    for item in bound[1:]:
        if not _same(first, item.default):
            names = ", ".join(repr(b.parameter) for b in bound)
            raise ValueError(
                f"node {node!r}: parameters {names} are bound to one source {source!r} "
                "with different defaults; give them the same default, or none"
            )
    return True, first


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    try:
        return bool(a == b)
    except Exception:
        return False


def check_steps(transforms: Iterable[Any], config: Mapping[str, Any], node: str, how: str) -> None:
    """The literal bindings of every ``step`` the configuration enables fit the step
    function's parameters; a step binds each source to one parameter only."""
    for applicable in transforms:
        if not applicable.resolves(config):
            continue  # a step config disables is not part of the graph
        fn = applicable.fn
        try:
            upstream, literal = applicable.bind_function_args(_CHAINED)
        except TypeError:
            continue  # Hamilton reports bindings the step function cannot take itself
        found = hints(fn)
        step_name = f"{node}: step {getattr(fn, '__name__', repr(fn))}"
        for parameter, value in literal.items():
            expected = found.get(parameter)
            if expected is not None:
                _check_literal(step_name, parameter, expected, value, how)
        seen: dict[str, str] = {}
        for parameter, source in upstream.items():
            if source in seen:
                raise ValueError(
                    f"node {step_name!r}: parameters {seen[source]!r} and {parameter!r} are "
                    f"bound to one source {source!r}; Hamilton passes it to one of them only: "
                    "bind each parameter to a source of its own"
                )
            seen[source] = parameter


def check_adapter_kwargs(adapter_cls: Any, kwargs: Mapping[str, Any], node: str, how: str) -> None:
    """Literal keyword arguments of ``load_from``/``save_to`` fit the data adapter's fields,
    checked before the adapter is ever constructed."""
    try:
        declared = typing.get_type_hints(adapter_cls)
    except Exception:  # pragma: no cover - an adapter whose annotations do not resolve
        return
    for parameter, binding in kwargs.items():
        if _is(binding, "UpstreamDependency"):
            continue
        value = binding.value if _is(binding, "LiteralDependency") else binding
        expected = declared.get(parameter)
        if expected is None:
            continue
        try:
            validate_type(expected, where=origin(adapter_cls))
        except TypeError:
            continue  # an annotation outside the checked vocabulary: left to the adapter
        _check_literal(node, parameter, expected, value, how)
