"""The asyncio executor: carries out a ``_core.Run``'s commands on the caller's event loop.

The Rust core decides what happens (which job starts, whether and when a failure is
retried, when the forward phase aborts, in which order releases run); the executor turns
its commands into calls, tasks, timers and cancellations and reports back what happened.
docs/internals.md follows one ``execute()`` through these modules:

* ``runtime``: what the plan hands the executor per node (``NodeRuntime``, ``ReleaseRuntime``);
* ``jobs``: the job table, built once per plan: what each of the core's job ids stands for;
* ``context``: the run's lifecycle and the phase and cancellation protocol (``open_run``);
* ``eager``: where a phase's task starts (eagerly where the loop allows);
* ``attempts``: the attempt table (live attempts per job, retry waits, the event queue);
* ``calls``: commands carried out as calls, tasks, inline awaits and timers;
* ``outcomes``: how each attempt ended, reported to the core;
* ``failures``: a failed attempt judged, told to the core, noted and recorded;
* ``guards``: bulkheads and circuit breakers admitting attempts, fallbacks (docs/resilience.md);
* ``verdicts``: what an attempt's ending means, and the notes it is written with (pure);
* ``record``: the primary/secondary failure record (pure);
* ``reporter``: logs and observers, behind one object;
* ``observers``: a run's observers called with each event, their exceptions kept out of the run.
"""

from .context import INSTANT_RETRIES, JITTER_SEED, NEVER_ENTERED, HeldRun, RunContext, open_run
from .jobs import JobTable
from .runtime import TIMEOUT_MESSAGE, NodeRuntime, ReleaseRuntime, carrier_of
from .verdicts import is_retryable

__all__ = [
    "HeldRun",
    "INSTANT_RETRIES",
    "JITTER_SEED",
    "JobTable",
    "NEVER_ENTERED",
    "NodeRuntime",
    "ReleaseRuntime",
    "RunContext",
    "TIMEOUT_MESSAGE",
    "carrier_of",
    "is_retryable",
    "open_run",
]
