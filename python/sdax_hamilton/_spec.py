"""Plain node descriptions passed from the Hamilton translation to planning.

These are the only shapes that cross from ``_hamilton`` (the one module that touches
Hamilton internals) to ``_plan`` (selection, static type checks, run preparation).
Nothing here imports Hamilton.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._core import Policy

if TYPE_CHECKING:
    from ._latency import Hedging
    from ._resilience import Bulkhead, CircuitBreaker


@dataclass(frozen=True, slots=True)
class InputSpec:
    """One input of a generated node, as its callable names it."""

    name: str
    """Dependency name: a node, an external input or a config key; also the keyword."""
    type: Any
    """The annotation this node requires of the value."""
    has_default: bool
    default: Any = None
    also: tuple[Any, ...] = ()
    """Further annotations this node requires of the same value: several parameters of the
    node's function bound to one source (docs/bindings.md)."""

    @property
    def types(self) -> tuple[Any, ...]:
        """Every annotation this node requires of the value."""
        return (self.type, *self.also) if self.also else (self.type,)


@dataclass(frozen=True, slots=True)
class ReleaseSpec:
    """The shutdown declared for an owned node."""

    call: Callable[..., Any]
    """The user's release function, called with one ``Acquisition``."""
    policy: Policy
    """The release's own policy; ``retryable_exceptions`` is always resolved (never None)."""
    acquisition_type: Any
    """``T`` of the release's ``Acquisition[T]`` parameter."""
    origin: str
    """``module.qualname`` of the release function, for messages."""


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One generated Hamilton node, translated."""

    name: str
    type: Any
    """Declared output type (validated against the docs/contract.md#annotation-forms vocabulary)."""
    call: Callable[..., Any]
    """Called with keyword arguments named by ``inputs``; may return an awaitable."""
    inputs: tuple[InputSpec, ...]
    policy: Policy
    """The node's ``execution`` policy, or ``Policy()`` with the default retryable set."""
    origin: str
    """``module.qualname`` of the declaration that produced the node, for messages."""
    release: ReleaseSpec | None = None
    """Set on an owned acquisition (an actual call of a shutdown-declared function)."""
    borrows: tuple[str, ...] = ()
    """Owned nodes this projection/validation/pipeline node borrows from."""
    ownership_required: bool = False
    """An actual call of a shutdown-declared function that no release targets."""
    validation_internal: bool = False
    """``check_output`` internals (``<name>_raw`` and validator nodes)."""
    validation_gate: str | None = None
    """For a validation internal: the gate node (``<name>``) it serves, the only consumer
    outside the internals that may take it as an input."""
    borrowed: bool = False
    """Generated node that calls no user code and borrows (projection, gate, step)."""
    bulkhead: Bulkhead | None = None
    """Shared limit on concurrent calls (docs/resilience.md)."""
    breaker: CircuitBreaker | None = None
    """Shared circuit breaker (docs/resilience.md)."""
    fallback: Callable[[BaseException], Any] | None = None
    """Called with the failure when the node has failed for good (docs/resilience.md)."""
    in_thread: bool = False
    """Each attempt runs ``call`` in a worker thread (``execution(in_thread=True)``)."""
    hedge: Hedging | None = None
    """Hedged calls (``execution(hedge_after=)``, docs/hedging.md), with this Driver's
    latency window of the node when ``hedge_after`` is a ``Latency``."""
