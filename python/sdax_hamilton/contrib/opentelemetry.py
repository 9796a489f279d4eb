"""OpenTelemetry spans and metrics for sdax_hamilton runs (needs ``opentelemetry-api``).

Two observers: :class:`SpanObserver` (traces, below) and :class:`MetricsObserver` (counters
and histograms through the OpenTelemetry metrics API; see its docstring and docs/api.md).

::

    from opentelemetry import trace
    from sdax_hamilton.contrib.opentelemetry import SpanObserver

    observer = SpanObserver(trace.get_tracer("my.app"))
    await plan.execute(inputs=..., observer=observer)

One ``SpanObserver`` can serve any number of runs, also concurrent ones. Per run it emits a
span ``sdax_hamilton.run`` (a child of the span current where the run was opened), and under
it one span per node attempt (named after the node) and one per release attempt
(``release <node>``).

The run span has ``sdax_hamilton.run_id``, the id the run's log records and events carry.
Attributes of attempt spans: ``sdax_hamilton.node``, ``sdax_hamilton.attempt`` (1-based),
``sdax_hamilton.release`` (bool), ``sdax_hamilton.outcome`` (``succeeded``, ``failed``,
``timed_out`` or ``cancelled``) and, for a failure, ``error.type`` (the exception's
qualified class name) with span status ``ERROR``. Exceptions are recorded by type only: an
``exception`` span event carries ``exception.type`` and nothing else, because messages,
arguments and results may hold secrets. Retry waits (``retry_scheduled`` with
``sdax_hamilton.retry_delay``), dropped retries and rejected inputs are events on the run
span.

Run timeouts (docs/lifecycle.md, "Deadlines and server-directed waits"): the run span has
``sdax_hamilton.timeout`` (seconds) when the run was given one; an attempt span whose
timeout was cut to the time left has ``sdax_hamilton.clipped`` set to true (so has its
``timeout`` event); ``retry_skipped`` (a retry without time left; ``sdax_hamilton.retry_delay``
is the wait that did not fit) and ``deadline_expired`` are events on the run span.

Spans the node functions create themselves are children of the context the run was
opened in, not of these attempt spans (an observer cannot enter a node's context).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

try:
    from opentelemetry import metrics, trace
    from opentelemetry.trace import Status, StatusCode
except ImportError as missing:  # pragma: no cover - exercised with the package hidden
    raise ImportError(
        "sdax_hamilton.contrib.opentelemetry needs the 'opentelemetry-api' package "
        "(pip install opentelemetry-api)"
    ) from missing

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.metrics import Histogram, Meter, MeterProvider
    from opentelemetry.trace import Span, Tracer

    from .._observe import RunEvent

__all__ = ["MetricsObserver", "SpanObserver"]

_PREFIX = "sdax_hamilton."
_END_OUTCOME = {
    "attempt_succeeded": "succeeded",
    "release_succeeded": "succeeded",
    "attempt_failed": "failed",
    "release_failed": "failed",
    "attempt_cancelled": "cancelled",
}


def error_type(error: BaseException) -> str:
    """The qualified class name of ``error`` (``ValueError``, ``mypkg.errors.Busy``)."""
    cls = type(error)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


@dataclass
class _Attempt:
    span: Span
    timed_out: bool = False


@dataclass
class _Run:
    span: Span | None
    context: Context | None
    attempts: dict[tuple[str, bool, int], _Attempt] = field(default_factory=dict)


class SpanObserver:
    """An observer (``observer=SpanObserver(tracer)``) emitting OpenTelemetry spans.

    ``tracer`` defaults to ``opentelemetry.trace.get_tracer("sdax_hamilton")``.
    """

    __slots__ = ("_runs", "_tracer")

    def __init__(self, tracer: Tracer | None = None) -> None:
        self._tracer = tracer if tracer is not None else trace.get_tracer("sdax_hamilton")
        self._runs: dict[str, _Run] = {}

    def __call__(self, event: RunEvent) -> None:
        kind = event.kind
        run = self._runs.get(event.run)
        if kind == "run_started" or run is None:
            run = self._runs[event.run] = self._start_run(event)
            if kind == "run_started":
                return
        if kind == "run_finished":
            self._finish(event, run)
        elif kind == "attempt_started" or kind == "release_started":
            self._start_attempt(event, run)
        elif kind in _END_OUTCOME:
            attempt = run.attempts.pop(_key(event), None)
            if attempt is not None:
                outcome = _END_OUTCOME[kind]
                if outcome == "failed" and attempt.timed_out:
                    outcome = "timed_out"
                _end(attempt.span, outcome, event.error)
        elif kind == "attempt_timed_out" or kind == "release_timed_out":
            attempt = run.attempts.get(_key(event))
            if attempt is not None:
                attempt.timed_out = True
                if event.clipped:
                    attempt.span.add_event("timeout", {_PREFIX + "clipped": True})
                else:
                    attempt.span.add_event("timeout")
        elif run.span is not None:
            _add_run_event(run.span, event)

    def _start_run(self, event: RunEvent) -> _Run:
        """The run's record; its span only when the observer saw the run start."""
        if event.kind != "run_started":
            return _Run(None, None)
        attributes: dict[str, str | int | float | bool] = {
            _PREFIX + "nodes": len(event.nodes),
            _PREFIX + "run_id": event.run,
        }
        if event.deadline is not None:
            attributes[_PREFIX + "timeout"] = event.deadline - event.time
        span = self._tracer.start_span("sdax_hamilton.run", attributes=attributes)
        return _Run(span, trace.set_span_in_context(span))

    def _start_attempt(self, event: RunEvent, run: _Run) -> None:
        release = event.kind.startswith("release_")
        attributes: dict[str, str | int | float | bool] = {
            _PREFIX + "node": event.node,
            _PREFIX + "attempt": event.attempt,
            _PREFIX + "release": release,
        }
        if event.clipped:
            attributes[_PREFIX + "clipped"] = True
        if event.bulkhead_wait is not None:  # docs/resilience.md
            attributes[_PREFIX + "bulkhead_wait"] = event.bulkhead_wait
        if event.breaker_state is not None:
            attributes[_PREFIX + "breaker_state"] = event.breaker_state
        span = self._tracer.start_span(
            f"release {event.node}" if release else event.node,
            context=run.context,
            attributes=attributes,
        )
        run.attempts[_key(event)] = _Attempt(span)

    def _finish(self, event: RunEvent, run: _Run) -> None:
        del self._runs[event.run]
        for attempt in run.attempts.values():  # only after an internal failure
            _end(attempt.span, "cancelled", None)
        span = run.span
        if span is None:
            return
        error = event.error
        if error is None:
            span.set_attribute(_PREFIX + "outcome", "succeeded")
        elif isinstance(error, asyncio.CancelledError):
            span.set_attribute(_PREFIX + "outcome", "cancelled")
        else:
            _fail(span, error)
            span.set_attribute(_PREFIX + "outcome", "failed")
        span.end()


def _key(event: RunEvent) -> tuple[str, bool, int]:
    """An attempt's key in its run: the node, whether the call is its release, and the
    attempt's number (a hedged round's calls overlap, docs/hedging.md)."""
    return (event.node, event.kind.startswith("release_"), event.attempt)


def _add_run_event(span: Span, event: RunEvent) -> None:
    """Any other event (a retry scheduled, an input rejected...) as an event of the run span."""
    attributes: dict[str, str | int | float | bool] = {_PREFIX + "node": event.node}
    if event.attempt:
        attributes[_PREFIX + "attempt"] = event.attempt
    if event.delay is not None:
        attributes[_PREFIX + "retry_delay"] = event.delay
    if event.error is not None:
        attributes["error.type"] = error_type(event.error)
    span.add_event(event.kind, attributes)


def _fail(span: Span, error: BaseException) -> None:
    name = error_type(error)
    span.set_attribute("error.type", name)
    span.add_event("exception", {"exception.type": name})
    span.set_status(Status(StatusCode.ERROR, name))


def _end(span: Span, outcome: str, error: BaseException | None) -> None:
    span.set_attribute(_PREFIX + "outcome", outcome)
    if error is not None:
        _fail(span, error)
    span.end()


# ------------------------------------------------------------------------------- metrics

_NODE = _PREFIX + "node"
_RELEASE = _PREFIX + "release"
_OUTCOME = _PREFIX + "outcome"

_Attributes = dict[str, str | bool]

# Durations are read from this clock when each event arrives (events are emitted as their
# moment happens): ``RunEvent.time`` is the loop's clock, which uvloop keeps in whole
# milliseconds, too coarse for attempts that take microseconds.
_clock: Final = time.perf_counter


class _Call:
    """One node's (or one release's) calls within one run, as the metrics need them."""

    __slots__ = ("error", "failed", "started", "timed_out")

    def __init__(self) -> None:
        self.started: float | None = None  # loop time the current attempt started
        self.timed_out = False  # the current attempt ran out of time
        self.failed = False  # the last attempt failed and no retry followed (yet)
        self.error = ""  # its error.type


class _RunCalls:
    __slots__ = ("calls", "started")

    def __init__(self, started: float | None) -> None:
        self.started = started
        self.calls: dict[tuple[str, bool], _Call] = {}


# Bucket boundaries in seconds (OpenTelemetry's semantic conventions for durations); the SDK's
# default ones (0 to 10000) suit milliseconds.
_SECONDS_BUCKETS: Final = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    0.75,
    1,
    2.5,
    5,
    7.5,
    10,
)


def _seconds_histogram(meter: Meter, name: str, description: str) -> Histogram:
    """A histogram in seconds, with bucket boundaries advised when the API can (1.23+)."""
    create = meter.create_histogram
    if "explicit_bucket_boundaries_advisory" in inspect.signature(create).parameters:
        return create(
            name,
            unit="s",
            description=description,
            explicit_bucket_boundaries_advisory=list(_SECONDS_BUCKETS),
        )
    return create(name, unit="s", description=description)  # pragma: no cover - older API


class MetricsObserver:
    """An observer (``observer=MetricsObserver()``) recording OpenTelemetry metrics.

    ``meter_provider`` defaults to the global one (``opentelemetry.metrics``): without an
    SDK configured, every instrument is a no-op. One instance serves every run of the
    application, also concurrent ones; a run without it pays nothing. Instruments (meter
    ``sdax_hamilton``):

    * ``sdax_hamilton.attempts`` (counter, ``{attempt}``): every attempt once it ended, with
      ``sdax_hamilton.node``, ``sdax_hamilton.release`` (bool) and ``sdax_hamilton.outcome``
      (``succeeded``, ``failed``, ``timed_out``, ``cancelled``).
    * ``sdax_hamilton.attempt.duration`` (histogram, ``s``): the same attempts' durations,
      same attributes.
    * ``sdax_hamilton.retries`` (counter, ``{retry}``): retry waits scheduled (node,
      release).
    * ``sdax_hamilton.timeouts`` (counter, ``{timeout}``): attempts that ran out of time
      (node, release).
    * ``sdax_hamilton.failures`` (counter, ``{failure}``): nodes and releases that failed
      for good in a run (node, release, ``error.type``: the exception's qualified class).
    * ``sdax_hamilton.releases`` (counter, ``{release}``): releases that ended in the run,
      with ``sdax_hamilton.node`` and ``sdax_hamilton.outcome`` (``succeeded``, ``failed``).
    * ``sdax_hamilton.runs`` (counter, ``{run}``) and ``sdax_hamilton.run.duration``
      (histogram, ``s``): finished runs, with ``sdax_hamilton.outcome`` (``succeeded``,
      ``failed``, ``cancelled``).

    Durations are ``time.perf_counter()`` differences between the events. Attributes name
    nodes and exception types only, never values (they may hold secrets), so the series
    stay as few as the graph's nodes.
    """

    __slots__ = (
        "_attempt_duration",
        "_attempts",
        "_failures",
        "_releases",
        "_retries",
        "_run_duration",
        "_runs",
        "_runs_seen",
        "_timeouts",
    )

    def __init__(self, meter_provider: MeterProvider | None = None) -> None:
        from .. import __version__

        provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        meter = provider.get_meter("sdax_hamilton", __version__)
        self._attempts = meter.create_counter(
            _PREFIX + "attempts", unit="{attempt}", description="Attempts of node and release calls"
        )
        self._attempt_duration = _seconds_histogram(
            meter, _PREFIX + "attempt.duration", "Duration of each attempt"
        )
        self._retries = meter.create_counter(
            _PREFIX + "retries", unit="{retry}", description="Retry waits scheduled"
        )
        self._timeouts = meter.create_counter(
            _PREFIX + "timeouts", unit="{timeout}", description="Attempts that ran out of time"
        )
        self._failures = meter.create_counter(
            _PREFIX + "failures",
            unit="{failure}",
            description="Nodes and releases that failed for good",
        )
        self._releases = meter.create_counter(
            _PREFIX + "releases", unit="{release}", description="Releases that ended"
        )
        self._runs = meter.create_counter(
            _PREFIX + "runs", unit="{run}", description="Runs that finished"
        )
        self._run_duration = _seconds_histogram(
            meter, _PREFIX + "run.duration", "Duration of each run, releases included"
        )
        self._runs_seen: dict[str, _RunCalls] = {}

    def __call__(self, event: RunEvent) -> None:
        kind = event.kind
        run = self._runs_seen.get(event.run)
        if run is None:
            run = self._runs_seen[event.run] = _RunCalls(
                _clock() if kind == "run_started" else None
            )
        if kind == "run_started" or kind == "shutdown_started":
            return
        if kind == "run_finished":
            self._finish(event, run)
            return
        release = kind.startswith("release_")
        key = (event.node, release)
        call = run.calls.get(key)
        if call is None:
            call = run.calls[key] = _Call()
        if kind == "attempt_started" or kind == "release_started":
            call.started = _clock()
            call.timed_out = False
            call.failed = False
        elif kind in _END_OUTCOME:
            self._attempt_ended(event, call, release, _END_OUTCOME[kind])
        elif kind == "attempt_timed_out" or kind == "release_timed_out":
            call.timed_out = True
            self._timeouts.add(1, {_NODE: event.node, _RELEASE: release})
        elif kind == "retry_scheduled" or kind == "release_retry_scheduled":
            call.failed = False
            self._retries.add(1, {_NODE: event.node, _RELEASE: release})
        elif kind == "input_rejected" or kind == "deadline_expired":
            call.failed = True
            call.error = "" if event.error is None else error_type(event.error)

    def _attempt_ended(self, event: RunEvent, call: _Call, release: bool, outcome: str) -> None:
        if outcome == "failed":
            call.failed = True
            call.error = "" if event.error is None else error_type(event.error)
            if call.timed_out:
                outcome = "timed_out"
        elif outcome == "succeeded" and release:
            self._releases.add(1, {_NODE: event.node, _OUTCOME: "succeeded"})
        attributes: _Attributes = {_NODE: event.node, _RELEASE: release, _OUTCOME: outcome}
        self._attempts.add(1, attributes)
        if call.started is not None:
            self._attempt_duration.record(max(_clock() - call.started, 0.0), attributes)
            call.started = None
        call.timed_out = False

    def _finish(self, event: RunEvent, run: _RunCalls) -> None:
        del self._runs_seen[event.run]
        for (node, release), call in run.calls.items():
            if not call.failed:
                continue
            attributes: _Attributes = {_NODE: node, _RELEASE: release}
            if call.error:
                attributes["error.type"] = call.error
            self._failures.add(1, attributes)
            if release:
                self._releases.add(1, {_NODE: node, _OUTCOME: "failed"})
        error = event.error
        if error is None:
            outcome = "succeeded"
        elif isinstance(error, asyncio.CancelledError):
            outcome = "cancelled"
        else:
            outcome = "failed"
        self._runs.add(1, {_OUTCOME: outcome})
        if run.started is not None:
            self._run_duration.record(max(_clock() - run.started, 0.0), {_OUTCOME: outcome})
