"""A run's phase task, started eagerly where the loop allows, and the current task.

A phase whose nodes never suspend is then over before ``phase_task`` returns, without a
loop iteration (docs/internals.md, "How the driver carries out STARTs"). Python 3.12+ does
this with public API (``asyncio.Task(..., eager_start=True)``). Python 3.11 has no eager
start for one task: there it takes CPython's private task bookkeeping
(``asyncio.tasks._enter_task``, ``_leave_task``, ``_current_tasks``), used only when a
capability check finds them as 3.11's asyncio has them, and never when the environment
variable ``SDAX_HAMILTON_PUBLIC_ASYNCIO`` is set to anything but ``""`` or ``"0"``; the
fallback queues the task's first step as ``loop.create_task`` does (one loop iteration
more per phase, nothing else changes). CI runs the whole suite once on the fallback
(.ci/public_asyncio.sh). ``EAGER_PHASES`` and ``USES_PRIVATE_ASYNCIO`` say which path
this process takes.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import Any, Final

from .. import _core

PHASE_TASK_NAME: Final = "sdax_hamilton run"
"""The name of a run's phase tasks (a name given costs less than ``Task-N`` on 3.11)."""

PUBLIC_ASYNCIO_SWITCH: Final = "SDAX_HAMILTON_PUBLIC_ASYNCIO"
"""Set (to anything but ``""`` or ``"0"``): use no private asyncio call (read at import)."""

PhaseTask = Callable[[asyncio.AbstractEventLoop, Coroutine[Any, Any, None]], "asyncio.Task[None]"]


def _public_only() -> bool:
    return os.environ.get(PUBLIC_ASYNCIO_SWITCH, "") not in ("", "0")


def _private_calls() -> tuple[Any, Any, Any] | None:
    """3.11's ``(_enter_task, _leave_task, _current_tasks.get)``, or ``None`` when they are
    not there as 3.11's asyncio has them (or the switch rules them out)."""
    if _public_only():
        return None
    tasks = asyncio.tasks
    enter = getattr(tasks, "_enter_task", None)
    leave = getattr(tasks, "_leave_task", None)
    current = getattr(tasks, "_current_tasks", None)
    if not (callable(enter) and callable(leave) and isinstance(current, dict)):
        return None
    return enter, leave, current.get


# The frames ``loop.create_task`` needs on 3.11 (Python code before and after the task takes
# its coroutine and queues its step), with room to spare.
_TASK_ROOM: Final = 20


def _queued_phase_task(
    loop: asyncio.AbstractEventLoop, coordinator: Coroutine[Any, Any, None]
) -> asyncio.Task[None]:
    """The phase's task, its first step queued (public API everywhere).

    Refused before anything runs when the stack has no room left to make a task: made
    part-way (a ``RecursionError`` near the limit), it would leave a coroutine never
    awaited, or a queued step of a run whose caller saw it fail."""
    if not _core.has_room(_TASK_ROOM):
        coordinator.close()
        raise RecursionError(
            "sdax_hamilton: a run started within a few levels of the recursion limit "
            f"({sys.getrecursionlimit()}): too deep to start its task, nothing ran"
        )
    return loop.create_task(coordinator, name=PHASE_TASK_NAME)


def _eager_phase_task_312(
    loop: asyncio.AbstractEventLoop, coordinator: Coroutine[Any, Any, None]
) -> asyncio.Task[None]:
    """The phase's task, started eagerly where the loop keeps asyncio's default task
    factory; a phase that never suspends is over before this returns, and the caller
    then handles it as under an eager task factory (``RunContext._start_phase``)."""
    try:
        if loop.get_task_factory() is None:
            return asyncio.Task(  # type: ignore[call-arg,unused-ignore]
                coordinator, loop=loop, eager_start=True, name=PHASE_TASK_NAME
            )
        return loop.create_task(coordinator, name=PHASE_TASK_NAME)
    except BaseException:
        coordinator.close()  # never started (a RecursionError near the limit, say)
        raise


# Stands in for the loop's ``call_soon`` while a phase task is created on 3.11: keeps the
# task's first step instead of queueing it. One per thread: loops in other threads may be
# creating their tasks meanwhile (the constructor runs Python code); in one thread, a
# catcher is emptied before the step runs (a run inside the step uses it).
_catchers: Final = threading.local()


def _eager_phase_task_311(enter: Any, leave: Any, task_of: Any) -> PhaseTask:
    catchers = _catchers

    def phase_task(
        loop: asyncio.AbstractEventLoop, coordinator: Coroutine[Any, Any, None]
    ) -> asyncio.Task[None]:
        """The phase's task, started eagerly as on Python 3.12 where the loop keeps
        asyncio's default task factory and has an instance dictionary (asyncio's loops and
        uvloop's do).

        ``asyncio.Task`` hands its first step to ``loop.call_soon``; an instance attribute
        shadowing that method for the duration of the constructor catches it, and the step
        runs now, in the task's context, with the task as the loop's current task (the
        caller's task is set aside meanwhile), which is what 3.12's ``eager_start`` does.
        Nothing else runs while the stand-in is in place (tests/test_driver_loops.py: an
        eager phase, a replaced ``call_soon`` kept).
        """
        attrs = getattr(loop, "__dict__", None)
        if attrs is None or "call_soon" in attrs or loop.get_task_factory() is not None:
            return _queued_phase_task(loop, coordinator)
        catcher = getattr(catchers, "catcher", None)
        if catcher is None:
            catcher = catchers.catcher = _core.StepCatcher()
        attrs["call_soon"] = catcher
        try:
            task = asyncio.Task(coordinator, loop=loop, name=PHASE_TASK_NAME)
        except BaseException:
            # The constructor failed after handing over its step (3.11 registers the task
            # in Python code after ``call_soon``: a RecursionError near the limit). The
            # catcher is left empty for the thread's next run, and the task, which will
            # never run, is dropped without a warning.
            _drop_caught(catcher.take())
            coordinator.close()
            raise
        finally:
            del attrs["call_soon"]
        caught = catcher.take()
        if caught is None:  # pragma: no cover - the task queued its step some other way
            return task
        step, context = caught
        caller = task_of(loop)
        if caller is not None:
            leave(loop, caller)
        try:
            context.run(step)
        except BaseException:
            if task.done():
                raise
            # The step was refused before it ran (the recursion limit is checked when it is
            # called): queue it as the constructor would have; the caller waits for it.
            loop.call_soon(step, context=context)
        finally:
            if caller is not None:
                enter(loop, caller)
        return task

    return phase_task


def _drop_caught(caught: tuple[Any, Any] | None) -> None:
    """Silence the task of a step caught from a constructor that then failed."""
    if caught is not None:
        task = getattr(caught[0], "__self__", None)
        if isinstance(task, asyncio.Task):
            task._log_destroy_pending = False  # type: ignore[attr-defined]


IN_RUN: Final[ContextVar[bool]] = ContextVar("sdax_hamilton_in_run", default=False)
"""Set in each phase task's context (a copy of its caller's): what runs in it, or in a task
made from it, is inside a run, and a run it starts is nested (``check_room``)."""

ROOM: Final = 100
"""The frames a run needs below the recursion limit to carry itself out, whatever its nodes
raise (its bookkeeping, logging and releases): a nested run started with less is refused."""


def check_room() -> None:
    """Refuse a run started too close to the recursion limit, before anything runs.

    A run inside a run's node (a plan run recursively, say) starts its phase eagerly, one
    stack deeper each time; with no room left below the limit, the run's own bookkeeping
    would fail part-way and leave its acquisitions to a salvage (``salvage.py``). Refused
    here, it is the node's ``RecursionError``, which the enclosing run handles with the
    room this keeps (docs/contract.md#hostile-run). Asked only of nested runs."""
    # The recursion counter of C calls (on 3.11 Python frames count against it too; from
    # 3.12 it has a limit of its own, which nested eager tasks can reach first).
    if _core.has_room(ROOM):
        if sys.version_info < (3, 12):
            return
        # From 3.12 the recursion limit counts Python frames alone.
        try:
            sys._getframe(sys.getrecursionlimit() - ROOM)
        except ValueError:
            return
    raise RecursionError(
        f"sdax_hamilton: a run nested in another started within {ROOM} levels of the "
        f"recursion limit ({sys.getrecursionlimit()}): too deep to carry it out, nothing ran"
    )


current_task: Callable[[asyncio.AbstractEventLoop], asyncio.Task[Any] | None]
phase_task: PhaseTask
EAGER_PHASES: bool
"""Phase tasks start eagerly on loops that keep asyncio's default task factory."""
USES_PRIVATE_ASYNCIO: bool
"""This process takes 3.11's private asyncio calls (the capability check found them and the
switch is off)."""

if sys.version_info >= (3, 12):
    current_task = asyncio.current_task  # implemented in C from 3.12
    phase_task = _eager_phase_task_312
    EAGER_PHASES, USES_PRIVATE_ASYNCIO = True, False
else:
    _private = _private_calls()
    if _private is None:
        current_task = asyncio.current_task
        phase_task = _queued_phase_task
        EAGER_PHASES, USES_PRIVATE_ASYNCIO = False, False
    else:
        # ``asyncio.current_task`` is Python code on 3.11; the table it reads is C's.
        current_task = _private[2]
        phase_task = _eager_phase_task_311(*_private)
        EAGER_PHASES, USES_PRIVATE_ASYNCIO = True, True
