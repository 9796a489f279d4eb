"""Every ```python block of README.md and docs/*.md runs, and shown output matches.

The convention (also stated at the top of docs/api.md):

* The runnable blocks of one page execute in order in one fresh module namespace,
  registered in ``sys.modules`` under a unique name, so functions defined in a block get
  that module as ``__module__`` and ``Driver(sys.modules[__name__])`` discovers them.
* Each block is compiled with ``ast.PyCF_ALLOW_TOP_LEVEL_AWAIT``; a block that uses
  top-level ``await`` is awaited on a fresh event loop.
* A block whose info string is ``python no-run``, and any non-python block (``text``,
  ``console``, ...), is not executed.
* A ```` ```text ```` block that directly follows a python block and whose first line is
  ``# output`` holds that block's expected standard output (the remaining lines).
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import itertools
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import loops as loop_support

ROOT = Path(__file__).resolve().parent.parent
PAGES = (ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md")))
OUTPUT_MARKER = "# output"

# Opening or closing fence: up to three spaces of indentation, three or more backticks or
# tildes, then the info string (CommonMark).
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
# Language tags that would be Python but escape execution under another name.
_PYTHON_ALIASES = frozenset({"py", "py3", "python3", "pycon", "ipython", "pyi"})

_counter = itertools.count(1)


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int
    """1-based line number of the block's first code line in the page."""
    info: str
    code: str
    expected: str | None = None
    """Expected stdout from a following ``# output`` text block, if any."""

    @property
    def language(self) -> str:
        words = self.info.split()
        return words[0] if words else ""

    @property
    def runs(self) -> bool:
        words = self.info.split()
        return self.language == "python" and "no-run" not in words[1:]

    @property
    def where(self) -> str:
        return f"{self.page.name}:{self.line}"


@dataclass(frozen=True)
class _Fenced:
    opening: int
    """0-based index of the opening fence line."""
    closing: int
    """0-based index of the closing fence line."""
    info: str
    code: str


def _scan(lines: list[str], page: Path) -> tuple[list[_Fenced], list[str]]:
    """Fenced blocks and prose lines of a page; HTML comments (CommonMark HTML blocks)
    belong to neither, so a fence inside a comment is not a block."""
    fenced: list[_Fenced] = []
    prose: list[str] = []
    index = 0
    while index < len(lines):
        if lines[index].lstrip(" ").startswith("<!--"):
            while index < len(lines) and "-->" not in lines[index]:
                index += 1
            index += 1
            continue
        opening = _FENCE.match(lines[index])
        if opening is None:
            prose.append(lines[index])
            index += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        body: list[str] = []
        close = index + 1
        while close < len(lines):
            closing = _FENCE.match(lines[close])
            if (
                closing is not None
                and closing["fence"][0] == fence[0]
                and len(closing["fence"]) >= len(fence)
                and not closing["info"].strip()
            ):
                break
            line = lines[close]
            # Remove up to the opening fence's indentation from each content line.
            strip = len(line) - len(line.lstrip(" "))
            body.append(line[min(strip, indent) :])
            close += 1
        if close == len(lines):
            raise ValueError(f"{page.name}:{index + 1}: unclosed code fence")
        fenced.append(_Fenced(index, close, opening["info"].strip(), "\n".join(body) + "\n"))
        index = close + 1
    return fenced, prose


def parse_blocks(text: str, page: Path) -> list[Block]:
    """Split a Markdown page into its fenced code blocks, pairing ``# output`` blocks."""
    lines = text.splitlines()
    raw = [
        (block.opening + 2, block.closing, block.info, block.code)
        for block in _scan(lines, page)[0]
    ]  # (1-based first code line, 0-based closing line, info, code)

    blocks: list[Block] = []
    for number, (first, closing_line, info, code) in enumerate(raw):
        expected = None
        if info.split()[:1] == ["python"] and number + 1 < len(raw):
            next_first, _, next_info, next_code = raw[number + 1]
            between = lines[closing_line + 1 : next_first - 2]
            if (
                next_info.split()[:1] == ["text"]
                and next_code.splitlines()[:1] == [OUTPUT_MARKER]
                and not any(line.strip() for line in between)
            ):
                expected = "".join(next_code.splitlines(keepends=True)[1:])
        blocks.append(Block(page=page, line=first, info=info, code=code, expected=expected))
    return blocks


def _normalise(output: str) -> str:
    return "\n".join(line.rstrip() for line in output.strip("\n").splitlines())


def run_blocks(blocks: list[Block], stem: str) -> None:
    """Run a page's runnable blocks in order in one fresh registered module."""
    safe = re.sub(r"\W", "_", stem)
    name = f"sdax_docs_{safe}_{next(_counter)}"
    module = types.ModuleType(name)
    sys.modules[name] = module
    try:
        for block in blocks:
            if not block.runs:
                continue
            # Pad so tracebacks and inspect.getsource point at the page's own lines.
            source = "\n" * (block.line - 1) + block.code
            code = compile(
                source,
                str(block.page),
                "exec",
                flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                dont_inherit=True,
            )
            captured = io.StringIO()
            with contextlib.redirect_stdout(captured):
                if code.co_flags & inspect.CO_COROUTINE:
                    coroutine = eval(code, module.__dict__)
                    loop_support.run(coroutine)
                else:
                    exec(code, module.__dict__)
            if block.expected is not None:
                assert _normalise(captured.getvalue()) == _normalise(block.expected), (
                    f"{block.where}: printed output differs from its '# output' block"
                )
    finally:
        sys.modules.pop(name, None)


def _page_blocks(page: Path) -> list[Block]:
    return parse_blocks(page.read_text(encoding="utf-8"), page)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_page_code_blocks_run(page: Path) -> None:
    run_blocks(_page_blocks(page), page.stem)


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_no_python_block_hides_under_another_tag(page: Path) -> None:
    hidden = [block.where for block in _page_blocks(page) if block.language in _PYTHON_ALIASES]
    assert hidden == [], "use ```python (or ```python no-run) so the doc test sees the block"


@pytest.mark.parametrize("name", ["README.md", "docs/api.md", "docs/lifecycle.md"])
def test_user_pages_have_runnable_examples(name: str) -> None:
    blocks = _page_blocks(ROOT / name)
    assert sum(block.runs for block in blocks) >= 2
    assert any(block.expected is not None for block in blocks)


def test_convention_is_stated_at_the_top_of_the_api_reference() -> None:
    head = (ROOT / "docs" / "api.md").read_text(encoding="utf-8").lstrip()
    assert head.startswith("<!--")
    comment = head[: head.index("-->")]
    for fragment in ("sys.modules", "PyCF_ALLOW_TOP_LEVEL_AWAIT", "no-run", "# output"):
        assert fragment in comment


_LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} +(?P<title>.+?) *$")


def _prose(page: Path) -> list[str]:
    return _scan(page.read_text(encoding="utf-8").splitlines(), page)[1]


_EXPLICIT_ANCHOR = re.compile(r'<a id="(?P<id>[^"]+)"></a>')


def _anchors(page: Path) -> set[str]:
    """GitHub-style heading anchors of a page, plus its explicit ``<a id="...">`` anchors
    (code blocks and comments ignored)."""
    anchors: set[str] = set()
    for line in _prose(page):
        heading = _HEADING.match(line)
        if heading is not None:
            title = heading["title"].replace("`", "").lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
        anchors.update(m["id"] for m in _EXPLICIT_ANCHOR.finditer(line))
    return anchors


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_relative_links_point_at_existing_pages_and_headings(page: Path) -> None:
    broken = []
    for match in _LINK.finditer("\n".join(_prose(page))):
        target = match["target"]
        if re.match(r"[a-z]+:", target):
            continue  # an external URL
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md":
            if anchor not in _anchors(linked):
                broken.append(target)
    assert broken == []


# The extractor itself: a page it misreads would silently skip or mangle examples.

_SAMPLE = """\
<!--
  ```python
  raise AssertionError("inside a comment")
  ```
-->
Intro.

```python
x = 1
print(x)
```

```text
# output
1
```

```python no-run
signature(*, a=1)
```

- A list item:

  ```python
  if True:
      y = x + 1
  ```

~~~~console
$ echo ```
~~~~

```text
# output
not paired: no python block directly before
```

```python
print("a")
```
Prose in between breaks the pairing.
```text
# output
a
```
"""


def test_parse_blocks_reads_fences_info_strings_and_output_pairs() -> None:
    blocks = parse_blocks(_SAMPLE, Path("sample.md"))
    assert [(block.line, block.info, block.runs) for block in blocks] == [
        (9, "python", True),
        (14, "text", False),
        (19, "python no-run", False),
        (25, "python", True),
        (30, "console", False),
        (34, "text", False),
        (39, "python", True),
        (43, "text", False),
    ]
    assert blocks[0].code == "x = 1\nprint(x)\n"
    assert blocks[0].expected == "1\n"
    assert blocks[3].code == "if True:\n    y = x + 1\n"
    assert blocks[3].expected is None
    assert blocks[4].code == "$ echo ```\n"
    assert blocks[6].expected is None


def test_run_blocks_share_one_registered_module_and_await_top_level() -> None:
    page = """\
```python
import sys

def double(x: int) -> int:
    return 2 * x

assert sys.modules[__name__].double is double
assert double.__module__ == __name__
```

```python
import asyncio

await asyncio.sleep(0)
print(double(21), asyncio.get_running_loop() is not None)
```

```text
# output
42 True
```

```python no-run
raise AssertionError("must not run")
```
"""
    blocks = parse_blocks(page, Path("sample.md"))
    before = set(sys.modules)
    run_blocks(blocks, "sample")
    assert set(sys.modules) == before  # the page module is unregistered afterwards


def test_run_blocks_reports_output_mismatch_with_the_page_line() -> None:
    page = '```python\nprint("actual")\n```\n\n```text\n# output\nexpected\n```\n'
    with pytest.raises(AssertionError, match=r"sample\.md:2: printed output differs"):
        run_blocks(parse_blocks(page, Path("sample.md")), "sample")


def test_run_blocks_tracebacks_point_at_the_page_line() -> None:
    page = "Text.\n\n```python\nx = 1\nraise KeyError(x)\n```\n"
    with pytest.raises(KeyError) as caught:
        run_blocks(parse_blocks(page, Path("sample.md")), "sample")
    assert caught.traceback[-1].lineno + 1 == 5  # pytest's lineno is 0-based
