"""The OpenTelemetry adapter (docs/contract.md#opentelemetry), checked with the SDK's in-memory
exporter."""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from sdax_hamilton import Driver, ExecutionError, RunReport
from sdax_hamilton.contrib.opentelemetry import SpanObserver, error_type
from sdax_hamilton.testing import instant_retries

SECRET = "hunter2-secret-value"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.clear()


@pytest.fixture
def tracer(exporter: InMemorySpanExporter) -> trace.Tracer:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("tests")


GRAPH = f"""
import asyncio
from sdax_hamilton import Acquisition, execution, shutdown

class Secretive(Exception):
    pass

class Connection:
    pass

async def connection(password: str) -> Connection:
    return Connection()

@shutdown(of=connection, retries=1, initial_delay=0)
async def close(acquired: Acquisition[Connection]) -> None:
    closes = getattr(close, "count", 0) + 1
    close.count = closes
    if closes == 1:
        raise ConnectionAbortedError("{SECRET}")

@execution(retries=2, initial_delay=0, timeout=0.05)
async def rows(connection: Connection, attempts: list[int]) -> int:
    attempts.append(1)
    if len(attempts) == 1:
        await asyncio.Event().wait()  # times out
    if len(attempts) == 2:
        raise ConnectionResetError("{SECRET}")
    return 3

async def total(rows: int, fail: bool) -> int:
    if fail:
        raise Secretive("{SECRET}")
    return rows
"""


def spans_named(exporter: InMemorySpanExporter) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in exporter.get_finished_spans():
        found.setdefault(span.name, []).append(span)
    return found


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def assert_no_secret(exporter: InMemorySpanExporter) -> None:
    for span in exporter.get_finished_spans():
        texts = [repr(span.attributes), repr(span.status.description)]
        texts += [f"{event.name} {event.attributes!r}" for event in span.events]
        assert not any(SECRET in text for text in texts), span.name
        for event in span.events:
            assert "exception.message" not in (event.attributes or {})
            assert "exception.stacktrace" not in (event.attributes or {})


async def test_one_span_per_attempt_and_per_release_attempt_under_a_run_span(
    make_module: Any, tracer: trace.Tracer, exporter: InMemorySpanExporter
) -> None:
    module = make_module(GRAPH)
    plan = Driver(module).prepare(["total"])
    report = RunReport()
    with tracer.start_as_current_span("request") as request:
        result = await plan.execute(
            inputs={"password": SECRET, "attempts": [], "fail": False},
            observer=[SpanObserver(tracer), report],
        )
    assert result == {"total": 3}
    spans = spans_named(exporter)
    [run] = spans["sdax_hamilton.run"]
    assert run.parent is not None
    assert run.parent.span_id == request.get_span_context().span_id
    # the run span carries the run's id: the report's, the log records'
    assert attrs(run) == {
        "sdax_hamilton.nodes": 3,
        "sdax_hamilton.outcome": "succeeded",
        "sdax_hamilton.run_id": report.run_id,
    }
    assert run.status.status_code is StatusCode.UNSET

    rows = sorted(spans["rows"], key=lambda s: attrs(s)["sdax_hamilton.attempt"])
    assert [attrs(s) for s in rows] == [
        {
            "sdax_hamilton.node": "rows",
            "sdax_hamilton.attempt": 1,
            "sdax_hamilton.release": False,
            "sdax_hamilton.outcome": "timed_out",
            "error.type": "TimeoutError",
        },
        {
            "sdax_hamilton.node": "rows",
            "sdax_hamilton.attempt": 2,
            "sdax_hamilton.release": False,
            "sdax_hamilton.outcome": "failed",
            "error.type": "ConnectionResetError",
        },
        {
            "sdax_hamilton.node": "rows",
            "sdax_hamilton.attempt": 3,
            "sdax_hamilton.release": False,
            "sdax_hamilton.outcome": "succeeded",
        },
    ]
    assert [s.status.status_code for s in rows] == [
        StatusCode.ERROR,
        StatusCode.ERROR,
        StatusCode.UNSET,
    ]
    assert [e.name for e in rows[0].events] == ["timeout", "exception"]
    assert dict(rows[1].events[0].attributes or {}) == {"exception.type": "ConnectionResetError"}
    for span in [*rows, *spans["connection"], *spans["total"], *spans["release connection"]]:
        assert span.parent is not None and span.parent.span_id == run.context.span_id
    assert rows[0].end_time is not None and rows[1].start_time is not None
    assert rows[0].end_time <= rows[1].start_time  # attempts never overlap

    releases = sorted(spans["release connection"], key=lambda s: attrs(s)["sdax_hamilton.attempt"])
    assert [(attrs(s)["sdax_hamilton.outcome"], attrs(s).get("error.type")) for s in releases] == [
        ("failed", "ConnectionAbortedError"),
        ("succeeded", None),
    ]
    assert all(attrs(s)["sdax_hamilton.release"] is True for s in releases)
    retries = [e for e in run.events if e.name == "retry_scheduled"]
    assert [dict(e.attributes or {}) for e in retries] == [
        {
            "sdax_hamilton.node": "rows",
            "sdax_hamilton.attempt": 1,
            "sdax_hamilton.retry_delay": 0.0,
        },
        {
            "sdax_hamilton.node": "rows",
            "sdax_hamilton.attempt": 2,
            "sdax_hamilton.retry_delay": 0.0,
        },
    ]
    assert [e.name for e in run.events].count("release_retry_scheduled") == 1
    assert_no_secret(exporter)


async def test_a_failed_run_marks_the_run_span_as_an_error(
    make_module: Any, tracer: trace.Tracer, exporter: InMemorySpanExporter
) -> None:
    module = make_module(GRAPH)
    plan = Driver(module).prepare(["total"])
    with pytest.raises(ExecutionError):
        await plan.execute(
            inputs={"password": SECRET, "attempts": [1, 1], "fail": True},
            observer=SpanObserver(tracer),
        )
    spans = spans_named(exporter)
    [run] = spans["sdax_hamilton.run"]
    assert run.status.status_code is StatusCode.ERROR
    assert attrs(run)["error.type"] == "sdax_hamilton._failures.ExecutionError"
    assert attrs(run)["sdax_hamilton.outcome"] == "failed"
    [total] = spans["total"]
    assert attrs(total)["error.type"] == f"{module.__name__}.Secretive"
    assert total.status.status_code is StatusCode.ERROR
    assert total.status.description == f"{module.__name__}.Secretive"
    assert_no_secret(exporter)


async def test_cancelled_attempts_and_dropped_retries(
    make_module: Any, tracer: trace.Tracer, exporter: InMemorySpanExporter
) -> None:
    module = make_module(
        """
        import asyncio
        from sdax_hamilton import execution

        async def hangs(started: asyncio.Event) -> int:
            started.set()
            await asyncio.Event().wait()
            return 0

        @execution(retries=1, initial_delay=60.0)
        async def waits(started: asyncio.Event) -> int:
            raise ConnectionError("later")
        """
    )
    plan = Driver(module).prepare(["hangs", "waits"])
    started = asyncio.Event()
    task = asyncio.create_task(
        plan.execute(inputs={"started": started}, observer=SpanObserver(tracer))
    )
    async with asyncio.timeout(5):
        await started.wait()
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    spans = spans_named(exporter)
    [hangs] = spans["hangs"]
    assert attrs(hangs)["sdax_hamilton.outcome"] == "cancelled"
    assert hangs.status.status_code is StatusCode.UNSET
    [run] = spans["sdax_hamilton.run"]
    assert attrs(run)["sdax_hamilton.outcome"] == "cancelled"
    assert "retry_cancelled" in [e.name for e in run.events]


async def test_one_observer_serves_concurrent_runs(
    make_module: Any, tracer: trace.Tracer, exporter: InMemorySpanExporter
) -> None:
    module = make_module(
        """
        import asyncio

        async def a(gate: asyncio.Event) -> int:
            await gate.wait()
            return 1
        """
    )
    plan = Driver(module).prepare(["a"])
    observer = SpanObserver(tracer)
    gate = asyncio.Event()
    runs = [asyncio.create_task(plan.execute(inputs={"gate": gate}, observer=observer))]
    runs.append(asyncio.create_task(plan.execute(inputs={"gate": gate}, observer=observer)))
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(*runs)
    spans = spans_named(exporter)
    run_ids = {s.context.span_id for s in spans["sdax_hamilton.run"]}
    assert len(run_ids) == 2
    parents = {s.parent.span_id for s in spans["a"] if s.parent is not None}
    assert parents == run_ids


async def test_the_default_tracer_comes_from_the_global_provider(make_module: Any) -> None:
    module = make_module("def x() -> int:\n    return 1\n")
    with instant_retries():  # unrelated: the adapter works under test mode too
        assert await Driver(module).prepare(["x"]).execute(observer=SpanObserver()) == {"x": 1}


def test_error_type_is_the_qualified_class_name() -> None:
    assert error_type(ValueError("v")) == "ValueError"
    assert error_type(asyncio.CancelledError()) == "asyncio.exceptions.CancelledError"
    assert error_type(ExecutionError("m", [ValueError()])) == (
        "sdax_hamilton._failures.ExecutionError"
    )


def test_importing_without_opentelemetry_names_the_package_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in list(sys.modules):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.delitem(sys.modules, "sdax_hamilton.contrib.opentelemetry")
    with pytest.raises(ImportError, match=r"opentelemetry-api") as info:
        importlib.import_module("sdax_hamilton.contrib.opentelemetry")
    assert "pip install opentelemetry-api" in str(info.value)
    assert isinstance(info.value.__cause__, ImportError)
