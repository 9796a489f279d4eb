"""Fault-injection campaign support: scenarios, generated Hamilton modules, the harness that
records every call, and the runner. The checker is :mod:`support.campaign_check`.

A *scenario* is a random DAG of nodes (async, sync, or sync returning an awaitable) with
``execution`` policies, owned acquisitions with ``shutdown`` releases and their own policies,
and per-attempt *steps* saying what each attempt does: return, raise an exception from a
palette, overrun its timeout, cancel itself, return a value that fails its annotation, or
ask for the caller to be cancelled; what it does when it is cancelled (propagate, drain then
re-raise, drain then return a value); and, for ``open()``, what the body does.

The generated functions call a :class:`Harness` that records every attempt (sequence
numbers from one counter, timestamps, the outcome and the exception objects), so the
checker derives the legitimately nondeterministic parts (which of two concurrently failing
nodes failed first, whether a cancellation landed in the forward phase or in cleanup) from
what actually happened, and verifies everything else against docs/contract.md#running.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import itertools
import logging
import re
import selectors
import sys
import time
import types
import warnings
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hypothesis import strategies as st

from sdax_hamilton import (
    Acquisition,
    Driver,
    PreparedPlan,
    RetryableException,
    RunEvent,
)
from sdax_hamilton.testing import jitter_seed
from support import loops as loop_support

DIAGNOSTICS_NOTE = "Additional execution/cleanup diagnostics: sdax_hamilton.failures(exception)"
BAD_VALUE = "BADVALUE-never-log-me"
"""What a ``bad`` step returns instead of an ``int``; it must never appear in logs/messages."""
OVERRUN = 30.0
"""How long an overrunning attempt sleeps: far beyond any timeout of the campaign."""
LATE_SLACK = 1.0
"""Generous slack (seconds) on upper time bounds: 2 shared cores, loaded machine."""
EARLY_SLACK = 1e-4
"""Slack on lower time bounds (timer resolution)."""

# ------------------------------------------------------------------------------------------
# Exception palette and retryable sets
# ------------------------------------------------------------------------------------------


def make_exception(kind: str) -> BaseException:
    """A fresh exception object of the palette entry ``kind``."""
    if kind == "conn":
        return ConnectionResetError("injected")
    if kind == "timeout":
        return TimeoutError("injected")
    if kind == "retryable":
        return RetryableException("injected")
    if kind == "value":
        return ValueError("injected")
    if kind == "key":
        return KeyError("injected")
    if kind == "os":
        return OSError("injected")
    if kind == "group_conn":
        return ExceptionGroup("injected", [ConnectionError("a"), ConnectionAbortedError("b")])
    if kind == "group_mixed":
        return ExceptionGroup("injected", [ConnectionError("a"), ValueError("b")])
    if kind == "group_nested":
        return ExceptionGroup(
            "injected",
            [ExceptionGroup("inner", [ConnectionError("a")]), RetryableException("b")],
        )
    if kind == "noted":
        return Noted("injected")
    raise AssertionError(f"unknown exception kind {kind}")


EXCEPTION_KINDS = (
    "conn",
    "timeout",
    "retryable",
    "value",
    "key",
    "os",
    "group_conn",
    "group_mixed",
    "group_nested",
)


def default_retryable_set() -> tuple[type[BaseException], ...]:
    """The default set (docs/contract.md#declaration-signatures): ConnectionError,
    TimeoutError, our RetryableException (+ sdax's)."""
    found: list[type[BaseException]] = [ConnectionError, TimeoutError, RetryableException]
    try:
        import sdax  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        pass
    else:  # pragma: no cover - sdax is not installed in the test environment
        extra = getattr(sdax, "RetryableException", None)
        if isinstance(extra, type) and issubclass(extra, BaseException):
            found.append(extra)
    return tuple(found)


RETRYABLE_SETS: tuple[tuple[type[BaseException], ...] | None, ...] = (
    None,
    (ValueError,),
    (Exception,),
    (OSError,),
    (ConnectionError, KeyError),
    (BaseExceptionGroup,),
    (RetryableException, TimeoutError),
)


def resolved_set(index: int) -> tuple[type[BaseException], ...]:
    chosen = RETRYABLE_SETS[index]
    return default_retryable_set() if chosen is None else chosen


def is_retryable(exc: BaseException, retryable: tuple[type[BaseException], ...]) -> bool:
    """``isinstance``; an ExceptionGroup only when every leaf is (flattening descends
    ExceptionGroup only): docs/contract.md#retry-loop."""
    if isinstance(exc, ExceptionGroup):
        return all(is_retryable(leaf, retryable) for leaf in exc.exceptions)
    return isinstance(exc, retryable)


# ------------------------------------------------------------------------------------------
# Hostile faults: BaseExceptions out of user code the driver itself calls
# ------------------------------------------------------------------------------------------

HOSTILE_PLACES = ("type check", "note", "retryable check", "observer", "type name")
"""Where a hostile fault raises: a metaclass ``__instancecheck__`` of the annotation every
value is checked against (inputs, outputs, acquisitions); an exception class's
``add_note``, when the driver notes a failure on it; a metaclass ``__instancecheck__`` of a
class in every retryable set, when the driver asks whether a failure is retried; the run's
observer, at one of its events; the class of a value that fails its output check, when the
driver names it in the error (its ``__qualname__``, through its metaclass)."""
HOSTILE_KINDS: tuple[type[BaseException], ...] = (
    KeyboardInterrupt,
    SystemExit,
    RecursionError,
    MemoryError,
)


@dataclass(frozen=True)
class Hostile:
    """A run's hostile fault: the ``after + 1``-th call of user code at ``place`` raises a
    fresh ``kind`` (once per run)."""

    place: str
    kind: type[BaseException]
    after: int = 0

    def __repr__(self) -> str:
        return f"<hostile {self.kind.__name__} from the {self.place} after {self.after}>"


def hostile_point(place: str) -> None:
    """User code at ``place`` runs: raise the current run's hostile fault if it is due."""
    state = CURRENT_RUN.get()
    if state is None or state.quiet:
        return  # building the plan, or the harness itself reading a value
    hostile = state.scenario.hostile
    if hostile is None or hostile.place != place or state.hostile_raised is not None:
        return
    if state.hostile_calls < hostile.after:
        state.hostile_calls += 1
        return
    exc = hostile.kind(f"hostile {place}")
    state.hostile_raised = exc
    state.hostile_seq = state.seq()
    raise exc


class _CheckedMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        hostile_point("type check")
        return type(obj) is int


class Checked(metaclass=_CheckedMeta):
    """What a hostile scenario's values are annotated with: ``int`` to the type checker (a
    class of its own metaclass, so every check of a value calls ``__instancecheck__``)."""


class _RetryMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        hostile_point("retryable check")
        return False


class HostileRetry(Exception, metaclass=_RetryMeta):
    """First in every retryable set of a hostile scenario; matches nothing."""


class _NamedMeta(type):
    def __getattribute__(cls, name: str) -> Any:
        if name == "__qualname__":
            hostile_point("type name")
        return super().__getattribute__(name)


class Named(metaclass=_NamedMeta):
    """What a ``bad`` step returns in a scenario whose hostile fault is the type name."""


class Noted(Exception):
    """An exception whose ``add_note`` is user code (``noted`` in the palette)."""

    def add_note(self, note: str) -> None:
        hostile_point("note")
        super().add_note(note)


# ------------------------------------------------------------------------------------------
# Scenario model
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class Step:
    """What one attempt (of a node or a release) or the body does."""

    kind: str = "ok"
    """ok | raise | overrun | selfcancel | bad (forward) | retval (release)."""
    delay: float | None = None
    """Sleep before acting; ``None``: no await at all."""
    exc: str = "value"
    reaction: str = "propagate"
    """On a CancelledError while awaiting: propagate | slow (drain, re-raise) | swallow
    (drain, return the value)."""
    drain: float = 0.0
    cancel_caller: bool = False
    """Ask (``loop.call_soon``) for the caller's task to be cancelled at the attempt start."""
    cancel_at_end: bool = False
    """Ask for the caller's cancellation as the attempt ends (the cancellation and the
    attempt's outcome reach the runtime in the same loop iteration)."""

    def __repr__(self) -> str:
        parts = [self.kind]
        if self.delay is not None:
            parts.append(f"delay={self.delay}")
        if self.kind == "raise":
            parts.append(self.exc)
        if self.reaction != "propagate":
            parts.append(f"{self.reaction}({self.drain})")
        if self.cancel_caller:
            parts.append("CANCEL-CALLER")
        if self.cancel_at_end:
            parts.append("CANCEL-CALLER-AT-END")
        return "<" + " ".join(parts) + ">"


@dataclass(frozen=True, repr=False)
class PolicyDef:
    timeout: float | None = None
    retries: int = 0
    initial_delay: float = 1.0
    backoff_factor: float = 2.0
    retryable: int = 0
    """Index into RETRYABLE_SETS."""
    declared: bool = True
    """Whether the decorator is written at all (``False``: the default policy)."""

    def __repr__(self) -> str:
        if not self.declared:
            return "default-policy"
        return f"policy({self.decorator_args()})"

    def decorator_args(self) -> str:
        parts = []
        if self.timeout is not None:
            parts.append(f"timeout={self.timeout!r}")
        parts.append(f"retries={self.retries}")
        parts.append(f"initial_delay={self.initial_delay!r}")
        parts.append(f"backoff_factor={self.backoff_factor!r}")
        parts.append(f"retryable_exceptions=_SETS[{self.retryable}]")
        return ", ".join(parts)

    def delay_bounds(self, k: int) -> tuple[float, float]:
        base = self.initial_delay * self.backoff_factor**k
        return 0.5 * base, base


@dataclass(frozen=True)
class NodeDef:
    idx: int
    deps: tuple[int, ...]
    uses_input: bool
    style: str
    """async | sync | sync_aw (a plain function returning a coroutine)."""
    policy: PolicyDef
    steps: tuple[Step, ...]
    """Per attempt; attempts beyond the tuple use ``default``."""
    default: Step
    owned: bool = False
    release_style: str = "async"
    release_policy: PolicyDef = PolicyDef(declared=True)
    release_steps: tuple[Step, ...] = ()
    release_default: Step = Step()

    @property
    def name(self) -> str:
        return node_name(self.idx)

    def step(self, number: int) -> Step:
        return self.steps[number] if number < len(self.steps) else self.default

    def release_step(self, number: int) -> Step:
        if number < len(self.release_steps):
            return self.release_steps[number]
        return self.release_default


@dataclass(frozen=True)
class Scenario:
    nodes: tuple[NodeDef, ...]
    outputs: tuple[int, ...]
    mode: str
    """execute | open."""
    body: Step
    check_outputs: bool
    input_value: int
    cancel_at: tuple[float, ...] = ()
    """Seconds after the run starts at which a timer cancels the caller's task; ``PENDING``
    (-1): the caller's task cancels itself just before calling the run."""
    hostile: Hostile | None = None
    """A hostile fault (``gen_hostile_scenario``); ``None`` for every other scenario."""

    def describe(self) -> str:
        lines = [
            f"mode={self.mode} check_outputs={self.check_outputs} outputs="
            f"{[node_name(i) for i in self.outputs]} body={self.body} "
            f"cancel_at={self.cancel_at}" + ("" if self.hostile is None else f" {self.hostile}")
        ]
        for node in self.nodes:
            lines.append(
                f"  {node.name}{' OWNED' if node.owned else ''} "
                f"deps={[node_name(d) for d in node.deps]} x={node.uses_input} "
                f"{node.style} {node.policy} steps={node.steps} default={node.default}"
            )
            if node.owned:
                lines.append(
                    f"    release {node.release_style} {node.release_policy} "
                    f"steps={node.release_steps} default={node.release_default}"
                )
        return "\n".join(lines)


def node_name(idx: int) -> str:
    return f"n{idx:03d}"


def names_node(text: str, idx: int) -> bool:
    """Whether ``text`` names node ``idx`` (also inside ``release_n007``)."""
    return re.search(rf"(?<![0-9A-Za-z]){node_name(idx)}(?![0-9])", text) is not None


def expected_value(idx: int, kwargs: dict[str, Any]) -> Any:
    total = idx * 7919
    for value in kwargs.values():
        if type(value) is not int:
            return None
        total += value
    return total % 1_000_003


# ------------------------------------------------------------------------------------------
# Generated module
# ------------------------------------------------------------------------------------------


def module_source(scenario: Scenario) -> str:
    """The scenario's module. Values are annotated ``T``: ``int``, or ``Checked`` when a
    hostile fault raises from type checks (``load_generated`` binds it)."""
    lines = ["from sdax_hamilton import Acquisition, execution, shutdown", ""]
    for node in scenario.nodes:
        params = [f"{node_name(d)}: T" for d in node.deps]
        if node.uses_input:
            params.append("x: T")
        signature = ", ".join(params)
        if node.policy.declared:
            lines.append(f"@execution({node.policy.decorator_args()})")
        if node.style == "async":
            lines.append(f"async def {node.name}({signature}) -> T:")
            lines.append(f"    return await _H.anode({node.idx}, locals())")
        elif node.style == "sync":
            lines.append(f"def {node.name}({signature}) -> T:")
            lines.append(f"    return _H.snode({node.idx}, locals())")
        else:
            lines.append(f"def {node.name}({signature}) -> T:")
            lines.append(f"    return _H.snode_aw({node.idx}, locals())")
        lines.append("")
    for node in scenario.nodes:
        if not node.owned:
            continue
        lines.append(f"@shutdown(of={node.name}, {node.release_policy.decorator_args()})")
        if node.release_style == "async":
            lines.append(f"async def release_{node.name}(acquired: Acquisition[T]) -> None:")
            lines.append(f"    return await _H.arelease({node.idx}, acquired)")
        else:
            lines.append(f"def release_{node.name}(acquired: Acquisition[T]) -> None:")
            lines.append(f"    return _H.srelease({node.idx}, acquired)")
        lines.append("")
    return "\n".join(lines)


_module_counter = itertools.count()


def load_generated(source: str, harness: Harness) -> types.ModuleType:
    """Exec ``source`` into a fresh registered module whose globals hold the harness."""
    name = f"sdax_campaign_graph_{next(_module_counter)}"
    module = types.ModuleType(name)
    module.__dict__["_H"] = harness
    module.__dict__["_SETS"] = RETRYABLE_SETS
    module.__dict__["T"] = int
    hostile = harness.scenario.hostile
    if hostile is not None and hostile.place == "type check":
        module.__dict__["T"] = Checked
    if hostile is not None and hostile.place == "retryable check":
        module.__dict__["_SETS"] = tuple(
            (HostileRetry, *(default_retryable_set() if chosen is None else chosen))
            for chosen in RETRYABLE_SETS
        )
    sys.modules[name] = module
    try:
        exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


# ------------------------------------------------------------------------------------------
# Event log
# ------------------------------------------------------------------------------------------


@dataclass
class AttemptRec:
    role: str
    """node | release | body."""
    idx: int
    number: int
    start_seq: int
    start_t: float
    kwargs: dict[str, Any] = field(default_factory=dict)
    end_seq: int | None = None
    end_t: float | None = None
    outcome: str | None = None
    """ok | raise | selfcancel | cancelled | swallowed | retval | overran | closed | bad_input."""
    exc: BaseException | None = None
    value: Any = None
    returned: bool = False
    cancels_seen: int = 0
    caught: list[BaseException] = field(default_factory=list)
    acq: tuple[bool, bool, Any, bool] | None = None
    """Release only: (has_value, is_valid, raw_value or None, value accessible)."""
    in_caller: bool = False
    """The attempt began inside the caller's own task (sync node, or awaited inline)."""


@dataclass
class CancelRec:
    msg: str
    issuer: str
    seq: int = -1
    """When ``task.cancel`` actually ran."""
    delivered: bool = False
    """``task.cancel`` returned True."""


class RunState:
    """The log of one run."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self._seq = itertools.count()
        self.attempts: dict[tuple[str, int], list[AttemptRec]] = {}
        self.cancels: list[CancelRec] = []
        self.caller: asyncio.Task[None] | None = None
        self.timers: list[asyncio.TimerHandle] = []
        self.body: AttemptRec | None = None
        self.body_values: dict[str, Any] | None = None
        self.outcome: BaseException | None = None
        self.result: Any = None
        self.outcome_seq: int | None = None
        self.late: list[BaseException] = []
        self.raised: list[BaseException] = []
        """Every exception object the harness raised (identity registry)."""
        self.log_messages: list[tuple[int, str]] = []
        self.problems: list[str] = []
        """Harness-side violations observed during the run."""
        self.events: list[RunEvent] | None = None
        """What the run's observer received; ``None``: the run had no observer."""
        self.clock: Callable[[], float] = time.monotonic
        """The harness's clock: real time, or the loop's clock under virtual time."""
        self.quiet = False
        """The harness reads a value itself: no hostile fault fires."""
        self.hostile_calls = 0
        """Calls of user code at the hostile fault's place that let it pass so far."""
        self.hostile_raised: BaseException | None = None
        """The hostile fault's exception, once raised."""
        self.hostile_seq: int | None = None

    def seq(self) -> int:
        return next(self._seq)

    def request_cancel(self, issuer: str) -> None:
        rec = CancelRec(msg=f"caller-cancel-{len(self.cancels)}", issuer=issuer)
        self.cancels.append(rec)
        asyncio.get_running_loop().call_soon(self._do_cancel, rec)

    def cancel_later(self, delay: float) -> asyncio.TimerHandle:
        rec = CancelRec(msg=f"caller-cancel-{len(self.cancels)}", issuer=f"timer {delay}")
        self.cancels.append(rec)
        return asyncio.get_running_loop().call_later(delay, self._do_cancel, rec)

    def _do_cancel(self, rec: CancelRec) -> None:
        rec.seq = self.seq()
        caller = self.caller
        if caller is not None:
            rec.delivered = caller.cancel(rec.msg)

    def records(self, role: str, idx: int) -> list[AttemptRec]:
        return self.attempts.get((role, idx), [])


CURRENT_RUN: contextvars.ContextVar[RunState | None] = contextvars.ContextVar(
    "sdax_campaign_run", default=None
)
"""The run a generated function belongs to: set in the caller task's context, inherited by
every task and callback the runtime creates from it (concurrent runs of one plan)."""


class Harness:
    """What the generated functions call; the current run's log comes from CURRENT_RUN."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.by_idx = {node.idx: node for node in scenario.nodes}

    # ------------------------------------------------------------------ helpers

    def _state(self) -> RunState:
        state = CURRENT_RUN.get()
        if state is None:
            raise AssertionError("a generated function ran outside a campaign run")
        return state

    def _begin(self, role: str, idx: int, kwargs: dict[str, Any]) -> AttemptRec:
        state = self._state()
        records = state.attempts.setdefault((role, idx), [])
        rec = AttemptRec(
            role=role,
            idx=idx,
            number=len(records),
            start_seq=state.seq(),
            start_t=state.clock(),
            kwargs=dict(kwargs),
            in_caller=asyncio.current_task() is state.caller,
        )
        records.append(rec)
        return rec

    def _end(self, rec: AttemptRec) -> None:
        state = self._state()
        rec.end_seq = state.seq()
        rec.end_t = state.clock()
        if rec.outcome is None:
            rec.outcome = "closed"

    def _raise(self, rec: AttemptRec, exc: BaseException, outcome: str) -> BaseException:
        rec.exc = exc
        rec.outcome = outcome
        self._state().raised.append(exc)
        return exc

    def _forward_value(self, rec: AttemptRec, step: Step) -> Any:
        value = expected_value(rec.idx, rec.kwargs)
        if value is None:
            rec.outcome = "bad_input"
        if step.kind != "bad":
            return value
        hostile = self.scenario.hostile
        return Named() if hostile is not None and hostile.place == "type name" else BAD_VALUE

    def _act(self, rec: AttemptRec, step: Step, value: Any) -> Any:
        if step.kind == "raise":
            raise self._raise(rec, make_exception(step.exc), "raise")
        if step.kind == "selfcancel":
            raise self._raise(rec, asyncio.CancelledError("self-cancel"), "selfcancel")
        if step.kind == "retval":
            rec.outcome = "retval"
            rec.returned = True
            rec.value = 1
            return 1
        if step.kind == "overrun":
            rec.outcome = "overran"  # it was never cancelled: the timeout did not work
        elif rec.outcome is None:
            rec.outcome = "ok"
        rec.returned = True
        rec.value = value
        return value

    async def _drain(self, rec: AttemptRec, seconds: float) -> None:
        """Keep running ``seconds`` after a cancellation, counting further cancellations."""
        clock = self._state().clock
        end = clock() + seconds
        while True:
            remaining = end - clock()
            if remaining <= 0:
                return
            try:
                await asyncio.sleep(remaining)
            except asyncio.CancelledError as again:
                rec.cancels_seen += 1
                rec.caught.append(again)

    async def _attempt(self, rec: AttemptRec, step: Step, value: Any) -> Any:
        state = self._state()
        if step.cancel_caller:
            state.request_cancel(f"{rec.role}:{node_name(rec.idx)}#{rec.number}")
        try:
            if step.kind == "overrun":
                await asyncio.sleep(OVERRUN)
            elif step.delay is not None:
                await asyncio.sleep(step.delay)
        except asyncio.CancelledError as exc:
            rec.cancels_seen += 1
            rec.caught.append(exc)
            if step.reaction == "propagate":
                rec.outcome = "cancelled"
                raise
            if step.cancel_caller:
                # the caller is cancelled again while this attempt cleans up
                state.request_cancel(f"{rec.role}:{node_name(rec.idx)}#{rec.number}:again")
            await self._drain(rec, step.drain)
            if step.reaction == "slow":
                rec.outcome = "cancelled"
                raise
            rec.outcome = "swallowed"
            rec.returned = True
            rec.value = value
            return value
        if step.cancel_at_end:
            state.request_cancel(f"{rec.role}:{node_name(rec.idx)}#{rec.number}:end")
        return self._act(rec, step, value)

    def _sync_attempt(self, rec: AttemptRec, step: Step, value: Any) -> Any:
        state = self._state()
        if step.cancel_caller or step.cancel_at_end:
            state.request_cancel(f"{rec.role}:{node_name(rec.idx)}#{rec.number}")
        return self._act(rec, step, value)

    # ------------------------------------------------------------------ forward nodes

    async def anode(self, idx: int, kwargs: dict[str, Any]) -> Any:
        rec = self._begin("node", idx, kwargs)
        try:
            step = self.by_idx[idx].step(rec.number)
            return await self._attempt(rec, step, self._forward_value(rec, step))
        finally:
            self._end(rec)

    def snode(self, idx: int, kwargs: dict[str, Any]) -> Any:
        rec = self._begin("node", idx, kwargs)
        try:
            step = self.by_idx[idx].step(rec.number)
            return self._sync_attempt(rec, step, self._forward_value(rec, step))
        finally:
            self._end(rec)

    def snode_aw(self, idx: int, kwargs: dict[str, Any]) -> Awaitable[Any]:
        return self.anode(idx, kwargs)

    # ------------------------------------------------------------------ releases

    def _begin_release(self, idx: int, acquired: Any) -> AttemptRec:
        rec = self._begin("release", idx, {})
        if not isinstance(acquired, Acquisition):
            self._state().problems.append(
                f"release of {node_name(idx)} got {type(acquired).__name__}, not an Acquisition"
            )
            rec.acq = (False, False, None, False)
            return rec
        state = self._state()
        state.quiet = True  # the driver's checks are under test, not these
        try:
            has_value = acquired.has_value
            raw: Any = None
            if has_value:
                raw = acquired.raw_value
            else:
                try:
                    acquired.raw_value  # noqa: B018 - the access is the check
                except ValueError:
                    pass
                else:
                    state.problems.append(f"{node_name(idx)}: raw_value without a value")
            try:
                acquired.value  # noqa: B018
            except TypeError:
                accessible = False
            else:
                accessible = True
            rec.acq = (has_value, acquired.is_valid, raw, accessible)
        finally:
            state.quiet = False
        return rec

    async def arelease(self, idx: int, acquired: Any) -> Any:
        rec = self._begin_release(idx, acquired)
        try:
            step = self.by_idx[idx].release_step(rec.number)
            return await self._attempt(rec, step, None)
        finally:
            self._end(rec)

    def srelease(self, idx: int, acquired: Any) -> Any:
        rec = self._begin_release(idx, acquired)
        try:
            step = self.by_idx[idx].release_step(rec.number)
            return self._sync_attempt(rec, step, None)
        finally:
            self._end(rec)

    # ------------------------------------------------------------------ body of open()

    async def body(self, values: dict[str, Any]) -> dict[str, Any]:
        state = self._state()
        rec = AttemptRec(role="body", idx=-1, number=0, start_seq=state.seq(), start_t=0.0)
        state.body = rec
        state.body_values = dict(values)
        step = self.scenario.body
        try:
            if step.cancel_caller:
                state.request_cancel("body")
            try:
                await asyncio.sleep(0)
                await asyncio.sleep(0)
            except asyncio.CancelledError as exc:
                rec.caught.append(exc)
                rec.outcome = "cancelled"
                raise
            if step.kind == "raise":
                raise self._raise(rec, make_exception(step.exc), "raise")
            rec.outcome = "ok"
            return values
        finally:
            rec.end_seq = state.seq()


# ------------------------------------------------------------------------------------------
# Running
# ------------------------------------------------------------------------------------------


class _LogCapture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append((record.levelno, record.getMessage()))


@contextlib.contextmanager
def capture_package_logs() -> Any:
    """Route the ``sdax_hamilton`` logger (all levels) to a list, not to pytest."""
    logger = logging.getLogger("sdax_hamilton")
    handler = _LogCapture()
    old_level, old_propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        logger.propagate = old_propagate


@dataclass
class Compiled:
    scenario: Scenario
    module: types.ModuleType
    harness: Harness
    plan: PreparedPlan
    active: frozenset[int]
    inputs: dict[str, Any]

    def dispose(self) -> None:
        sys.modules.pop(self.module.__name__, None)


def active_nodes(scenario: Scenario) -> frozenset[int]:
    by_idx = {node.idx: node for node in scenario.nodes}
    seen: set[int] = set()
    stack = list(scenario.outputs)
    while stack:
        idx = stack.pop()
        if idx in seen:
            continue
        seen.add(idx)
        stack.extend(by_idx[idx].deps)
    return frozenset(seen)


def compile_scenario(scenario: Scenario) -> Compiled:
    harness = Harness(scenario)
    module = load_generated(module_source(scenario), harness)
    try:
        plan = Driver(module).prepare(
            [node_name(i) for i in scenario.outputs], check_outputs=scenario.check_outputs
        )
    except BaseException:
        sys.modules.pop(module.__name__, None)
        raise
    active = active_nodes(scenario)
    uses_input = any(node.uses_input for node in scenario.nodes if node.idx in active)
    expected_required = ["x"] if uses_input else []
    assert list(plan.required_inputs) == expected_required, (
        plan.required_inputs,
        expected_required,
    )
    inputs = {"x": scenario.input_value} if uses_input else {}
    return Compiled(scenario, module, harness, plan, active, inputs)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock stands still while callbacks are ready and jumps to the
    next timer when none is: sleeps, timeouts and retry waits take no real time, and a
    run's course depends only on its scenario and its jitter seed, never on the machine's
    load. (The selector still polls, without blocking, for the loop's self-pipe.)"""

    def __init__(self) -> None:
        super().__init__(selectors.DefaultSelector())
        self._virtual_now = 0.0
        real_select = self._selector.select

        def select(timeout: float | None = None) -> Any:
            if timeout is None:
                return real_select(None)
            ready = real_select(0)
            if not ready and timeout > 0:
                self._virtual_now += timeout
            return ready

        self._selector.select = select  # type: ignore[method-assign]

    def time(self) -> float:
        return self._virtual_now


async def _caller(compiled: Compiled, state: RunState) -> None:
    plan = compiled.plan
    # Timed cancellations count from the caller's first step, so they are armed here and not
    # when the task is created: uvloop may run a timer that is already due before a new
    # task's first step, cancelling a caller that never ran.
    state.caller = asyncio.current_task()
    delays = [delay for delay in compiled.scenario.cancel_at if delay >= 0]
    state.timers = [state.cancel_later(delay) for delay in delays]
    if PENDING in compiled.scenario.cancel_at:
        # a cancellation already requested when the run starts (the task cancels itself)
        rec = CancelRec(msg=f"caller-cancel-{len(state.cancels)}", issuer="pending at entry")
        state.cancels.append(rec)
        rec.seq = state.seq()
        rec.delivered = asyncio.current_task().cancel(rec.msg)  # type: ignore[union-attr]
    try:
        observer = None if state.events is None else state.events.append
        if observer is not None and compiled.scenario.hostile is not None:
            observer = _hostile_observer(state.events)  # type: ignore[arg-type]
        if compiled.scenario.mode == "execute":
            result: Any = await plan.execute(inputs=compiled.inputs, observer=observer)
        else:
            async with plan.open(inputs=compiled.inputs, observer=observer) as values:
                result = await compiled.harness.body(values)
    except BaseException as exc:  # the campaign inspects everything, KeyboardInterrupt too
        state.outcome = exc
    else:
        state.result = result
    state.outcome_seq = state.seq()
    # Cancellations requested while the runtime was finishing without a suspension land
    # here (legitimate asyncio semantics): catch them so they are not misattributed.
    for _ in range(3):
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError as late:
            state.late.append(late)


def _hostile_observer(events: list[RunEvent]) -> Callable[[RunEvent], None]:
    def observe(event: RunEvent) -> None:
        events.append(event)
        hostile_point("observer")

    return observe


async def run_once(
    compiled: Compiled, concurrent: int = 1, observe: Callable[[], bool] = lambda: False
) -> list[RunState]:
    """``concurrent`` simultaneous runs of ``compiled`` on the running loop, each with its
    own caller task and log (and an observer recording its events when ``observe()``);
    afterwards no task of theirs may be pending."""
    loop = asyncio.get_running_loop()
    before = asyncio.all_tasks()
    states: list[RunState] = []
    tasks: list[asyncio.Task[None]] = []
    for _ in range(concurrent):
        state = RunState(compiled.scenario)
        state.clock = loop.time if isinstance(loop, VirtualTimeLoop) else time.monotonic
        if observe():
            state.events = []
        context = contextvars.copy_context()
        context.run(CURRENT_RUN.set, state)
        task = loop.create_task(_caller(compiled, state), context=context)
        state.caller = task
        states.append(state)
        tasks.append(task)
    await asyncio.wait(tasks)
    for state in states:
        for timer in state.timers:
            timer.cancel()
    leftover = [t for t in asyncio.all_tasks() - before if not t.done()]
    if leftover:
        states[0].problems.append(f"tasks left pending after the run: {leftover!r}")
        for t in leftover:
            t.cancel()
    for state, task in zip(states, tasks, strict=True):
        if task.cancelled():
            state.problems.append("the caller task ended cancelled (harness could not see it)")
    return states


_freezes = itertools.count()


def _freeze_heap() -> None:
    """Move every object that exists now out of the collector's sight, so the collections
    after a run only scan what the run created (a full collection of a process holding
    Hamilton, pandas and Hypothesis costs ~30 ms). Thawed and collected now and then."""
    if next(_freezes) % 256 == 255:
        gc.unfreeze()
        gc.collect()
    gc.freeze()


def run_scenario(
    compiled: Compiled,
    runs: int = 1,
    concurrent: int = 1,
    *,
    observe: str = "alternate",
    virtual_time: bool = False,
    seed: int | None = None,
) -> list[RunState]:
    """Run ``compiled`` ``runs`` times (each time ``concurrent`` runs at once) on a fresh
    loop; check loop/GC hygiene as well.

    ``observe``: which runs get an observer recording their events: ``"alternate"`` (every
    other run, so that runs without observers are exercised too), ``"all"`` or ``"none"``.
    ``virtual_time``: run on :class:`VirtualTimeLoop` (time moves only when nothing is
    ready, so every run of a scenario unfolds identically). ``seed``: the runs' jitter seed
    (``sdax_hamilton.testing.jitter_seed``).
    """
    loop_errors: list[dict[str, Any]] = []
    _freeze_heap()
    started = itertools.count()

    def observed() -> bool:
        number = next(started)
        return observe == "all" or (observe == "alternate" and number % 2 == 0)

    async def main() -> list[RunState]:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: loop_errors.append(context))
        states = []
        for _ in range(runs):
            states.extend(await run_once(compiled, concurrent, observed))
        gc.collect()
        await asyncio.sleep(0)
        return states

    def run_all() -> list[RunState]:
        return loop_support.run(main(), VirtualTimeLoop if virtual_time else None)

    with warnings.catch_warnings(record=True) as caught, capture_package_logs() as logs:
        warnings.simplefilter("always")
        if seed is None:
            states = run_all()
        else:
            with jitter_seed(seed):
                states = run_all()
        loop_support.campaign_runs += len(states)
        gc.collect()
    for state in states:
        state.log_messages = logs.messages
    hygiene = [
        f"loop exception handler called: {context.get('message')!r} {context.get('exception')!r}"
        for context in loop_errors
    ] + [
        f"warning: {w.category.__name__}: {w.message}"
        for w in caught
        if issubclass(w.category, RuntimeWarning | ResourceWarning)
    ]
    if hygiene:
        states[-1].problems.extend(hygiene)
    return states


# ------------------------------------------------------------------------------------------
# Scenario generation (one generator, two sources of choices)
# ------------------------------------------------------------------------------------------

TIMEOUTS = (0.005, 0.01, 0.02)
DELAYS: tuple[float | None, ...] = (None, 0.0, 0.0005, 0.002)
INITIAL_DELAYS = (0.0, 0.0005, 0.001, 0.002)
BACKOFFS = (0.5, 1.0, 2.0)
DRAINS = (0.0, 0.001, 0.003)
PENDING = -1.0
CANCEL_TIMES = (0.0, 0.0005, 0.002, 0.005, 0.01, 0.02, 0.04, PENDING)


class Chooser:
    """Where a generator's choices come from: Hypothesis (shrinkable) or a seeded RNG."""

    def integer(self, low: int, high: int) -> int:
        raise NotImplementedError

    def choice(self, options: Sequence[Any]) -> Any:
        return options[self.integer(0, len(options) - 1)]

    def percent(self, rate: int) -> bool:
        """True with probability ``rate``%; shrinks towards False."""
        return self.integer(0, 99) >= 100 - rate if rate else False

    def sample(self, options: Sequence[Any], count: int) -> list[Any]:
        pool = list(options)
        picked = []
        for _ in range(min(count, len(pool))):
            picked.append(pool.pop(self.integer(0, len(pool) - 1)))
        return picked


class RandomChooser(Chooser):
    def __init__(self, seed: int) -> None:
        import random

        self.rng = random.Random(seed)

    def integer(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)


class DrawChooser(Chooser):
    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw

    def integer(self, low: int, high: int) -> int:
        return self.draw(st.integers(low, high))


def gen_step(
    ch: Chooser, *, release: bool, can_overrun: bool, is_async: bool, cancel_rate: int
) -> Step:
    kinds = ["raise", "ok", "raise", "selfcancel", "retval" if release else "bad"]
    if can_overrun:
        kinds += ["overrun", "overrun"]
    kind = ch.choice(kinds)
    return Step(
        kind=kind,
        delay=ch.choice(DELAYS) if is_async else None,
        exc=ch.choice(EXCEPTION_KINDS),
        reaction=ch.choice(("propagate", "slow", "swallow")) if is_async else "propagate",
        drain=ch.choice(DRAINS),
        cancel_caller=ch.percent(cancel_rate),
        cancel_at_end=ch.percent(cancel_rate),
    )


def gen_policy(ch: Chooser, *, max_retries: int, declared: bool | None = None) -> PolicyDef:
    if declared is None:
        declared = ch.integer(0, 3) != 0
    if not declared:
        return PolicyDef(declared=False)
    return PolicyDef(
        timeout=None if ch.integer(0, 1) == 0 else ch.choice(TIMEOUTS),
        retries=ch.integer(0, max_retries),
        initial_delay=ch.choice(INITIAL_DELAYS),
        backoff_factor=ch.choice(BACKOFFS),
        retryable=ch.integer(0, len(RETRYABLE_SETS) - 1),
    )


def gen_scenario(ch: Chooser, max_nodes: int = 60) -> Scenario:
    n = ch.integer(1, 8) if ch.integer(0, 1) == 0 else ch.integer(1, max_nodes)
    fault_rate = ch.choice((0, 3, 10, 30))
    cancel_rate = ch.choice((0, 0, 2, 10))
    owned_rate = ch.choice((0, 20, 50))
    nodes: list[NodeDef] = []
    for idx in range(n):
        window = list(range(max(0, idx - 8), idx))
        deps = tuple(sorted(ch.sample(window, ch.integer(0, 3)))) if window else ()
        uses_input = ch.integer(0, 1) == 1 if not deps else ch.percent(10)
        owned = ch.percent(owned_rate)
        styles = ("async", "async", "async", "sync") + (() if owned else ("sync_aw",))
        style = ch.choice(styles)
        policy = gen_policy(ch, max_retries=0 if owned else 3)
        is_async = style != "sync"
        node_steps: tuple[Step, ...] = ()
        if ch.percent(fault_rate):
            node_steps = tuple(
                gen_step(
                    ch,
                    release=False,
                    can_overrun=is_async and policy.timeout is not None,
                    is_async=is_async,
                    cancel_rate=cancel_rate,
                )
                for _ in range(ch.integer(1, policy.retries + 1))
            )
        default = Step(
            delay=ch.choice(DELAYS) if is_async else None,
            cancel_caller=ch.percent(cancel_rate // 2),
        )
        release_style = "async"
        release_policy = PolicyDef()
        release_steps: tuple[Step, ...] = ()
        release_default = Step()
        if owned:
            release_style = ch.choice(("async", "async", "sync"))
            release_policy = gen_policy(ch, max_retries=2, declared=True)
            r_async = release_style == "async"
            if ch.percent(fault_rate):
                release_steps = tuple(
                    gen_step(
                        ch,
                        release=True,
                        can_overrun=r_async and release_policy.timeout is not None,
                        is_async=r_async,
                        cancel_rate=cancel_rate,
                    )
                    for _ in range(ch.integer(1, release_policy.retries + 1))
                )
            release_default = Step(
                delay=ch.choice(DELAYS) if r_async else None,
                cancel_caller=ch.percent(cancel_rate // 2),
            )
        nodes.append(
            NodeDef(
                idx=idx,
                deps=deps,
                uses_input=uses_input,
                style=style,
                policy=policy,
                steps=node_steps,
                default=default,
                owned=owned,
                release_style=release_style,
                release_policy=release_policy,
                release_steps=release_steps,
                release_default=release_default,
            )
        )
    mode = ch.choice(("execute", "execute", "open"))
    candidates = [node.idx for node in nodes if mode == "open" or not node.owned]
    if not candidates:
        mode = "open"
        candidates = [node.idx for node in nodes]
    # bias towards late nodes (more of the graph is active)
    late_first = sorted(candidates, reverse=True)
    outputs = tuple(ch.sample(late_first, ch.integer(1, 4)))
    body = Step()
    if mode == "open":
        body = Step(
            kind=ch.choice(("ok", "raise", "ok")),
            exc=ch.choice(EXCEPTION_KINDS),
            cancel_caller=ch.percent(min(100, cancel_rate * 3)),
        )
    cancel_at: tuple[float, ...] = ()
    if cancel_rate and ch.percent(30):
        cancel_at = tuple(ch.choice(CANCEL_TIMES) for _ in range(ch.integer(1, 3)))
    return Scenario(
        nodes=tuple(nodes),
        outputs=outputs,
        mode=mode,
        body=body,
        check_outputs=ch.integer(0, 1) == 1,
        input_value=ch.integer(0, 1000),
        cancel_at=cancel_at,
    )


@st.composite
def scenarios(draw: st.DrawFn, max_nodes: int = 60) -> Scenario:
    return gen_scenario(DrawChooser(draw), max_nodes)


def gen_hostile_scenario(ch: Chooser, max_nodes: int = 30) -> Scenario:
    """A scenario of ``gen_scenario`` with a hostile fault (``Hostile``); a fault that
    needs a failure to be reached gets one: the first requested output raises on its first
    attempt (a ``noted`` exception for the note, a plain one for the retryable check), or
    returns a ``Named`` (the type name: outputs are checked, and its check names it)."""
    scenario = gen_scenario(ch, max_nodes)
    place = ch.choice(HOSTILE_PLACES)
    # Checks and events are many in a run; notes, retry questions and type names one per
    # failure.
    after = ch.integer(0, 3) if place in ("type check", "observer") else ch.integer(0, 1)
    hostile = Hostile(place, ch.choice(HOSTILE_KINDS), after)
    nodes = list(scenario.nodes)
    if hostile.place == "type name":  # the first output returns a value of that class
        first = scenario.outputs[0]
        nodes = [
            replace(node, steps=(Step(kind="bad"), *node.steps)) if node.idx == first else node
            for node in nodes
        ]
        scenario = replace(scenario, check_outputs=True)  # its output check names it
    if hostile.place in ("note", "retryable check"):
        exc = "noted" if hostile.place == "note" else "value"

        def retarget(steps: tuple[Step, ...]) -> tuple[Step, ...]:
            return tuple(replace(step, exc=exc) if step.kind == "raise" else step for step in steps)

        nodes = [
            replace(node, steps=retarget(node.steps), release_steps=retarget(node.release_steps))
            for node in nodes
        ]
        first = scenario.outputs[0]
        nodes = [
            replace(node, steps=(Step(kind="raise", exc=exc), *node.steps))
            if node.idx == first
            else node
            for node in nodes
        ]
    return replace(scenario, nodes=tuple(nodes), hostile=hostile)
