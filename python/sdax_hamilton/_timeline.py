"""The run's timeline (docs/contract.md#timeline): a ``RunReport`` as a Chrome trace and an SVG.

:class:`~sdax_hamilton.RunReport` keeps, besides its per-node totals, one compact entry per
event about a node or a release (kind, node, attempt, time, delay, exception *type* name,
clipped, reason). This module turns those entries into spans (attempts, waits) and marks (a retry
skipped, the deadline passing...), then draws them two ways:

* :func:`chrome_trace`: a dict in the Trace Event Format, which Perfetto and
  ``chrome://tracing`` load (a track per node, complete events ``"ph": "X"`` for spans,
  instant events ``"ph": "i"`` for marks, metadata ``"ph": "M"`` naming the tracks).
* :func:`svg`: a standalone SVG document, one row per node then one per release, a time
  axis, bars coloured by outcome, waits hatched.

Names and exception type names are user input: every string written into the SVG goes
through :func:`_xml`, and the JSON is built from plain values that ``json.dumps`` escapes.
Exception messages are never kept (they may hold secrets): type names only.
"""

from __future__ import annotations

import hashlib
import math
import re
import xml.sax.saxutils
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

__all__ = ["Entry", "Recording", "Timeline", "chrome_trace", "svg", "timeline"]

Entry: TypeAlias = tuple[str, str, int, float, float | None, str | None, bool, str | None]
"""One event about a node or a release: ``(kind, node, attempt, time, delay, error type name,
clipped, reason)``."""


@dataclass(frozen=True, slots=True)
class Recording:
    """What a ``RunReport`` hands over to be drawn (times are event-loop times)."""

    run: str | None
    order: tuple[str, ...]
    """The plan's nodes in topological order (then any other node seen)."""
    releases: tuple[str, ...]
    """Owners of the releases that ran, in start order."""
    started: float | None
    shutdown: float | None
    finished: float | None
    deadline: float | None
    outcome: str
    error: str | None
    entries: Sequence[Entry]


@dataclass(slots=True)
class Span:
    """A stretch of time on one row: an attempt (or a release attempt) or a wait."""

    row: int
    kind: str
    """``"attempt"``, ``"retry wait"`` or ``"bulkhead wait"``."""
    attempt: int
    start: float
    end: float = 0.0
    outcome: str = "running"
    """Attempts: ``succeeded``, ``failed``, ``timed out``, ``cancelled``, ``running``;
    waits: ``waited``, ``cancelled``, ``expired``, ``waiting``."""
    error: str | None = None
    clipped: bool = False
    timed_out_at: float | None = None
    delay: float | None = None
    """Retry waits: the wait the core scheduled."""
    finished: bool = False
    """False when the span was still going when the report was read."""
    lane: int = 0


@dataclass(frozen=True, slots=True)
class Mark:
    """A moment on one row: a retry skipped, the deadline passing, a hedge..."""

    row: int
    kind: str
    attempt: int
    time: float
    error: str | None


@dataclass(slots=True)
class Row:
    name: str
    release: bool
    lanes: int = 1

    @property
    def label(self) -> str:
        return f"release of {self.name}" if self.release else self.name


@dataclass(slots=True)
class Timeline:
    """Spans and marks of one run, times relative to ``origin``."""

    run: str | None
    origin: float
    end: float
    shutdown: float | None
    deadline: float | None
    outcome: str
    error: str | None
    rows: list[Row] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)


_ATTEMPT_START = frozenset({"attempt_started", "release_started"})
_SUCCEEDED = frozenset({"attempt_succeeded", "release_succeeded"})
_FAILED = frozenset({"attempt_failed", "release_failed"})
_TIMED_OUT = frozenset({"attempt_timed_out", "release_timed_out"})
_RETRY = frozenset({"retry_scheduled", "release_retry_scheduled"})
# Events drawn as marks on their row, and how they are called there.
_MARKS = {
    "retry_skipped": "retry skipped",
    "deadline_expired": "deadline expired",
    "input_rejected": "input rejected",
    "hedge_started": "hedge started",
    "bulkhead_rejected": "bulkhead full",
    "circuit_rejected": "circuit open",
    "fallback_used": "fallback used",
}
# Marks that also end a wait of their row, and how the wait ended.
_WAIT_ENDS = {
    "deadline_expired": "expired",
    "bulkhead_rejected": "rejected",
    "circuit_rejected": "rejected",
}


def timeline(recording: Recording) -> Timeline:
    """Spans and marks from a report's entries (unfinished ones end at the last time seen)."""
    times = [entry[3] for entry in recording.entries]
    times.extend(
        moment
        for moment in (recording.started, recording.shutdown, recording.finished)
        if moment is not None
    )
    origin = recording.started if recording.started is not None else min(times, default=0.0)
    last = recording.finished if recording.finished is not None else max(times, default=origin)
    result = Timeline(
        run=recording.run,
        origin=origin,
        end=max(last - origin, 0.0),
        shutdown=None if recording.shutdown is None else recording.shutdown - origin,
        deadline=None if recording.deadline is None else recording.deadline - origin,
        outcome=recording.outcome,
        error=recording.error,
    )
    builder = _Builder(result)
    for release, names in ((False, recording.order), (True, recording.releases)):
        for name in names:
            builder.row(release, name)
    for entry in recording.entries:
        builder.add(entry)
    for span in result.spans:
        if not span.finished:
            span.end = max(result.end, span.start)
    _lanes(result)
    return result


class _Builder:
    """Turns entries into spans and marks, one event at a time."""

    __slots__ = ("attempts", "index", "result", "waits")

    def __init__(self, result: Timeline) -> None:
        self.result = result
        self.index: dict[tuple[bool, str], int] = {}
        self.attempts: dict[tuple[int, int], Span] = {}
        self.waits: dict[int, Span] = {}

    def row(self, release: bool, name: str) -> int:
        row = self.index.get((release, name))
        if row is None:
            row = self.index[release, name] = len(self.result.rows)
            self.result.rows.append(Row(name, release))
        return row

    def add(self, entry: Entry) -> None:
        kind, node, attempt, at, delay, error, clipped, reason = entry
        row = self.row(kind.startswith("release_"), node)
        time = at - self.result.origin
        if kind in _ATTEMPT_START:
            self.close_wait(row, time, "waited")
            span = Span(row, "attempt", attempt, time, clipped=clipped)
            self.attempts[row, attempt] = span
            self.result.spans.append(span)
        elif kind in _SUCCEEDED or kind in _FAILED or kind == "attempt_cancelled":
            self.end_attempt(kind, row, attempt, time, error)
        elif kind in _TIMED_OUT:
            running = self.attempts.get((row, attempt))
            if running is not None:
                running.timed_out_at = time
                running.clipped = running.clipped or clipped
        elif kind in _RETRY or kind == "bulkhead_waiting":
            self.close_wait(row, time, "waited")
            what = "bulkhead wait" if kind == "bulkhead_waiting" else "retry wait"
            wait = Span(row, what, attempt, time, outcome="waiting", delay=delay)
            self.waits[row] = wait
            self.result.spans.append(wait)
        elif kind == "retry_cancelled":
            self.close_wait(row, time, "cancelled")
        else:
            if kind in _WAIT_ENDS:
                self.close_wait(row, time, _WAIT_ENDS[kind])
            label = _MARKS.get(kind, kind.replace("_", " "))
            if reason is not None:
                label += f" ({reason})"  # a skipped retry's "deadline" or "budget"
            self.result.marks.append(Mark(row, label, attempt, time, error))

    def end_attempt(
        self, kind: str, row: int, attempt: int, time: float, error: str | None
    ) -> None:
        span = self.attempts.pop((row, attempt), None)
        if span is None:
            # Cancelled before it began: nothing ran, a mark says so.
            self.result.marks.append(Mark(row, "cancelled", attempt, time, error))
            return
        span.end, span.finished, span.error = time, True, error
        if kind in _SUCCEEDED:
            span.outcome = "succeeded"
        elif kind == "attempt_cancelled":
            span.outcome = "cancelled"
        else:
            span.outcome = "timed out" if span.timed_out_at is not None else "failed"

    def close_wait(self, row: int, time: float, outcome: str) -> None:
        wait = self.waits.pop(row, None)
        if wait is not None:
            wait.end, wait.outcome, wait.finished = time, outcome, True


def _lanes(result: Timeline) -> None:
    """Give overlapping spans of a row (hedged calls) lanes of their own, first fit."""
    ends: dict[int, list[float]] = {}
    for span in sorted(result.spans, key=lambda s: (s.start, s.attempt)):
        lanes = ends.setdefault(span.row, [])
        for lane, end in enumerate(lanes):
            if end <= span.start:
                span.lane = lane
                lanes[lane] = span.end
                break
        else:
            span.lane = len(lanes)
            lanes.append(span.end)
    for row, lanes in ends.items():
        result.rows[row].lanes = max(len(lanes), 1)


# ------------------------------------------------------------------ Chrome trace

_PID = 1


def _us(seconds: float) -> float:
    """Trace Event Format times are microseconds; three decimals keep nanoseconds."""
    return round(seconds * 1e6, 3)


def chrome_trace(recording: Recording) -> dict[str, object]:
    """The run in the Trace Event Format (JSON object form), times from the run's start."""
    line = timeline(recording)
    events: list[dict[str, object]] = []
    title = "sdax_hamilton run" if line.run is None else f"sdax_hamilton run {line.run}"
    events.append(_meta("process_name", 0, {"name": title}))
    events.append(_meta("thread_name", 0, {"name": "run"}))
    events.append(_meta("thread_sort_index", 0, {"sort_index": 0}))
    run_args: dict[str, object] = {"outcome": line.outcome, "exception": line.error}
    if line.run is not None:
        run_args["run_id"] = line.run
    events.append(_complete("run", "run", 0, 0.0, line.end, run_args))
    if line.shutdown is not None:
        events.append(_complete("forward", "phase", 0, 0.0, line.shutdown, {}))
        events.append(
            _complete("shutdown", "phase", 0, line.shutdown, line.end - line.shutdown, {})
        )
    if line.deadline is not None:
        events.append(_instant("deadline", "run", 0, line.deadline, {}))
    first_tid: list[int] = []
    tid = 1
    for row in line.rows:
        first_tid.append(tid)
        for lane in range(row.lanes):
            name = row.label if lane == 0 else f"{row.label} [{lane + 1}]"
            events.append(_meta("thread_name", tid, {"name": name}))
            events.append(_meta("thread_sort_index", tid, {"sort_index": tid}))
            tid += 1
    for span in line.spans:
        row = line.rows[span.row]
        args: dict[str, object] = {
            "node": row.name,
            "attempt": span.attempt,
            "outcome": span.outcome,
        }
        if span.kind == "attempt":
            name = f"attempt {span.attempt}"
            category = "release" if row.release else "attempt"
            args["exception"] = span.error
            args["clipped"] = span.clipped
            if span.timed_out_at is not None:
                args["timed_out_at_us"] = _us(span.timed_out_at)
        else:
            name = span.kind
            category = "wait"
            if span.delay is not None:
                args["delay"] = span.delay
        if not span.finished:
            args["unfinished"] = True
        events.append(
            _complete(
                name,
                category,
                first_tid[span.row] + span.lane,
                span.start,
                span.end - span.start,
                args,
            )
        )
    for mark in line.marks:
        row = line.rows[mark.row]
        events.append(
            _instant(
                mark.kind,
                "mark",
                first_tid[mark.row],
                mark.time,
                {"node": row.name, "attempt": mark.attempt, "exception": mark.error},
            )
        )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": "sdax_hamilton",
            "run_id": line.run,
            "outcome": line.outcome,
            "exception": line.error,
        },
    }


def _meta(name: str, tid: int, args: dict[str, object]) -> dict[str, object]:
    return {"name": name, "ph": "M", "pid": _PID, "tid": tid, "ts": 0, "args": args}


def _complete(
    name: str, category: str, tid: int, start: float, duration: float, args: dict[str, object]
) -> dict[str, object]:
    return {
        "name": name,
        "cat": category,
        "ph": "X",
        "pid": _PID,
        "tid": tid,
        "ts": _us(start),
        # From the rounded ends, so that a span ending where the next begins ends exactly
        # there in nanoseconds.
        "dur": max(round(_us(start + duration) - _us(start), 3), 0.0),
        "args": args,
    }


def _instant(
    name: str, category: str, tid: int, time: float, args: dict[str, object]
) -> dict[str, object]:
    return {
        "name": name,
        "cat": category,
        "ph": "i",
        "s": "t",
        "pid": _PID,
        "tid": tid,
        "ts": _us(time),
        "args": args,
    }


# ------------------------------------------------------------------------- SVG

# Characters XML 1.0 cannot carry even escaped (controls, lone surrogates, U+FFFE/U+FFFF).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_LABEL_CHARS = 48

FILLS = {
    "succeeded": "#2f9e5a",
    "failed": "#d64545",
    "timed out": "#ee8a1d",
    "cancelled": "#9aa0a6",
    "running": "#3b7dd8",
}
_MARK_FILL = "#7b2cbf"
_WAIT_STROKE = {"retry wait": "#5f6b7a", "bulkhead wait": "#8e44ad"}


def _xml(text: str) -> str:
    """``text`` safe in XML character data and in a double- or single-quoted attribute."""
    return xml.sax.saxutils.escape(_NOT_XML.sub("\ufffd", text), {'"': "&quot;", "'": "&apos;"})


def _short(text: str, limit: int = _LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _duration(seconds: float) -> str:
    if seconds == 0:
        return "0"
    magnitude = abs(seconds)
    if magnitude < 0.001:
        return f"{seconds * 1e6:.3g} µs"
    if magnitude < 1.0:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def _ticks(end: float) -> list[float]:
    """Round tick positions (1, 2 or 5 times a power of ten) covering ``[0, end]``."""
    if end <= 0 or not math.isfinite(end):
        return [0.0]
    raw = end / 8
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    count = int(end / step + 1e-9)
    return [i * step for i in range(count + 1)]


def svg(recording: Recording) -> str:
    """The timeline as a standalone SVG document (no script, no external reference)."""
    return _Drawing(timeline(recording)).document()


class _Drawing:
    """The layout of one timeline picture and the pieces drawn on it."""

    PLOT_W = 880
    TOP = 78

    def __init__(self, line: Timeline) -> None:
        self.line = line
        digest = hashlib.sha256((line.run or "").encode("utf-8", "replace")).hexdigest()
        self.ids = "sdax" + digest[:10]  # pattern ids, distinct per run within one page
        many = sum(row.lanes for row in line.rows) > 60
        self.lane_h = 12 if many else 18
        self.font = 10 if many else 12
        chars = max((len(_short(row.label)) for row in line.rows), default=4)
        self.label_w = int(chars * self.font * 0.62) + 16
        self.left = 12 + self.label_w
        self.tops: list[int] = []
        y = self.TOP
        for row in line.rows:
            self.tops.append(y)
            y += row.lanes * self.lane_h
        self.bottom = y
        self.height = y + 52
        self.width = self.left + self.PLOT_W + 24
        end = line.end
        if line.deadline is not None and line.deadline <= line.end * 1.25:
            end = max(end, line.deadline)
        self.span_end = end
        self.scale = self.PLOT_W / end if end > 0 else 0.0
        self.out: list[str] = []

    def x(self, seconds: float) -> float:
        return self.left + max(seconds, 0.0) * self.scale

    def add(self, text: str) -> None:
        self.out.append(text)

    def document(self) -> str:
        self.add('<?xml version="1.0" encoding="UTF-8"?>')
        self.add(
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" '
            f'height="{self.height}" viewBox="0 0 {self.width} {self.height}" '
            'font-family="DejaVu Sans, Liberation Sans, Arial, sans-serif" '
            f'font-size="{self.font}" class="sdax-timeline">'
        )
        header = self.header()
        self.add(f"<title>{_xml(header)}</title>")
        self.patterns()
        self.add(f'<rect width="{self.width}" height="{self.height}" fill="#ffffff"/>')
        self.add(
            f'<text x="12" y="20" font-size="{self.font + 2}" font-weight="bold" '
            f'fill="#222">{_xml(header)}</text>'
        )
        _legend(self.add, 12, 38, self.ids, self.font)
        self.bands()
        self.axis()
        self.phases()
        self.labels()
        for span in self.line.spans:
            self.span(span)
        for mark in self.line.marks:
            self.mark(mark)
        self.add("</svg>")
        return "\n".join(self.out) + "\n"

    def header(self) -> str:
        line = self.line
        text = f"sdax_hamilton run: {line.outcome}"
        if line.error is not None:
            text += f" ({line.error})"
        text += f" in {_duration(line.end)}"
        if line.shutdown is not None:
            forward, shutdown = _duration(line.shutdown), _duration(line.end - line.shutdown)
            text += f" (forward {forward}, shutdown {shutdown})"
        return text

    def patterns(self) -> None:
        self.add("<defs>")
        for kind, stroke in _WAIT_STROKE.items():
            self.add(
                f'<pattern id="{self.ids}-{kind.split()[0]}" patternUnits="userSpaceOnUse" '
                'width="6" height="6" patternTransform="rotate(45)">'
                '<rect width="6" height="6" fill="#ffffff"/>'
                f'<line x1="0" y1="0" x2="0" y2="6" stroke="{stroke}" stroke-width="2.5"/>'
                "</pattern>"
            )
        self.add("</defs>")

    def bands(self) -> None:
        """A band per row, releases tinted."""
        for number, (row, top) in enumerate(zip(self.line.rows, self.tops, strict=True)):
            even = number % 2 == 0
            if row.release:
                fill = "#f7f3ec" if even else "#fdfbf7"
            else:
                fill = "#f3f5f8" if even else "#ffffff"
            self.add(
                f'<rect class="row" x="12" y="{top}" width="{self.label_w + self.PLOT_W}" '
                f'height="{row.lanes * self.lane_h}" fill="{fill}"/>'
            )

    def labels(self) -> None:
        """Each row's label, cut short, the whole one as its tooltip (drawn after every band,
        so that no band hides a descender of the row above)."""
        for row, top in zip(self.line.rows, self.tops, strict=True):
            baseline = top + self.lane_h / 2 + self.font * 0.36
            self.add(
                f'<text class="label" x="16" y="{baseline:.1f}" fill="#222">'
                f"<title>{_xml(row.label)}</title>{_xml(_short(row.label))}</text>"
            )

    def axis(self) -> None:
        """Grid lines at round times, labelled under the rows (and above them in a tall
        picture)."""
        tall = self.bottom - self.TOP > 400
        for tick in _ticks(self.span_end):
            tx = self.x(tick)
            self.add(
                f'<line class="grid" x1="{tx:.1f}" y1="{self.TOP - 4}" x2="{tx:.1f}" '
                f'y2="{self.bottom}" stroke="#d5d9df" stroke-width="1"/>'
            )
            self.add(
                f'<text class="tick" x="{tx:.1f}" y="{self.bottom + 14}" '
                f'text-anchor="middle" fill="#444">{_xml(_duration(tick))}</text>'
            )
            if tall:  # the times again above the rows, in view before scrolling down
                self.add(
                    f'<text class="tick top" x="{tx:.1f}" y="{self.TOP - 6}" '
                    f'text-anchor="middle" fill="#444">{_xml(_duration(tick))}</text>'
                )
        self.add(
            f'<line class="axis" x1="{self.left}" y1="{self.bottom}" '
            f'x2="{self.left + self.PLOT_W}" y2="{self.bottom}" stroke="#444" stroke-width="1"/>'
        )
        self.add(
            f'<text x="{self.left + self.PLOT_W / 2:.1f}" y="{self.bottom + 32}" '
            'text-anchor="middle" fill="#444">time since the run started</text>'
        )

    def phases(self) -> None:
        """Where releases began, and the run's deadline when it falls within the picture."""
        line = self.line
        for moment, css, colour, label, anchor in (
            (line.shutdown, "shutdown", "#8a6d3b", "releases", "start"),
            (line.deadline, "deadline", "#c0392b", "deadline", "end"),
        ):
            if moment is None or moment > self.span_end:
                continue
            mx = self.x(moment)
            self.add(
                f'<line class="{css}" x1="{mx:.1f}" y1="{self.TOP - 20}" x2="{mx:.1f}" '
                f'y2="{self.bottom}" stroke="{colour}" stroke-width="1.5" '
                'stroke-dasharray="4 3"/>'
            )
            if anchor == "start" and mx > self.left + self.PLOT_W - 80:
                anchor = "end"  # near the right edge: the label goes to the line's left
            tx = mx + 3 if anchor == "start" else mx - 3
            self.add(
                f'<text x="{tx:.1f}" y="{self.TOP - 22}" text-anchor="{anchor}" '
                f'fill="{colour}">{label}</text>'
            )

    def span(self, span: Span) -> None:
        row = self.line.rows[span.row]
        top = self.tops[span.row] + span.lane * self.lane_h + 2
        height = self.lane_h - 4
        x0 = self.x(span.start)
        width = max(self.x(span.end) - x0, 1.5)
        tip = _xml(_tip(row, span))
        if span.kind != "attempt":
            stroke = _WAIT_STROKE.get(span.kind, "#5f6b7a")
            self.add(
                f'<rect class="wait {span.kind.replace(" ", "-")}" x="{x0:.2f}" '
                f'y="{top + 2}" width="{width:.2f}" height="{height - 4}" '
                f'fill="url(#{self.ids}-{span.kind.split()[0]})" stroke="{stroke}" '
                f'stroke-width="0.8"><title>{tip}</title></rect>'
            )
            return
        fill = FILLS.get(span.outcome, FILLS["running"])
        css = f"attempt {span.outcome.replace(' ', '-')}"
        outline = ' stroke="#1b1b1b" stroke-width="1"' if span.clipped else ""
        self.add(
            f'<rect class="{css}" x="{x0:.2f}" y="{top}" width="{width:.2f}" '
            f'height="{height}" rx="2" fill="{fill}"{outline}><title>{tip}</title></rect>'
        )
        if span.timed_out_at is not None:
            tx = self.x(span.timed_out_at)
            self.add(
                f'<line class="timeout-tick" x1="{tx:.2f}" y1="{top - 1}" x2="{tx:.2f}" '
                f'y2="{top + height + 1}" stroke="#1b1b1b" stroke-width="1.5"/>'
            )

    def mark(self, mark: Mark) -> None:
        """A small diamond on the row."""
        mx = self.x(mark.time)
        my = self.tops[mark.row] + self.lane_h / 2
        r = self.lane_h / 2 - 2
        tip = f"{self.line.rows[mark.row].label}: {mark.kind} at {_duration(mark.time)}"
        if mark.error is not None:
            tip += f" ({mark.error})"
        self.add(
            f'<path class="mark" d="M{mx:.2f} {my - r:.2f} L{mx + r:.2f} {my:.2f} '
            f'L{mx:.2f} {my + r:.2f} L{mx - r:.2f} {my:.2f} Z" fill="{_MARK_FILL}">'
            f"<title>{_xml(tip)}</title></path>"
        )


def _tip(row: Row, span: Span) -> str:
    where = f"+{_duration(span.start)} for {_duration(span.end - span.start)}"
    if span.kind == "attempt":
        text = f"{row.label}: attempt {span.attempt} {span.outcome}"
        if span.error is not None:
            text += f" ({span.error})"
        if span.clipped:
            text += ", timeout clipped to the run's"
    else:
        text = f"{row.label}: {span.kind} after attempt {span.attempt} ({span.outcome})"
    return f"{text}, {where}"


def _legend(add: Callable[[str], None], x0: int, y0: int, ids: str, font: int) -> None:
    """Outcome colours, the two hatched waits and the event diamond, in one line."""
    cursor = x0
    for outcome, fill in FILLS.items():
        add(f'<rect x="{cursor}" y="{y0 - 9}" width="14" height="10" rx="2" fill="{fill}"/>')
        add(f'<text x="{cursor + 18}" y="{y0}" fill="#333">{_xml(outcome)}</text>')
        cursor += 24 + int(len(outcome) * font * 0.6)
    for kind, stroke in _WAIT_STROKE.items():
        add(
            f'<rect x="{cursor}" y="{y0 - 9}" width="14" height="10" '
            f'fill="url(#{ids}-{kind.split()[0]})" stroke="{stroke}" stroke-width="0.8"/>'
        )
        add(f'<text x="{cursor + 18}" y="{y0}" fill="#333">{_xml(kind)}</text>')
        cursor += 24 + int(len(kind) * font * 0.6)
    add(
        f'<path d="M{cursor + 6} {y0 - 10} L{cursor + 11} {y0 - 4} L{cursor + 6} {y0 + 1} '
        f'L{cursor + 1} {y0 - 4} Z" fill="{_MARK_FILL}"/>'
    )
    add(f'<text x="{cursor + 18}" y="{y0}" fill="#333">event</text>')
