"""Test mode: reproducible jitter and retries without waiting.

Both helpers are context managers over context variables that a run reads when it is
opened (``PreparedPlan.open``, and so ``execute``). They affect every run opened inside the
``with`` block, in this task and in tasks created from it (asyncio copies the context into
new tasks), and nothing outside it. Runs opened before the block keep their settings.

::

    from sdax_hamilton.testing import instant_retries, jitter_seed

    with instant_retries():
        await plan.execute(inputs=...)  # same attempts, no retry waits

    @pytest.fixture(autouse=True)
    def _no_retry_waits() -> Iterator[None]:
        with instant_retries():
            yield
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ._executor import INSTANT_RETRIES, JITTER_SEED

__all__ = ["instant_retries", "jitter_seed"]


@contextlib.contextmanager
def jitter_seed(seed: int) -> Iterator[None]:
    """Seed the retry jitter of every run opened inside the block with ``seed``.

    Each such run draws its delays from a generator seeded with ``seed``, so two runs with
    the same seed and the same sequence of failures wait exactly the same times (for a
    given build of the package). Any ``int`` works (taken modulo ``2**64``); a ``bool`` or a
    non-int is a ``TypeError``. An inner ``jitter_seed`` block replaces an outer one.
    """
    if type(seed) is not int:
        raise TypeError(f"jitter_seed() needs an int seed, not {type(seed).__name__}")
    token = JITTER_SEED.set(seed)
    try:
        yield
    finally:
        JITTER_SEED.reset(token)


@contextlib.contextmanager
def instant_retries(enabled: bool = True) -> Iterator[None]:
    """Make every retry wait of runs opened inside the block zero seconds.

    Attempts, retry decisions, timeouts and the order of events are unchanged; only the
    waits between attempts (of nodes and of releases) are skipped: the next attempt starts
    one event-loop iteration later. ``RunEvent.delay`` and the retry log records report the
    wait actually taken (``0.0``). ``instant_retries(False)`` restores real waits inside an
    outer block.
    """
    if type(enabled) is not bool:
        raise TypeError(f"instant_retries() needs a bool, not {type(enabled).__name__}")
    token = INSTANT_RETRIES.set(enabled)
    try:
        yield
    finally:
        INSTANT_RETRIES.reset(token)
