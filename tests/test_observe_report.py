"""RunReport (docs/contract.md#run-report): per-node and per-release timings of one run."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from support.modules import RETRIED_RUN

from sdax_hamilton import Driver, ExecutionError, NodeReport, RunEvent, RunReport
from sdax_hamilton.testing import instant_retries


def feed(report: RunReport, *events: tuple[Any, ...], run: str = "run-1") -> None:
    """Feed synthetic events ``(kind, node, attempt, time, {extra fields})``."""
    for kind, node, attempt, time, *extra in events:
        fields: dict[str, Any] = extra[0] if extra else {}
        report(RunEvent(kind, node, attempt, time, run=run, **fields))


SLOW_REQUEST: tuple[tuple[Any, ...], ...] = (
    ("run_started", "", 0, 100.0, {"nodes": ("connection", "rates", "report", "audit")}),
    ("attempt_started", "connection", 1, 100.0002),
    ("attempt_succeeded", "connection", 1, 100.0042),
    ("attempt_started", "rates", 1, 100.0043),
    ("attempt_timed_out", "rates", 1, 100.0543),
    ("attempt_failed", "rates", 1, 100.0551, {"error": TimeoutError()}),
    ("retry_scheduled", "rates", 1, 100.0551, {"delay": 0.31}),
    ("attempt_started", "rates", 2, 100.3652),
    ("attempt_failed", "rates", 2, 100.3702, {"error": ConnectionResetError("secret")}),
    ("retry_scheduled", "rates", 2, 100.3702, {"delay": 0.7}),
    ("attempt_started", "rates", 3, 101.0702),
    ("attempt_succeeded", "rates", 3, 101.0902),
    ("attempt_started", "report", 1, 101.0903),
    ("attempt_succeeded", "report", 1, 101.0904),
    ("shutdown_started", "", 0, 101.0905),
    ("release_started", "connection", 1, 101.0906),
    ("release_succeeded", "connection", 1, 101.0956),
    ("run_finished", "", 0, 101.0957),
)


def test_format_renders_a_compact_table_of_where_the_time_went() -> None:
    report = RunReport()
    feed(report, *SLOW_REQUEST)
    expected = """\
sdax_hamilton run: succeeded in 1.10 s (forward 1.09 s, shutdown 5.2 ms)
  step                   outcome             attempts    start   total  in calls  waiting  last error
  connection             succeeded                  1  +200 µs  4.0 ms    4.0 ms     0 µs  -
  rates                  succeeded    3 (1 timed out)  +4.3 ms  1.09 s   75.8 ms   1.01 s  ConnectionResetError
  report                 succeeded                  1  +1.09 s  100 µs    100 µs     0 µs  -
  audit                  not started                0        -       -         -        -  -
  release of connection  succeeded                  1  +1.09 s  5.0 ms    5.0 ms     0 µs  -"""  # noqa: E501
    assert report.format() == expected
    assert str(report) == expected
    assert "secret" not in report.format()  # error types only, never messages
    assert repr(report) == "<RunReport succeeded: nodes=4 releases=1>"


def test_records_hold_attempts_times_outcome_and_last_error_type() -> None:
    report = RunReport()
    feed(report, *SLOW_REQUEST)
    rates = report.nodes["rates"]
    assert rates.in_attempts == pytest.approx(0.0508 + 0.005 + 0.02)
    assert rates == NodeReport(
        name="rates",
        outcome="succeeded",
        attempts=3,
        timeouts=1,
        started=100.0043,
        finished=101.0902,
        in_attempts=rates.in_attempts,
        last_error="ConnectionResetError",
    )
    assert rates.total == pytest.approx(1.0859)
    assert rates.waiting == pytest.approx(1.0859 - 0.0758)
    assert list(report.nodes) == ["connection", "rates", "report", "audit"]
    audit = report.nodes["audit"]
    assert (audit.outcome, audit.attempts, audit.total, audit.waiting) == (
        "not started",
        0,
        None,
        None,
    )
    [release] = report.releases.values()
    assert (release.name, release.outcome, release.attempts) == ("connection", "succeeded", 1)
    assert release.total == pytest.approx(0.005)
    assert (report.started, report.finished) == (100.0, 101.0957)
    assert report.duration == pytest.approx(1.0957)
    assert (report.outcome, report.error) == ("succeeded", None)
    with pytest.raises(TypeError):
        report.nodes["x"] = rates  # type: ignore[index]


def outcome_of(report: RunReport, node: str) -> str:
    return report.nodes[node].outcome


def test_the_report_can_be_read_while_the_run_goes_on() -> None:
    report = RunReport()
    assert (report.outcome, report.duration, report.nodes) == ("not started", None, {})
    feed(report, ("run_started", "", 0, 1.0, {"nodes": ("a",)}), ("attempt_started", "a", 1, 1.5))
    assert report.outcome == "running"
    assert outcome_of(report, "a") == "running"
    assert report.nodes["a"].total is None
    feed(
        report,
        ("attempt_failed", "a", 1, 2.0, {"error": ConnectionError()}),
        ("retry_scheduled", "a", 1, 2.0, {"delay": 1.0}),
    )
    assert outcome_of(report, "a") == "waiting"
    assert report.nodes["a"].finished is None
    assert "waiting" in report.format()
    feed(report, ("retry_cancelled", "a", 1, 2.5))
    assert outcome_of(report, "a") == "cancelled"
    assert report.nodes["a"].total == pytest.approx(1.0)
    assert report.nodes["a"].in_attempts == pytest.approx(0.5)


def test_a_report_records_one_run_only_and_refuses_another_once() -> None:
    report = RunReport()
    assert report.run_id is None
    feed(report, ("run_started", "", 0, 1.0, {"nodes": ("a",)}), run="r7")
    assert report.run_id == "r7"
    with pytest.raises(ValueError, match=r"one run .*give each run a new RunReport"):
        feed(report, ("run_started", "", 0, 1.0, {"nodes": ("a",)}), run="r8")
    # the rest of that run is ignored without another error; a third run is refused once too
    feed(report, ("attempt_started", "a", 1, 2.0), ("run_finished", "", 0, 3.0), run="r8")
    with pytest.raises(ValueError, match="r9"):
        feed(report, ("run_started", "", 0, 4.0, {"nodes": ("a",)}), run="r9")
    assert report.started == 1.0 and report.run_id == "r7"
    assert report.nodes["a"].outcome == "not started" and report.finished is None


def test_an_input_rejection_is_a_failure_without_attempts() -> None:
    report = RunReport()
    feed(
        report,
        ("run_started", "", 0, 1.0, {"nodes": ("a",)}),
        ("input_rejected", "a", 0, 1.0, {"error": TypeError("Invalid input for a.x")}),
        ("shutdown_started", "", 0, 1.0),
        ("run_finished", "", 0, 1.0, {"error": ExecutionError("failed", [TypeError()])}),
    )
    a = report.nodes["a"]
    assert (a.outcome, a.attempts, a.last_error, a.started, a.total) == (
        "failed",
        0,
        "TypeError",
        None,
        None,
    )
    assert (report.outcome, report.error) == ("failed", "ExecutionError")
    row = report.format().splitlines()[2]
    assert row.split() == ["a", "failed", "0", "-", "-", "-", "-", "TypeError"]


# --------------------------------------------------------------------- real runs


async def test_a_real_run_with_retries_and_a_retried_release(make_module: Any) -> None:
    plan = Driver(make_module(RETRIED_RUN)).prepare(["after"])
    report = RunReport()
    assert await plan.execute(inputs={"hang": False}, observer=report) == {"after": 4}
    assert list(report.nodes) == ["service", "fetched", "stuck", "after"]
    fetched = report.nodes["fetched"]
    assert (fetched.outcome, fetched.attempts, fetched.last_error) == (
        "succeeded",
        3,
        "ConnectionResetError",
    )
    assert fetched.total is not None and fetched.waiting is not None
    assert 0.0 <= fetched.in_attempts <= fetched.total
    assert fetched.waiting >= 2 * 0.005 - 0.004  # two waits of at least half 0.01 s
    assert all(node.outcome == "succeeded" for node in report.nodes.values())
    release = report.releases["service"]
    assert (release.outcome, release.attempts, release.last_error) == (
        "succeeded",
        2,
        "ConnectionError",
    )
    assert report.outcome == "succeeded"
    assert report.duration is not None and report.duration >= fetched.total
    assert [line.split()[0] for line in report.format().splitlines()[2:]] == [
        "service",
        "fetched",
        "stuck",
        "after",
        "release",
    ]


async def test_a_failed_run_shows_which_node_failed_and_what_never_ran(make_module: Any) -> None:
    plan = Driver(make_module(RETRIED_RUN)).prepare(["after"])
    report = RunReport()
    with instant_retries(), pytest.raises(ExecutionError):
        await plan.execute(inputs={"hang": True}, observer=report)
    outcomes = {name: (n.outcome, n.attempts, n.timeouts) for name, n in report.nodes.items()}
    assert outcomes == {
        "service": ("succeeded", 1, 0),
        "fetched": ("succeeded", 3, 0),
        "stuck": ("failed", 1, 1),
        "after": ("not started", 0, 0),
    }
    assert report.nodes["stuck"].last_error == "TimeoutError"
    assert (report.outcome, report.error) == ("failed", "ExecutionError")
    assert report.format().startswith("sdax_hamilton run: failed (ExecutionError) in ")


async def test_a_cancelled_run_and_its_cancelled_nodes(make_module: Any) -> None:
    module = make_module(
        """
        import asyncio

        async def slow(started: asyncio.Event) -> int:
            started.set()
            await asyncio.Event().wait()
            return 0
        """
    )
    plan = Driver(module).prepare(["slow"])
    report = RunReport()
    started = asyncio.Event()
    task = asyncio.create_task(plan.execute(inputs={"started": started}, observer=report))
    async with asyncio.timeout(5):
        await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert report.nodes["slow"].outcome == "cancelled"
    assert (report.outcome, report.error) == ("cancelled", "CancelledError")


async def test_reusing_a_report_for_a_second_run_is_logged_and_harmless(
    make_module: Any, caplog: pytest.LogCaptureFixture
) -> None:
    plan = Driver(make_module("def x() -> int:\n    return 1\n")).prepare(["x"])
    report = RunReport()
    await plan.execute(observer=report)
    first = report.nodes
    with caplog.at_level(logging.ERROR, logger="sdax_hamilton"):
        assert await plan.execute(observer=report) == {"x": 1}
    assert report.nodes == first
    # one record for the misuse (not one per event of the second run), with its run's id
    [record] = [r for r in caplog.records if r.name == "sdax_hamilton"]
    assert "ValueError" in record.getMessage() and "run_started" in record.getMessage()
    assert record.run_id not in (None, report.run_id)  # type: ignore[attr-defined]
