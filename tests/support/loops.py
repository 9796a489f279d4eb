"""The event loop every test runs on, chosen by ``SDAX_TEST_LOOP`` (this module holds no tests).

``asyncio`` (default)
    asyncio's own loop.
``uvloop``
    uvloop's loop (the default loop of uvicorn).
``eager``
    asyncio's loop with ``asyncio.eager_task_factory`` installed (CPython 3.12+).

``async def`` tests (``conftest.py``), the campaign (``support.campaign.run_scenario``) and
every test that runs a coroutine itself go through :func:`run` or :func:`new_loop`; a policy
installed for the session (:func:`install_policy`) gives the same loop to code that calls
``asyncio.run`` as a user would (the docs' snippets). ``test_loops.py`` checks all of it.
``.ci/matrix.sh`` runs the suite once per interpreter and loop.
"""

from __future__ import annotations

import asyncio
import os
import sys
import warnings
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

LOOPS = ("asyncio", "uvloop", "eager")
NAME = os.environ.get("SDAX_TEST_LOOP", "").strip() or "asyncio"

campaign_runs = 0
"""Runs the campaign checked in this process (``support.campaign.run_scenario`` counts)."""


class LoopChoiceError(RuntimeError):
    """``SDAX_TEST_LOOP`` names a loop this interpreter cannot run (never a silent fallback)."""


def check_choice() -> None:
    if NAME not in LOOPS:
        raise LoopChoiceError(f"SDAX_TEST_LOOP={NAME!r}: expected one of {', '.join(LOOPS)}")
    if NAME == "eager" and not hasattr(asyncio, "eager_task_factory"):
        raise LoopChoiceError(
            f"SDAX_TEST_LOOP=eager needs CPython 3.12+ (asyncio.eager_task_factory); "
            f"this is {sys.version.split()[0]}"
        )
    if NAME == "uvloop":
        try:
            import uvloop  # noqa: F401
        except ImportError as exc:
            raise LoopChoiceError(
                f"SDAX_TEST_LOOP=uvloop but uvloop cannot be imported ({exc}); "
                "pip install '.[test]' installs it"
            ) from exc


def new_loop() -> asyncio.AbstractEventLoop:
    """A new loop of the chosen kind (not set as the current loop)."""
    loop: asyncio.AbstractEventLoop
    if NAME == "uvloop":
        import uvloop

        loop = uvloop.new_event_loop()
    else:
        loop = (
            asyncio.ProactorEventLoop() if sys.platform == "win32" else asyncio.SelectorEventLoop()
        )
    if NAME == "eager":
        loop.set_task_factory(asyncio.eager_task_factory)  # type: ignore[attr-defined]
    return loop


def run(
    main: Coroutine[Any, Any, T],
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> T:
    """``asyncio.run(main)`` on a new loop of the chosen kind (or of ``loop_factory``, for
    the campaign's virtual-time determinism re-runs)."""
    with asyncio.Runner(loop_factory=loop_factory or new_loop) as runner:
        return runner.run(main)


def on_chosen_loop(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` is of the chosen kind (used by ``test_loops.py``)."""
    if NAME == "uvloop":
        import uvloop

        return isinstance(loop, uvloop.Loop)
    if "uvloop" in type(loop).__module__:
        return False
    factory = loop.get_task_factory()
    if NAME == "eager":
        return factory is asyncio.eager_task_factory  # type: ignore[attr-defined]
    return factory is None


def describe() -> str:
    """One line for pytest's header: which loop, from where."""
    if NAME == "uvloop":
        import uvloop

        kind = f"uvloop {uvloop.__version__}"
    elif NAME == "eager":
        kind = "asyncio with asyncio.eager_task_factory"
    else:
        kind = "asyncio"
    loop = new_loop()
    try:
        cls = f"{type(loop).__module__}.{type(loop).__qualname__}"
    finally:
        loop.close()
    return f"event loop (SDAX_TEST_LOOP={NAME}): {kind} [{cls}]"


class _ChosenLoopPolicy(asyncio.DefaultEventLoopPolicy):
    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return new_loop()


def install_policy() -> None:
    """Make ``asyncio.run`` / ``asyncio.new_event_loop`` in this process use the chosen loop.

    Event loop policies are deprecated from CPython 3.14 on; they are still the only hook for
    code that calls ``asyncio.run`` without a ``loop_factory``.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        asyncio.set_event_loop_policy(_ChosenLoopPolicy())
