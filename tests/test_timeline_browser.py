"""The timeline SVG in a real browser (docs/contract.md#timeline): headless Chromium renders
``RunReport.to_svg()`` to PNG and dumps the DOM it built from it.

The picture must not be blank: its rows, labels and bars coloured by outcome are found in
the pixels, where the layout puts them; the node names must be in the DOM as text (escaped
names stay text: no element comes out of a hostile one). CI installs Chromium
(.ci/chromium.sh); without it these tests skip, saying why, except under ``CI=true``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from support import png
from support.modules import RETRIED_RUN
from test_timeline import HOSTILE, SVG, expected_label, hostile_report, wide_report

from sdax_hamilton import Driver, RunReport
from sdax_hamilton._timeline import FILLS

ROOT = Path(__file__).resolve().parent.parent
DOCS_PICTURE = ROOT / "docs" / "timeline.svg"


def chromium_path() -> str:
    """The Chromium binary; skips (or fails under ``CI=true``) when there is none."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found is not None:
            return found
    reason = "headless Chromium is not on PATH (apt-get install chromium)"
    if os.environ.get("CI", "").strip().lower() in ("true", "1"):
        pytest.fail(f"CI=true: {reason}; CI installs it (.ci/chromium.sh), so this must run")
    pytest.skip(reason)


def chromium(tmp_path: Path, *args: str) -> str:
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    done = subprocess.run(
        [
            chromium_path(),
            "--headless",
            "--no-sandbox",  # CI runs as root
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def size(svg: str) -> tuple[int, int]:
    match = re.search(r'<svg [^>]*width="(\d+)" height="(\d+)"', svg)
    assert match is not None
    return int(match.group(1)), int(match.group(2))


def render(tmp_path: Path, svg: str, scale: float = 1.0) -> tuple[png.Image, ET.Element]:
    """The SVG as Chromium draws it (a screenshot the size of the picture) and as its DOM."""
    path = tmp_path / "timeline.svg"
    path.write_text(svg, encoding="utf-8")
    shot = tmp_path / "timeline.png"
    width, height = size(svg)
    chromium(
        tmp_path,
        f"--window-size={width},{height}",  # an SVG document has no page margin
        f"--force-device-scale-factor={scale}",
        f"--screenshot={shot}",
        path.as_uri(),
    )
    dom = chromium(tmp_path, "--dump-dom", path.as_uri())
    return png.read(shot), ET.fromstring(dom.encode("utf-8"))


def near(colour: tuple[int, int, int], hex_colour: str, tolerance: int = 6) -> bool:
    target = tuple(int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return all(abs(a - b) <= tolerance for a, b in zip(colour, target, strict=True))


def count(image: png.Image, hex_colour: str, tolerance: int = 6) -> int:
    """Pixels within ``tolerance`` of a colour in every channel."""
    return sum(n for pixel, n in image.colours.items() if near(pixel, hex_colour, tolerance))


def assert_not_blank(image: png.Image) -> None:
    white = image.colours[255, 255, 255]
    assert white < 0.97 * len(image.pixels), "the picture is (almost) all white"
    assert len(image.colours) > 20, "the picture has almost no colours"


def dom_labels(dom: ET.Element) -> list[str]:
    labels = []
    for text in dom.iter(f"{SVG}text"):
        if text.get("class") == "label":
            title = text.find(f"{SVG}title")
            labels.append("" if title is None else title.text or "")
    return labels


def label_is_drawn(image: png.Image, dom: ET.Element, label: str, scale: float = 1.0) -> bool:
    """Dark (text) pixels at the start of the label's row."""
    text = next(
        e
        for e in dom.iter(f"{SVG}text")
        if e.get("class") == "label" and (e.findtext(f"{SVG}title") or "") == label
    )
    baseline = float(text.get("y", "0"))
    ys = range(int((baseline - 9) * scale), int((baseline + 2) * scale))
    xs = range(int(16 * scale), int(60 * scale))
    return any(max(image.pixel(x, y)) < 110 for y in ys for x in xs)


async def test_a_real_run_renders_with_its_rows_bars_and_names(
    make_module: Any, tmp_path: Path
) -> None:
    plan = Driver(make_module(RETRIED_RUN)).prepare(["after"])
    report = RunReport()
    assert await plan.execute(inputs={"hang": False}, observer=report) == {"after": 4}
    image, dom = render(tmp_path, report.to_svg())
    width, height = size(report.to_svg())
    assert (image.width, image.height) == (width, height)
    assert_not_blank(image)
    names = ["service", "fetched", "stuck", "after", "release of service"]
    assert dom_labels(dom) == names
    for name in names:
        assert label_is_drawn(image, dom, name), name
    # Bars in the outcome colours: fetched failed twice and succeeded, the release failed
    # once; retry waits are hatched with the wait's stroke colour.
    assert count(image, FILLS["succeeded"]) > 50
    assert count(image, FILLS["failed"]) > 20
    assert count(image, "#5f6b7a", tolerance=40) > 20


def test_the_docs_picture_renders_with_every_outcome_it_shows(tmp_path: Path) -> None:
    svg = DOCS_PICTURE.read_text(encoding="utf-8")
    image, dom = render(tmp_path, svg)
    assert_not_blank(image)
    names = ["connection", "forecast", "radar", "summary", "release of connection"]
    assert dom_labels(dom) == names
    assert all(label_is_drawn(image, dom, name) for name in names)
    for outcome in ("succeeded", "failed", "timed out"):
        assert count(image, FILLS[outcome]) > 100, outcome


def test_hostile_names_are_text_in_the_browser_dom(tmp_path: Path) -> None:
    image, dom = render(tmp_path, hostile_report().to_svg())
    assert_not_blank(image)
    assert [e for e in dom.iter() if e.tag.endswith("script")] == []
    assert dom_labels(dom) == [
        *(expected_label(name) for name in HOSTILE),
        expected_label(f"release of {HOSTILE[0]}"),
    ]
    shown = {
        "".join(e.itertext())[len(e.findtext(f"{SVG}title") or "") :]
        for e in dom.iter(f"{SVG}text")
        if e.get("class") == "label"
    }
    assert "<script>alert(1)</script>" in shown and "a & b" in shown
    assert label_is_drawn(image, dom, HOSTILE[0])


def test_two_hundred_nodes_render_down_to_the_last_row(tmp_path: Path) -> None:
    svg = wide_report(200).to_svg()
    scale = 0.5  # half size: a smaller PNG to read, bars still solid
    image, dom = render(tmp_path, svg, scale)
    assert_not_blank(image)
    labels = dom_labels(dom)
    assert len(labels) == 250 and labels[0].startswith("step_000")
    assert labels[199].startswith("step_199") and labels[-1].startswith("release of step_049")
    rows = [e for e in dom.iter(f"{SVG}rect") if e.get("class") == "row"]
    last_node = rows[199]
    top = float(last_node.get("y", "0")) * scale
    bottom = top + float(last_node.get("height", "0")) * scale
    band = [image.pixel(x, y) for y in range(int(top) + 1, int(bottom)) for x in range(image.width)]
    assert any(near(pixel, FILLS["succeeded"], tolerance=30) for pixel in band)
    assert label_is_drawn(image, dom, labels[199], scale)


def test_without_chromium_these_tests_skip_with_their_reason_but_fail_under_ci(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no browser on PATH
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="headless Chromium is not on PATH"):
        chromium_path()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true: headless Chromium"):
        chromium_path()
    browser = tmp_path / "chromium"
    browser.write_text("#!/bin/sh\n")
    browser.chmod(0o755)
    assert chromium_path() == str(browser)
