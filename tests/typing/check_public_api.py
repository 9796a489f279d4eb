"""Static typing expectations of the public API, checked by ``mypy --strict`` in CI.

Not a pytest module: nothing here runs. Each ``assert_type`` is a claim about what a type
checker infers; each ``type: ignore[code]`` marks a call that must be rejected (CI runs
mypy with ``warn_unused_ignores``, so an accepted call fails the check).
"""

from __future__ import annotations

import types
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, assert_type

from sdax_hamilton import (
    Acquisition,
    Driver,
    ExecutionError,
    Latency,
    PreparedPlan,
    RetryableException,
    RunEvent,
    RunReport,
    execution,
    failures,
    shutdown,
)
from sdax_hamilton.contrib.fastapi import Startup, run_values
from sdax_hamilton.contrib.opentelemetry import MetricsObserver
from sdax_hamilton.testing import ReleaseCheck, assert_all_released, retry_waits


class Connection:
    async def close(self) -> None: ...


async def connection(dsn: str, *, pool: int = 1) -> Connection:
    return Connection()


@execution(timeout=5.0, retries=3, initial_delay=0.5, backoff_factor=2.0)
async def fetch(connection: Connection, *, limit: int = 10) -> list[str]:
    return []


@execution(retries=1)
def parse(raw: str) -> int:
    return int(raw)


@execution(in_thread=True, timeout=2.0)
def checksum(raw: str) -> int:
    return len(raw)


assert_type(checksum("abc"), int)  # a direct call stays a sync call


def retry_after_header(exc: BaseException) -> float | None:
    return getattr(exc, "retry_after", None)


@execution(retries=3, max_delay=30.0, retry_after=retry_after_header)
async def quote(connection: Connection) -> float:
    return 1.0


@shutdown(of=connection, timeout=2.0, max_delay=1.0, retry_after=lambda exc: None)
async def close_connection(acquired: Acquisition[Connection]) -> None:
    if acquired.is_valid:
        await acquired.value.close()


def signatures_are_preserved() -> None:
    # The decorators return the very function, so calls keep their exact types.
    assert_type(parse("1"), int)
    fetched = fetch(Connection(), limit=3)
    _ = assert_type(fetched, Coroutine[Any, Any, list[str]])
    fetched.close()
    released = close_connection(Acquisition())
    _ = assert_type(released, Coroutine[Any, Any, None])
    released.close()
    parse(1)  # type: ignore[arg-type]
    _ = fetch(Connection(), 3)  # type: ignore[call-arg]
    parse("1", extra=True)  # type: ignore[call-arg]


def acquisition_is_generic(acquired: Acquisition[Connection]) -> None:
    assert_type(acquired.value, Connection)
    assert_type(acquired.raw_value, Any)
    assert_type(acquired.is_valid, bool)
    assert_type(acquired.has_value, bool)


def decorator_arguments_are_keyword_only() -> None:
    execution(5.0)  # type: ignore[call-arg, arg-type]
    execution(max_delay="1")  # type: ignore[arg-type]
    execution(retry_after=len)  # type: ignore[arg-type]
    shutdown(connection)  # type: ignore[call-arg]


async def plans(module: types.ModuleType) -> None:
    plan = Driver(module, config={"region": "eu"}).prepare(["fetch"], check_outputs=True)
    assert_type(plan, PreparedPlan)
    assert_type(plan.outputs, tuple[str, ...])
    assert_type(plan.override_nodes, frozenset[str])
    assert_type(plan.required_inputs, Mapping[str, tuple[Any, ...]])
    result = await plan.execute(inputs={"dsn": "sqlite://"})
    assert_type(result, dict[str, Any])
    async with plan.open(inputs={"dsn": "sqlite://"}) as values:
        assert_type(values, dict[str, Any])
    assert_type(plan.to_dot(), str)
    hooked = Driver(module, adapters=[object()]).prepare(["fetch"])  # any adapter objects
    assert_type(hooked, PreparedPlan)
    Driver(module, adapters=None)
    Driver(module, allow_module_overrides=True, executor=ThreadPoolExecutor(4))
    Driver(module, executor=None)
    Driver(module, executor=4)  # type: ignore[arg-type]
    execution(in_thread="yes")  # type: ignore[arg-type]

    seen: list[RunEvent] = []
    report = RunReport()
    await plan.execute(inputs={"dsn": "sqlite://"}, observer=seen.append)
    await plan.execute(inputs={"dsn": "sqlite://"}, observer=[report, seen.append])
    assert_type(report.format(), str)
    await plan.execute(inputs={"dsn": "sqlite://"}, observer=42)  # type: ignore[arg-type]

    result = await plan.execute(inputs={"dsn": "sqlite://"}, timeout=2.5)
    async with plan.open(inputs={"dsn": "sqlite://"}, timeout=None) as values:
        assert_type(values, dict[str, Any])
    await plan.execute(inputs={"dsn": "sqlite://"}, timeout="2")  # type: ignore[arg-type]
    assert_type(report.timeout, float | None)
    assert_type(report.nodes["fetch"].clipped, int)
    assert_type(report.run_id, str | None)
    assert_type(report.to_svg(), str)
    assert_type(report._repr_svg_(), str)
    assert_type(report.to_chrome_trace(), dict[str, object])
    assert_type(seen[0].run, str)

    # the service tools: metrics, the release check, the retry schedule
    metrics = MetricsObserver()
    with assert_all_released(plan) as released:
        await plan.execute(inputs={"dsn": "sqlite://"}, observer=[metrics, released])
    assert_type(released, ReleaseCheck)
    assert_type(released.problems(), list[str])
    assert_type(retry_waits(plan, "fetch"), tuple[tuple[float, float], ...])
    retry_waits(plan, "fetch", True)  # type: ignore[call-arg]


def service_tools(plan: PreparedPlan) -> None:
    startup = Startup(lambda: plan)
    assert_type(startup, Startup[PreparedPlan])
    dependency = run_values(lambda: plan, lambda: {"dsn": "x"}, timeout=1.0)
    assert_type(dependency, Callable[..., AsyncIterator[dict[str, Any]]])
    Startup(42)  # type: ignore[arg-type]


def latency_types() -> None:
    latency = Latency(99.0, window=30.0, min_samples=50, initial=0.05)
    assert_type(latency.percentile, float)
    assert_type(latency.min_samples, int)
    Latency(95.0, 60.0)  # type: ignore[call-arg]
    Latency(window="60")  # type: ignore[arg-type]


def failure_types(error: BaseException) -> None:
    assert_type(failures(error), tuple[BaseException, ...])
    assert issubclass(ExecutionError, ExceptionGroup)
    assert issubclass(RetryableException, Exception)
