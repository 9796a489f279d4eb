"""What the plan hands the driver for each active node: how to call it and its release."""

from __future__ import annotations

import inspect
import time
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from .. import _core
from .._declarations import Acquisition
from .._latency import Hedging
from .._resilience import Bulkhead, CircuitBreaker
from .._types import split_check
from .permits import wake

TIMEOUT_MESSAGE: Final = "sdax_hamilton: the attempt timed out"
"""The message of the cancellation that ends a timed-out attempt: node hooks wrapped around
a call tell a timeout from other cancellations by it (docs/adapters.md)."""


@dataclass(frozen=True, slots=True)
class ReleaseRuntime:
    """How to run the release (shutdown function) of one owned node."""

    origin: str
    """``module.qualname`` of the release function, for notes and logs."""
    call: Callable[[Any], Any]
    """Called with one ``Acquisition``; an awaitable result is awaited; must return ``None``."""
    retryable: tuple[type[BaseException], ...]
    retry_after: Callable[[BaseException], object] | None = None
    """The release policy's ``retry_after`` hook, called when the core emits a HINT."""


@dataclass(frozen=True, slots=True)
class NodeRuntime:
    """How to run one active node of a plan (``nodes[i]`` belongs to ``plan.nodes[i]``)."""

    name: str
    origin: str
    """``module.qualname`` of the declaring function."""
    call: Callable[..., Any]
    """Called with keyword arguments; an awaitable result is awaited."""
    args: tuple[tuple[str, str], ...]
    """``(keyword, value-table key)`` pairs read from the run's values."""
    defaults: Mapping[str, Any]
    """``keyword -> default`` for keywords not in ``args``."""
    input_checks: tuple[tuple[str, Callable[[Any], bool]], ...]
    """``(keyword, predicate)``, checked once before attempt 0 (never retried)."""
    output_check: Callable[[Any], bool] | None
    """Checked after a successful attempt, outside the attempt loop (never re-runs the call)."""
    retryable: tuple[type[BaseException], ...]
    output_type: Any
    """Declared output type, recorded in the node's ``Acquisition``."""
    release: ReleaseRuntime | None
    """Set on owned acquisitions."""
    retry_after: Callable[[BaseException], object] | None = None
    """The forward policy's ``retry_after`` hook, called when the core emits a HINT."""
    bulkhead: Bulkhead | None = None
    """The shared bulkhead its calls take a permit of (docs/resilience.md)."""
    breaker: CircuitBreaker | None = None
    """The shared circuit breaker that admits its attempts and records their outcomes."""
    fallback: Callable[[BaseException], Any] | None = None
    """Its value once it has failed for good, unless the run is stopping."""
    hedge: Hedging | None = None
    """Its hedged rounds (``hedging.py``), when ``execution(hedge_after=)`` names them."""
    guard: _core.Guard | None = None
    """Its bulkhead and breaker as the core asks them for each attempt the driver admits
    (``guards.py``); made from them when not given."""

    def __post_init__(self) -> None:
        if self.guard is None and (self.bulkhead is not None or self.breaker is not None):
            guard = _core.Guard(
                None if self.bulkhead is None else self.bulkhead._core,
                None if self.breaker is None else self.breaker._core,
                time.monotonic,
                wake,
            )
            object.__setattr__(self, "guard", guard)  # a frozen dataclass's derived field


def carrier_of(nodes: Sequence[NodeRuntime]) -> _core.Carrier:
    """What a plan's runs need to carry out their lone STARTs inside the core's ``Run``
    (src/carry.rs; docs/internals.md, "How the driver carries out STARTs"): each node's
    call, arguments, checks and release, as the driver would use them. A node's bulkhead
    and breaker admit its carried attempts as the driver's (``guards.py``; a permit
    the carrier gives back wakes its waiter through ``permits.wake``)."""
    return _core.Carrier(
        [
            _core.CarriedNode(
                call=node.call,
                name=node.name,
                args=list(node.args),
                defaults=dict(node.defaults) if node.defaults else None,
                checks=[(keyword, *split_check(check)) for keyword, check in node.input_checks],
                output_check=None if node.output_check is None else split_check(node.output_check),
                output_type=node.output_type,
                owned=node.release is not None,
                positional=not node.defaults and _takes_positionally(node.call, node.args),
                declined=node.hedge is not None,
                bulkhead=None if node.bulkhead is None else node.bulkhead._core,
                breaker=None if node.breaker is None else node.breaker._core,
            )
            for node in nodes
        ],
        [None if node.release is None else node.release.call for node in nodes],
        Acquisition,
        inspect.isawaitable,
        types.CoroutineType,
        time.monotonic,
        wake=wake,
    )


def _takes_positionally(call: Callable[..., Any], args: Sequence[tuple[str, str]]) -> bool:
    """Whether calling ``call`` with ``args``' values positionally, in order, is the call
    with them as keywords: a plain function whose first parameters are those keywords, in
    that order, and none of them positional-only."""
    if type(call) is not types.FunctionType:
        return False
    code = call.__code__
    names = tuple(keyword for keyword, _ in args)
    return (
        code.co_posonlyargcount == 0
        and len(names) <= code.co_argcount
        and code.co_varnames[: len(names)] == names
    )
