"""MetricsObserver (docs/api.md, "OpenTelemetry: MetricsObserver"): counters and histograms
through the OpenTelemetry metrics API, read back with the SDK's in-memory reader."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)

from sdax_hamilton import Driver, ExecutionError
from sdax_hamilton.contrib.opentelemetry import MetricsObserver
from sdax_hamilton.testing import instant_retries

SECRET = "hunter2-secret-value"

GRAPH = f"""
import asyncio
from sdax_hamilton import Acquisition, execution, shutdown


class Connection:
    closes = 0


async def connection(password: str) -> Connection:
    return Connection()


@shutdown(of=connection, retries=1, initial_delay=0)
async def close(acquired: Acquisition[Connection]) -> None:
    connection = acquired.value
    connection.closes += 1
    if connection.closes == 1:
        raise ConnectionAbortedError("{SECRET}")


@execution(retries=2, initial_delay=0, timeout=0.05)
async def rows(connection: Connection, attempts: list[int]) -> int:
    attempts.append(1)
    if len(attempts) == 1:
        await asyncio.Event().wait()  # times out
    if len(attempts) == 2:
        raise ConnectionResetError("{SECRET}")
    return 3


@execution(retries=1, initial_delay=0)
async def total(rows: int, fail: bool) -> int:
    if fail:
        raise ConnectionRefusedError("{SECRET}")
    return rows
"""

Points = dict[tuple[str, tuple[tuple[str, Any], ...]], Any]


def points(reader: InMemoryMetricReader) -> Points:
    """{(instrument, sorted attributes): value (a sum) or data point (a histogram)}."""
    found: Points = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == "sdax_hamilton"
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    key = (metric.name, tuple(sorted((point.attributes or {}).items())))
                    if isinstance(point, NumberDataPoint):
                        found[key] = point.value
                    else:
                        assert isinstance(point, HistogramDataPoint)
                        found[key] = point
    return found


def a(error_type: str | None = None, **attributes: Any) -> tuple[tuple[str, Any], ...]:
    """Attributes as ``points`` keys them: ``sdax_hamilton.<name>``, and ``error.type``."""
    named = [(f"sdax_hamilton.{k}", v) for k, v in attributes.items()]
    if error_type is not None:
        named.append(("error.type", error_type))
    return tuple(sorted(named))


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


async def test_attempts_retries_timeouts_failures_and_releases_are_counted(
    make_module: Any, reader: InMemoryMetricReader
) -> None:
    plan = Driver(make_module(GRAPH)).prepare(["total"])
    observer = MetricsObserver(MeterProvider(metric_readers=[reader]))
    with instant_retries():
        ok = await plan.execute(
            inputs={"password": SECRET, "attempts": [], "fail": False},
            observer=observer,
        )
        with pytest.raises(ExecutionError):
            await plan.execute(
                inputs={"password": SECRET, "attempts": [0, 0], "fail": True},
                observer=observer,
            )
    assert ok == {"total": 3}
    found = points(reader)
    counters = {k: v for k, v in found.items() if not hasattr(v, "bucket_counts")}
    assert counters == {
        # run 1: rows timed out, failed, then succeeded; total succeeded; run 2: rows at once
        ("sdax_hamilton.attempts", a(node="connection", release=False, outcome="succeeded")): 2,
        ("sdax_hamilton.attempts", a(node="rows", release=False, outcome="timed_out")): 1,
        ("sdax_hamilton.attempts", a(node="rows", release=False, outcome="failed")): 1,
        ("sdax_hamilton.attempts", a(node="rows", release=False, outcome="succeeded")): 2,
        ("sdax_hamilton.attempts", a(node="total", release=False, outcome="succeeded")): 1,
        ("sdax_hamilton.attempts", a(node="total", release=False, outcome="failed")): 2,
        # each run's release fails once, then succeeds on its retry
        ("sdax_hamilton.attempts", a(node="connection", release=True, outcome="failed")): 2,
        ("sdax_hamilton.attempts", a(node="connection", release=True, outcome="succeeded")): 2,
        ("sdax_hamilton.timeouts", a(node="rows", release=False)): 1,
        ("sdax_hamilton.retries", a(node="rows", release=False)): 2,
        ("sdax_hamilton.retries", a(node="total", release=False)): 1,
        ("sdax_hamilton.retries", a(node="connection", release=True)): 2,
        (
            "sdax_hamilton.failures",
            a(node="total", release=False, error_type="ConnectionRefusedError"),
        ): 1,
        ("sdax_hamilton.releases", a(node="connection", outcome="succeeded")): 2,
        ("sdax_hamilton.runs", a(outcome="succeeded")): 1,
        ("sdax_hamilton.runs", a(outcome="failed")): 1,
    }
    # durations: one histogram point per attribute set, counts matching the counters
    histograms = {k: v for k, v in found.items() if hasattr(v, "bucket_counts")}
    for (name, attributes), point in histograms.items():
        if name == "sdax_hamilton.attempt.duration":
            assert point.count == counters[("sdax_hamilton.attempts", attributes)]
        else:
            assert name == "sdax_hamilton.run.duration"
            assert point.count == counters[("sdax_hamilton.runs", attributes)]
        assert point.min >= 0
    timed_out = histograms[
        ("sdax_hamilton.attempt.duration", a(node="rows", release=False, outcome="timed_out"))
    ]
    assert timed_out.min >= 0.05  # the attempt lasted at least its timeout
    run_points = [p for (n, _), p in histograms.items() if n == "sdax_hamilton.run.duration"]
    assert sum(p.count for p in run_points) == 2
    # the first run holds the attempt that timed out: it lasted at least as long
    assert max(p.max for p in run_points) >= timed_out.max
    assert SECRET not in repr(found)


async def test_a_cancelled_run_and_a_failed_release_are_counted(
    make_module: Any, reader: InMemoryMetricReader
) -> None:
    module = make_module(
        """
import asyncio
from sdax_hamilton import Acquisition, shutdown

class Handle:
    pass

async def handle() -> Handle:
    return Handle()

@shutdown(of=handle)
async def drop(acquired: Acquisition[Handle]) -> None:
    raise OSError("gone")

async def slow(handle: Handle, started: asyncio.Event) -> int:
    started.set()
    await asyncio.sleep(60)
    return 1
"""
    )
    plan = Driver(module).prepare(["slow"])
    observer = MetricsObserver(MeterProvider(metric_readers=[reader]))
    started = asyncio.Event()
    task = asyncio.create_task(plan.execute(inputs={"started": started}, observer=observer))
    await started.wait()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, ExecutionError):
        await task
    found = points(reader)
    assert found[("sdax_hamilton.runs", a(outcome="cancelled"))] == 1
    assert found[("sdax_hamilton.attempts", a(node="slow", release=False, outcome="cancelled"))]
    assert found[("sdax_hamilton.releases", a(node="handle", outcome="failed"))] == 1
    assert (
        found[("sdax_hamilton.failures", a(node="handle", release=True, error_type="OSError"))] == 1
    )


async def test_without_a_configured_sdk_the_observer_is_a_no_op(make_module: Any) -> None:
    plan = Driver(make_module(GRAPH)).prepare(["total"])
    with instant_retries():
        result = await plan.execute(
            inputs={"password": SECRET, "attempts": [], "fail": False},
            observer=MetricsObserver(),  # the global provider: the API's no-op one
        )
    assert result == {"total": 3}
