"""Declarations (docs/contract.md#declarations, #acquisition): ``execution``, ``shutdown`` and the
``Acquisition[T]`` record.

Decorators only validate their arguments and annotate the function object; they return the
same object, so direct calls and static types are unchanged. The Hamilton translation reads
``fn.__sdax_declaration__`` and ``owner.__sdax_shutdowns__`` (see docs/internals.md).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Collection, Mapping
from dataclasses import FrozenInstanceError, dataclass
from typing import Any, Final, Generic, TypeVar, cast, final

from . import _messages
from ._core import Policy
from ._core import check_hedging as _core_check_hedging
from ._failures import RetryableException
from ._latency import Latency
from ._resilience import Bulkhead, CircuitBreaker
from ._types import checker, describe

__all__ = [
    "Acquisition",
    "ExecutionDeclaration",
    "ShutdownDeclaration",
    "default_retryable_exceptions",
    "execution",
    "shutdown",
]

_F = TypeVar("_F", bound=Callable[..., Any])
_T = TypeVar("_T")

DECLARATION_ATTR: Final = "__sdax_declaration__"
SHUTDOWNS_ATTR: Final = "__sdax_shutdowns__"

ExceptionTypes = tuple[type[BaseException], ...]
RetryAfter = Callable[[BaseException], "float | None"]
Fallback = Callable[[BaseException], Any]


# --------------------------------------------------------------------------------------------
# Default retryable set
# --------------------------------------------------------------------------------------------

_default_retryable: ExceptionTypes | None = None
_NEVER_RETRYABLE: Final = (asyncio.CancelledError, KeyboardInterrupt, SystemExit)


def default_retryable_exceptions() -> ExceptionTypes:
    """``ConnectionError``, ``TimeoutError``, our ``RetryableException`` and, when the
    ``sdax`` distribution is importable, ``sdax.RetryableException`` (looked up once)."""
    global _default_retryable
    if _default_retryable is None:
        found: list[type[BaseException]] = [ConnectionError, TimeoutError, RetryableException]
        try:
            import sdax  # type: ignore[import-not-found, unused-ignore]
        except ImportError:
            pass
        else:
            extra = getattr(sdax, "RetryableException", None)
            if (
                isinstance(extra, type)
                and issubclass(extra, BaseException)
                and not any(issubclass(never, extra) for never in _NEVER_RETRYABLE)
                and not issubclass(extra, _NEVER_RETRYABLE)
            ):
                found.append(extra)
        _default_retryable = tuple(found)
    return _default_retryable


def _policy(
    *,
    timeout: float | None,
    retries: int,
    retryable_exceptions: ExceptionTypes | None,
    initial_delay: float,
    backoff_factor: float,
    max_delay: float | None,
    retry_after: RetryAfter | None,
) -> Policy:
    return Policy(
        timeout=timeout,
        retries=retries,
        retryable_exceptions=(
            default_retryable_exceptions() if retryable_exceptions is None else retryable_exceptions
        ),
        initial_delay=initial_delay,
        backoff_factor=backoff_factor,
        max_delay=max_delay,
        retry_after=retry_after,
    )


# --------------------------------------------------------------------------------------------
# target_
# --------------------------------------------------------------------------------------------

_BYTES_LIKE: Final = (bytes, bytearray, memoryview)


def _targets(target: object) -> tuple[str, ...] | None:
    """docs/contract.md#target-validation: ``None``; a non-empty name; or a collection of distinct
    non-empty names."""
    if target is None:
        return None
    if isinstance(target, str):
        if not target:
            raise ValueError("target_ must not be an empty string")
        return (str.__str__(target),)
    if (
        isinstance(target, _BYTES_LIKE)
        or isinstance(target, Mapping)
        or not isinstance(target, Collection)
    ):
        raise TypeError(
            "target_ must be a node name or a collection of node names, "
            f"not {type(target).__name__}"
        )
    names = tuple(target)
    if not names:
        raise ValueError("target_ must name at least one node")
    for name in names:
        if not isinstance(name, str):
            raise ValueError(
                f"target_ must contain only non-empty node names, found {type(name).__name__}"
            )
        if not name:
            raise ValueError("target_ must contain only non-empty node names, found ''")
    names = tuple(str.__str__(name) for name in names)  # plain str: no subclass method runs
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(
            f"target_ contains duplicate names: {_messages.names(duplicates)}; name each once"
        )
    return names


# --------------------------------------------------------------------------------------------
# Declaration records
# --------------------------------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class ExecutionDeclaration:
    """``@execution(...)`` on a function: the forward policy and optional explicit targets."""

    policy: Policy
    target: tuple[str, ...] | None
    bulkhead: Bulkhead | None = None
    breaker: CircuitBreaker | None = None
    fallback: Fallback | None = None
    in_thread: bool = False
    """Each attempt runs the (sync) function in a worker thread (docs/lifecycle.md,
    "Blocking functions")."""
    hedge_after: float | Latency | None = None
    """When a hedged call is due (docs/hedging.md); ``None``: the node is not hedged."""
    hedges: int = 1
    """The extra calls a hedged round may start."""


def _guards(
    bulkhead: object, breaker: object, fallback: object
) -> tuple[Bulkhead | None, CircuitBreaker | None, Fallback | None]:
    """docs/contract.md#shared-objects: each ``None`` or an object of its own kind."""
    if bulkhead is not None and not isinstance(bulkhead, Bulkhead):
        raise TypeError(
            f"Invalid bulkhead: {_messages.type_name(bulkhead)}; bulkhead must be a "
            "sdax_hamilton.Bulkhead or None"
        )
    if breaker is not None and not isinstance(breaker, CircuitBreaker):
        raise TypeError(
            f"Invalid breaker: {_messages.type_name(breaker)}; breaker must be a "
            "sdax_hamilton.CircuitBreaker or None"
        )
    if fallback is not None and not callable(fallback):
        raise TypeError(
            f"Invalid fallback: {_messages.type_name(fallback)}; fallback must be a "
            "callable taking the exception, or None"
        )
    return bulkhead, breaker, cast("Fallback | None", fallback)


@final
@dataclass(frozen=True, slots=True)
class ShutdownDeclaration:
    """``@shutdown(of=owner, ...)`` on ``release``: the release policy and optional targets."""

    release: Callable[..., Any]
    owner: Callable[..., Any]
    policy: Policy
    target: tuple[str, ...] | None


def _name(obj: object) -> str:
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if qualname is None:
        return type(obj).__name__
    return f"{module}.{qualname}" if module else str(qualname)


def _check_unclaimed(fn: object, adding: str) -> None:
    existing = getattr(fn, DECLARATION_ATTR, None)
    if existing is None:
        return
    kind = "execution" if isinstance(existing, ExecutionDeclaration) else "shutdown"
    raise ValueError(
        f"Conflicting execution/shutdown declaration on {_name(fn)}: "
        f"it already carries @{kind}; cannot add @{adding}"
    )


def execution(
    *,
    target_: str | Collection[str] | None = None,
    timeout: float | None = None,
    retries: int = 0,
    retryable_exceptions: ExceptionTypes | None = None,
    initial_delay: float = 1.0,
    backoff_factor: float = 2.0,
    max_delay: float | None = None,
    retry_after: RetryAfter | None = None,
    bulkhead: Bulkhead | None = None,
    breaker: CircuitBreaker | None = None,
    fallback: Fallback | None = None,
    in_thread: bool = False,
    hedge_after: float | Latency | None = None,
    hedges: int = 1,
) -> Callable[[_F], _F]:
    """Attach a forward attempt policy to a Hamilton function (docs/contract.md#declarations).

    The policy is validated now; the decorator returns the function itself, so calling it
    directly is unchanged (no retry, no timeout; sync stays sync).

    ``max_delay`` caps every retry wait before the jitter; ``retry_after(exc)`` may set the
    wait of a retry the retryable set already takes (docs/lifecycle.md, "Deadlines and
    server-directed waits").

    ``bulkhead``, ``breaker`` (shared by every run naming them) and ``fallback(exc)`` (the
    node's value when it has failed for good): docs/resilience.md.

    ``in_thread=True`` runs each attempt of a sync function in a worker thread (the
    Driver's ``executor``), so a blocking call does not stall the event loop; an async
    function is a ``TypeError`` (docs/lifecycle.md, "Blocking functions").

    ``hedge_after`` (seconds, a finite number >= 0, or a ``Latency``) starts another call of
    the function with the same arguments when the latest one has run that long without a
    result, up to ``hedges`` extra calls; the first valid value wins (docs/hedging.md).
    """
    if type(in_thread) is not bool:
        raise TypeError(f"in_thread must be True or False, not {type(in_thread).__name__}")
    policy = _policy(
        timeout=timeout,
        retries=retries,
        retryable_exceptions=retryable_exceptions,
        initial_delay=initial_delay,
        backoff_factor=backoff_factor,
        max_delay=max_delay,
        retry_after=retry_after,
    )
    # The core checks the numbers (src/hedge.rs) and hands them back read by value; a
    # ``Latency`` checked its own when made.
    after, count = _core_check_hedging(
        None if isinstance(hedge_after, Latency) else hedge_after, hedges
    )
    guards = _guards(bulkhead, breaker, fallback)
    target = _targets(target_)
    declaration = ExecutionDeclaration(
        policy,
        target,
        *guards,
        in_thread=in_thread,
        hedge_after=hedge_after if isinstance(hedge_after, Latency) else after,
        hedges=count,
    )

    def decorate(fn: _F) -> _F:
        if in_thread and (inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)):
            raise TypeError(
                f"execution(in_thread=True) on async function {_name(fn)}: a worker "
                "thread runs sync functions only; an async function already leaves the "
                "loop free while it awaits, so drop in_thread"
            )
        _check_unclaimed(fn, "execution")
        setattr(fn, DECLARATION_ATTR, declaration)
        return fn

    return decorate


def shutdown(
    *,
    of: Callable[..., Any],
    target_: str | Collection[str] | None = None,
    timeout: float | None = None,
    retries: int = 0,
    retryable_exceptions: ExceptionTypes | None = None,
    initial_delay: float = 1.0,
    backoff_factor: float = 2.0,
    max_delay: float | None = None,
    retry_after: RetryAfter | None = None,
) -> Callable[[_F], _F]:
    """Declare the decorated function as the release of ``of``'s acquisitions
    (docs/contract.md#declarations, #acquisition).

    The release receives one ``Acquisition[T]`` and runs under its own policy. The
    declaration is stored on the release and recorded on the owner, so a Driver compiling
    the owner finds it wherever it is defined.
    """
    if not callable(of):
        raise TypeError(
            f"shutdown of= must refer to an acquisition function, not {type(of).__name__}"
        )
    policy = _policy(
        timeout=timeout,
        retries=retries,
        retryable_exceptions=retryable_exceptions,
        initial_delay=initial_delay,
        backoff_factor=backoff_factor,
        max_delay=max_delay,
        retry_after=retry_after,
    )
    target = _targets(target_)
    owner = of

    def decorate(fn: _F) -> _F:
        _check_unclaimed(fn, "shutdown")
        declaration = ShutdownDeclaration(release=fn, owner=owner, policy=policy, target=target)
        setattr(fn, DECLARATION_ATTR, declaration)
        recorded: tuple[ShutdownDeclaration, ...] = getattr(owner, SHUTDOWNS_ATTR, ())
        try:
            setattr(owner, SHUTDOWNS_ATTR, (*recorded, declaration))
        except (AttributeError, TypeError):
            # An owner that cannot carry attributes (a builtin, a bound method) is not a
            # Hamilton function; the Driver reports the release when it finds it.
            pass
        return fn

    return decorate


# --------------------------------------------------------------------------------------------
# Acquisition[T]
# --------------------------------------------------------------------------------------------


@final
class _Missing:
    """The "no value" marker of an ``Acquisition`` (the call never returned)."""

    __slots__ = ()
    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = object.__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<no value>"

    def __reduce__(self) -> str:
        return "_MISSING"


_MISSING: Final = _Missing()


@dataclass(frozen=True, slots=True, repr=False)
class Acquisition(Generic[_T]):
    """What a release receives: the outcome of one acquisition call (docs/contract.md#acquisition).

    ``Acquisition()`` is an empty record (the call raised, timed out or was cancelled
    before returning); ``Acquisition(value, declared_type)`` records a returned value and
    the acquisition's declared return type. ``is_valid`` re-checks the value against that
    type on every access.
    """

    _raw: object = _MISSING
    _declared: Any = Any

    @property
    def has_value(self) -> bool:
        """The acquisition call returned (a returned ``None`` counts as a value)."""
        return self._raw is not _MISSING

    @property
    def raw_value(self) -> Any:
        """The returned object, unchecked; ``ValueError`` if the call never returned."""
        if self._raw is _MISSING:
            raise ValueError(
                "Acquisition has no value: the acquisition raised, timed out or was "
                "cancelled before returning"
            )
        return self._raw

    @property
    def is_valid(self) -> bool:
        """The call returned and its value passes the declared type's runtime check."""
        if self._raw is _MISSING:
            return False
        check = checker(self._declared)
        return check is None or check(self._raw)

    @property
    def value(self) -> _T:
        """The returned object when valid; ``TypeError`` otherwise (inspect ``raw_value``)."""
        raw = self._raw
        if isinstance(raw, _Missing):
            raise TypeError("Acquisition has no value (the call did not return); inspect raw_value")
        if not self.is_valid:
            raise TypeError(
                f"Acquisition value does not match its declared type "
                f"{describe(self._declared)}; inspect raw_value"
            )
        return cast(_T, raw)

    def __repr__(self) -> str:
        if self._raw is _MISSING:
            state = "no value"
        else:
            state = "valid" if self.is_valid else "invalid"
        return f"Acquisition[{describe(self._declared)}]({state})"


def _refuse_setattr(self: object, name: str, value: object) -> None:
    raise FrozenInstanceError(f"cannot assign to {name!r} of a frozen Acquisition")


def _refuse_delattr(self: object, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete {name!r} of a frozen Acquisition")


# Python 3.11's generated __setattr__/__delattr__ for frozen *slotted* dataclasses call
# super() with the class as it was before slots were added, so assigning an unknown name
# raises a confusing TypeError. Every assignment is refused the frozen way instead.
Acquisition.__setattr__ = _refuse_setattr  # type: ignore[method-assign]
Acquisition.__delattr__ = _refuse_delattr  # type: ignore[method-assign]
