"""Hamilton's own adapter plugins on this Driver: progress bars and OpenTelemetry tracing.

The plugins are the real ones (``hamilton.plugins.h_tqdm``, ``h_rich``,
``h_opentelemetry``), over real runs; their output goes to in-memory sinks.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest

from sdax_hamilton import Driver, ExecutionError

N = 200


def wide_graph_source(n: int) -> str:
    """``n`` nodes: a chain of sync and async functions, with a fan-in at the end."""
    lines = ["import asyncio", "", "def n0(x: int) -> int:", "    return x", ""]
    for i in range(1, n - 1):
        if i % 2:
            lines += [f"async def n{i}(n{i - 1}: int) -> int:", "    await asyncio.sleep(0)"]
        else:
            lines += [f"def n{i}(n{i - 1}: int) -> int:"]
        lines += [f"    return n{i - 1} + 1", ""]
    inputs = ", ".join(f"n{i}: int" for i in [*range(0, n - 2, 20), n - 2])
    lines += [f"def n{n - 1}({inputs}) -> int:", f"    return n{n - 2}", ""]
    return "\n".join(lines)


async def test_tqdm_progress_bar_over_a_200_node_graph(make_module: Any) -> None:
    from hamilton.plugins.h_tqdm import ProgressBar

    module = make_module(wide_graph_source(N))
    sink = io.StringIO()
    bar = ProgressBar(desc="wide", file=sink, mininterval=0)
    plan = Driver(module, adapters=[bar]).prepare([f"n{N - 1}"])
    result = await plan.execute(inputs={"x": 0})
    assert result == {f"n{N - 1}": N - 2}
    progress = bar.progress_bar
    assert progress is not None
    assert progress.total == N
    assert progress.n == N  # one update per node (each ran one attempt)
    text = sink.getvalue()
    assert f"{N}/{N}" in text
    assert "Execution Complete!" in text


async def test_rich_progress_bar_over_a_200_node_graph(make_module: Any) -> None:
    from hamilton.plugins.h_rich import RichProgressBar
    from rich.console import Console

    module = make_module(wide_graph_source(N))
    console = Console(file=io.StringIO(), force_terminal=False, width=100)
    bar = RichProgressBar(run_desc="wide", console=console)
    plan = Driver(module, adapters=[bar]).prepare([f"n{N - 1}"])
    await plan.execute(inputs={"x": 0})
    (task,) = bar._progress.tasks
    assert task.total == N
    assert task.completed == N


async def test_progress_bar_counts_attempts(make_module: Any) -> None:
    """Node hooks fire per attempt, so a progress bar counting them counts retries too."""
    from hamilton.plugins.h_tqdm import ProgressBar

    module = make_module(
        """
        from sdax_hamilton import execution

        CALLS = []

        def a(x: int) -> int:
            return x

        @execution(retries=1, initial_delay=0.0)
        def b(a: int) -> int:
            CALLS.append(a)
            if len(CALLS) == 1:
                raise ConnectionError("once")
            return a
        """
    )
    bar = ProgressBar(file=io.StringIO())
    plan = Driver(module, adapters=[bar]).prepare(["b"])
    await plan.execute(inputs={"x": 0})
    assert bar.progress_bar is not None
    assert (bar.progress_bar.total, bar.progress_bar.n) == (2, 3)


@pytest.fixture
def tracing() -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


TRACED = """
import asyncio
from sdax_hamilton import execution

TRACER = None
CALLS = []

def a(x: int) -> int:
    return x + 1

@execution(retries=1, initial_delay=0.0)
async def b(a: int) -> int:
    CALLS.append(a)
    with TRACER.start_as_current_span("inside b"):
        await asyncio.sleep(0)
    if len(CALLS) == 1:
        raise ConnectionError("first attempt fails")
    return a * 2

def c(a: int, b: int) -> int:
    return a + b
"""


async def test_opentelemetry_tracer_produces_spans(make_module: Any, tracing: Any) -> None:
    from hamilton.plugins.h_opentelemetry import OpenTelemetryTracer
    from opentelemetry.trace import StatusCode

    provider, exporter = tracing
    tracer = provider.get_tracer("sdax-tests")
    module = make_module(TRACED)
    module.TRACER = tracer
    plan = Driver(module, adapters=[OpenTelemetryTracer(tracer=tracer)]).prepare(["c"])
    assert await plan.execute(inputs={"x": 1}) == {"c": 6}

    spans = exporter.get_finished_spans()
    by_name: dict[str, list[Any]] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    graph_spans = [s for s in spans if s.parent is None]
    assert len(graph_spans) == 1
    (graph_span,) = graph_spans
    assert graph_span.status.status_code == StatusCode.OK
    assert list(graph_span.attributes["final_vars"]) == ["c"]
    assert sorted(graph_span.attributes["execution_path"]) == ["a", "b", "c"]
    assert len(by_name["a"]) == len(by_name["c"]) == 1
    assert len(by_name["b"]) == 2  # one span per attempt
    first, second = sorted(by_name["b"], key=lambda s: s.start_time)
    assert first.status.status_code == StatusCode.ERROR
    assert "ConnectionError" in first.status.description or "first attempt" in (
        first.status.description or ""
    )
    assert second.status.status_code == StatusCode.OK
    for span in (*by_name["a"], *by_name["b"], *by_name["c"]):
        assert span.parent is not None and span.parent.span_id == graph_span.context.span_id
        assert span.context.trace_id == graph_span.context.trace_id
    # The node's own spans nest under the span of its attempt.
    inside = by_name["inside b"]
    assert len(inside) == 2
    assert {s.parent.span_id for s in inside} == {first.context.span_id, second.context.span_id}


async def test_opentelemetry_failed_run_and_concurrent_runs(make_module: Any, tracing: Any) -> None:
    from hamilton.plugins.h_opentelemetry import OpenTelemetryTracer
    from opentelemetry.trace import StatusCode

    provider, exporter = tracing
    tracer = provider.get_tracer("sdax-tests")
    module = make_module(
        """
        import asyncio

        async def ok(x: int) -> int:
            await asyncio.sleep(0.01)
            return x

        def broken(ok: int) -> int:
            if ok < 0:
                raise ValueError("negative")
            return ok
        """
    )
    plan = Driver(module, adapters=[OpenTelemetryTracer(tracer=tracer)]).prepare(["broken"])
    outcomes = await asyncio.gather(
        plan.execute(inputs={"x": 1}),
        plan.execute(inputs={"x": -1}),
        plan.execute(inputs={"x": 2}),
        return_exceptions=True,
    )
    assert isinstance(outcomes[1], ExecutionError)
    spans = exporter.get_finished_spans()
    roots = [s for s in spans if s.parent is None]
    assert len(roots) == 3
    assert len({s.context.trace_id for s in roots}) == 3  # one trace per run
    failed = [s for s in roots if s.status.status_code == StatusCode.ERROR]
    assert len(failed) == 1
    for root in roots:
        children = [
            s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id
        ]
        assert sorted(s.name for s in children) == ["broken", "ok"]


def test_example_runs_with_a_progress_bar() -> None:
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / "examples" / "adapters.py"
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "report: north=150.5, south=99.5" in done.stdout
    assert done.stdout.rstrip().endswith("connection closed")
    assert "guide graph -> Execution Complete!" in done.stderr


async def test_opentelemetry_spans_of_generated_async_nodes_running_concurrently(
    make_module: Any, tracing: Any
) -> None:
    """Nodes Hamilton generates around async functions (``@parameterize`` calls them through
    a ``functools.partial``) run concurrently in tasks; each node's span is still a child of
    the run's span, opened and closed where the node runs."""
    from hamilton.plugins.h_opentelemetry import OpenTelemetryTracer

    provider, exporter = tracing
    tracer = provider.get_tracer("sdax-tests")
    module = make_module(
        """
        import asyncio
        from hamilton.function_modifiers import parameterize, value

        @parameterize(**{f"p{i}": {"k": value(i)} for i in range(6)})
        async def p(x: int, k: int) -> int:
            await asyncio.sleep(0.01)
            return x + k

        def total(p0: int, p1: int, p2: int, p3: int, p4: int, p5: int) -> int:
            return p0 + p1 + p2 + p3 + p4 + p5
        """
    )
    plan = Driver(module, adapters=[OpenTelemetryTracer(tracer=tracer)]).prepare(["total"])
    for _ in range(2):
        assert await plan.execute(inputs={"x": 1}) == {"total": 21}
    spans = exporter.get_finished_spans()
    roots = [s for s in spans if s.parent is None]
    assert len(roots) == 2
    for root in roots:
        children = [
            s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id
        ]
        assert sorted(s.name for s in children) == [*(f"p{i}" for i in range(6)), "total"]
