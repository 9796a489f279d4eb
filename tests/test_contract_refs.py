"""The contract lives in this repository: docs/contract.md, cited by stable anchors.

Comments, docstrings, messages and pages cite ``docs/contract.md#<anchor>`` (or, in a page,
link to ``contract.md#<anchor>``); nothing may cite a text outside the repository by
section number or issue number, and every cited anchor must exist.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = ROOT / "docs" / "contract.md"

# Where references can live. Build output and generated benchmark modules are not sources.
SOURCES = ("python", "src", "core", "tests", "docs", "bench", "examples", ".ci", "README.md")
SUFFIXES = {".py", ".pyi", ".rs", ".md", ".toml", ".txt", ".sh", ".cfg", ".yml", ".yaml"}
SKIP_PARTS = {"target", "__pycache__", "_generated", ".venv", "node_modules"}

_WORD = "SP" + "EC"  # spelled apart so that this file does not cite it
_PAGE = "docs/" + "contract.md"  # likewise for the examples below
_ISSUE = "iss" + "ue"
# A citation of the external product text: the bare word (an identifier such as
# ``X_NAMES`` is not one) or a section sign followed by a number.
EXTERNAL = re.compile(rf"\b{_WORD}\b(?!_)|§\s*\d")
# A project issue cited by number; an upstream tracker's issue is not one of ours.
ISSUE = re.compile(r"\b[Ii]ssues?\s+#?\d+")
FOREIGN_ISSUE = re.compile(
    r"(?:CPython|Python|Hamilton|PyO3|pyo3|uvloop|maturin|cargo|tokio|GitHub|upstream|bpo)"
    r"\s+$"
)

# ``docs/contract.md#<anchor>`` and the anchors listed after it, as in
# ``docs/contract.md#<first>, #<second>`` (possibly wrapped onto the next comment line).
_STEPS = r"(?:\s+steps?\s+\d+(?:\s*[-,]\s*\d+)*)?"
CITATION = re.compile(
    rf"docs/contract\.md#(?P<first>[a-z][a-z0-9-]*){_STEPS}"
    rf"(?P<more>(?:[,;]\s*(?:(?:#|//[/!]?)\s+)?(?:and\s+)?#[a-z][a-z0-9-]*{_STEPS})*)"
)
MORE = re.compile(r"#(?P<anchor>[a-z][a-z0-9-]*)")
ANCHOR = re.compile(r'<a id="(?P<id>[^"]+)"></a>')


def source_files() -> Iterator[Path]:
    for name in SOURCES:
        base = ROOT / name
        paths = [base] if base.is_file() else sorted(base.rglob("*")) if base.is_dir() else []
        for path in paths:
            rel_parts = path.relative_to(ROOT).parts
            if not path.is_file() or SKIP_PARTS.intersection(rel_parts):
                continue
            if path.suffix in SUFFIXES or path.name == "run":
                yield path


def contract_anchors() -> list[str]:
    return [m["id"] for m in ANCHOR.finditer(CONTRACT.read_text(encoding="utf-8"))]


def cited_anchors(text: str) -> Iterator[tuple[int, str]]:
    """(offset, anchor) of every contract anchor a text cites."""
    for m in CITATION.finditer(text):
        yield m.start(), m["first"]
        for more in MORE.finditer(m["more"]):
            yield m.start(), more["anchor"]


def external_references(text: str) -> list[tuple[int, str]]:
    """(line number, reference) of citations of texts outside the repository."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for m in EXTERNAL.finditer(line):
            found.append((number, m[0]))
        for m in ISSUE.finditer(line):
            if not FOREIGN_ISSUE.search(line[: m.start()]):
                found.append((number, m[0]))
    return found


def test_no_reference_points_outside_the_repository() -> None:
    offending = []
    for path in source_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, ref in external_references(text):
            offending.append(f"{path.relative_to(ROOT)}:{number}: {ref}")
    assert offending == [], (
        "cite docs/contract.md#<anchor> (or a test, or another page of docs/) instead of:\n"
        + "\n".join(offending)
    )


def test_every_cited_contract_anchor_exists() -> None:
    anchors = set(contract_anchors())
    missing = []
    cited = 0
    for path in source_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for offset, anchor in cited_anchors(text):
            cited += 1
            if anchor not in anchors:
                line = text.count("\n", 0, offset) + 1
                missing.append(f"{path.relative_to(ROOT)}:{line}: #{anchor}")
    assert missing == []
    assert cited > 0, "nothing cites docs/contract.md: the scan is looking in the wrong place"


def test_contract_anchors_are_unique_precede_a_heading_and_are_indexed() -> None:
    text = CONTRACT.read_text(encoding="utf-8")
    anchors = contract_anchors()
    assert len(anchors) == len(set(anchors)), "duplicate anchor ids"
    for m in ANCHOR.finditer(text):
        following = text[m.end() :].lstrip("\n").splitlines()[0]
        assert re.match(r"#{2,4} \S", following), f"#{m['id']} is not followed by a heading"
    index = text[: text.index("\n---\n")]  # the anchor index sits above the first rule
    for anchor in anchors:
        if anchor != "extensions":
            assert f"(#{anchor})" in index, f"#{anchor} missing from the anchor index"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"see {_PAGE}#retry-loop.", ["retry-loop"]),
        (
            f"({_PAGE}#forward-phase, #open-algorithm steps 2-4, #outcomes)",
            ["forward-phase", "open-algorithm", "outcomes"],
        ),
        (f"{_PAGE}#diagnostics,\n#outcomes).", ["diagnostics", "outcomes"]),
        (f"# {_PAGE}#a, \n# #b-c: x", ["a", "b-c"]),
        (f"{_PAGE}#x #1 in the list", ["x"]),
    ],
)
def test_citation_scanner_reads_compact_and_wrapped_lists(text: str, expected: list[str]) -> None:
    assert [anchor for _, anchor in cited_anchors(text)] == expected


@pytest.mark.parametrize(
    ("line", "flagged"),
    [
        (f"checked here ({_WORD} 7.9 step 6)", True),
        (f"every {_WORD} rule", True),
        ("see \u00a7 7.2", True),
        (f"Run events ({_ISSUE} 6, item 1)", True),
        (f"fixed upstream, Hamilton {_ISSUE} 1234", False),
        (f"{_WORD}_NAMES = set()", False),
        (f"{_PAGE}#retry-loop", False),
    ],
)
def test_external_reference_scanner(line: str, flagged: bool) -> None:
    assert bool(external_references(line)) is flagged
