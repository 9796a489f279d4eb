"""Objects shared by every run that names them (docs/contract.md#shared-objects): :class:`Bulkhead`,
:class:`CircuitBreaker`, :class:`RetryBudget`, and the exceptions :class:`BulkheadFull`
and :class:`CircuitOpen`.

The state and every rule live in the Rust core (``_core.Bulkhead`` and friends, one lock
per object, shared by every plan, Driver, event loop and thread of the process). These
classes only give them their public signatures and read the clock for them: the core is
handed ``time.monotonic()``, it never reads one.
"""

from __future__ import annotations

import time
from typing import Literal, final

from . import _core

__all__ = ["Bulkhead", "BulkheadFull", "CircuitBreaker", "CircuitOpen", "RetryBudget"]


@final
class Bulkhead:
    """At most ``max_concurrent`` calls at once of the functions of every node naming it;
    up to ``max_waiting`` more attempts wait for a permit, first in, first out.

    ``TypeError`` for a wrong type (``bool`` included), ``ValueError`` for
    ``max_concurrent < 1`` or ``max_waiting < 0``.
    """

    __slots__ = ("_core",)

    def __init__(self, max_concurrent: int, *, max_waiting: int = 0, name: str | None = None):
        self._core = _core.Bulkhead(max_concurrent, max_waiting, name)

    @property
    def name(self) -> str | None:
        return self._core.name

    @property
    def max_concurrent(self) -> int:
        return self._core.max_concurrent

    @property
    def max_waiting(self) -> int:
        return self._core.max_waiting

    @property
    def in_use(self) -> int:
        """Permits taken now."""
        return self._core.in_use

    @property
    def waiting(self) -> int:
        """Attempts waiting for a permit now."""
        return self._core.waiting

    def __copy__(self) -> Bulkhead:
        # Shared state: a copy would be a second, independent limit.
        return self

    def __deepcopy__(self, memo: object, /) -> Bulkhead:
        return self

    def __repr__(self) -> str:
        core = self._core
        return (
            f"Bulkhead(name={core.name!r}, max_concurrent={core.max_concurrent}, "
            f"max_waiting={core.max_waiting}, in_use={core.in_use}, waiting={core.waiting})"
        )


@final
class CircuitBreaker:
    """Fails attempts fast while the dependency they call is failing
    (docs/contract.md#circuit-breaker).

    Closed: attempts go through and their outcomes are recorded over the trailing
    ``window`` seconds; at least ``min_calls`` outcomes with a failure share of at least
    ``failure_ratio`` open it. Open: for ``break_for`` seconds attempts fail with
    :class:`CircuitOpen`. Half-open: up to ``probes`` attempts go through; all succeeding
    close it (with an empty window), one failing opens it again.
    """

    __slots__ = ("_core",)

    def __init__(
        self,
        *,
        failure_ratio: float = 0.5,
        min_calls: int = 20,
        window: float = 30.0,
        break_for: float = 5.0,
        probes: int = 1,
        name: str | None = None,
    ):
        self._core = _core.CircuitBreaker(failure_ratio, min_calls, window, break_for, probes, name)

    @property
    def name(self) -> str | None:
        return self._core.name

    @property
    def failure_ratio(self) -> float:
        return self._core.failure_ratio

    @property
    def min_calls(self) -> int:
        return self._core.min_calls

    @property
    def window(self) -> float:
        return self._core.window

    @property
    def break_for(self) -> float:
        return self._core.break_for

    @property
    def probes(self) -> int:
        return self._core.probes

    @property
    def state(self) -> Literal["closed", "open", "half_open"]:
        """``"closed"``, ``"open"`` or ``"half_open"`` now."""
        return self._core.state(time.monotonic())

    def __copy__(self) -> CircuitBreaker:
        return self

    def __deepcopy__(self, memo: object, /) -> CircuitBreaker:
        return self

    def __repr__(self) -> str:
        core = self._core
        return (
            f"CircuitBreaker(name={core.name!r}, state={self.state!r}, "
            f"failure_ratio={core.failure_ratio!r}, min_calls={core.min_calls}, "
            f"window={core.window!r}, break_for={core.break_for!r}, probes={core.probes})"
        )


@final
class RetryBudget:
    """Retries allowed across runs (docs/contract.md#retry-budget): within the trailing
    ``window`` seconds, at most ``ratio`` * first attempts + ``min_per_second`` * ``window``."""

    __slots__ = ("_core",)

    def __init__(self, *, ratio: float = 0.2, min_per_second: float = 10.0, window: float = 10.0):
        self._core = _core.RetryBudget(ratio, min_per_second, window)

    @property
    def ratio(self) -> float:
        return self._core.ratio

    @property
    def min_per_second(self) -> float:
        return self._core.min_per_second

    @property
    def window(self) -> float:
        return self._core.window

    @property
    def available(self) -> float:
        """Retries it would allow now: ``ratio`` * first attempts in the window +
        ``min_per_second`` * ``window`` - retries taken in the window (never below 0)."""
        return self._core.available(time.monotonic())

    def __copy__(self) -> RetryBudget:
        return self

    def __deepcopy__(self, memo: object, /) -> RetryBudget:
        return self

    def __repr__(self) -> str:
        core = self._core
        return (
            f"RetryBudget(ratio={core.ratio!r}, min_per_second={core.min_per_second!r}, "
            f"window={core.window!r}, available={self.available!r})"
        )


class BulkheadFull(Exception):
    """An attempt found every permit of its bulkhead taken and no room to wait; no call
    was made. ``bulkhead`` is the object (``None`` when raised by hand)."""

    def __init__(self, message: str, bulkhead: Bulkhead | None = None) -> None:
        super().__init__(message)
        self.bulkhead = bulkhead

    def __reduce__(self) -> tuple[type[BulkheadFull], tuple[str, Bulkhead | None]]:
        return (type(self), (str(self), self.bulkhead))


class CircuitOpen(Exception):
    """An attempt was refused by an open (or half-open, probes all out) circuit breaker;
    no call was made. ``retry_after``: seconds until the breaker lets a probe through;
    ``breaker``: the object."""

    def __init__(self, message: str, retry_after: float, breaker: CircuitBreaker) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.breaker = breaker

    def __reduce__(self) -> tuple[type[CircuitOpen], tuple[str, float, CircuitBreaker]]:
        return (type(self), (str(self), self.retry_after, self.breaker))
