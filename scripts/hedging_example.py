"""Draw docs/hedging.svg: runs the first example of docs/hedging.md and writes its picture.

The page's first python block is the one source of the graph (run as tests/test_docs.py
runs it); its ``report`` is drawn. Times differ from run to run; the shape does not.

Usage: python scripts/hedging_example.py
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timeline_example import ROOT, first_python_block

PAGE = ROOT / "docs" / "hedging.md"
PICTURE = ROOT / "docs" / "hedging.svg"


def main() -> None:
    from sdax_hamilton import RunReport

    module = types.ModuleType("hedging_example")
    sys.modules[module.__name__] = module
    code = compile(
        first_python_block(PAGE), str(PAGE), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    )
    with contextlib.redirect_stdout(io.StringIO()):
        outcome = eval(code, module.__dict__)  # the repository's own page
        if asyncio.iscoroutine(outcome):
            asyncio.run(outcome)
    report = module.__dict__["report"]
    if not isinstance(report, RunReport):
        raise SystemExit(f"{PAGE}: the example's `report` is not a RunReport")
    PICTURE.write_text(report.to_svg(), encoding="utf-8")
    print(f"wrote {PICTURE.relative_to(ROOT)} ({report.outcome}, {len(report.nodes)} nodes)")


if __name__ == "__main__":
    main()
