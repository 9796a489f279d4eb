"""No class of the package is over 400 lines counting the package's own base classes
(docs/internals.md, "The executor's parts"): a part that grows past it is split by concern,
not hidden in a base class. Lines run from a class's first decorator to its last line; a
base class counts once however many paths lead to it, and a base the package imports from
elsewhere (``Protocol``, ``Exception``) counts nothing.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from support import package_walk

import sdax_hamilton

PACKAGE = Path(sdax_hamilton.__file__).parent
LIMIT = 400


@dataclass(frozen=True)
class ClassInfo:
    module: str
    name: str
    lines: int
    bases: tuple[ast.expr, ...]


class Index:
    """Every class of a package (any depth, nested ones included) and each module's names
    for what it imports, to find a base class where it is defined."""

    def __init__(self, root: Path) -> None:
        self.classes: dict[tuple[str, str], ClassInfo] = {}
        # module -> local name -> (module, name) it stands for; name "" for a module
        self.imports: dict[str, dict[str, tuple[str, str]]] = {}
        for module, (path, is_package) in package_walk.modules(root).items():
            names = self.imports.setdefault(module, {})
            for node in ast.walk(package_walk.parse(path)):
                if isinstance(node, ast.ClassDef):
                    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                    end = node.end_lineno or node.lineno
                    self.classes[(module, node.name)] = ClassInfo(
                        module, node.name, end - first + 1, tuple(node.bases)
                    )
                elif isinstance(node, ast.ImportFrom):
                    source = package_walk.imported_from(module, is_package, node)
                    for alias in node.names:
                        names[alias.asname or alias.name] = (source, alias.name)
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.asname:
                            names[alias.asname] = (alias.name, "")
                        else:
                            top = alias.name.split(".")[0]
                            names[top] = (top, "")

    def _find(self, module: str, name: str, seen: frozenset[tuple[str, str]]) -> ClassInfo | None:
        """The class ``name`` means in ``module``: defined there, or imported (re-exports
        followed)."""
        if (module, name) in self.classes:
            return self.classes[(module, name)]
        target = self.imports.get(module, {}).get(name)
        if target is None or target in seen:
            return None
        source, imported = target
        if not imported:
            return None
        if f"{source}.{imported}" in self.imports:  # ``from pkg import module``: not a class
            return None
        return self._find(source, imported, seen | {target})

    def base(self, module: str, expr: ast.expr) -> ClassInfo | None:
        """The package's class a base expression names (``Name``, ``module.Name``)."""
        if isinstance(expr, ast.Subscript):  # ``Generic[T]``, ``Base[T]``
            expr = expr.value
        if isinstance(expr, ast.Name):
            return self._find(module, expr.id, frozenset())
        if isinstance(expr, ast.Attribute):
            path: list[str] = []
            inner: ast.expr = expr
            while isinstance(inner, ast.Attribute):
                path.append(inner.attr)
                inner = inner.value
            if not isinstance(inner, ast.Name):
                return None
            target = self.imports.get(module, {}).get(inner.id)
            if target is None:
                return None
            source, imported = target
            start = f"{source}.{imported}" if imported else source
            *middle, name = reversed(path)
            return self._find(".".join([start, *middle]), name, frozenset())
        return None

    def size(self, info: ClassInfo) -> tuple[int, list[str]]:
        """Lines of ``info`` with every base of the package above it, and their names
        (``info`` first)."""
        total = 0
        counted: list[str] = []
        seen: set[tuple[str, str]] = set()
        work = [info]
        while work:
            current = work.pop()
            key = (current.module, current.name)
            if key in seen:
                continue
            seen.add(key)
            total += current.lines
            counted.append(f"{current.module}.{current.name} ({current.lines})")
            for expr in current.bases:
                found = self.base(current.module, expr)
                if found is not None:
                    work.append(found)
        return total, [counted[0], *sorted(counted[1:])]


def oversized(root: Path, limit: int = LIMIT) -> list[str]:
    index = Index(root)
    found = []
    for info in index.classes.values():
        total, counted = index.size(info)
        if total > limit:
            found.append(f"{info.module}.{info.name}: {total} lines ({' + '.join(counted)})")
    return sorted(found)


def test_no_class_is_over_the_limit_with_its_bases() -> None:
    index = Index(PACKAGE)
    # The walk found the executor's parts (the check is not vacuous).
    calls = index.classes[("sdax_hamilton._executor.calls", "Calls")]
    assert 100 < calls.lines <= LIMIT
    found = oversized(PACKAGE)
    assert not found, f"classes over {LIMIT} lines with their bases: " + "; ".join(found)


def _class(name: str, body_lines: int, bases: str = "") -> str:
    head = f"class {name}({bases}):\n" if bases else f"class {name}:\n"
    return head + "".join(f"    x{i} = {i}\n" for i in range(body_lines - 1))


def test_the_count_includes_bases_of_the_package(tmp_path: Path) -> None:
    """A class under the limit on its own is over it with its bases: defined in the same
    module, imported from another (relatively, absolutely, as a module attribute, through a
    package's re-export), generic, and a base's own base; a shared base counts once and a
    base from outside the package counts nothing."""
    root = package_walk.write_package(
        tmp_path,
        {
            "pkg/__init__.py": "from .base import Base\n",
            "pkg/base.py": "from typing import Protocol\n" + _class("Base", 150, "Protocol"),
            "pkg/middle.py": "from pkg.base import Base\n" + _class("Middle", 150, "Base"),
            "pkg/leaf.py": (
                "from typing import Generic, TypeVar\n"
                "from . import middle\n"
                "from . import Base\n"
                "T = TypeVar('T')\n"
                + _class("Mixin", 20)
                + "@staticmethod\n"  # a decorator line counts
                + _class("Leaf", 99, "middle.Middle, Mixin, Base, Generic[T], Exception")
            ),
        },
    )
    index = Index(root)
    leaf = index.classes[("pkg.leaf", "Leaf")]
    assert leaf.lines == 100
    total, counted = index.size(leaf)
    assert total == 100 + 150 + 20 + 150  # Base once, though two paths lead to it
    assert sorted(counted) == [
        "pkg.base.Base (150)",
        "pkg.leaf.Leaf (100)",
        "pkg.leaf.Mixin (20)",
        "pkg.middle.Middle (150)",
    ]
    assert oversized(root) == [
        "pkg.leaf.Leaf: 420 lines (pkg.leaf.Leaf (100) + pkg.base.Base (150)"
        " + pkg.leaf.Mixin (20) + pkg.middle.Middle (150))"
    ]
    assert oversized(root, limit=420) == []
