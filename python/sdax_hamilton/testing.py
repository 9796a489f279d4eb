"""Test aids: reproducible jitter, retries without waiting, and a release check.

docs/testing.md shows them in a pytest suite. ``jitter_seed`` and ``instant_retries`` are
the test clock of retries: context managers over context variables that a run reads when it
is opened (``PreparedPlan.open``, and so ``execute``). They affect every run opened inside the
``with`` block, in this task and in tasks created from it (asyncio copies the context into
new tasks), and nothing outside it. Runs opened before the block keep their settings.

::

    from sdax_hamilton.testing import instant_retries, jitter_seed, retry_waits

    with instant_retries():
        await plan.execute(inputs=...)  # same attempts, no retry waits

    @pytest.fixture(autouse=True)
    def _no_retry_waits() -> Iterator[None]:
        with instant_retries():
            yield

:func:`retry_waits` gives the bounds of the waits a node's policy would have made.
:func:`assert_all_released` is an observer that checks, when its block ends, that every
resource the observed runs acquired was released::

    with assert_all_released(plan) as released:
        await plan.execute(inputs=..., observer=released)
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ._executor import INSTANT_RETRIES, JITTER_SEED
from ._observe import RunEvent

if TYPE_CHECKING:
    from ._plan import PreparedPlan

__all__ = ["ReleaseCheck", "assert_all_released", "instant_retries", "jitter_seed", "retry_waits"]


@contextlib.contextmanager
def jitter_seed(seed: int) -> Iterator[None]:
    """Seed the retry jitter of every run opened inside the block with ``seed``.

    Each such run draws its delays from a generator seeded with ``seed``, so two runs with
    the same seed and the same sequence of failures wait exactly the same times (for a
    given build of the package). Any ``int`` works (taken modulo ``2**64``); a ``bool`` or a
    non-int is a ``TypeError``. An inner ``jitter_seed`` block replaces an outer one.
    """
    if type(seed) is not int:
        raise TypeError(f"jitter_seed() needs an int seed, not {type(seed).__name__}")
    token = JITTER_SEED.set(seed)
    try:
        yield
    finally:
        JITTER_SEED.reset(token)


@contextlib.contextmanager
def instant_retries(enabled: bool = True) -> Iterator[None]:
    """Make every retry wait of runs opened inside the block zero seconds.

    Attempts, retry decisions, timeouts and the order of events are unchanged; only the
    waits between attempts (of nodes and of releases) are skipped: the next attempt starts
    one event-loop iteration later. ``RunEvent.delay`` and the retry log records report the
    wait actually taken (``0.0``). ``instant_retries(False)`` restores real waits inside an
    outer block.
    """
    if type(enabled) is not bool:
        raise TypeError(f"instant_retries() needs a bool, not {type(enabled).__name__}")
    token = INSTANT_RETRIES.set(enabled)
    try:
        yield
    finally:
        INSTANT_RETRIES.reset(token)


def retry_waits(
    plan: PreparedPlan, node: str, *, release: bool = False
) -> tuple[tuple[float, float], ...]:
    """The bounds ``(low, high)``, in seconds, of each retry wait of ``node`` (of its
    release with ``release=True``), one pair per retry its policy allows.

    The core computes them from the policy (``initial_delay``, ``backoff_factor``,
    ``max_delay``; a jittered wait lies between half and all of the backoff), as it does
    for a run. With :func:`instant_retries` a test skips the waits; this says what they
    would have been, so the test can check the policy itself without waiting. A wait a
    ``retry_after`` hook gives, or a run's timeout, replaces or cuts the wait of a run.
    """
    specs = {spec.name: spec for spec in plan._program.specs}
    spec = specs.get(node)
    if spec is None:
        close = difflib.get_close_matches(node, specs, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; its nodes: {sorted(specs)}"
        raise ValueError(f"retry_waits(): the plan has no node {node!r}{hint}")
    if release:
        if spec.release is None:
            raise ValueError(
                f"retry_waits(): node {node!r} has no release; "
                "leave out release=True for the node's own retries"
            )
        policy = spec.release.policy
    else:
        policy = spec.policy
    return tuple(policy.delay_bounds(retry) for retry in range(policy.retries))


_UNRELEASED = {
    "running": "never ended",
    "failed": "failed",
    "waiting to retry": "never made its retry",
}


@dataclass
class _RunSeen:
    succeeded: set[str] = field(default_factory=set)  # nodes whose last attempt succeeded
    releases: dict[str, str] = field(default_factory=dict)  # owner -> last release outcome
    errors: dict[str, str] = field(default_factory=dict)  # owner -> its release's last error
    finished: bool = False


class ReleaseCheck:
    """An observer recording, per run, what was acquired and what was released.

    Pass it as ``observer=`` (alone or in a list) to any number of runs, then call
    :meth:`assert_all_released` (or use :func:`assert_all_released`, which calls it when
    its block ends). ``plans``: the plans whose runs it will see; with them it also knows
    which nodes own a resource, so that an owner that succeeded without any release of its
    own is a failure too. Without, it checks the releases that started.
    """

    __slots__ = ("_owners", "_runs")

    def __init__(self, *plans: PreparedPlan) -> None:
        owners: set[str] = set()
        for plan in plans:
            owners.update(spec.name for spec in plan._program.specs if spec.release is not None)
        self._owners = frozenset(owners)
        self._runs: dict[str, _RunSeen] = {}

    def __call__(self, event: RunEvent) -> None:
        run = self._runs.get(event.run)
        if run is None:
            run = self._runs[event.run] = _RunSeen()
        kind = event.kind
        if kind == "attempt_succeeded":
            run.succeeded.add(event.node)
        elif kind == "release_started":
            run.releases[event.node] = "running"
        elif kind == "release_succeeded":
            run.releases[event.node] = "succeeded"
            run.errors.pop(event.node, None)
        elif kind == "release_failed":
            run.releases[event.node] = "failed"
            if event.error is not None:
                run.errors[event.node] = type(event.error).__qualname__
        elif kind == "release_retry_scheduled":
            run.releases[event.node] = "waiting to retry"
        elif kind == "run_finished":
            run.finished = True

    @property
    def runs(self) -> int:
        """How many runs reported to this observer."""
        return len(self._runs)

    def problems(self) -> list[str]:
        """What was not released, one line per problem (empty when all is well)."""
        found: list[str] = []
        for run_id, run in self._runs.items():
            if not run.finished:
                found.append(
                    f"run {run_id} has not finished: an open() block still open, or a run "
                    "abandoned without being awaited"
                )
            for owner, outcome in run.releases.items():
                if outcome != "succeeded":
                    error = run.errors.get(owner)
                    found.append(
                        f"run {run_id}: the release of {owner!r} {_UNRELEASED[outcome]}"
                        + (f" with {error}" if error else "")
                    )
            for owner in sorted(self._owners & run.succeeded - run.releases.keys()):
                found.append(f"run {run_id}: {owner!r} acquired its resource, never released")
        return found

    def assert_all_released(self) -> None:
        """Raise ``AssertionError`` naming every resource not released, or when no run
        reported to this observer (it was probably not passed as ``observer=``)."""
        if not self._runs:
            raise AssertionError(
                "no run reported to this ReleaseCheck: pass it to each run as observer="
            )
        found = self.problems()
        if found:
            raise AssertionError("not every acquisition was released:\n  " + "\n  ".join(found))


@contextlib.contextmanager
def assert_all_released(*plans: PreparedPlan) -> Iterator[ReleaseCheck]:
    """A :class:`ReleaseCheck` for the runs of the block, checked when the block ends.

    Pass the yielded observer to each run (``observer=released``); when the block exits
    normally, every observed run must have finished with each release it started having
    succeeded (after its retries), and, for the ``plans`` given, every node owning a
    resource that succeeded must have been released. An exception out of the block
    propagates unchecked (the test failed already)::

        with assert_all_released(plan) as released:
            with pytest.raises(ExecutionError):
                await plan.execute(inputs=..., observer=released)
    """
    check = ReleaseCheck(*plans)
    yield check
    check.assert_all_released()
