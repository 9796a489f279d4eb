"""Draw docs/timeline.svg: runs the example of docs/timeline.md and writes its picture.

The example's first python block is the one source of the graph: it runs here as
tests/test_docs.py runs it (one fresh module namespace, top-level ``await`` allowed), then
its ``report`` is drawn. Times differ from run to run; the shape does not.

Usage: python scripts/timeline_example.py
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import re
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "timeline.md"
PICTURE = ROOT / "docs" / "timeline.svg"


def first_python_block(page: Path) -> str:
    match = re.search(r"^```python\n(.*?)^```$", page.read_text(encoding="utf-8"), re.S | re.M)
    if match is None:
        raise SystemExit(f"{page}: no python block")
    return match.group(1)


def draw(page: Path, picture: Path) -> None:
    """Run the first python block of ``page`` and write its ``report``'s SVG to ``picture``."""
    from sdax_hamilton import RunReport

    module = types.ModuleType(f"{page.stem}_example")
    sys.modules[module.__name__] = module
    code = compile(
        first_python_block(page),
        str(page),
        "exec",
        flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
    )
    with contextlib.redirect_stdout(io.StringIO()):
        outcome = eval(code, module.__dict__)  # the repository's own page
        if asyncio.iscoroutine(outcome):
            asyncio.run(outcome)
    report = module.__dict__["report"]
    if not isinstance(report, RunReport):
        raise SystemExit(f"{page}: the example's `report` is not a RunReport")
    picture.write_text(report.to_svg(), encoding="utf-8")
    print(f"wrote {picture.relative_to(ROOT)} ({report.outcome}, {len(report.nodes)} nodes)")


def main() -> None:
    draw(PAGE, PICTURE)


if __name__ == "__main__":
    main()
