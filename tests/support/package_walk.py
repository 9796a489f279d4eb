"""One walk over a package's source files, shared by the checks of the package's structure
(tests/test_import_graph.py, tests/test_class_sizes.py): which module each file is, what a
``from`` import names in absolute terms, and small packages written out for their self-tests.
"""

from __future__ import annotations

import ast
from pathlib import Path


def module_name(root: Path, path: Path) -> tuple[str, bool]:
    """The dotted name of the module in ``path`` (under the package ``root``), and whether
    it is a package (an ``__init__``)."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package), for every ``.py`` file under ``root``, in path
    order."""
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted(root.rglob("*.py")):
        name, is_package = module_name(root, path)
        found[name] = (path, is_package)
    return found


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def imported_from(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute name of the module ``node`` (in ``module``) imports from: a relative
    import counts its dots from the module's own package."""
    if not node.level:
        return node.module or ""
    here = module.split(".") if is_package else module.split(".")[:-1]
    base = here[: len(here) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def write_package(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (relative path -> text) under ``root``; the package is ``pkg``."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"
