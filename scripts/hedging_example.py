"""Draw docs/hedging.svg: runs the first example of docs/hedging.md and writes its picture.

The page's first python block is the one source of the graph (run as tests/test_docs.py
runs it); its ``report`` is drawn. Times differ from run to run; the shape does not.

Usage: python scripts/hedging_example.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timeline_example import ROOT, draw

PAGE = ROOT / "docs" / "hedging.md"
PICTURE = ROOT / "docs" / "hedging.svg"


def main() -> None:
    draw(PAGE, PICTURE)


if __name__ == "__main__":
    main()
