"""OpenTelemetry spans of runs with a timeout: the run span's ``sdax_hamilton.timeout``, a
clipped attempt, and skipped retries / expiry as run-span events (docs/lifecycle.md,
"Deadlines and server-directed waits"), checked with the SDK's in-memory exporter."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support import loops as loop_support

from sdax_hamilton import Driver, ExecutionError
from sdax_hamilton.contrib.opentelemetry import SpanObserver

GRAPH = """
import asyncio
import time
from sdax_hamilton import execution

@execution(timeout=30.0)
async def slow() -> int:
    await asyncio.sleep(60)
    return 1

@execution(retries=3, retry_after=lambda exc: 120.0)
async def busy() -> int:
    raise ConnectionError("429")

def block(seconds: float) -> int:
    time.sleep(seconds)
    return 1

async def late(block: int) -> int:
    return block
"""


def spans_of(module: Any, outputs: list[str], fails: bool = True, **kwargs: Any) -> list[Any]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    observer = SpanObserver(provider.get_tracer("tests"))

    async def go() -> None:
        plan = Driver(module).prepare(outputs)
        if fails:
            with pytest.raises(ExecutionError):
                await plan.execute(observer=observer, **kwargs)
        else:
            await plan.execute(observer=observer, **kwargs)

    loop_support.run(go())
    return list(exporter.get_finished_spans())


def test_a_clipped_attempt_span_and_the_run_timeout(make_module: Any) -> None:
    spans = spans_of(make_module(GRAPH), ["slow"], timeout=0.2)
    (run,) = [s for s in spans if s.name == "sdax_hamilton.run"]
    (slow,) = [s for s in spans if s.name == "slow"]
    assert run.attributes is not None and slow.attributes is not None
    assert 0.19 <= run.attributes["sdax_hamilton.timeout"] <= 0.21
    assert slow.attributes["sdax_hamilton.clipped"] is True
    assert slow.attributes["sdax_hamilton.outcome"] == "timed_out"
    (timeout,) = [e for e in slow.events if e.name == "timeout"]
    assert timeout.attributes is not None and timeout.attributes["sdax_hamilton.clipped"]


def test_a_skipped_retry_is_a_run_span_event(make_module: Any) -> None:
    spans = spans_of(make_module(GRAPH), ["busy"], timeout=5.0)
    (run,) = [s for s in spans if s.name == "sdax_hamilton.run"]
    (skipped,) = [e for e in run.events if e.name == "retry_skipped"]
    assert skipped.attributes is not None
    assert skipped.attributes["sdax_hamilton.node"] == "busy"
    assert skipped.attributes["sdax_hamilton.retry_delay"] == 120.0
    assert skipped.attributes["error.type"] == "ConnectionError"
    assert "429" not in str(dict(skipped.attributes))  # types only, never messages


def test_expiry_is_a_run_span_event(make_module: Any) -> None:
    spans = spans_of(make_module(GRAPH), ["late"], inputs={"seconds": 0.2}, timeout=0.05)
    (run,) = [s for s in spans if s.name == "sdax_hamilton.run"]
    (expired,) = [e for e in run.events if e.name == "deadline_expired"]
    assert expired.attributes is not None
    assert expired.attributes["sdax_hamilton.node"] == "late"
    assert expired.attributes["error.type"] == "TimeoutError"
    assert not [s for s in spans if s.name == "late"]  # it never started


def test_runs_without_a_timeout_carry_no_deadline_attributes(make_module: Any) -> None:
    spans = spans_of(make_module(GRAPH), ["late"], fails=False, inputs={"seconds": 0.0})
    (run,) = [s for s in spans if s.name == "sdax_hamilton.run"]
    assert run.attributes is not None and "sdax_hamilton.timeout" not in run.attributes
    for span in spans:
        assert span.attributes is not None and "sdax_hamilton.clipped" not in span.attributes
