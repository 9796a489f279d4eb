"""Placement: which generated nodes an ``execution`` policy or a ``shutdown`` lands on, and
which owned acquisitions each borrowing node borrows (docs/lifecycle.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import FunctionType
from typing import TYPE_CHECKING, Any

from .. import _declarations, _messages
from .._spec import ReleaseSpec
from .names import declaration, origin, shutdowns_of
from .provenance import ALIAS, CALL, IO, Generated
from .signatures import SignatureChecks
from .snapshot import function_snapshot

if TYPE_CHECKING:
    from .. import _core


@dataclass(frozen=True, slots=True)
class Placement:
    policies: dict[str, _core.Policy]
    """Node -> its ``execution`` policy (nodes without one are absent)."""
    releases: dict[str, tuple[ReleaseSpec, FunctionType]]
    """Owned node -> its release."""
    ownership: frozenset[str]
    """Actual calls of shutdown-declared functions (each must be owned when selected)."""
    guarded: dict[str, _declarations.ExecutionDeclaration]
    """Node -> its ``execution`` declaration, for nodes naming a bulkhead, a breaker, a
    fallback (docs/resilience.md) or hedging (docs/hedging.md)."""
    threaded: frozenset[str] = frozenset()
    """Nodes whose attempts run in a worker thread (``execution(in_thread=True)``)."""


Mounts = dict[tuple[str, ...], list[str]]


def _group(
    declarations: Iterable[FunctionType], by_name: Mapping[str, Generated]
) -> dict[int, Mounts]:
    """id(declaration) -> mount -> its generated nodes, for declarations that place
    anything (an execution policy or a shutdown)."""
    groups: dict[int, Mounts] = {
        id(fn): {}
        for fn in declarations
        if isinstance(declaration(fn), _declarations.ExecutionDeclaration) or shutdowns_of(fn)
    }
    if groups:
        for name, item in by_name.items():
            mounts = groups.get(id(item.prov.decl))
            if mounts is not None:
                mounts.setdefault(item.prov.mount, []).append(name)
    return groups


def place(
    declarations: Iterable[FunctionType],
    by_name: Mapping[str, Generated],
    checks: SignatureChecks,
) -> Placement:
    """Map policies and releases onto generated nodes."""
    declarations = tuple(declarations)
    groups = _group(declarations, by_name)
    policies: dict[str, _core.Policy] = {}
    releases: dict[str, tuple[ReleaseSpec, FunctionType]] = {}
    ownership: set[str] = set()
    guarded: dict[str, _declarations.ExecutionDeclaration] = {}
    threaded: set[str] = set()

    for fn in declarations:
        mounts = groups.get(id(fn), {})
        found = declaration(fn)
        if isinstance(found, _declarations.ExecutionDeclaration):
            for name in targets(fn, found.target, mounts, by_name, io=True):
                if name in policies:
                    raise ValueError(
                        f"Node {name} receives more than one execution policy; give each "
                        "node one execution(...) (check the declarations' target_)"
                    )
                policies[name] = found.policy
                if (
                    found.bulkhead
                    or found.breaker
                    or found.fallback
                    or found.hedge_after is not None
                ):
                    guarded[name] = found
                if found.in_thread:
                    threaded.add(name)
        shutdowns = shutdowns_of(fn)
        if not shutdowns:
            continue
        for names in mounts.values():
            ownership.update(name for name in names if by_name[name].prov.kind == CALL)
        for shutdown in shutdowns:
            _place_release(fn, shutdown, mounts, by_name, checks, releases)
    return Placement(policies, releases, frozenset(ownership), guarded, frozenset(threaded))


def _place_release(
    fn: FunctionType,
    shutdown: Any,
    mounts: Mounts,
    by_name: Mapping[str, Generated],
    checks: SignatureChecks,
    releases: dict[str, tuple[ReleaseSpec, FunctionType]],
) -> None:
    release = shutdown.release
    spec = ReleaseSpec(
        call=function_snapshot(release),
        policy=shutdown.policy,
        acquisition_type=checks.acquired_type(release),
        origin=origin(release),
    )
    for name in targets(fn, shutdown.target, mounts, by_name, io=False):
        if by_name[name].prov.kind != CALL:  # pragma: no cover - io=False
            continue
        previous = releases.get(name)
        if previous is not None and previous[1] is not release:
            raise ValueError(
                f"duplicate shutdown declaration for node {name}: "
                f"{previous[0].origin} and {spec.origin}; keep one release per node"
            )
        releases[name] = (spec, release)


def _public(name: str, mount: tuple[str, ...]) -> str:
    prefix = ".".join(mount) + "." if mount else ""
    return name[len(prefix) :] if prefix and name.startswith(prefix) else name


def targets(
    fn: FunctionType,
    target: tuple[str, ...] | str | None,
    mounts: Mapping[tuple[str, ...], list[str]],
    by_name: Mapping[str, Generated],
    *,
    io: bool,
) -> list[str]:
    """The nodes a declaration of ``fn`` lands on."""
    if isinstance(target, str):
        target = (target,)
    placed: list[str] = []
    missing: list[str] = []
    generated: list[str] = []  # public names of the candidates, for the error below
    for mount, names in mounts.items():
        calls = [name for name in names if by_name[name].prov.kind == CALL]
        if target is None:
            # the pipeline steps calling a helper are its calls wherever they are; only
            # the nodes its own resolution made must be one
            own = [name for name in calls if not by_name[name].prov.helper]
            if not mount and len(own) > 1:
                raise ValueError(
                    f"expanded declaration requires explicit target_: {origin(fn)} "
                    f"generates {_messages.names(calls)}; pass target_= naming the ones "
                    "the declaration is for (a name or a list of names)"
                )
            placed.extend(calls)
            continue
        candidates = calls + (
            [name for name in names if by_name[name].prov.kind == IO] if io else []
        )
        generated.extend(_public(name, mount) for name in names)
        for wanted in target:
            matched = _matching(wanted, mount, names, candidates, by_name)
            if not matched:
                if wanted not in missing:
                    missing.append(wanted)
                continue
            placed.extend(name for name in matched if name not in placed)
    if missing:
        choices = sorted(set(generated))
        raise ValueError(
            f"targets not generated: {_messages.unknown(missing, choices)} (declared on "
            f"{origin(fn)}) — target_ must name nodes it generates: {_messages.names(choices)}"
        )
    return list(dict.fromkeys(placed))


def _matching(
    wanted: str,
    mount: tuple[str, ...],
    names: list[str],
    candidates: list[str],
    by_name: Mapping[str, Generated],
) -> list[str]:
    """The candidates named ``wanted``, else the calls an alias named ``wanted`` derives
    from."""
    matched = [name for name in candidates if name == wanted or _public(name, mount) == wanted]
    if matched:
        return matched
    aliases = [
        name
        for name in names
        if by_name[name].prov.kind == ALIAS and (name == wanted or _public(name, mount) == wanted)
    ]
    return _upstream_calls(aliases, set(names), by_name)


def _upstream_calls(
    aliases: list[str], group: set[str], by_name: Mapping[str, Generated]
) -> list[str]:
    """The calls of the same declaration and mount that an alias derives from."""
    found: list[str] = []
    seen = set(aliases)
    stack = list(aliases)
    while stack:
        name = stack.pop()
        for input_name in by_name[name].node.input_types:
            if input_name in seen or input_name not in group:
                continue
            seen.add(input_name)
            if by_name[input_name].prov.kind == CALL:
                found.append(input_name)
            else:
                stack.append(input_name)
    return sorted(found)


def borrows(by_name: Mapping[str, Generated], owned: frozenset[str]) -> dict[str, tuple[str, ...]]:
    """Owned acquisitions each borrowing-kind node borrows from.

    A projection, validation or pipeline node borrows every owned acquisition in its
    upstream closure (through nodes of any kind, owned ones included).
    """
    aliases = [name for name, item in by_name.items() if item.prov.kind == ALIAS]
    if not owned or not aliases:
        return {}
    empty: frozenset[str] = frozenset()
    memo: dict[str, frozenset[str]] = {}
    visiting: set[str] = set()

    def producers(name: str) -> list[str]:
        return [p for p in by_name[name].node.input_types if p in by_name]

    def closure(start: str) -> frozenset[str]:
        # Iterative post-order; an edge back into the current path (a cycle, reported
        # by planning when selected) contributes nothing.
        stack: list[tuple[str, bool]] = [(start, False)]
        while stack:
            name, expanded = stack.pop()
            if name in memo:
                continue
            if not expanded:
                if name in visiting:
                    continue
                visiting.add(name)
                stack.append((name, True))
                stack.extend(
                    (p, False) for p in producers(name) if p not in memo and p not in visiting
                )
                continue
            found: set[str] = set()
            for producer in producers(name):
                if producer in owned:
                    found.add(producer)
                found.update(memo.get(producer, empty))
            memo[name] = frozenset(found) if found else empty
            visiting.discard(name)
        return memo[start]

    return {name: tuple(sorted(closure(name))) for name in aliases}
