"""Bulkhead permits across the process: who a released permit wakes.

A bulkhead is shared by every run of every loop and thread in the process; its queue is its
core's (core/src/shared/). Here is where each queued waiter is registered with how to wake
it on its own loop, and where a permit given back goes: to the first waiter (woken) or to
the pool. The guards (``guards.py``) queue and register waiters; the guards, hedged rounds
(``hedging.py``) and the carrier (src/carry.rs, through ``runtime.carrier_of``) give
permits back. This module imports nothing of the executor, so all of them can import it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Final

from .. import _core
from .._resilience import Bulkhead

# Every waiter of every bulkhead in the process: (id of the bulkhead's core, waiter id) ->
# how to wake it. The lock spans a queueing and its registration, and every look-up is made
# under it, so a permit never goes to a waiter not registered yet: a release that names a
# waiter (here, or in the core's Run for a carried attempt, which then calls ``wake``)
# looks it up only once the queueing that made it has registered it.
_lock: Final = threading.Lock()
_wakers: Final[dict[tuple[int, int], Callable[[], object]]] = {}


def wake(core: _core.Bulkhead, waiter: int | None) -> None:
    """Wake ``waiter`` of the bulkhead whose core is ``core`` (a permit went to it); one
    that can no longer be woken (its loop closed) leaves, and its permit passes on. The
    carrier calls it for a permit a carried attempt gave back (src/carry.rs)."""
    while waiter is not None:
        with _lock:
            woken = _wakers.pop((id(core), waiter), None)
        if woken is None:
            return  # it left meanwhile (its cancellation passes the permit on)
        try:
            woken()
            return
        except RuntimeError:  # its loop is closed
            with _lock:
                waiter = core.cancel_waiter(waiter)


def give_back(bulkhead: Bulkhead) -> None:
    """Return a permit: to the first waiter (woken), or to the pool."""
    with _lock:
        waiter = bulkhead._core.release()
    wake(bulkhead._core, waiter)
