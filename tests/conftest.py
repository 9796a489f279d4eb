"""Shared pytest setup: ``async def`` tests run on a fresh event loop each."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest
from support.modules import load_module


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    funcargs = pyfuncitem.funcargs
    names = pyfuncitem._fixtureinfo.argnames
    kwargs: dict[str, Any] = {name: funcargs[name] for name in names}
    asyncio.run(pyfuncitem.obj(**kwargs))
    return True


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
