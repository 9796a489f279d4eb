"""Snapshots: a built Driver keeps no live reference to what users can still change.

Every declaration is resolved on a clone, and every object Hamilton's resolution reads
from a decorator (``source``/``value``/``group`` bindings, ``step``s, helper functions, a
``does`` replacement, load/save arguments, subdag inputs and config) is copied first. A
function is copied as a new function object over the same code object, so rebinding the
original's ``__code__``, defaults or decorator lists afterwards changes nothing the Driver
runs (``tests/test_hamilton_fidelity.py``, "snapshot").
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from types import FunctionType
from typing import Any

from . import admitted
from .admitted import LIFECYCLE


def clone(fn: FunctionType) -> FunctionType:
    """A new function sharing code, globals and closure; modifier lists re-created with
    snapshots of the modifier objects, so resolution cannot mutate the user's objects and
    later changes to them do not reach this build."""
    new = FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = dict(fn.__kwdefaults__) if fn.__kwdefaults__ is not None else None
    if fn.__dict__:
        new.__dict__.update(fn.__dict__)
    for lifecycle in LIFECYCLE:
        modifiers = fn.__dict__.get(lifecycle)
        if isinstance(modifiers, list):
            new.__dict__[lifecycle] = [modifier_snapshot(modifier) for modifier in modifiers]
    new.__qualname__ = fn.__qualname__
    new.__module__ = fn.__module__
    new.__doc__ = fn.__doc__
    new.__annotations__ = dict(fn.__annotations__)
    return new


def function_snapshot(fn: Any) -> Any:
    """A clone of a Python function; any other callable as it is."""
    return clone(fn) if isinstance(fn, FunctionType) else fn


def binding_snapshot(binding: Any) -> Any:
    """A copy of a ``source``/``value``/``configuration``/``group`` binding (a plain
    literal, which Hamilton reads as ``value(literal)``, is kept as it is)."""
    dependencies = admitted.fm("dependencies")
    if isinstance(binding, dependencies.GroupedListDependency):
        return dependencies.GroupedListDependency(
            sources=[binding_snapshot(item) for item in binding.sources]
        )
    if isinstance(binding, dependencies.GroupedDictDependency):
        return dependencies.GroupedDictDependency(
            sources={key: binding_snapshot(item) for key, item in binding.sources.items()}
        )
    if isinstance(binding, dependencies.ParametrizedDependency):
        return copy.copy(binding)
    return binding


def _bindings(mapping: Mapping[str, Any]) -> dict[str, Any]:
    return {key: binding_snapshot(item) for key, item in mapping.items()}


def step_snapshot(applicable: Any) -> Any:
    """A copy of a pipeline ``step`` (its function cloned, its bindings copied)."""
    new = copy.copy(applicable)
    new.fn = function_snapshot(applicable.fn)
    new.args = tuple(binding_snapshot(item) for item in applicable.args)
    new.kwargs = _bindings(applicable.kwargs)
    new.resolvers = list(applicable.resolvers)
    return new


def _parameterization(parameterization: Mapping[str, Any]) -> dict[str, Any]:
    copied: dict[str, Any] = {}
    for output, entry in parameterization.items():
        if isinstance(entry, tuple):  # (mapping, docstring) as Hamilton stores it
            copied[output] = tuple(
                _bindings(item) if isinstance(item, Mapping) else item for item in entry
            )
        else:
            copied[output] = _bindings(entry)
    return copied


def _extract_snapshot(extract: Any) -> Any:
    new = copy.copy(extract)
    new.input_mapping = _bindings(extract.input_mapping)
    return new


def modifier_snapshot(modifier: object) -> object:
    """A shallow copy of a decorator object with the parts resolution reads copied too."""
    new: Any = copy.copy(modifier)
    kind = admitted.admitted_kind(type(modifier))
    if kind == "parameterize":
        new.parameterization = _parameterization(new.parameterization)
    elif kind == "parameterize_extract" and hasattr(new, "extract_config"):
        new.extract_config = tuple(_extract_snapshot(item) for item in new.extract_config)
    elif kind in ("pipe_input", "pipe_output"):
        new.transforms = tuple(step_snapshot(item) for item in new.transforms)
    elif kind == "does":
        new.replacing_function = function_snapshot(new.replacing_function)
        new.argument_mapping = dict(new.argument_mapping)
    elif kind in ("load_from", "save_to"):
        new.kwargs = _bindings(new.kwargs)
    elif kind == "subdag":
        new.inputs = _bindings(new.inputs)
        new.config = _bindings(new.config)
        new.subdag_functions = list(new.subdag_functions)
    return new
