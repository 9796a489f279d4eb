"""Run events and the run report (docs/contract.md#observability).

A run started with ``observer=`` calls the observer with one :class:`RunEvent` at each step
of the run, in causal order, on the event loop thread. :class:`RunReport` is an observer
that accumulates those events into per-node and per-release timings.

Events carry node names, attempt numbers, times and exception objects; nothing here
formats an exception's message or a value flowing through the graph (they may be secrets):
the report keeps exception *type* names only.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, TypeAlias

from . import _timeline

__all__ = [
    "EventKind",
    "NodeReport",
    "Observer",
    "RunEvent",
    "RunReport",
    "new_run_id",
    "observers_of",
]

EventKind: TypeAlias = Literal[
    "run_started",
    "attempt_started",
    "attempt_succeeded",
    "attempt_failed",
    "attempt_timed_out",
    "attempt_cancelled",
    "retry_scheduled",
    "retry_cancelled",
    "retry_skipped",
    "deadline_expired",
    "input_rejected",
    "cache_hit",
    "shutdown_started",
    "release_started",
    "release_succeeded",
    "release_failed",
    "release_timed_out",
    "release_retry_scheduled",
    "run_finished",
    "bulkhead_waiting",
    "bulkhead_rejected",
    "circuit_rejected",
    "fallback_used",
    "hedge_started",
]
"""Every ``RunEvent.kind``; see :class:`RunEvent` for when each is emitted."""


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One step of a run, passed to the run's observer(s).

    ``kind`` says what happened:

    * ``run_started`` (``nodes`` lists the plan's active nodes in topological order;
      ``deadline`` is the loop time at which the run's ``timeout`` ends the forward phase),
      ``shutdown_started`` (the forward phase, and an ``open()`` body, are over; releases
      begin) and ``run_finished`` (everything is released; ``error`` is the exception the
      run raises, ``None`` on success) concern the whole run: ``node`` is ``""`` and
      ``attempt`` is ``0``.
    * ``attempt_started``: the node's function is called for attempt ``attempt``;
      ``clipped`` says its timeout was cut to the time left before the run's deadline.
    * ``attempt_succeeded``: the attempt returned and its value passed the output check.
    * ``attempt_timed_out``: the attempt ran out of time and has been cancelled; it may
      still be unwinding (``clipped``: the time was the run's, not the node's own
      timeout). Its ``attempt_failed`` (``error`` a ``TimeoutError``) follows
      once it has finished.
    * ``attempt_failed``: the attempt failed with ``error`` (also an output that failed its
      check). Followed at once by ``retry_scheduled`` when the node will be retried;
      otherwise the node has failed for good.
    * ``retry_scheduled``: the run waits ``delay`` seconds, then starts attempt
      ``attempt + 1`` (``attempt`` is the one that failed, so the delay lies within
      ``initial_delay * backoff_factor ** (attempt - 1) * [0.5, 1.0]``).
    * ``retry_cancelled``: that wait was dropped because the run is stopping.
    * ``retry_skipped``: follows ``attempt_failed`` instead of ``retry_scheduled`` when the
      failure would be retried but the retry is not taken: ``reason`` ``"deadline"``, the
      wait (``delay``; ``None`` when the deadline had already passed) would not end before
      the run's deadline; ``"budget"``, the Driver's retry budget refused it. The node has
      failed for good with ``error``.
    * ``bulkhead_waiting``: attempt ``attempt`` found every permit of its bulkhead taken
      and waits for one (its ``attempt_started`` follows when it gets one).
    * ``bulkhead_rejected`` / ``circuit_rejected``: attempt ``attempt`` was refused
      without a call (``error`` the ``BulkheadFull`` / ``CircuitOpen``); its
      ``attempt_started`` and ``attempt_failed`` follow, as for any failed attempt.
    * ``fallback_used``: the node failed for good with ``error`` and its fallback's value
      is used in its place; the run goes on.
    * ``hedge_started``: a hedged round (``execution(hedge_after=)``, docs/hedging.md)
      starts another call, attempt ``attempt``; its ``attempt_started`` follows. A loser
      of the round ends with ``attempt_cancelled``, ``reason`` ``"lost to attempt N"``.
    * ``deadline_expired``: the run's deadline passed before attempt ``attempt`` of the node
      could start (it was ready, or its retry wait had ended); the node fails with
      ``error``, a ``TimeoutError``.
    * ``attempt_cancelled``: the run cancelled the attempt (another node failed or the
      caller cancelled) and it has finished unwinding; ``error`` is an exception other
      than ``CancelledError`` it raised meanwhile, else ``None``.
    * ``input_rejected``: the node's inputs failed their type check before its first
      attempt (``error`` is the ``TypeError``); nothing was called, ``attempt`` is ``0``.
    * ``cache_hit``: the node took its value from the cache (``Driver(..., cache=)``,
      docs/caching.md), or from a concurrent run computing the same key; its function
      was not called, ``attempt`` is ``0``.
    * ``release_started`` / ``release_succeeded`` / ``release_failed`` /
      ``release_timed_out`` / ``release_retry_scheduled``: the same for the release of
      the resource owned by ``node``.

    ``time`` is the event loop's clock (``loop.time()``) when the event was emitted.
    ``run`` is the run's id, a UUID string, so one observer can follow several concurrent
    runs. It is the id the run's log records carry (``LogRecord.run_id``), the ``run_id``
    its Hamilton graph hooks receive, :attr:`RunReport.run_id` and the run span's
    ``sdax_hamilton.run_id``.
    """

    kind: EventKind
    node: str
    attempt: int
    time: float
    delay: float | None = None
    """Seconds until the next attempt (``retry_scheduled``, ``release_retry_scheduled``)."""
    error: BaseException | None = None
    """The exception object of a failure (the original, not a copy), else ``None``."""
    run: str = ""
    nodes: tuple[str, ...] = ()
    """``run_started`` only: the plan's active nodes, in topological order."""
    deadline: float | None = None
    """``run_started`` only: loop time at which the run's ``timeout`` expires, else ``None``."""
    clipped: bool = False
    """``attempt_started`` / ``attempt_timed_out``: the attempt's timeout is the time left
    before the run's deadline, shorter than the node's own (or the node has none)."""
    reason: str | None = None
    """``retry_skipped``: ``"deadline"`` or ``"budget"``; else ``None``."""
    bulkhead_wait: float | None = None
    """``attempt_started`` of a node with a bulkhead: seconds the attempt waited for its
    permit (``0.0``: none); else ``None``."""
    breaker_state: str | None = None
    """``attempt_started`` of a node with a circuit breaker: the breaker's state when it
    admitted (``"closed"``, ``"half_open"``) or rejected (``"open"``, ``"half_open"``) the
    attempt; else ``None``."""


Observer: TypeAlias = Callable[[RunEvent], object]
"""Anything callable with one ``RunEvent``; its return value is ignored."""


def new_run_id() -> str:
    """A fresh run id, unique across processes as a service's logs need: a UUID string (its
    version 4) whose first 74 bits are random per process and last 48 count the process's
    runs. ``uuid.uuid4()`` per run would cost a system call (micro-seconds) each time."""
    return f"{_run_ids.head}{next(_run_ids.count):012x}"


class _RunIds:
    """The random part of this process's run ids and their counter."""

    __slots__ = ("count", "head")

    def __init__(self) -> None:
        self.renew()

    def renew(self) -> None:
        self.head = str(uuid.uuid4())[:24]  # "xxxxxxxx-xxxx-4xxx-yxxx-"
        self.count = itertools.count()


_run_ids = _RunIds()
# A forked worker (a pre-forking server's) must not repeat its parent's ids.
os.register_at_fork(after_in_child=_run_ids.renew)


GIVEN_RUN_ID: ContextVar[str | None] = ContextVar("sdax_hamilton_given_run_id", default=None)
"""The id a run is to take, set only while the run is constructed (not entered): by the
Hamilton graph hooks' wrapper (``_adapters.py``), whose hooks got the id first. Runs opened
later, in its nodes say, do not see it."""


def observers_of(observer: object) -> tuple[Observer, ...] | None:
    """Normalise an ``observer=`` argument: ``None``, a callable, or a sequence of them.

    Returns ``None`` when there is nothing to call (``None`` or an empty sequence).
    """
    if observer is None:
        return None
    if callable(observer):
        return (observer,)
    if isinstance(observer, Sequence) and not isinstance(observer, (str, bytes, bytearray)):
        for item in observer:
            if not callable(item):
                raise TypeError(
                    "observer must be a callable or a sequence of callables, "
                    f"got a {type(observer).__name__} containing {type(item).__name__}"
                )
        return tuple(observer) or None
    raise TypeError(
        f"observer must be a callable or a sequence of callables, not {type(observer).__name__}"
    )


# ------------------------------------------------------------------------- run report

Outcome: TypeAlias = Literal[
    "not started", "running", "waiting", "succeeded", "failed", "cancelled"
]


@dataclass(frozen=True, slots=True)
class NodeReport:
    """What one node (or one release) did during a run, as recorded by :class:`RunReport`.

    Times are event-loop times (``loop.time()``); durations are in seconds.
    """

    name: str
    """The node's name (for a release: the name of the node owning the resource)."""
    outcome: Outcome
    """``succeeded``, ``failed``, ``cancelled`` (stopped by the run, also during a retry
    wait), ``not started``, or, while the run is still going, ``running`` / ``waiting``
    (for a retry)."""
    attempts: int
    """Attempts started."""
    timeouts: int
    """Attempts that ran out of time."""
    started: float | None
    """When the first attempt started."""
    finished: float | None
    """When the final outcome was known (``None`` while running or waiting)."""
    in_attempts: float
    """Time spent inside attempts (from each call until it returned, failed or drained)."""
    last_error: str | None
    """Type name of the last exception (``None`` if there was none)."""
    clipped: int = 0
    """Attempts whose timeout was cut to the time left before the run's deadline."""
    retry_skipped: bool = False
    """A retry was not taken because its wait would not have ended before the deadline."""
    expired: bool = False
    """The run's deadline passed before the node's next attempt could start."""
    bulkhead_wait: float = 0.0
    """Seconds its attempts waited for a bulkhead's permit (outside the attempts)."""
    rejections: int = 0
    """Attempts refused without a call (``BulkheadFull``, ``CircuitOpen``)."""
    fallback: bool = False
    """It failed for good and its fallback's value was used (its outcome: ``succeeded``)."""
    cached: bool = False
    """The node's value came from the cache (a ``cache_hit``): no attempt was made."""
    hedges: int = 0
    """Hedged calls started (``hedge_started``; each is also counted in ``attempts``)."""
    won_by: int | None = None
    """The number of the attempt that won a hedged round (one that started a hedge),
    ``None`` without such a win."""

    @property
    def total(self) -> float | None:
        """First start to final outcome, retry waits included (``None`` if unknown)."""
        if self.started is None or self.finished is None:
            return None
        return self.finished - self.started

    @property
    def waiting(self) -> float | None:
        """Time outside attempts between first start and final outcome (retry waits)."""
        total = self.total
        return None if total is None else max(total - self.in_attempts, 0.0)


class _Track:
    """Mutable per-job accumulator behind a ``NodeReport``."""

    __slots__ = (
        "attempt_start",
        "attempts",
        "bulkhead_wait",
        "cached",
        "clipped",
        "expired",
        "fallback",
        "finished",
        "hedges",
        "in_attempts",
        "last_error",
        "open",
        "outcome",
        "rejections",
        "retry_skipped",
        "started",
        "timeouts",
        "wait_since",
        "won_by",
    )

    def __init__(self) -> None:
        self.outcome: Outcome = "not started"
        self.attempts = 0
        self.timeouts = 0
        self.started: float | None = None
        self.finished: float | None = None
        self.attempt_start: float | None = None
        self.in_attempts = 0.0
        self.last_error: str | None = None
        self.clipped = 0
        self.retry_skipped = False
        self.expired = False
        self.bulkhead_wait = 0.0
        self.rejections = 0
        self.fallback = False
        self.wait_since: float | None = None
        self.cached = False
        self.hedges = 0
        self.won_by: int | None = None
        self.open = 0  # attempts running at once (hedged calls overlap)

    def start(self, time: float) -> None:
        self.attempts += 1
        if self.started is None:
            self.started = time
        if not self.open:
            self.attempt_start = time
        self.open += 1
        self.outcome = "running"
        self.finished = None

    def end(
        self, time: float, outcome: Outcome, error: BaseException | None, attempt: int = 0
    ) -> None:
        if outcome == "succeeded" and attempt and self.hedges:
            self.won_by = attempt  # the call that won a hedged round
        if self.open:
            self.open -= 1
        if self.attempt_start is not None and not self.open:
            # Overlapping attempts (a hedged round) count once: from the first start to
            # the last end.
            self.in_attempts += time - self.attempt_start
            self.attempt_start = None
        self.outcome = outcome
        self.finished = time
        if error is not None:
            self.last_error = type(error).__qualname__

    def snapshot(self, name: str) -> NodeReport:
        return NodeReport(
            name=name,
            outcome=self.outcome,
            attempts=self.attempts,
            timeouts=self.timeouts,
            started=self.started,
            finished=self.finished,
            in_attempts=self.in_attempts,
            last_error=self.last_error,
            clipped=self.clipped,
            retry_skipped=self.retry_skipped,
            expired=self.expired,
            bulkhead_wait=self.bulkhead_wait,
            rejections=self.rejections,
            fallback=self.fallback,
            cached=self.cached,
            hedges=self.hedges,
            won_by=self.won_by,
        )


_FORWARD_END: Mapping[str, Outcome] = {
    "attempt_succeeded": "succeeded",
    "attempt_failed": "failed",
    "attempt_cancelled": "cancelled",
    "release_succeeded": "succeeded",
    "release_failed": "failed",
}


def _record_shared_event(track: _Track, kind: str, time: float) -> None:
    """Record an event of what runs share (docs/caching.md, docs/resilience.md) on a node's
    track."""
    if kind == "cache_hit":
        track.cached = True
        track.started = time
        track.end(time, "succeeded", None)
    elif kind == "bulkhead_waiting":
        track.wait_since = time
        if track.started is None:
            track.started = time
        track.outcome = "waiting"
    elif kind == "bulkhead_rejected" or kind == "circuit_rejected":
        track.rejections += 1
    elif kind == "hedge_started":
        track.hedges += 1
    elif kind == "fallback_used":
        track.fallback = True
        track.outcome = "succeeded"
        track.finished = time


class RunReport:
    """An observer that records one run: per node and per release, where the time went.

    ::

        report = RunReport()
        await plan.execute(inputs=..., observer=report)
        print(report.format())

    Use one ``RunReport`` per run: the first event of another run raises ``ValueError``
    (which that run logs once and ignores, as for any observer that raises); the report
    ignores that run's later events. The report can be read while
    the run is going; unfinished nodes then show ``running`` or ``waiting``.
    """

    __slots__ = (
        "_deadline",
        "_entries",
        "_finished",
        "_nodes",
        "_order",
        "_refused",
        "_releases",
        "_run",
        "_run_cancelled",
        "_run_error",
        "_shutdown",
        "_started",
    )

    def __init__(self) -> None:
        self._run: str | None = None
        self._order: tuple[str, ...] = ()
        self._nodes: dict[str, _Track] = {}
        self._releases: dict[str, _Track] = {}
        self._started: float | None = None
        self._shutdown: float | None = None
        self._finished: float | None = None
        self._run_error: str | None = None
        self._run_cancelled = False
        self._deadline: float | None = None
        self._refused: set[str] = set()
        # One entry per event about a call, for the timeline (error type names only).
        self._entries: list[_timeline.Entry] = []

    def __call__(self, event: RunEvent) -> None:
        if self._run is None:
            self._run = event.run
        elif event.run != self._run:
            # One error per misuse, not one per event of the other run.
            if event.run in self._refused:
                return
            self._refused.add(event.run)
            raise ValueError(
                f"a RunReport records one run (run {self._run}); events of run {event.run} "
                "were passed to it and are ignored: give each run a new RunReport()"
            )
        if not self._record_run_event(event):
            self._record_call_event(event)

    def _record_run_event(self, event: RunEvent) -> bool:
        """Record an event about the whole run; False when it is about one call."""
        kind = event.kind
        if kind == "run_started":
            self._started = event.time
            self._deadline = event.deadline
            self._order = event.nodes
            for name in event.nodes:
                self._nodes.setdefault(name, _Track())
        elif kind == "shutdown_started":
            self._shutdown = event.time
        elif kind == "run_finished":
            self._finished = event.time
            # The type name only: keeping the exception would tie its traceback (and the
            # frames it holds) to the report (tests/test_driver_memory.py).
            error = event.error
            if error is not None:
                self._run_error = type(error).__qualname__
                self._run_cancelled = isinstance(error, asyncio.CancelledError)
        else:
            return False
        return True

    def _record_call_event(self, event: RunEvent) -> None:
        """Record an event about one node's or one release's calls."""
        kind = event.kind
        time = event.time
        error = event.error
        self._entries.append(
            (
                kind,
                event.node,
                event.attempt,
                time,
                event.delay,
                None if error is None else type(error).__qualname__,
                event.clipped,
                event.reason,
            )
        )
        release = kind.startswith("release_")
        table = self._releases if release else self._nodes
        track = table.get(event.node)
        if track is None:
            track = table[event.node] = _Track()
        if track.wait_since is not None and kind != "bulkhead_waiting":
            track.bulkhead_wait += time - track.wait_since
            track.wait_since = None
        if kind == "attempt_started" or kind == "release_started":
            track.start(time)
            if event.clipped:
                track.clipped += 1
        elif kind in _FORWARD_END:
            track.end(time, _FORWARD_END[kind], event.error, event.attempt)
        elif kind == "retry_scheduled" or kind == "release_retry_scheduled":
            track.outcome = "waiting"
            track.finished = None
        elif kind == "retry_cancelled":
            track.end(time, "cancelled", None)
        elif kind == "attempt_timed_out" or kind == "release_timed_out":
            track.timeouts += 1
        elif kind == "input_rejected":
            track.end(time, "failed", event.error)
        elif kind == "retry_skipped":
            track.retry_skipped = True
        elif kind == "deadline_expired":
            track.expired = True
            track.end(time, "failed", event.error)
        else:
            _record_shared_event(track, kind, time)

    # ----------------------------------------------------------------- reading

    @property
    def run_id(self) -> str | None:
        """The id of the recorded run (``RunEvent.run``, log records' ``run_id``); ``None``
        before its first event."""
        return self._run

    @property
    def nodes(self) -> Mapping[str, NodeReport]:
        """Every active node of the run (started or not), in topological order."""
        order = self._order or tuple(self._nodes)
        extra = tuple(name for name in self._nodes if name not in set(order))
        return MappingProxyType(
            {name: self._nodes[name].snapshot(name) for name in (*order, *extra)}
        )

    @property
    def releases(self) -> Mapping[str, NodeReport]:
        """The releases that ran, keyed by the node owning the resource, in start order."""
        return MappingProxyType(
            {name: track.snapshot(name) for name, track in self._releases.items()}
        )

    @property
    def started(self) -> float | None:
        """Loop time at which the run started (``None`` before ``run_started``)."""
        return self._started

    @property
    def finished(self) -> float | None:
        """Loop time at which the run finished, releases included (``None`` until then)."""
        return self._finished

    @property
    def deadline(self) -> float | None:
        """Loop time at which the run's ``timeout`` expired or would have (``None``: none)."""
        return self._deadline

    @property
    def timeout(self) -> float | None:
        """The run's ``timeout`` in seconds, as measured from ``run_started``."""
        if self._deadline is None or self._started is None:
            return None
        return self._deadline - self._started

    @property
    def duration(self) -> float | None:
        """Whole run in seconds, from start to the end of the last release."""
        if self._started is None or self._finished is None:
            return None
        return self._finished - self._started

    @property
    def outcome(self) -> Literal["not started", "running", "succeeded", "failed", "cancelled"]:
        """How the run ended: ``cancelled`` when it raised a ``CancelledError``."""
        if self._started is None:
            return "not started"
        if self._finished is None:
            return "running"
        if self._run_error is None:
            return "succeeded"
        return "cancelled" if self._run_cancelled else "failed"

    @property
    def error(self) -> str | None:
        """Type name of the exception the run raised, ``None`` if it did not (yet)."""
        return self._run_error

    def format(self) -> str:
        """A compact table of the run: one row per node and per release.

        The header gives the run's outcome and duration, split into *forward* (from the
        start until releases begin; for ``open()`` this includes the body) and *shutdown*.
        Columns: outcome, attempts (with timeouts, attempts clipped by the run's timeout, a
        retry skipped for lack of time, a next attempt the run's timeout prevented), start
        (offset from the run's start), total (first start to final outcome), in calls (time
        inside attempts), waiting (retry waits: the rest of total) and the last exception's
        type.
        """
        origin = self._started
        header = f"sdax_hamilton run: {self.outcome}"
        if self.error is not None:
            header += f" ({self.error})"
        if origin is not None and self._finished is not None:
            header += f" in {_duration(self._finished - origin)}"
            shutdown = self._shutdown
            if shutdown is not None:
                forward = _duration(shutdown - origin)
                header += f" (forward {forward}, shutdown {_duration(self._finished - shutdown)})"
        timeout = self.timeout
        if timeout is not None:
            header += f"; run timeout {_duration(timeout)}"
        rows: list[tuple[str, ...]] = [
            ("step", "outcome", "attempts", "start", "total", "in calls", "waiting", "last error")
        ]
        for kind, table in (("node", self.nodes), ("release", self.releases)):
            for name, item in table.items():
                attempts = str(item.attempts)
                remarks = _remarks(item)
                if remarks:
                    attempts += f" ({', '.join(remarks)})"
                start = (
                    "-"
                    if item.started is None or origin is None
                    else "+" + _duration(item.started - origin)
                )
                total = item.total
                waiting = item.waiting
                rows.append(
                    (
                        name if kind == "node" else f"release of {name}",
                        item.outcome,
                        attempts,
                        start,
                        "-" if total is None else _duration(total),
                        "-" if item.started is None else _duration(item.in_attempts),
                        "-" if waiting is None else _duration(waiting),
                        item.last_error or "-",
                    )
                )
        return "\n".join([header, *_table(rows)])

    def __str__(self) -> str:
        return self.format()

    def _recording(self) -> _timeline.Recording:
        return _timeline.Recording(
            run=self._run,
            order=tuple(self.nodes),
            releases=tuple(self._releases),
            started=self._started,
            shutdown=self._shutdown,
            finished=self._finished,
            deadline=self._deadline,
            outcome=self.outcome,
            error=self._run_error,
            entries=tuple(self._entries),
        )

    def to_chrome_trace(self) -> dict[str, object]:
        """The run in the Trace Event Format, which Perfetto and ``chrome://tracing`` load
        (``json.dump`` it to a file): a track per node and per release, a span per attempt
        (outcome, exception type), retry waits, marks for skipped retries and the like, the
        run and its forward and shutdown phases. Times are microseconds from the run's
        start (docs/timeline.md)."""
        return _timeline.chrome_trace(self._recording())

    def to_svg(self) -> str:
        """The run's timeline as a standalone SVG document: a row per node then per
        release, a bar per attempt coloured by outcome, retry waits hatched, releases after
        the forward phase, a time axis (docs/timeline.md)."""
        return _timeline.svg(self._recording())

    def _repr_svg_(self) -> str:
        """Notebooks (IPython, Jupyter) show a report as its timeline."""
        return self.to_svg()

    def __repr__(self) -> str:
        return (
            f"<RunReport {self.outcome}: nodes={len(self._nodes)} releases={len(self._releases)}>"
        )


def _remarks(item: NodeReport) -> list[str]:
    """What ``RunReport.format`` says after a step's attempt count."""
    remarks = []
    if item.timeouts:
        remarks.append(f"{item.timeouts} timed out")
    if item.clipped:
        remarks.append(f"{item.clipped} clipped")
    if item.retry_skipped:
        remarks.append("no time to retry")
    if item.expired:
        remarks.append("run timed out")
    if item.cached:
        remarks.append("from cache")
    return remarks


def _duration(seconds: float) -> str:
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1.0:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


_RIGHT = frozenset({2, 3, 4, 5, 6})  # numeric columns are right-aligned


def _table(rows: Iterable[tuple[str, ...]]) -> list[str]:
    materialised = list(rows)
    widths = [max(len(row[i]) for row in materialised) for i in range(len(materialised[0]))]
    lines = []
    for row in materialised:
        cells = [
            cell.rjust(widths[i]) if i in _RIGHT else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  " + "  ".join(cells).rstrip())
    return lines
