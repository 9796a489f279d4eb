"""Shared pytest setup: ``async def`` tests run on a fresh event loop each."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    funcargs = pyfuncitem.funcargs
    names = pyfuncitem._fixtureinfo.argnames
    kwargs: dict[str, Any] = {name: funcargs[name] for name in names}
    asyncio.run(pyfuncitem.obj(**kwargs))
    return True


_module_counter = 0


def load_module(source: str, name: str | None = None) -> Any:
    """Create, execute and register (``sys.modules``) a module from source text.

    Declarations must live in loaded modules (SPEC 5.3), so test graphs are real modules.
    The source is dedented; each call gets a fresh unique name unless one is given.
    """
    import sys
    import textwrap
    import types

    global _module_counter
    _module_counter += 1
    module_name = name or f"sdax_test_graph_{_module_counter}"
    module = types.ModuleType(module_name)
    sys.modules[module_name] = module
    code = compile(textwrap.dedent(source), f"<{module_name}>", "exec", dont_inherit=True)
    exec(code, module.__dict__)
    return module


@pytest.fixture
def make_module() -> Any:
    """``make_module(source, name=None)`` -> a loaded module (unregistered afterwards)."""
    import sys

    created: list[str] = []

    def factory(source: str, name: str | None = None) -> Any:
        module = load_module(source, name)
        created.append(module.__name__)
        return module

    yield factory
    for module_name in created:
        sys.modules.pop(module_name, None)
