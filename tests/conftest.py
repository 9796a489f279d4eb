"""Shared pytest setup: ``async def`` tests run on a fresh event loop each, of the kind
``SDAX_TEST_LOOP`` chooses (asyncio, uvloop or eager: see ``support/loops.py``)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from support import loops as loop_support
from support.modules import load_module


def pytest_configure(config: pytest.Config) -> None:
    try:
        loop_support.check_choice()
    except loop_support.LoopChoiceError as exc:
        raise pytest.UsageError(str(exc)) from None
    loop_support.install_policy()


def pytest_report_header(config: pytest.Config) -> list[str]:
    import sdax_hamilton

    return [loop_support.describe(), f"sdax_hamilton imported from {sdax_hamilton.__file__}"]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    terminalreporter.write_line(loop_support.describe())  # again: ``pytest -q`` has no header
    terminalreporter.write_line(
        f"campaign runs: {loop_support.campaign_runs} (SDAX_TEST_LOOP={loop_support.NAME})"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    funcargs = pyfuncitem.funcargs
    names = pyfuncitem._fixtureinfo.argnames
    kwargs: dict[str, Any] = {name: funcargs[name] for name in names}
    loop_support.run(pyfuncitem.obj(**kwargs))
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
