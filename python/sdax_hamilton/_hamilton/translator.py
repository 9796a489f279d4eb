"""The translation, step by step: discover, check, resolve, index, place, specify."""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

from .._spec import NodeSpec
from . import nodes, placement, spark
from .discovery import discover
from .interceptors import Resolver
from .provenance import Generated
from .signatures import SignatureChecks


def translate(
    modules: tuple[ModuleType, ...],
    config: Mapping[str, Any],
    hamilton_nodes: dict[str, Any] | None = None,
    *,
    allow_module_overrides: bool = False,
) -> dict[str, NodeSpec]:
    """Compile ``modules`` under ``config`` into the node table planning works on.

    ``hamilton_nodes``, when given, receives Hamilton's own node for each name (lifecycle
    adapters are shown a Hamilton graph of them, docs/adapters.md).
    ``allow_module_overrides``: a later node replaces an earlier one of the same name
    (Hamilton's ``Builder.allow_module_overrides()``) instead of being refused.
    """
    found = discover(modules)
    checks = SignatureChecks()
    for fn in found.declarations:
        checks.check_declaration(fn)
    for release in found.releases:
        checks.check_release(release)

    resolver = Resolver(checks.facts, found.helpers)
    generated: list[Generated] = []
    for fn in found.roots:
        generated.extend(resolver.resolve(fn, dict(config), ()))
    checks.facts.clear()  # served node creation; free it before the specs are made

    by_name = nodes.index(generated, allow_overrides=allow_module_overrides)
    del generated
    if hamilton_nodes is not None:
        hamilton_nodes.update((name, item.node) for name, item in by_name.items())
    nodes.hamilton_edge_check(by_name, config)
    placed = placement.place(found.declarations, by_name, checks)
    nodes.check_releases(by_name, placed)
    spark.check_graph(by_name, placed)
    borrows = placement.borrows(by_name, frozenset(placed.releases))
    return nodes.specs(by_name, placed, borrows)
