"""Log records tied to their run (docs/logging.md): every record the package logs during a
run carries ``run_id`` (the id of its events, its RunReport, its Hamilton graph hooks) and
``node`` as ``LogRecord`` attributes; durations are rounded."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import re
from typing import Any

import pytest
from hamilton.lifecycle import (  # type: ignore[import-untyped, unused-ignore]
    GraphExecutionHook,
    NodeExecutionHook,
)

from sdax_hamilton import Driver, ExecutionError, RunReport
from sdax_hamilton.testing import instant_retries

GRAPH = """
import asyncio
from sdax_hamilton import Acquisition, execution, shutdown


class Conn:
    def __init__(self, case: int) -> None:
        self.case = case
        self.closes = 0


async def conn(case: int) -> Conn:
    return Conn(case)


@shutdown(of=conn, retries=1, initial_delay=0.001)
async def close_conn(acquired: Acquisition[Conn]) -> None:
    connection = acquired.value
    connection.closes += 1
    if connection.case % 5 == 0 and connection.closes == 1:
        raise OSError("close failed once")


@execution(timeout=0.01, retries=2, initial_delay=0.001)
async def fetch(conn: Conn, case: int, attempts: dict) -> int:
    attempts[case] = attempts.get(case, 0) + 1
    if case % 3 == 0 and attempts[case] == 1:
        await asyncio.Event().wait()  # times out
    if case % 4 == 0:
        raise ConnectionError("down")  # fails for good after three attempts
    return case


async def total(fetch: int) -> int:
    return fetch + 1
"""

RUNS = 100


async def test_every_record_of_100_concurrent_runs_carries_its_run_id_and_node(
    make_module: Any, caplog: pytest.LogCaptureFixture
) -> None:
    module = make_module(GRAPH)
    plan = Driver(module).prepare(["total"])
    attempts: dict[int, int] = {}
    reports = [RunReport() for _ in range(RUNS)]

    async def one(case: int) -> None:
        inputs = {"case": case, "attempts": attempts}
        with contextlib.suppress(ExecutionError):
            await plan.execute(inputs=inputs, observer=reports[case])

    with caplog.at_level(logging.DEBUG, logger="sdax_hamilton"), instant_retries():
        await asyncio.gather(*(one(case) for case in range(RUNS)))

    records = [r for r in caplog.records if r.name == "sdax_hamilton"]
    by_run = {report.run_id: report for report in reports}
    assert len(by_run) == RUNS and None not in by_run
    nodes = {"conn", "fetch", "total"}
    started: collections.Counter[str] = collections.Counter()
    for record in records:
        run_id: str = record.__dict__.get("run_id", "missing")
        node = record.__dict__.get("node", "missing")
        assert run_id in by_run, record.getMessage()
        assert node is None or node in nodes, (node, record.getMessage())
        if node is not None:
            assert repr(node) in record.getMessage()
        if re.search(r"attempt \d+ started", record.getMessage()):
            started[run_id] += 1
    # every attempt a report saw was logged under that report's run id, and no other
    for report in reports:
        calls = sum(n.attempts for n in report.nodes.values())
        calls += sum(r.attempts for r in report.releases.values())
        assert started[str(report.run_id)] == calls, report.format()
    # the failures are logged under the failed run's id and node
    failed = {
        (r.__dict__["run_id"], r.__dict__["node"]) for r in records if r.levelno == logging.ERROR
    }
    expected = {
        (report.run_id, name)
        for report in reports
        for table in (report.nodes, report.releases)
        for name, item in table.items()
        if item.outcome == "failed"
    }
    assert failed == expected
    assert {name for _, name in expected} == {"fetch", "conn"}
    # durations are rounded: no float printed with more than a few digits
    timeouts = [r.getMessage() for r in records if "timed out after" in r.getMessage()]
    assert timeouts and all("timed out after 0.01 s" in m for m in timeouts)
    assert not any(re.search(r"\d\.\d{5,}", r.getMessage()) for r in records)


class RunIds(GraphExecutionHook):  # type: ignore[misc]
    def __init__(self) -> None:
        self.before: list[str] = []
        self.after: list[str] = []

    def run_before_graph_execution(self, *, run_id: str, **kwargs: Any) -> None:
        self.before.append(run_id)

    def run_after_graph_execution(self, *, run_id: str, **kwargs: Any) -> None:
        self.after.append(run_id)


async def test_hamilton_graph_hooks_the_report_and_the_log_records_share_the_run_id(
    make_module: Any, caplog: pytest.LogCaptureFixture
) -> None:
    module = make_module(GRAPH)
    hooks = RunIds()
    plan = Driver(module, adapters=[hooks]).prepare(["total"])
    reports = [RunReport() for _ in range(10)]

    async def one(case: int) -> None:
        with contextlib.suppress(ExecutionError):
            await plan.execute(inputs={"case": case, "attempts": {}}, observer=reports[case])

    with caplog.at_level(logging.WARNING, logger="sdax_hamilton"), instant_retries():
        await asyncio.gather(*(one(case) for case in range(10)))
    ids = [report.run_id for report in reports]
    assert sorted(hooks.before) == sorted(hooks.after) == sorted(ids)  # type: ignore[type-var]
    logged = {r.__dict__["run_id"] for r in caplog.records if r.name == "sdax_hamilton"}
    assert logged and logged <= set(ids)


async def test_a_run_opened_inside_a_node_has_an_id_of_its_own(make_module: Any) -> None:
    inner_module = make_module("async def leaf() -> int:\n    return 1\n")
    inner_plan = Driver(inner_module).prepare(["leaf"])
    inner = RunReport()

    async def outer_node() -> int:
        value: int = (await inner_plan.execute(observer=inner))["leaf"]
        return value

    outer_module = make_module("")
    outer_module.outer_node = outer_node
    outer_node.__module__ = outer_module.__name__
    hooks = RunIds()
    outer = RunReport()
    plan = Driver(outer_module, adapters=[hooks]).prepare(["outer_node"])
    assert await plan.execute(observer=outer) == {"outer_node": 1}
    assert hooks.before == [outer.run_id]
    assert inner.run_id is not None and inner.run_id != outer.run_id


class Broken(NodeExecutionHook, GraphExecutionHook):  # type: ignore[misc]
    """Raises in every hook: each failure is logged (and ignored) with the run's id."""

    def run_before_node_execution(self, **kwargs: Any) -> None:
        raise RuntimeError("node hook bug")

    def run_after_node_execution(self, **kwargs: Any) -> None:
        pass

    def run_before_graph_execution(self, **kwargs: Any) -> None:
        raise RuntimeError("graph hook bug")

    def run_after_graph_execution(self, **kwargs: Any) -> None:
        pass


async def test_records_of_adapter_hooks_that_raise_carry_the_run_id_and_node(
    make_module: Any, caplog: pytest.LogCaptureFixture
) -> None:
    plan = Driver(make_module(GRAPH), adapters=[Broken()]).prepare(["total"])
    report = RunReport()
    with caplog.at_level(logging.ERROR, logger="sdax_hamilton"):
        await plan.execute(inputs={"case": 1, "attempts": {}}, observer=report)
    hooks = [r for r in caplog.records if "adapter" in r.getMessage()]
    assert {(r.__dict__["run_id"], r.__dict__["node"]) for r in hooks} == {
        (report.run_id, None),  # the graph hook
        (report.run_id, "conn"),
        (report.run_id, "fetch"),
        (report.run_id, "total"),
    }


async def test_a_timeout_cut_short_by_the_run_is_logged_to_the_millisecond(
    make_module: Any, caplog: pytest.LogCaptureFixture
) -> None:
    module = make_module(
        "import asyncio\n\nasync def hangs() -> int:\n    await asyncio.sleep(60)\n    return 1\n"
    )
    plan = Driver(module).prepare(["hangs"])
    with caplog.at_level(logging.WARNING, logger="sdax_hamilton"):
        with pytest.raises(ExecutionError):
            await plan.execute(timeout=0.0123456789)
    [record] = [r for r in caplog.records if "timed out after" in r.getMessage()]
    # the attempt's timeout is the run's time left, an arbitrary float: shown rounded
    assert re.fullmatch(
        r"node 'hangs': attempt 1 timed out after 0\.0\d{1,2} s \(cut short by the run's "
        r"timeout\); waiting for it to finish",
        record.getMessage(),
    ), record.getMessage()
    assert record.__dict__["node"] == "hangs"
