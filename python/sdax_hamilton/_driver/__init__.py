"""The asyncio driver: carries out a ``_core.Run``'s commands on the caller's event loop.

The Rust core decides what happens (which job starts, whether and when a failure is
retried, when the forward phase aborts, in which order releases run); the driver turns its
commands into calls, tasks, timers and cancellations and reports back what happened.
docs/internals.md describes the protocol. The parts, each a module:

* ``runtime``: what the plan hands the driver per node (``NodeRuntime``, ``ReleaseRuntime``);
* ``context``: the phase and cancellation protocol (``open_run``, ``RunContext``);
* ``outcomes``: how each attempt ended, reported to the core;
* ``attempts``: commands carried out as calls, tasks and timers (``Attempt``);
* ``record``: the primary/secondary failure record (pure);
* ``reporter``: logs and observers, behind one object;
* ``state``: what one run holds.
"""

from .context import INSTANT_RETRIES, JITTER_SEED, NEVER_ENTERED, RunContext, open_run
from .runtime import TIMEOUT_MESSAGE, NodeRuntime, ReleaseRuntime, carrier_of, is_retryable

__all__ = [
    "INSTANT_RETRIES",
    "JITTER_SEED",
    "NEVER_ENTERED",
    "NodeRuntime",
    "ReleaseRuntime",
    "RunContext",
    "TIMEOUT_MESSAGE",
    "carrier_of",
    "is_retryable",
    "open_run",
]
