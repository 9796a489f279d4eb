"""``Latency``: a hedge delay that follows a node's own recent latency (docs/contract.md#latency).

The configuration is validated, and the window of each node kept, by the Rust core
(``_core.Latency``, ``_core.LatencyWindow``: a fixed-memory ring per node and Driver, behind one
lock, shared by every run and thread); this class only gives the configuration its public
signature and reads the clock for the window.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import final

from . import _core

__all__ = ["Hedging", "Latency", "LatencyWindow"]


@final
class Latency:
    """The ``percentile`` of a node's successful attempts' durations within the trailing
    ``window`` seconds, across every run of the Driver; ``initial`` seconds until the window
    holds ``min_samples`` of them.

    ``percentile`` in (0, 100], ``window`` finite > 0, ``min_samples`` an int >= 1,
    ``initial`` finite >= 0 (seconds); a wrong type raises ``TypeError`` (``bool`` too), a
    wrong value ``ValueError``.
    """

    __slots__ = ("_core",)

    def __init__(
        self,
        percentile: float = 95.0,
        *,
        window: float = 60.0,
        min_samples: int = 20,
        initial: float = 0.1,
    ) -> None:
        self._core = _core.Latency(percentile, window, min_samples, initial)

    @property
    def percentile(self) -> float:
        return self._core.percentile

    @property
    def window(self) -> float:
        return self._core.window

    @property
    def min_samples(self) -> int:
        return self._core.min_samples

    @property
    def initial(self) -> float:
        return self._core.initial

    def _new_window(self) -> LatencyWindow:
        """A new, empty window of this configuration: one per node and Driver."""
        return LatencyWindow(self._core.new_window())

    def _key(self) -> tuple[float, float, int, float]:
        return (self.percentile, self.window, self.min_samples, self.initial)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Latency):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __copy__(self) -> Latency:
        return self

    def __deepcopy__(self, memo: object, /) -> Latency:
        return self

    def __reduce__(
        self,
    ) -> tuple[Callable[[float, float, int, float], Latency], tuple[float, float, int, float]]:
        return (_rebuild, self._key())

    def __repr__(self) -> str:
        return (
            f"Latency(percentile={self.percentile!r}, window={self.window!r}, "
            f"min_samples={self.min_samples!r}, initial={self.initial!r})"
        )


def _rebuild(percentile: float, window: float, min_samples: int, initial: float) -> Latency:
    return Latency(percentile, window=window, min_samples=min_samples, initial=initial)


@final
class LatencyWindow:
    """One node's window (internal): successes recorded, the hedge delay read, at the
    monotonic clock's time."""

    __slots__ = ("_core",)

    def __init__(self, core: _core.LatencyWindow) -> None:
        self._core = core

    def record(self, duration: float) -> None:
        """A successful attempt that took ``duration`` seconds has just ended."""
        self._core.record(time.monotonic(), duration)

    def hedge_after(self) -> float:
        """Seconds after which a hedge is due now."""
        return self._core.hedge_after(time.monotonic())

    @property
    def samples(self) -> int:
        """Successes within the window now."""
        return self._core.samples(time.monotonic())


@final
class Hedging:
    """A node's hedging (``execution(hedge_after=, hedges=)``, docs/hedging.md), as one
    Driver carries it out: a fixed delay, or the node's own window (one per node and Driver,
    shared by every run and thread), the extra calls a round may start, and the policy's
    timeout (each call's own)."""

    __slots__ = ("after", "hedges", "timeout", "window")

    def __init__(
        self, after: float | None, window: LatencyWindow | None, hedges: int, timeout: float | None
    ) -> None:
        self.after = after
        self.window = window
        self.hedges = hedges
        self.timeout = timeout

    def delay(self) -> float:
        """Seconds after which a hedge is due now."""
        window = self.window
        if window is None:
            return self.after or 0.0
        return window.hedge_after()

    def __repr__(self) -> str:
        return (
            f"<Hedging after={self.after!r} window={self.window is not None} hedges={self.hedges}>"
        )
