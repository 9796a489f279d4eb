"""The package's modules import one another without a cycle (no two modules of the package
import each other, docs/internals.md), counting every import a module writes: at its top, inside
a function, and under ``if TYPE_CHECKING:``. Importing ``a.b.c`` runs ``a`` and ``a.b``
first, so a module also depends on each package above what it imports. Where two parts
need each other, one of them states what it uses as a ``Protocol`` (``guards.RunCalls``,
``cache.RunCalls``) or the shared type moves to a module both import (``jobs.PlanCache``).
"""

from __future__ import annotations

import ast
from pathlib import Path

from support import package_walk

import sdax_hamilton

PACKAGE = Path(sdax_hamilton.__file__).parent


def _modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package): every ``.py`` file under ``root``, and every
    ``.pyi`` stub without one."""
    modules = package_walk.modules(root)
    for stub in root.rglob("*.pyi"):  # compiled modules (``_core``): imported, import nothing
        modules.setdefault(package_walk.module_name(root, stub)[0], (stub, False))
    return modules


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (with the packages above them)."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, is_package) in modules.items():
        if path.suffix == ".pyi":
            continue
        for node in ast.walk(package_walk.parse(path)):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = package_walk.imported_from(name, is_package, node)
                # ``from p import m`` imports the module ``p.m`` when there is one, and ``p``
                # either way (its ``__init__`` runs first).
                targets = [source]
                targets += [f"{source}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                if target not in modules:
                    continue
                pieces = target.split(".")
                for end in range(1, len(pieces) + 1):
                    above = ".".join(pieces[:end])
                    # A module's own packages are already running when it is imported.
                    if above in modules and not f"{name}.".startswith(f"{above}."):
                        graph[name].add(above)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a path back to its start) per strongly connected group of modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:  # Tarjan's algorithm, iterative
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(_path_within(graph, group))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def _path_within(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A cycle through the group's first module, found breadth first (for the message)."""
    start = min(group)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & group):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover


def test_the_package_imports_without_a_cycle() -> None:
    graph = import_graph(PACKAGE)
    assert "sdax_hamilton._executor.calls" in graph  # the walk found the package
    assert "sdax_hamilton._executor.jobs" in graph["sdax_hamilton._executor.calls"]
    found = cycles(graph)
    assert not found, "import cycles: " + "; ".join(" -> ".join(path) for path in found)


def test_the_check_sees_type_only_lazy_and_package_cycles(tmp_path: Path) -> None:
    """The check is not vacuous: each way two modules can end up importing each other."""
    type_only = package_walk.write_package(
        tmp_path / "a",
        {
            "pkg/__init__.py": "",
            "pkg/one.py": "from .two import Two\n",
            "pkg/two.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .one import One\n"
            ),
        },
    )
    assert cycles(import_graph(type_only)) == [["pkg.one", "pkg.two", "pkg.one"]]
    lazy = package_walk.write_package(
        tmp_path / "b",
        {
            "pkg/__init__.py": "",
            "pkg/one.py": "from . import two\n",
            "pkg/two.py": "def f():\n    from pkg.one import x\n",
        },
    )
    assert cycles(import_graph(lazy)) == [["pkg.one", "pkg.two", "pkg.one"]]
    through_init = package_walk.write_package(
        tmp_path / "c",
        {
            "pkg/__init__.py": "",
            "pkg/sub/__init__.py": "from .front import Front\n",
            "pkg/sub/front.py": "from ..core import run\n",
            "pkg/sub/data.py": "",
            "pkg/core.py": "from .sub.data import Data\n",
        },
    )
    assert cycles(import_graph(through_init)) == [
        ["pkg.core", "pkg.sub", "pkg.sub.front", "pkg.core"]
    ]
    fine = package_walk.write_package(
        tmp_path / "d",
        {
            "pkg/__init__.py": "from .one import One\n",
            "pkg/one.py": "from . import two\nfrom .two import Two\n",
            "pkg/two.py": "import os\n",
        },
    )
    assert cycles(import_graph(fine)) == []
