"""The run's timeline (docs/contract.md#timeline): ``RunReport.to_chrome_trace()``,
``RunReport.to_svg()`` and ``RunReport._repr_svg_``.

The Chrome trace is checked against the Trace Event Format (JSON object form: ``traceEvents``
of complete ``X``, instant ``i`` and metadata ``M`` events with ``ph``, ``ts``, ``dur``,
``pid``, ``tid``, ``name``); the SVG is parsed as XML. tests/test_timeline_browser.py renders
the SVG in a real browser.
"""

from __future__ import annotations

import gc
import json
import re
import weakref
import xml.etree.ElementTree as ET
from collections import defaultdict
from typing import Any

import pytest
from support.modules import RETRIED_RUN

from sdax_hamilton import Driver, ExecutionError, RunEvent, RunReport
from sdax_hamilton.testing import instant_retries

SVG = "{http://www.w3.org/2000/svg}"


def feed(report: RunReport, *events: tuple[Any, ...], run: str = "run-1") -> RunReport:
    """Feed synthetic events ``(kind, node, attempt, time, {extra fields})``."""
    for kind, node, attempt, time, *extra in events:
        fields: dict[str, Any] = extra[0] if extra else {}
        report(RunEvent(kind, node, attempt, time, run=run, **fields))
    return report


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
    ("release_failed", "connection", 1, 101.0916, {"error": OSError("secret too")}),
    ("release_retry_scheduled", "connection", 1, 101.0916, {"delay": 0.001}),
    ("release_started", "connection", 2, 101.0926),
    ("release_succeeded", "connection", 2, 101.0956),
    ("run_finished", "", 0, 101.0957),
)


def slow_request() -> RunReport:
    return feed(RunReport(), *SLOW_REQUEST)


# ------------------------------------------------------------------ Chrome trace


def check_trace_format(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rule of the Trace Event Format the trace relies on; returns its events."""
    assert json.loads(json.dumps(trace, allow_nan=False)) == trace
    assert set(trace) >= {"traceEvents", "displayTimeUnit"}
    assert trace["displayTimeUnit"] in ("ms", "ns")
    events = trace["traceEvents"]
    assert isinstance(events, list) and events
    for event in events:
        assert isinstance(event["name"], str)
        assert event["ph"] in ("X", "i", "M")
        assert isinstance(event["pid"], int) and not isinstance(event["pid"], bool)
        assert isinstance(event["tid"], int) and not isinstance(event["tid"], bool)
        assert isinstance(event["ts"], (int, float)) and event["ts"] >= 0
        assert isinstance(event.get("args", {}), dict)
        if event["ph"] == "X":
            assert isinstance(event["dur"], (int, float)) and event["dur"] >= 0
            assert isinstance(event["cat"], str)
        if event["ph"] == "i":
            assert event["s"] in ("t", "p", "g")
        if event["ph"] == "M":
            assert event["name"] in ("process_name", "thread_name", "thread_sort_index")
    # Complete events of one track nest or follow each other (Perfetto draws a track as a
    # stack of slices: partial overlaps would be misdrawn).
    by_track: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for event in events:
        if event["ph"] == "X":
            # In nanoseconds, as Perfetto reads them.
            start = round(event["ts"] * 1000)
            by_track[event["pid"], event["tid"]].append((start, start + round(event["dur"] * 1000)))
    for spans in by_track.values():
        spans.sort(key=lambda span: (span[0], -span[1]))
        stack: list[int] = []
        for start, end in spans:
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], f"slices overlap on one track: {spans}"
            stack.append(end)
    return events


def tracks(events: list[dict[str, Any]]) -> dict[str, int]:
    return {e["args"]["name"]: e["tid"] for e in events if e["name"] == "thread_name"}


def slices(events: list[dict[str, Any]], tid: int) -> list[dict[str, Any]]:
    return sorted((e for e in events if e["ph"] == "X" and e["tid"] == tid), key=lambda e: e["ts"])


def test_the_chrome_trace_is_the_trace_event_format_and_round_trips_through_json() -> None:
    report = slow_request()
    trace = report.to_chrome_trace()
    events = check_trace_format(trace)
    assert trace["otherData"]["run_id"] == "run-1"
    assert trace["otherData"]["outcome"] == "succeeded"
    names = tracks(events)
    # A track per node (topological order, also those that never ran) and per release,
    # after the run's own track.
    assert list(names) == [
        "run",
        "connection",
        "rates",
        "report",
        "audit",
        "release of connection",
    ]
    sort = {e["tid"]: e["args"]["sort_index"] for e in events if e["name"] == "thread_sort_index"}
    assert [sort[names[name]] for name in names] == sorted(sort.values())
    assert len({e["pid"] for e in events}) == 1


def test_the_trace_has_a_span_per_attempt_with_outcome_and_exception_type() -> None:
    events = check_trace_format(slow_request().to_chrome_trace())
    rates = slices(events, tracks(events)["rates"])
    assert [(e["name"], e["cat"]) for e in rates] == [
        ("attempt 1", "attempt"),
        ("retry wait", "wait"),
        ("attempt 2", "attempt"),
        ("retry wait", "wait"),
        ("attempt 3", "attempt"),
    ]
    attempts = [e for e in rates if e["cat"] == "attempt"]
    assert [(e["args"]["outcome"], e["args"]["exception"]) for e in attempts] == [
        ("timed out", "TimeoutError"),
        ("failed", "ConnectionResetError"),
        ("succeeded", None),
    ]
    # Microseconds from the run's start.
    assert [e["ts"] for e in rates] == pytest.approx([4300, 55100, 365200, 370200, 1070200])
    assert [e["dur"] for e in rates] == pytest.approx([50800, 310100, 5000, 700000, 20000])
    assert attempts[0]["args"]["timed_out_at_us"] == pytest.approx(54300)
    waits = [e for e in rates if e["cat"] == "wait"]
    assert [e["args"]["delay"] for e in waits] == [0.31, 0.7]
    assert [e["args"]["outcome"] for e in waits] == ["waited", "waited"]
    assert slices(events, tracks(events)["audit"]) == []
    assert "secret" not in json.dumps(events)  # exception type names, never messages


def test_the_run_and_its_phases_are_spans_and_releases_come_after_the_forward_phase() -> None:
    events = check_trace_format(slow_request().to_chrome_trace())
    run = slices(events, tracks(events)["run"])
    assert [(e["name"], e["ts"]) for e in run] == [
        ("run", 0),
        ("forward", 0),
        ("shutdown", pytest.approx(1090500)),
    ]
    assert run[0]["dur"] == pytest.approx(1095700)
    assert run[0]["args"] == {"outcome": "succeeded", "exception": None, "run_id": "run-1"}
    release = slices(events, tracks(events)["release of connection"])
    assert [(e["name"], e["cat"], e["args"]["outcome"]) for e in release] == [
        ("attempt 1", "release", "failed"),
        ("retry wait", "wait", "waited"),
        ("attempt 2", "release", "succeeded"),
    ]
    assert release[0]["args"]["exception"] == "OSError"
    assert all(e["ts"] >= run[2]["ts"] for e in release)


def test_skipped_retries_expired_deadlines_and_rejected_inputs_are_instant_events() -> None:
    report = feed(
        RunReport(),
        ("run_started", "", 0, 5.0, {"nodes": ("a", "b", "c"), "deadline": 5.5}),
        ("input_rejected", "c", 0, 5.001, {"error": TypeError("bad")}),
        ("attempt_started", "a", 1, 5.0, {"clipped": True}),
        ("attempt_timed_out", "a", 1, 5.5, {"clipped": True}),
        ("attempt_failed", "a", 1, 5.501, {"error": TimeoutError()}),
        ("retry_skipped", "a", 1, 5.501, {"error": TimeoutError(), "reason": "deadline"}),
        ("attempt_started", "b", 1, 5.0),
        ("attempt_failed", "b", 1, 5.1, {"error": ValueError()}),
        ("retry_scheduled", "b", 1, 5.1, {"delay": 1.0}),
        ("deadline_expired", "b", 2, 5.5, {"error": TimeoutError()}),
        ("shutdown_started", "", 0, 5.51),
        ("run_finished", "", 0, 5.52, {"error": ExecutionError("x", [ValueError()])}),
    )
    events = check_trace_format(report.to_chrome_trace())
    names = tracks(events)
    marks = {(e["tid"], e["name"], e["args"].get("exception")) for e in events if e["ph"] == "i"}
    assert marks == {
        (0, "deadline", None),
        (names["a"], "retry skipped (deadline)", "TimeoutError"),
        (names["b"], "deadline expired", "TimeoutError"),
        (names["c"], "input rejected", "TypeError"),
    }
    deadline = next(e for e in events if e["name"] == "deadline")
    assert deadline["ts"] == pytest.approx(500000)
    a = slices(events, names["a"])
    assert a[0]["args"]["clipped"] is True and a[0]["args"]["outcome"] == "timed out"
    b_wait = slices(events, names["b"])[1]
    assert (b_wait["name"], b_wait["args"]["outcome"]) == ("retry wait", "expired")
    assert b_wait["dur"] == pytest.approx(400000)
    run = slices(events, 0)[0]
    assert run["args"]["outcome"] == "failed" and run["args"]["exception"] == "ExecutionError"
    root = parse(report.to_svg())
    (deadline_line,) = classes(root, "deadline")
    (shutdown_line,) = classes(root, "shutdown")
    assert float(deadline_line.get("x1", "0")) < float(shutdown_line.get("x1", "0"))
    assert len(classes(root, "mark")) == 3  # the deadline is a line, not a row's mark
    # A deadline far past the run's end is not drawn: it would squeeze the run.
    far = feed(
        RunReport(),
        ("run_started", "", 0, 0.0, {"nodes": ("a",), "deadline": 60.0}),
        ("attempt_started", "a", 1, 0.0),
        ("attempt_succeeded", "a", 1, 0.5),
        ("shutdown_started", "", 0, 0.5),
        ("run_finished", "", 0, 1.0),
    )
    assert classes(parse(far.to_svg()), "deadline") == []


def test_a_report_read_mid_run_draws_what_is_still_going_up_to_the_last_event() -> None:
    report = feed(
        RunReport(),
        ("run_started", "", 0, 1.0, {"nodes": ("a", "b")}),
        ("attempt_started", "a", 1, 1.0),
        ("attempt_failed", "a", 1, 1.2, {"error": OSError()}),
        ("retry_scheduled", "a", 1, 1.2, {"delay": 5.0}),
        ("attempt_started", "b", 1, 1.1),
        ("attempt_succeeded", "b", 1, 1.3),
    )
    events = check_trace_format(report.to_chrome_trace())
    wait = slices(events, tracks(events)["a"])[1]
    assert wait["args"]["unfinished"] is True
    assert wait["ts"] + wait["dur"] == pytest.approx(300000)  # the last time seen
    assert ET.fromstring(report.to_svg().encode()).tag == f"{SVG}svg"


def test_overlapping_calls_of_one_node_get_lanes_of_their_own() -> None:
    # Two calls of one node at once (a hedged round): the second starts while the first runs.
    report = feed(
        RunReport(),
        ("run_started", "", 0, 0.0, {"nodes": ("lookup",)}),
        ("attempt_started", "lookup", 1, 0.0),
        ("hedge_started", "lookup", 2, 0.01),
        ("attempt_started", "lookup", 2, 0.01),
        ("attempt_succeeded", "lookup", 2, 0.012),
        ("attempt_cancelled", "lookup", 1, 0.013),
        ("shutdown_started", "", 0, 0.014),
        ("run_finished", "", 0, 0.015),
    )
    events = check_trace_format(report.to_chrome_trace())
    names = tracks(events)
    assert list(names) == ["run", "lookup", "lookup [2]"]
    first = slices(events, names["lookup"])
    second = slices(events, names["lookup [2]"])
    assert [(e["name"], e["args"]["outcome"]) for e in first] == [("attempt 1", "cancelled")]
    assert [(e["name"], e["args"]["outcome"]) for e in second] == [("attempt 2", "succeeded")]
    hedge = [e for e in events if e["ph"] == "i"]
    assert [(e["name"], e["tid"]) for e in hedge] == [("hedge started", names["lookup"])]
    root = ET.fromstring(report.to_svg().encode())
    bars = [r for r in root.iter(f"{SVG}rect") if "attempt" in r.get("class", "").split()]
    assert len(bars) == 2 and bars[0].get("y") != bars[1].get("y")


# ------------------------------------------------------------------------- SVG


def parse(svg: str) -> ET.Element:
    assert svg.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<svg ')
    return ET.fromstring(svg.encode("utf-8"))


def classes(root: ET.Element, name: str) -> list[ET.Element]:
    return [e for e in root.iter() if name in e.get("class", "").split()]


def labels(root: ET.Element) -> list[str]:
    return [(e.find(f"{SVG}title").text or "") for e in classes(root, "label")]  # type: ignore[union-attr]


def test_the_svg_has_a_row_per_node_then_per_release_and_bars_coloured_by_outcome() -> None:
    report = slow_request()
    svg = report.to_svg()
    assert report._repr_svg_() == svg
    root = parse(svg)
    assert root.tag == f"{SVG}svg"
    assert int(root.get("width", "0")) > 600 and int(root.get("height", "0")) > 100
    assert labels(root) == ["connection", "rates", "report", "audit", "release of connection"]
    attempts = classes(root, "attempt")
    outcome_of = {e.get("class", "").split()[1] for e in attempts}
    assert outcome_of == {"succeeded", "failed", "timed-out"}
    fills = {e.get("class", "").split()[1]: e.get("fill") for e in attempts}
    assert len(set(fills.values())) == 3  # one colour per outcome
    assert len(attempts) == 1 + 3 + 1 + 2  # connection, rates, report, two release attempts
    tips = [e.find(f"{SVG}title").text for e in attempts]  # type: ignore[union-attr]
    assert "rates: attempt 2 failed (ConnectionResetError), +365 ms for 5 ms" in tips
    # Waits are hatched: filled with a pattern the document defines.
    waits = classes(root, "wait")
    assert len(waits) == 3
    patterns = {p.get("id") for p in root.iter(f"{SVG}pattern")}
    for wait in waits:
        match = re.fullmatch(r"url\(#(.+)\)", wait.get("fill", ""))
        assert match is not None and match.group(1) in patterns
    assert "secret" not in svg


def test_the_svg_draws_releases_right_of_the_shutdown_line_on_a_time_axis() -> None:
    root = parse(slow_request().to_svg())
    (shutdown,) = classes(root, "shutdown")
    line_x = float(shutdown.get("x1", "nan"))
    rows = classes(root, "row")
    release_row = rows[-1]
    release_bars = [
        e
        for e in classes(root, "attempt")
        if float(e.get("y", "0")) >= float(release_row.get("y", "0"))
    ]
    assert len(release_bars) == 2
    assert all(float(e.get("x", "0")) >= line_x for e in release_bars)
    ticks = [e.text for e in classes(root, "tick")]
    assert ticks[0] == "0" and "200 ms" in ticks and "1 s" in ticks
    grid = [float(e.get("x1", "nan")) for e in classes(root, "grid")]
    assert grid == sorted(grid) and len(grid) == len(ticks) >= 4
    # Bars sit where their times are: attempt 3 of rates ends where the run's forward phase
    # is drawn to end, near the shutdown line.
    rates_last = next(
        e
        for e in classes(root, "attempt")
        if e.find(f"{SVG}title").text.startswith("rates: attempt 3")  # type: ignore[union-attr]
    )
    end = float(rates_last.get("x", "0")) + float(rates_last.get("width", "0"))
    assert abs(end - line_x) < 1.0


HOSTILE = (
    "<script>alert(1)</script>",
    "a & b",
    "\"double\" and 'single' quotes",
    "]]><![CDATA[",
    "x" * 400,
    "tab\tnewline\ncontrol\x01bell\x07",
    "lone \ud800 surrogate",
    "ünïcødé → ✓",
)


def hostile_report() -> RunReport:
    events: list[tuple[Any, ...]] = [("run_started", "", 0, 0.0, {"nodes": HOSTILE})]
    for number, name in enumerate(HOSTILE):
        at = number * 0.01
        events.append(("attempt_started", name, 1, at))
        error_type = type("<Evil & 'Error'>", (Exception,), {})
        events.append(("attempt_failed", name, 1, at + 0.005, {"error": error_type("boom")}))
    events.append(("shutdown_started", "", 0, 0.1))
    events.append(("release_started", HOSTILE[0], 1, 0.1))
    events.append(("release_succeeded", HOSTILE[0], 1, 0.11))
    events.append(("run_finished", "", 0, 0.11))
    return feed(RunReport(), *events, run="<run & 'id'>")


def expected_label(name: str) -> str:
    return re.sub("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff]", "\ufffd", name)


def test_hostile_names_and_exception_types_are_escaped_in_the_svg() -> None:
    report = hostile_report()
    svg = report.to_svg()
    svg.encode("utf-8")  # no lone surrogate left
    root = parse(svg)
    assert not [e for e in root.iter() if e.tag in (f"{SVG}script", "script")]
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert labels(root) == [
        *(expected_label(name) for name in HOSTILE),
        expected_label(f"release of {HOSTILE[0]}"),
    ]
    shown = [e.itertext() for e in classes(root, "label")]
    texts = ["".join(parts)[len(title) :] for parts, title in zip(shown, labels(root), strict=True)]
    assert texts[4] == "x" * 47 + "\u2026"  # very long names are cut short, whole in the tip
    assert max(len(text) for text in texts) == 48
    tips = [e.find(f"{SVG}title").text or "" for e in classes(root, "attempt")]  # type: ignore[union-attr]
    assert all("(<Evil & 'Error'>)" in tip for tip in tips[:-1])
    assert "boom" not in svg


def test_hostile_names_survive_the_chrome_trace_as_plain_json_strings() -> None:
    events = check_trace_format(hostile_report().to_chrome_trace())
    names = tracks(events)
    assert [name for name in names if name != "run"] == [
        *HOSTILE,
        f"release of {HOSTILE[0]}",
    ]
    attempts = [e for e in events if e["ph"] == "X" and e["cat"] == "attempt"]
    assert {e["args"]["exception"] for e in attempts} == {"<Evil & 'Error'>"}
    assert {e["args"]["node"] for e in attempts} == set(HOSTILE)


def wide_report(count: int) -> RunReport:
    names = tuple(f"step_{i:03d}_{'long_name_' * (i % 4)}" for i in range(count))
    events: list[tuple[Any, ...]] = [("run_started", "", 0, 0.0, {"nodes": names})]
    for i, name in enumerate(names):
        start = (i % 20) * 0.002
        events.append(("attempt_started", name, 1, start))
        if i % 7 == 3:
            events.append(("attempt_failed", name, 1, start + 0.003, {"error": OSError()}))
            events.append(("retry_scheduled", name, 1, start + 0.003, {"delay": 0.004}))
            events.append(("attempt_started", name, 2, start + 0.007))
            events.append(("attempt_succeeded", name, 2, start + 0.009))
        else:
            events.append(("attempt_succeeded", name, 1, start + 0.001 + (i % 5) * 0.001))
    events.append(("shutdown_started", "", 0, 0.05))
    for i, name in enumerate(names[: count // 4]):
        events.append(("release_started", name, 1, 0.05 + i * 0.0001))
        events.append(("release_succeeded", name, 1, 0.05 + i * 0.0001 + 0.00005))
    events.append(("run_finished", "", 0, 0.06))
    return feed(RunReport(), *events)


@pytest.mark.parametrize("count", [3, 200])
def test_the_svg_stays_readable_for_3_and_200_nodes(count: int) -> None:
    root = parse(wide_report(count).to_svg())
    rows = classes(root, "row")
    assert len(rows) == count + count // 4
    heights = {float(e.get("height", "0")) for e in rows}
    assert min(heights) >= 12  # a row stays tall enough for its label
    font = float(root.get("font-size", "0"))
    assert font >= 10
    # Rows do not overlap and the picture grows with them.
    tops = [float(e.get("y", "0")) for e in rows]
    assert tops == sorted(tops) and len(set(tops)) == len(tops)
    assert float(root.get("height", "0")) >= tops[-1] + min(heights)
    # Every bar lies inside the plot and inside its row.
    width = float(root.get("width", "0"))
    for bar in classes(root, "attempt"):
        x, w = float(bar.get("x", "0")), float(bar.get("width", "0"))
        assert 0 < x and x + w <= width
    assert len(classes(root, "attempt")) == count + sum(1 for i in range(count) if i % 7 == 3) + (
        count // 4
    )
    assert len(classes(root, "tick")) >= 4


# --------------------------------------------------------------------- real runs


async def test_a_real_run_draws_its_retries_release_and_phases(make_module: Any) -> None:
    plan = Driver(make_module(RETRIED_RUN)).prepare(["after"])
    report = RunReport()
    assert await plan.execute(inputs={"hang": False}, observer=report) == {"after": 4}
    events = check_trace_format(report.to_chrome_trace())
    names = tracks(events)
    assert list(names) == ["run", "service", "fetched", "stuck", "after", "release of service"]
    fetched = slices(events, names["fetched"])
    assert [(e["name"], e["args"]["outcome"]) for e in fetched] == [
        ("attempt 1", "failed"),
        ("retry wait", "waited"),
        ("attempt 2", "failed"),
        ("retry wait", "waited"),
        ("attempt 3", "succeeded"),
    ]
    for wait in fetched[1::2]:
        assert wait["dur"] >= wait["args"]["delay"] * 1e6 - 2000  # timers may fire a hair early
    release = slices(events, names["release of service"])
    assert [(e["name"], e["args"]["outcome"], e["args"].get("exception")) for e in release] == [
        ("attempt 1", "failed", "ConnectionError"),
        ("retry wait", "waited", None),
        ("attempt 2", "succeeded", None),
    ]
    run, forward, shutdown = slices(events, 0)
    assert release[0]["ts"] >= shutdown["ts"] >= forward["ts"] + forward["dur"] - 1e-3
    assert report.duration is not None
    assert run["dur"] == pytest.approx(report.duration * 1e6, abs=0.01)
    root = parse(report.to_svg())
    assert labels(root) == ["service", "fetched", "stuck", "after", "release of service"]


async def test_a_real_failed_run_draws_the_timed_out_attempt(make_module: Any) -> None:
    plan = Driver(make_module(RETRIED_RUN)).prepare(["after"])
    report = RunReport()
    with instant_retries(), pytest.raises(ExecutionError):
        await plan.execute(inputs={"hang": True}, observer=report)
    events = check_trace_format(report.to_chrome_trace())
    stuck = slices(events, tracks(events)["stuck"])
    assert [(e["args"]["outcome"], e["args"]["exception"]) for e in stuck] == [
        ("timed out", "TimeoutError")
    ]
    assert stuck[0]["dur"] >= 0.05 * 1e6 - 2000
    assert slices(events, tracks(events)["after"]) == []
    root = parse(report.to_svg())
    drawn = {
        (e.find(f"{SVG}title").text or "").split(":")[0]: e.get("class")  # type: ignore[union-attr]
        for e in classes(root, "attempt")
    }
    assert drawn["stuck"] == "attempt timed-out"
    assert len(classes(root, "timeout-tick")) == 1
    assert "sdax_hamilton run: failed (ExecutionError)" in (
        root.find(f"{SVG}title").text or ""  # type: ignore[union-attr]
    )


def test_a_report_before_its_run_draws_an_empty_but_valid_timeline() -> None:
    report = RunReport()
    events = check_trace_format(report.to_chrome_trace())
    assert tracks(events) == {"run": 0}
    root = parse(report.to_svg())
    assert classes(root, "row") == [] and classes(root, "attempt") == []
    assert (root.find(f"{SVG}title").text or "").startswith("sdax_hamilton run: not started")  # type: ignore[union-attr]


def test_the_timeline_keeps_no_exception_object() -> None:
    # The type name only: an exception would keep its traceback's frames alive.
    class Dropped(ConnectionResetError):  # a Python subclass can be weakly referenced
        pass

    error = Dropped("secret")
    alive = weakref.ref(error)
    report = feed(
        RunReport(),
        ("run_started", "", 0, 0.0, {"nodes": ("a",)}),
        ("attempt_started", "a", 1, 0.0),
        ("attempt_failed", "a", 1, 0.1, {"error": error}),
    )
    del error
    gc.collect()
    assert alive() is None
    assert "Dropped" in report.to_svg()


def test_bulkhead_waits_are_hatched_spans_and_rejections_are_marks() -> None:
    # The order docs/contract.md#shared-objects gives: a queued attempt's
    # ``bulkhead_waiting`` then its ``attempt_started``; a refused attempt's
    # ``bulkhead_rejected`` / ``circuit_rejected`` then its ``attempt_started`` and
    # ``attempt_failed``; ``fallback_used`` when the fallback's value is used.
    report = feed(
        RunReport(),
        ("run_started", "", 0, 0.0, {"nodes": ("query", "lookup")}),
        ("bulkhead_waiting", "query", 1, 0.0),
        ("attempt_started", "query", 1, 0.2),
        ("attempt_succeeded", "query", 1, 0.3),
        ("bulkhead_rejected", "lookup", 1, 0.0, {"error": RuntimeError()}),
        ("attempt_started", "lookup", 1, 0.0),
        ("attempt_failed", "lookup", 1, 0.0, {"error": RuntimeError()}),
        ("fallback_used", "lookup", 1, 0.0, {"error": RuntimeError()}),
        ("shutdown_started", "", 0, 0.3),
        ("run_finished", "", 0, 0.3),
    )
    events = check_trace_format(report.to_chrome_trace())
    names = tracks(events)
    query = slices(events, names["query"])
    assert [(e["name"], e["cat"], e["args"]["outcome"]) for e in query] == [
        ("bulkhead wait", "wait", "waited"),
        ("attempt 1", "attempt", "succeeded"),
    ]
    assert query[0]["dur"] == pytest.approx(200000)
    marks = [(e["name"], e["tid"]) for e in events if e["ph"] == "i"]
    assert marks == [("bulkhead full", names["lookup"]), ("fallback used", names["lookup"])]
    root = parse(report.to_svg())
    (wait,) = classes(root, "bulkhead-wait")
    assert wait.get("fill", "").startswith("url(#") and "wait" in wait.get("class", "")
    assert len(classes(root, "mark")) == 2


def test_a_cache_hit_is_a_mark_without_an_attempt() -> None:
    report = feed(
        RunReport(),
        ("run_started", "", 0, 0.0, {"nodes": ("rates",)}),
        ("cache_hit", "rates", 0, 0.001),
        ("shutdown_started", "", 0, 0.002),
        ("run_finished", "", 0, 0.002),
    )
    events = check_trace_format(report.to_chrome_trace())
    rates = tracks(events)["rates"]
    assert slices(events, rates) == []
    assert [(e["name"], e["tid"]) for e in events if e["ph"] == "i"] == [("cache hit", rates)]
    root = parse(report.to_svg())
    assert classes(root, "attempt") == [] and len(classes(root, "mark")) == 1
