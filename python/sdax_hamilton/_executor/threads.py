"""Attempts of ``execution(in_thread=True)`` nodes: the sync call runs in a worker thread.

The node's call is replaced by a coroutine function that hands the call to the Driver's
executor (the loop's default executor when it is ``None``) and awaits it, so every other
part of the attempt path (timeouts, cancellation, retries, hooks) treats the attempt as
any awaitable one. A thread cannot be cancelled: when the attempt is cancelled (its
timeout, or the run's cancellation) while the call runs, the coroutine waits until the
thread has returned and only then ends with the cancellation: the attempt has failed, and
what the thread returned is not the node's value. It is still the acquisition's, for an
owned acquisition: the cancellation carries it (``late_value``) so that the release gets
it and closes what the thread opened. So the next attempt, the node's completion and the
releases wait for the thread (the drain rule, docs/lifecycle.md, "Blocking functions"). A
call the executor has not started yet is abandoned instead: it will not run.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import Any, Final

_SKIPPED: Final = object()
"""What an abandoned call's thread returns: nothing ran."""

_LATE_VALUE: Final = "_sdax_hamilton_late_value"
"""The attribute of an attempt's cancellation that carries what its thread returned."""

NO_LATE_VALUE: Final = object()
"""``late_value``'s answer when the thread returned nothing after the cancellation."""


def late_value(exc: BaseException) -> Any:
    """What the thread of a cancelled ``in_thread`` attempt returned after the cancellation
    (``NO_LATE_VALUE``: it raised, never ran, or ``exc`` is another failure)."""
    return getattr(exc, _LATE_VALUE, NO_LATE_VALUE)


class _ThreadCall:
    """One attempt's call in a thread: started, or abandoned before it started."""

    __slots__ = ("_abandoned", "_call", "_context", "_kwargs", "_lock", "_started")

    def __init__(self, call: Callable[..., Any], kwargs: dict[str, Any]) -> None:
        self._call = call
        self._kwargs = kwargs
        # The thread runs in a copy of the attempt's context, as asyncio.to_thread does.
        self._context = contextvars.copy_context()
        self._lock = threading.Lock()
        self._started = False
        self._abandoned = False

    def run(self) -> Any:
        with self._lock:
            if self._abandoned:
                return _SKIPPED
            self._started = True
        return self._context.run(self._call, **self._kwargs)

    def abandon(self) -> bool:
        """Whether the call is abandoned (it had not started, and now never will)."""
        with self._lock:
            if self._started:
                return False
            self._abandoned = True
            return True


def in_thread(
    call: Callable[..., Any], executor: Executor | None
) -> Callable[..., Coroutine[Any, Any, Any]]:
    """``call``'s attempts run in ``executor``'s threads (``None``: the loop's default)."""

    async def threaded(**kwargs: Any) -> Any:
        work = _ThreadCall(call, kwargs)
        future = asyncio.get_running_loop().run_in_executor(executor, work.run)
        try:
            # shielded: a cancellation of this attempt must not detach it from the thread
            return await asyncio.shield(future)
        except asyncio.CancelledError as cancelled:
            if future.done() or work.abandon():
                raise
            while not future.done():  # drain: wait for the thread, whatever cancels meanwhile
                try:
                    await asyncio.shield(future)
                except asyncio.CancelledError:
                    continue
                except BaseException:
                    break  # the call's own failure is discarded
            if not future.cancelled() and future.exception() is None:
                late = future.result()
                if late is not _SKIPPED:
                    # Not the node's value; an owned acquisition's release still gets it.
                    setattr(cancelled, _LATE_VALUE, late)
            raise cancelled

    threaded.__name__ = getattr(call, "__name__", "threaded")
    threaded.__qualname__ = getattr(call, "__qualname__", threaded.__name__)
    return threaded
