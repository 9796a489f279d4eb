"""Discovery: the declarations a Driver compiles (docs/api.md, "Driver").

Roots are what Hamilton's own discovery finds in the modules; nested declarations are the
functions their ``subdag``/``parameterized_subdag``/``with_columns`` decorators resolve;
releases are the ``shutdown`` functions of every reached declaration.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from types import FunctionType, ModuleType
from typing import Any

from . import admitted, spark
from .admitted import LIFECYCLE_SET
from .names import check_defining_module, declaration, is_release, loaded, origin, shutdowns_of


@dataclass(frozen=True, slots=True)
class Discovered:
    roots: tuple[FunctionType, ...]
    declarations: tuple[FunctionType, ...]
    """Roots and nested declarations, in discovery order."""
    releases: tuple[FunctionType, ...]
    helpers: tuple[FunctionType, ...] = ()
    """Pipeline step functions carrying an ``execution`` or a ``shutdown``: the step nodes
    calling one are calls of it (docs/contract.md#discovery)."""


def module_functions(module: ModuleType) -> list[FunctionType]:
    """Hamilton's own discovery (``graph_utils.find_functions``), identity-deduplicated."""
    graph_utils = admitted.hamilton_module("graph_utils")
    loaded(module)
    found: list[FunctionType] = []
    seen: set[int] = set()
    for found_as, fn in graph_utils.find_functions(module):
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        check_defining_module(fn, found_as)
        found.append(fn)
    return found


def discover(modules: Iterable[ModuleType]) -> Discovered:
    roots, module_releases = _roots(modules)
    reached: dict[int, FunctionType] = {}
    active: set[int] = set()
    for root in roots:
        _visit(root, reached, active)
    declarations = tuple(reached.values())
    spark.check_declarations(declarations)

    releases: dict[int, FunctionType] = {}
    for fn in declarations:
        for found in shutdowns_of(fn):
            release = found.release
            releases.setdefault(id(release), release)
    for release in module_releases:
        if id(release) not in releases:
            owner = declaration(release).owner  # type: ignore[attr-defined]
            raise ValueError(
                f"Shutdown {origin(release)} is declared for {origin(owner)}, which is "
                "not a node of this Driver; pass the module defining it to Driver(...) too"
            )
    helpers = tuple(
        child for fn in declarations for child in step_helpers(fn) if id(child) in reached
    )
    return Discovered(
        tuple(roots), declarations, tuple(releases.values()), tuple(dict.fromkeys(helpers))
    )


def _roots(modules: Iterable[ModuleType]) -> tuple[list[FunctionType], list[FunctionType]]:
    """The modules' declarations, and the releases defined in them."""
    roots: list[FunctionType] = []
    module_releases: list[FunctionType] = []
    seen_roots: set[int] = set()
    for module in modules:
        for fn in module_functions(module):
            if id(fn) in seen_roots:
                continue
            seen_roots.add(id(fn))
            if is_release(fn):
                module_releases.append(fn)
            elif admitted.is_excluded(fn):
                if shutdowns_of(fn):
                    raise ValueError(
                        f"{origin(fn)} is excluded from the graph (hamilton_exclude) but "
                        f"owns a shutdown declaration ({origin(shutdowns_of(fn)[0].release)}); "
                        "remove one of the two"
                    )
            else:
                roots.append(fn)
    return roots, module_releases


def _visit(fn: FunctionType, reached: dict[int, FunctionType], active: set[int]) -> None:
    """Reach ``fn`` and, depth first, the declarations its subdags resolve."""
    if id(fn) in active:
        raise ValueError(
            f"Recursive subdag declaration cycle at {origin(fn)}; a subdag cannot include "
            "the function that mounts it"
        )
    if id(fn) in reached:
        return
    active.add(id(fn))
    reached[id(fn)] = fn
    for child in nested(fn):
        if is_release(child):
            continue
        if admitted.is_excluded(child):
            if shutdowns_of(child):
                raise ValueError(
                    f"{origin(child)} is excluded from the graph (hamilton_exclude) "
                    "but owns a shutdown declaration"
                )
            continue
        _visit(child, reached, active)
    active.discard(id(fn))


def step_helpers(fn: FunctionType) -> list[FunctionType]:
    """The functions of ``fn``'s pipeline steps (``pipe_input``, ``pipe_output``,
    ``mutate``) that carry an ``execution`` or a ``shutdown`` declaration."""
    if LIFECYCLE_SET.isdisjoint(fn.__dict__):
        return []
    found: list[FunctionType] = []
    for _lifecycle, modifier in admitted.modifiers(fn):
        if admitted.admitted_kind(type(modifier)) not in ("pipe_input", "pipe_output"):
            continue
        for applicable in getattr(modifier, "transforms", ()):
            step_fn = getattr(applicable, "fn", None)
            if isinstance(step_fn, FunctionType) and (
                declaration(step_fn) is not None or shutdowns_of(step_fn)
            ):
                found.append(step_fn)
    return found


def nested(fn: FunctionType) -> list[FunctionType]:
    """Functions a ``subdag``/``parameterized_subdag``/``with_columns`` resolves, and the
    pipeline step functions carrying a declaration."""
    if LIFECYCLE_SET.isdisjoint(fn.__dict__):
        return []
    recursive = admitted.fm("recursive")
    found: list[FunctionType] = []
    for lifecycle, modifier in admitted.modifiers(fn):
        cls = type(modifier)
        sources: Iterable[Any]
        if lifecycle == "generate" and cls is recursive.subdag:
            sources = modifier.subdag_functions  # type: ignore[attr-defined]
        elif lifecycle == "generate" and cls is recursive.parameterized_subdag:
            sources = recursive.subdag.collect_functions(modifier.load_from)  # type: ignore[attr-defined]
        elif lifecycle == "inject" and admitted.admitted_kind(cls) == "with_columns":
            sources = modifier.subdag_functions  # type: ignore[attr-defined]
        else:
            continue
        for source in sources:
            if not isinstance(source, FunctionType):
                raise TypeError(
                    f"{origin(fn)}: subdag source {type(source).__name__} is not a Python "
                    "function; pass the subdag's functions or modules"
                )
            # Subdag functions need not be module attributes: Hamilton's reuse pattern
            # defines them inside a function that returns them (docs/contract.md#discovery).
            found.append(source)
    found.extend(step_helpers(fn))
    return found
