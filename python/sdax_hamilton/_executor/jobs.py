"""The job table: what each of the core's job ids stands for, built once per plan.

The core numbers a plan's jobs ``0 .. 2n``: job ``i < n`` is the forward job of active node
``i``, job ``n + i`` the release of node ``i`` (docs/internals.md, "The core's run
protocol"). This is the one place that decodes that numbering; everything else asks the
table (``jobs[job]``) and reads the record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Self

from .. import _core
from .._hamilton.caching import Cache, NodeCache
from .._resilience import RetryBudget
from .runtime import NodeRuntime, ReleaseRuntime, carrier_of


@dataclass(frozen=True, slots=True, eq=False)
class Job:
    """One job of a plan: a node's forward job, or the release of an owned node."""

    id: int
    """The core's job id."""
    forward: bool
    """A forward job (else a release job)."""
    node: NodeRuntime
    """The node (for a release job: the node whose acquisition it releases)."""
    owner: int
    """The node's index in the plan (``id`` for a forward job)."""
    name: str
    """The node's name, as in events."""
    subject: str
    """``node 'name'`` or ``release of 'name'``, as in notes and logs."""
    retryable: tuple[type[BaseException], ...]
    """The retryable exceptions of the job's policy."""
    hook: Callable[[BaseException], object] | None
    """The job's ``retry_after`` hook (called when the core emits a HINT)."""
    release: ReleaseRuntime | None
    """For a release job: the release it calls (``None`` for a node that owns nothing)."""
    guarded: bool = False
    """A forward job naming a bulkhead, a breaker or hedging: its attempts are admitted
    before the call, by ``guards.Guards`` or (a lone first attempt of a node without
    hedging, admitted at once) by the core's ``Run`` (src/carry.rs); a hedged one's call
    is a round (``hedging.py``)."""
    plain: bool = False
    """A forward job that is neither guarded nor owns a release: how its attempts end is
    the common case (``Outcomes.returned``'s first branch)."""


class PlanCache:
    """A plan's caching: the Driver's cache and each active node's decision."""

    __slots__ = ("cache", "nodes", "replays")

    def __init__(
        self,
        cache: Cache,
        nodes: Sequence[NodeCache | None],
        replays: Sequence[Callable[[Any, dict[str, Any]], Any] | None],
    ) -> None:
        self.cache = cache
        self.nodes = tuple(nodes)  # per forward job; None: not cached
        # Per forward job: the lifecycle adapters' node hooks around a hit, if any.
        self.replays = tuple(replays)


@dataclass(frozen=True, slots=True)
class FanOut:
    """One ``Parallelizable`` node of a plan and its branch (built once per plan)."""

    source: int
    """The ``Parallelizable`` node's job."""
    collect: int
    """The ``Collect`` node's job."""
    templates: tuple[int, ...]
    """The branch's nodes' jobs, in the plan's (dependency) order."""
    limit: int | None
    """``max_concurrency``."""
    keyword: str
    """The ``Collect`` node's parameter receiving the list."""
    collected: str
    """The branch node whose results the list holds."""
    item_check: Callable[[Any], bool] | None = None
    """Checks each item against the ``T`` of ``Parallelizable[T]`` (``None``: unchecked)."""

    def core_args(self) -> tuple[int, int, list[int], int | None]:
        return self.source, self.collect, list(self.templates), self.limit


class JobTable(tuple[Job, ...]):
    """Every job of one plan, indexed by the core's job id (a tuple: ``jobs[job]``), with
    the plan's node runtimes and carrier.

    Built once per plan (``PreparedPlan``) and shared by its runs; holds nothing of a run.
    """

    nodes: tuple[NodeRuntime, ...]
    """The runtimes of the plan's active nodes, in the plan's order."""
    forward_count: int
    """The number of active nodes (and so of forward jobs: ids ``0 .. forward_count``)."""
    carrier: _core.Carrier | None
    """How runs of this plan carry out lone STARTs in the core (src/carry.rs); ``None``:
    they do not."""
    calling: _core.Carrier
    """How every job of the plan is called: the carrier's reading of a node's arguments
    serves the driver's own STARTs too (``Carrier.arguments``), so both paths pass the same
    arguments (tests/test_driver_carrier.py). ``carrier`` itself when there is one."""
    cache: PlanCache | None
    """The plan's caching (``Driver(..., cache=)``; a run's side: ``cache.CacheRun``);
    ``None``: none."""

    fan_outs: tuple[FanOut, ...] | None
    """The plan's ``Parallelizable`` nodes and their branches (docs/fanout.md); ``None``:
    none, and runs use this table as it is."""

    shared: tuple[RetryBudget | None, list[int] | None] | None
    """What runs of this plan hand the core's ``Run`` (docs/resilience.md): the Driver's
    retry budget and the forward jobs with a fallback; ``None``: neither."""

    def __new__(
        cls,
        nodes: Sequence[NodeRuntime],
        carrier: _core.Carrier | None = None,
        cache: PlanCache | None = None,
        retry_budget: RetryBudget | None = None,
        fan_outs: tuple[FanOut, ...] | None = None,
    ) -> Self:
        nodes = tuple(nodes)
        n = len(nodes)
        forward = [
            Job(
                i,
                True,
                node,
                i,
                node.name,
                f"node {node.name!r}",
                node.retryable,
                node.retry_after,
                None,
                guarded := (
                    node.bulkhead is not None or node.breaker is not None or node.hedge is not None
                ),
                not guarded and node.release is None,
            )
            for i, node in enumerate(nodes)
        ]
        releases = [
            Job(n + i, False, node, i, node.name, f"release of {node.name!r}",
                () if node.release is None else node.release.retryable,
                None if node.release is None else node.release.retry_after, node.release)
            for i, node in enumerate(nodes)
        ]  # fmt: skip
        table = super().__new__(cls, (*forward, *releases))
        table.nodes = nodes
        table.forward_count = n
        # (A node with a bulkhead or a breaker is carried only when admitted at once:
        # ``carrier_of``, src/carry.rs.)
        fallbacks = [i for i, node in enumerate(nodes) if node.fallback is not None]
        table.shared = (
            None if retry_budget is None and not fallbacks else (retry_budget, fallbacks or None)
        )
        table.carrier = carrier
        table.cache = cache
        table.fan_outs = fan_outs
        table.calling = carrier if carrier is not None else carrier_of(nodes)
        return table

    def __repr__(self) -> str:
        return f"<JobTable of {self.forward_count} nodes>"
