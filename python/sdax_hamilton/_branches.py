"""A prepared plan's fan-outs (``Parallelizable`` / ``Collect``, docs/fanout.md): each
``Parallelizable`` node's branch found and checked at ``prepare``, before anything runs.

The branch of a ``Parallelizable`` node is every node that depends on it, directly or
through other branch nodes, up to its ``Collect`` node (excluded). The core runs the branch
once per item (core/src/fanout.rs); here the plan is refused where that cannot be done.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from . import _core
from ._executor.jobs import FanOut
from ._spec import NodeSpec
from ._types import checker


def fan_outs(
    nodes: Mapping[str, NodeSpec],
    plan: _core.Plan,
    outputs: Sequence[str],
    replaced: Collection[str],
    check_outputs: bool = True,
) -> tuple[FanOut, ...] | None:
    """The plan's fan-outs, in the plan's order; ``None`` when it has none."""
    active = plan.nodes
    expands = [name for name in active if nodes[name].fan == "expand"]
    collects = [name for name in active if nodes[name].fan == "collect"]
    if not expands and not collects:
        for name in outputs:
            _refuse_branch_output(nodes, name, replaced)
        return None
    consumers: dict[str, list[str]] = {name: [] for name in active}
    for name in active:
        for inp in nodes[name].inputs:
            if inp.name in consumers:
                consumers[inp.name].append(name)
    for name in outputs:
        _refuse_branch_output(nodes, name, replaced)
    found: list[FanOut] = []
    for source in expands:
        branch, collect = _branch(nodes, consumers, source, outputs)
        spec = nodes[collect]
        assert spec.collects is not None  # set on every Collect node by the translation
        collected = next(inp.name for inp in spec.inputs if inp.name == spec.collects)
        if collected not in branch:
            raise ValueError(
                f"Collect node {collect!r} collects {collected!r}, which is not in the branch "
                f"of Parallelizable node {source!r}: collect a node that depends on {source!r}"
            )
        found.append(
            FanOut(
                source=plan.index(source),
                collect=plan.index(collect),
                templates=tuple(sorted((plan.index(n) for n in branch), key=int)),
                limit=nodes[source].max_concurrency,
                keyword=spec.collects,
                collected=collected,
                item_check=checker(nodes[source].type) if check_outputs else None,
            )
        )
    for name in collects:
        if not any(found_.collect == plan.index(name) for found_ in found):
            raise ValueError(
                f"Collect node {name!r} has no Parallelizable node upstream in this plan: "
                "select the Parallelizable node's inputs too, or do not override it"
            )
    return tuple(found)


def _refuse_branch_output(
    nodes: Mapping[str, NodeSpec], name: str, replaced: Collection[str]
) -> None:
    """A Parallelizable node is not an output: its value is the source its branch draws."""
    spec = nodes.get(name)
    if spec is None or name in replaced:
        return
    if spec.fan == "expand":
        raise ValueError(
            f"Node {name!r} is a Parallelizable node: its items are run by its branch; "
            "select its Collect node, which receives the list of the items' results"
        )


def _branch(
    nodes: Mapping[str, NodeSpec],
    consumers: Mapping[str, list[str]],
    source: str,
    outputs: Sequence[str],
) -> tuple[set[str], str]:
    """The branch of ``source`` and its one ``Collect`` node; refusals name the nodes."""
    branch: set[str] = set()
    collects: set[str] = set()
    stack = list(consumers[source])
    while stack:
        name = stack.pop()
        if name in branch or name in collects:
            continue
        spec = nodes[name]
        if spec.fan == "collect":
            collects.add(name)
            continue
        if spec.fan == "expand":
            raise ValueError(
                f"Parallelizable node {name!r} is inside the branch of Parallelizable node "
                f"{source!r}: nested Parallelizable nodes are not supported; collect the "
                "inner items first, or flatten the items into one Parallelizable node"
            )
        branch.add(name)
        stack.extend(consumers[name])
    for name in outputs:
        if name in branch:
            raise ValueError(
                f"Node {name!r} runs once per item of Parallelizable node {source!r} and "
                "cannot be selected on its own; select its Collect node, which receives the "
                "list of the items' results"
            )
    if len(collects) != 1:
        found = ", ".join(repr(n) for n in sorted(collects)) or "none"
        raise ValueError(
            f"Parallelizable node {source!r} needs exactly one Collect node downstream in "
            f"this plan, found {found}: select one Collect node that collects its branch"
        )
    (collect,) = collects
    for name in branch:
        for consumer in consumers[name]:
            if consumer not in branch and consumer != collect:
                raise ValueError(
                    f"Node {consumer!r} takes {name!r}, which runs once per item of "
                    f"Parallelizable node {source!r}, without collecting it: take the "
                    f"Collect node {collect!r} instead"
                )
    return branch, collect
