"""OpenTelemetry spans for sdax_hamilton runs (needs ``opentelemetry-api``).

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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

try:
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode
except ImportError as missing:  # pragma: no cover - exercised with the package hidden
    raise ImportError(
        "sdax_hamilton.contrib.opentelemetry needs the 'opentelemetry-api' package "
        "(pip install opentelemetry-api)"
    ) from missing

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer

    from .._observe import RunEvent

__all__ = ["SpanObserver"]

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
    attempts: dict[tuple[str, bool], _Attempt] = field(default_factory=dict)


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


def _key(event: RunEvent) -> tuple[str, bool]:
    """An attempt's key in its run: the node, and whether the call is its release."""
    return (event.node, event.kind.startswith("release_"))


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
