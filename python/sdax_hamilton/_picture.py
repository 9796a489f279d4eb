"""The plan picture: Graphviz DOT of a selection, and rendering it when Graphviz is there."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ._core import Policy
from ._spec import NodeSpec


def _quote(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _seconds(value: float) -> str:
    return f"{value:g}s"


def _policy_text(policy: Policy) -> str:
    """``"timeout 5s, retries 3, max wait 30s, retry_after"``; empty for the default."""
    parts = []
    if policy.timeout is not None:
        parts.append(f"timeout {_seconds(policy.timeout)}")
    if policy.retries:
        parts.append(f"retries {policy.retries}")
    if policy.max_delay is not None:
        parts.append(f"max wait {_seconds(policy.max_delay)}")
    if policy.retry_after is not None:
        parts.append("retry_after")
    return ", ".join(parts)


def _attributes(**attrs: str) -> str:
    return ", ".join(f"{key}={_quote(value)}" for key, value in attrs.items())


def _node_line(spec: NodeSpec, output_set: frozenset[str]) -> str:
    """One node's statement: its policy, the resource it owns or borrows, output or not."""
    policy = _policy_text(spec.policy)
    label = [spec.name, policy] if policy else [spec.name]
    attrs = {"shape": "box"}
    if spec.release is not None:
        release = spec.release.origin.rsplit(".", 1)[-1]
        label.append(f"owns resource; release {release}")
        release_policy = _policy_text(spec.release.policy)
        if release_policy:
            label.append(f"release {release_policy}")
        attrs["style"] = "rounded,bold"
    elif spec.borrows:
        label.append("borrows " + ", ".join(spec.borrows))
        attrs["style"] = "rounded"
    if spec.name in output_set:
        attrs["peripheries"] = "2"
        label.append("output")
    attrs["label"] = "\n".join(label)
    return f"  {_quote(spec.name)} [{_attributes(**attrs)}];"


def plan_to_dot(
    specs: Sequence[NodeSpec],
    *,
    outputs: Sequence[str],
    inputs: Iterable[str],
    replaced: Mapping[str, str],
    shutdown: Iterable[tuple[str, str]],
) -> str:
    """DOT source of a selection. ``shutdown`` is the core's release order as
    ``(dependent, owner)`` pairs (``_core.Plan.shutdown_edges``), drawn as is."""
    output_set = frozenset(outputs)
    active = {spec.name for spec in specs}
    lines = [
        "digraph plan {",
        "  rankdir=LR;",
        '  node [fontname="Helvetica", fontsize=11];',
        '  edge [fontname="Helvetica", fontsize=9];',
    ]
    for name in inputs:
        attrs_text = _attributes(shape="parallelogram", label=name + "\ninput")
        lines.append(f"  {_quote(name)} [{attrs_text}];")
    for name, source in sorted(replaced.items()):
        attrs = {"shape": "box", "style": "dashed", "label": f"{name}\n{source} value"}
        if name in output_set:
            attrs["peripheries"] = "2"
        lines.append(f"  {_quote(name)} [{_attributes(**attrs)}];")
    lines.extend(_node_line(spec, output_set) for spec in specs)
    known = active | set(replaced) | set(inputs)
    for spec in specs:
        for inp in spec.inputs:
            if inp.name in known:
                lines.append(f"  {_quote(inp.name)} -> {_quote(spec.name)};")
        for owner in spec.borrows:
            if owner in known:
                attrs_text = _attributes(style="dotted", label="borrows")
                lines.append(f"  {_quote(owner)} -> {_quote(spec.name)} [{attrs_text}];")
    for dependent, owner in shutdown:
        attrs_text = _attributes(
            style="dashed", color="gray40", label="released before", constraint="false"
        )
        lines.append(f"  {_quote(dependent)} -> {_quote(owner)} [{attrs_text}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render(dot: str, path: str | os.PathLike[str], *, format: str | None = None) -> Path:
    try:
        import graphviz  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError as error:
        raise ImportError(
            "PreparedPlan.visualize() needs the 'graphviz' package "
            "(pip install graphviz) and Graphviz's 'dot' program; "
            "PreparedPlan.to_dot() works without them"
        ) from error
    target = Path(path)
    fmt = format or target.suffix.lstrip(".") or "png"
    source: Any = graphviz.Source(dot)
    try:
        data: bytes = source.pipe(format=fmt)
    except graphviz.ExecutableNotFound as error:
        raise RuntimeError(
            "PreparedPlan.visualize() could not run Graphviz's 'dot' program; "
            "install Graphviz (e.g. apt-get install graphviz)"
        ) from error
    target.write_bytes(data)
    return target
