"""Spark: what a Driver refuses because Spark evaluates lazily (docs/bindings.md, "Spark").

A node returning a Spark ``DataFrame`` returns a plan, computed later by whoever acts on it
(a ``collect`` downstream, or the caller after the run). So a timeout or retries cannot
govern that computation, and a release may run before it; loaders and savers would see or
write a plan rather than data. Such graphs are refused at ``Driver(...)``, as are Spark
decorators used where Hamilton does not support them: ``require_columns`` outside an
``h_spark.with_columns``/``select``, and ``execution``/``shutdown`` on the column functions
those decorators fuse into one Spark plan. Nothing here imports pyspark: a graph can only
hold Spark values when the user's modules imported it.
"""

from __future__ import annotations

import sys
import typing
from collections.abc import Iterable, Mapping
from types import FunctionType
from typing import Any

from . import admitted
from .names import declaration, origin, shutdowns_of
from .placement import Placement
from .provenance import IO, Generated

_LAZY = frozenset({"DataFrame", "Column", "RDD", "GroupedData", "Series"})
_H_SPARK = "hamilton.plugins.h_spark"


def _spark_modifiers(fn: Any) -> list[tuple[str, Any]]:
    found = []
    for _lifecycle, modifier in admitted.modifiers(fn):
        plugin = admitted.plugin_of(type(modifier))
        if plugin is not None and plugin.module == _H_SPARK:
            found.append((plugin.qualname, modifier))
    return found


def is_lazy(tp: Any) -> bool:
    """A Spark value computed on demand (``pyspark`` DataFrame, Column, RDD, …)."""
    module = getattr(tp, "__module__", None)
    return (
        isinstance(module, str)
        and module.startswith("pyspark.")
        and getattr(tp, "__name__", None) in _LAZY
    )


def check_declarations(declarations: Iterable[FunctionType]) -> None:
    """Spark decorators only where Hamilton supports them; no policy or release on a
    column function fused into a Spark plan."""
    if "pyspark" not in sys.modules:
        return
    for fn in declarations:
        for qualname, modifier in _spark_modifiers(fn):
            if qualname == "require_columns":
                raise ValueError(
                    f"{origin(fn)}: h_spark.require_columns is only supported on column "
                    "functions passed to h_spark.with_columns or h_spark.select"
                )
            for udf in modifier.subdag_functions:
                loading = _io_decorator(udf)
                if loading is not None:
                    raise ValueError(
                        f"{origin(udf)}: Hamilton I/O decorator {loading} on a column "
                        f"function of h_spark.{qualname} on {origin(fn)}; Spark fuses column "
                        "functions into one plan, so nothing may load or save there: load "
                        "or save in a node of its own, outside the with_columns"
                    )
                if declaration(udf) is not None or shutdowns_of(udf):
                    raise ValueError(
                        f"{origin(udf)}: execution/shutdown cannot be declared on a column "
                        f"function of h_spark.{qualname} on {origin(fn)}; Spark runs it "
                        "inside one lazy plan, not as a node"
                    )


def _io_decorator(fn: Any) -> str | None:
    """The class name of a Hamilton I/O decorator on ``fn`` (``@dataloader``,
    ``@datasaver``, ``@load_from...``, ``@save_to...``), else ``None``."""
    for _lifecycle, modifier in admitted.modifiers(fn):
        if admitted.admitted_kind(type(modifier)) in _ALL_IO_KINDS:
            return type(modifier).__name__
    return None


def check_graph(by_name: Mapping[str, Generated], placement: Placement) -> None:
    """No Spark in a subdag; no owned acquisition or non-default policy upstream of (or
    on) a lazy Spark value; no loader or saver connected to one."""
    if "pyspark" not in sys.modules:
        return
    lazy = {name for name, item in by_name.items() if is_lazy(item.node.type)}
    for name, item in by_name.items():
        spark_made = bool(_spark_modifiers(item.prov.decl))
        if item.prov.mount and (name in lazy or spark_made):
            raise ValueError(
                f"node {name!r} ({origin(item.prov.decl)}): Spark inside a subdag "
                f"({'.'.join(item.prov.mount)}) is not supported"
            )
    if not lazy:
        return
    _check_io(by_name, lazy)
    consumers: dict[str, list[str]] = {}
    for name, item in by_name.items():
        for producer in item.node.input_types:
            consumers.setdefault(producer, []).append(name)
    governed = set(placement.releases)
    governed.update(
        name
        for name, policy in placement.policies.items()
        if policy.timeout is not None or policy.retries > 0
    )
    for name in sorted(governed):
        reached = _downstream(name, consumers) & lazy
        if reached:
            what = "an owned acquisition" if name in placement.releases else "an execution policy"
            raise ValueError(
                f"node {name!r} ({origin(by_name[name].prov.decl)}) has {what} upstream of "
                f"the lazy Spark value {sorted(reached)[0]!r}: Spark computes it later, "
                "outside the node's timeout, retries and release"
            )


# Decorators whose function itself is the loader or saver (``@dataloader``, ``@datasaver``):
# every node of such a declaration is I/O. ``load_from`` / ``save_to`` add adapter nodes
# (provenance ``IO``) and leave the decorated function an ordinary node: only those
# adapters are I/O, so a loaded ``dict`` feeding a Spark plan is not refused.
_IO_KINDS = frozenset({"dataloader", "creator"})
_ALL_IO_KINDS = _IO_KINDS | {"load_from", "save_to"}


def _mentions_lazy(tp: Any) -> bool:
    return is_lazy(tp) or any(_mentions_lazy(arg) for arg in typing.get_args(tp))


def _check_io(by_name: Mapping[str, Generated], lazy: set[str]) -> None:
    for name, item in by_name.items():
        io = item.prov.kind == IO or any(
            admitted.admitted_kind(type(m)) in _IO_KINDS
            for _l, m in admitted.modifiers(item.prov.decl)
        )
        if not io:
            continue
        inputs = set(item.node.input_types)
        if (
            name in lazy
            or inputs & lazy
            or _mentions_lazy(item.node.type)
            or any(_mentions_lazy(tp) for tp, _ in item.node.input_types.values())
        ):
            raise ValueError(
                f"node {name!r} ({origin(item.prov.decl)}): a loader or saver connected to a "
                "lazy Spark value is not supported"
            )


def _downstream(start: str, consumers: Mapping[str, list[str]]) -> set[str]:
    seen = {start}
    stack = [start]
    while stack:
        for consumer in consumers.get(stack.pop(), ()):
            if consumer not in seen:
                seen.add(consumer)
                stack.append(consumer)
    return seen
