"""Fault-injection campaign support: scenarios, generated Hamilton modules, an event log and
a checker whose expectations come from SPEC 7.2-7.11 only.

A *scenario* is a random DAG of nodes (async, sync, or sync returning an awaitable) with
``execution`` policies, owned acquisitions with ``shutdown`` releases and their own policies,
and per-attempt *steps* saying what each attempt does: return, raise an exception from a
palette, overrun its timeout, cancel itself, return a value that fails its annotation, or
ask for the caller to be cancelled; what it does when it is cancelled (propagate, drain then
re-raise, drain then return a value); and, for ``open()``, what the body does.

The generated functions call a :class:`Harness` that records every attempt (sequence
numbers from one counter, monotonic timestamps, the outcome and the exception objects), so
the checker derives the legitimately nondeterministic parts (which of two concurrently
failing nodes failed first, whether a cancellation landed in the forward phase or in
cleanup) from what actually happened, and verifies everything else against SPEC.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import itertools
import logging
import re
import sys
import time
import types
import warnings
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from sdax_hamilton import (
    Acquisition,
    Driver,
    ExecutionError,
    PreparedPlan,
    RetryableException,
    failures,
)

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
    """SPEC 2.1: ConnectionError, TimeoutError, our RetryableException (+ sdax's)."""
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
    """SPEC 7.7: ``isinstance``; an ExceptionGroup only when every leaf is (flattening
    descends ExceptionGroup only)."""
    if isinstance(exc, ExceptionGroup):
        return all(is_retryable(leaf, retryable) for leaf in exc.exceptions)
    return isinstance(exc, retryable)


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

    def describe(self) -> str:
        lines = [
            f"mode={self.mode} check_outputs={self.check_outputs} outputs="
            f"{[node_name(i) for i in self.outputs]} body={self.body} "
            f"cancel_at={self.cancel_at}"
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
    lines = ["from sdax_hamilton import Acquisition, execution, shutdown", ""]
    for node in scenario.nodes:
        params = [f"{node_name(d)}: int" for d in node.deps]
        if node.uses_input:
            params.append("x: int")
        signature = ", ".join(params)
        if node.policy.declared:
            lines.append(f"@execution({node.policy.decorator_args()})")
        if node.style == "async":
            lines.append(f"async def {node.name}({signature}) -> int:")
            lines.append(f"    return await _H.anode({node.idx}, locals())")
        elif node.style == "sync":
            lines.append(f"def {node.name}({signature}) -> int:")
            lines.append(f"    return _H.snode({node.idx}, locals())")
        else:
            lines.append(f"def {node.name}({signature}) -> int:")
            lines.append(f"    return _H.snode_aw({node.idx}, locals())")
        lines.append("")
    for node in scenario.nodes:
        if not node.owned:
            continue
        lines.append(f"@shutdown(of={node.name}, {node.release_policy.decorator_args()})")
        if node.release_style == "async":
            lines.append(f"async def release_{node.name}(acquired: Acquisition[int]) -> None:")
            lines.append(f"    return await _H.arelease({node.idx}, acquired)")
        else:
            lines.append(f"def release_{node.name}(acquired: Acquisition[int]) -> None:")
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
            start_t=time.monotonic(),
            kwargs=dict(kwargs),
            in_caller=asyncio.current_task() is state.caller,
        )
        records.append(rec)
        return rec

    def _end(self, rec: AttemptRec) -> None:
        state = self._state()
        rec.end_seq = state.seq()
        rec.end_t = time.monotonic()
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
        return BAD_VALUE if step.kind == "bad" else value

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
        end = time.monotonic() + seconds
        while True:
            remaining = end - time.monotonic()
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
                self._state().problems.append(f"{node_name(idx)}: raw_value without a value")
        try:
            acquired.value  # noqa: B018
        except TypeError:
            accessible = False
        else:
            accessible = True
        rec.acq = (has_value, acquired.is_valid, raw, accessible)
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


async def _caller(compiled: Compiled, state: RunState) -> None:
    plan = compiled.plan
    if PENDING in compiled.scenario.cancel_at:
        # a cancellation already requested when the run starts (the task cancels itself)
        rec = CancelRec(msg=f"caller-cancel-{len(state.cancels)}", issuer="pending at entry")
        state.cancels.append(rec)
        rec.seq = state.seq()
        rec.delivered = asyncio.current_task().cancel(rec.msg)  # type: ignore[union-attr]
    try:
        if compiled.scenario.mode == "execute":
            result: Any = await plan.execute(inputs=compiled.inputs)
        else:
            async with plan.open(inputs=compiled.inputs) as values:
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


async def run_once(compiled: Compiled, concurrent: int = 1) -> list[RunState]:
    """``concurrent`` simultaneous runs of ``compiled`` on the running loop, each with its
    own caller task and log; afterwards no task of theirs may be pending."""
    loop = asyncio.get_running_loop()
    before = asyncio.all_tasks()
    states: list[RunState] = []
    tasks: list[asyncio.Task[None]] = []
    timers: list[asyncio.TimerHandle] = []
    for _ in range(concurrent):
        state = RunState(compiled.scenario)
        context = contextvars.copy_context()
        context.run(CURRENT_RUN.set, state)
        task = loop.create_task(_caller(compiled, state), context=context)
        state.caller = task
        timers += [state.cancel_later(delay) for delay in compiled.scenario.cancel_at if delay >= 0]
        states.append(state)
        tasks.append(task)
    await asyncio.wait(tasks)
    for timer in timers:
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


def run_scenario(compiled: Compiled, runs: int = 1, concurrent: int = 1) -> list[RunState]:
    """Run ``compiled`` ``runs`` times (each time ``concurrent`` runs at once) on a fresh
    loop; check loop/GC hygiene as well."""
    loop_errors: list[dict[str, Any]] = []
    _freeze_heap()

    async def main() -> list[RunState]:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: loop_errors.append(context))
        states = []
        for _ in range(runs):
            states.extend(await run_once(compiled, concurrent))
        gc.collect()
        await asyncio.sleep(0)
        return states

    with warnings.catch_warnings(record=True) as caught, capture_package_logs() as logs:
        warnings.simplefilter("always")
        states = asyncio.run(main())
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
# Checker
# ------------------------------------------------------------------------------------------


class Violation(AssertionError):
    pass


@dataclass
class Expect:
    kind: str
    """obj | timeout | output | input | result | demoted."""
    role: str
    idx: int
    required: bool
    obj: BaseException | None = None
    matched: bool = False
    attempts: int | None = None
    """Attempts made, which the failure's note must state (None: not checked)."""
    leaf: BaseException | None = None
    """The failure that matched."""


def _final_success(rec: AttemptRec, check_outputs: bool) -> bool:
    if rec.outcome in ("ok", "swallowed"):
        return not (check_outputs and rec.value == BAD_VALUE)
    return False


def check_run(compiled: Compiled, state: RunState) -> None:
    """Raise :class:`Violation` describing every SPEC rule the run broke."""
    errors = _check(compiled, state)
    if errors:
        raise Violation(
            "campaign run violated SPEC:\n- "
            + "\n- ".join(errors)
            + "\n\nscenario:\n"
            + compiled.scenario.describe()
            + "\n\nlog:\n"
            + format_log(state)
        )


def format_log(state: RunState) -> str:
    events: list[tuple[int, str]] = []
    for (role, idx), recs in state.attempts.items():
        for rec in recs:
            events.append((rec.start_seq, f"start {role} {node_name(idx)} #{rec.number}"))
            events.append(
                (
                    rec.end_seq if rec.end_seq is not None else 10**9,
                    f"end   {role} {node_name(idx)} #{rec.number} {rec.outcome} "
                    f"{rec.exc!r} cancels_seen={rec.cancels_seen} "
                    f"dt={(rec.end_t or 0) - rec.start_t:.4f}",
                )
            )
    for cancel in state.cancels:
        events.append((cancel.seq, f"cancel {cancel.msg} by {cancel.issuer} -> {cancel.delivered}"))
    if state.body is not None:
        events.append((state.body.start_seq, "body start"))
        events.append((state.body.end_seq or 10**9, f"body end {state.body.outcome}"))
    if state.outcome_seq is not None:
        outcome = state.outcome
        events.append((state.outcome_seq, f"outcome {outcome!r} result={state.result!r}"))
    events.sort()
    return "\n".join(f"{seq:5d} {text}" for seq, text in events)


def _check(compiled: Compiled, state: RunState) -> list[str]:
    scenario = compiled.scenario
    by_idx = {node.idx: node for node in scenario.nodes}
    active = compiled.active
    errors: list[str] = list(state.problems)
    check_outputs = scenario.check_outputs
    raised_ids = {id(exc) for exc in state.raised}

    # -------------------------------------------------------------- per node, forward
    expects: list[Expect] = []
    incomplete: list[str] = []
    any_cancelled_by_runtime = False
    swallowed_caller_cancel = False
    caller_msgs = {cancel.msg for cancel in state.cancels}
    for (role, idx), recs in state.attempts.items():
        for rec in recs:
            for caught in rec.caught:
                if caught.args and caught.args[0] in caller_msgs and rec.outcome == "swallowed":
                    swallowed_caller_cancel = True
            if rec.cancels_seen > 1:
                errors.append(
                    f"{role} {node_name(idx)} attempt {rec.number} was cancelled "
                    f"{rec.cancels_seen} times (SPEC 7.9: cancelled once, further "
                    "cancellations absorbed)"
                )
            if rec.end_seq is None:
                errors.append(f"{role} {node_name(idx)} attempt {rec.number} never ended")
            elif state.outcome_seq is not None and rec.end_seq > state.outcome_seq:
                errors.append(
                    f"{role} {node_name(idx)} attempt {rec.number} ended after the run "
                    "returned to its caller (SPEC 7.3/7.10: results after every release)"
                )
            if rec.outcome == "closed":
                errors.append(
                    f"{role} {node_name(idx)} attempt {rec.number} was closed/abandoned "
                    "mid-flight (not drained)"
                )
            if rec.outcome == "overran":
                errors.append(f"{role} {node_name(idx)} overran: its timeout never fired")
            if rec.outcome == "bad_input":
                errors.append(f"{node_name(idx)} started with an input that is not an int")

    for idx in sorted(by_idx):
        node = by_idx[idx]
        recs = state.records("node", idx)
        if idx not in active:
            if recs:
                errors.append(f"{node.name} is not selected but ran")
            continue
        retryable = resolved_set(node.policy.retryable)
        # each attempt's inputs are its dependencies' values
        for rec in recs:
            for dep in node.deps:
                dep_recs = [r for r in state.records("node", dep) if r.returned]
                if not dep_recs:
                    errors.append(f"{node.name} started before its dependency {node_name(dep)}")
                    continue
                dep_rec = dep_recs[-1]
                if dep_rec.end_seq is not None and dep_rec.end_seq > rec.start_seq:
                    errors.append(
                        f"{node.name} #{rec.number} started before {node_name(dep)} returned"
                    )
                if rec.kwargs.get(node_name(dep)) != dep_rec.value:
                    errors.append(f"{node.name} got the wrong value for {node_name(dep)}")
            if node.uses_input and rec.kwargs.get("x") != scenario.input_value:
                errors.append(f"{node.name} got the wrong value for input x")
        if len(recs) > 1 + node.policy.retries:
            errors.append(
                f"{node.name}: {len(recs)} attempts > 1 + retries ({node.policy.retries})"
            )
        for k in range(1, len(recs)):
            prev, cur = recs[k - 1], recs[k]
            if prev.end_seq is None or prev.end_seq > cur.start_seq:
                errors.append(f"{node.name}: attempt {k} started while attempt {k - 1} ran")
                continue
            prev_retryable = (
                prev.outcome == "raise"
                and prev.exc is not None
                and is_retryable(prev.exc, retryable)
            ) or (
                prev.outcome == "cancelled"
                and node.policy.timeout is not None
                and is_retryable(TimeoutError(), retryable)
            )
            if not prev_retryable:
                errors.append(
                    f"{node.name}: attempt {k} after a nonretryable outcome "
                    f"{prev.outcome} {prev.exc!r}"
                )
            low, high = node.policy.delay_bounds(k - 1)
            assert prev.end_t is not None
            waited = cur.start_t - prev.end_t
            if waited < low - EARLY_SLACK or waited > high + LATE_SLACK:
                errors.append(
                    f"{node.name}: waited {waited:.5f}s before retry {k - 1}, outside "
                    f"[{low:.5f}, {high:.5f}]"
                )
        for rec in recs:
            if rec.outcome in ("cancelled", "swallowed") and rec.end_t is not None:
                if node.policy.timeout is not None and node.style != "sync":
                    step = node.step(rec.number)
                    limit = node.policy.timeout + step.drain + LATE_SLACK
                    if rec.end_t - rec.start_t > limit:
                        errors.append(f"{node.name} #{rec.number} ran past its timeout")
        if not recs:
            # never started: legitimate only when the run aborted (checked below), or when
            # its input check failed (check_outputs=False and a bad dependency value)
            dep_values = [[r for r in state.records("node", d) if r.returned] for d in node.deps]
            if all(dep_values) and any(v[-1].value == BAD_VALUE for v in dep_values):
                if check_outputs:
                    pass  # the producer failed its output check; this node must not run
                else:
                    expects.append(Expect("input", "node", idx, required=False))
            incomplete.append(node.name)
            continue
        last = recs[-1]
        final = last.number == node.policy.retries
        if last.outcome == "raise":
            assert last.exc is not None
            if final or not is_retryable(last.exc, retryable):
                expects.append(
                    Expect("obj", "node", idx, required=True, obj=last.exc, attempts=len(recs))
                )
            else:
                # raised while the run aborted: may be kept as a diagnostic of the drain
                expects.append(
                    Expect("obj", "node", idx, required=False, obj=last.exc, attempts=len(recs))
                )
            incomplete.append(node.name)
        elif last.outcome == "selfcancel":
            expects.append(
                Expect("obj", "node", idx, required=True, obj=last.exc, attempts=len(recs))
            )
            incomplete.append(node.name)
        elif last.outcome == "cancelled":
            if node.policy.timeout is not None and (
                final or not is_retryable(TimeoutError(), retryable)
            ):
                expects.append(Expect("timeout", "node", idx, required=False, attempts=len(recs)))
            if node.policy.timeout is None:
                any_cancelled_by_runtime = True
            incomplete.append(node.name)
        elif last.outcome in ("ok", "swallowed"):
            if check_outputs and last.value == BAD_VALUE:
                # optional: a value returned while the run was already aborting is drained
                # (the liveness rule below still demands it when nothing else failed)
                expects.append(Expect("output", "node", idx, required=False, attempts=len(recs)))
                incomplete.append(node.name)
            if last.number < len(recs) - 1:
                errors.append(f"{node.name}: attempts after a success")
        else:
            incomplete.append(node.name)

    # -------------------------------------------------------------- releases
    all_forward_end = max(
        (
            rec.end_seq
            for (role, _idx), recs in state.attempts.items()
            if role == "node"
            for rec in recs
            if rec.end_seq is not None
        ),
        default=-1,
    )
    release_starts: dict[int, int] = {}
    release_ends: dict[int, int] = {}
    for idx in sorted(by_idx):
        node = by_idx[idx]
        recs = state.records("release", idx)
        forward = state.records("node", idx)
        owed = node.owned and idx in active and bool(forward)
        if not node.owned:
            continue
        if not owed:
            if recs:
                errors.append(f"release of {node.name} ran but its node never started")
            continue
        if not recs:
            errors.append(f"release of {node.name} never ran (SPEC 7.3: exactly once)")
            continue
        release_starts[idx] = recs[0].start_seq
        release_ends[idx] = max(r.end_seq or 10**9 for r in recs)
        if recs[0].start_seq < all_forward_end:
            errors.append(f"release of {node.name} started before the forward phase drained")
        if state.body is not None and state.body.end_seq is not None:
            if recs[0].start_seq < state.body.end_seq:
                errors.append(f"release of {node.name} started before the body exited")
        # the acquisition record
        owner = forward[0]
        for rec in recs:
            if rec.acq is None:
                continue
            has_value, valid, raw, accessible = rec.acq
            if has_value != owner.returned:
                errors.append(
                    f"release of {node.name}: has_value={has_value} but the node "
                    f"{'returned' if owner.returned else 'never returned'}"
                )
            elif has_value:
                if raw != owner.value:
                    errors.append(f"release of {node.name}: raw_value is not what it returned")
                want_valid = type(owner.value) is int
                if valid != want_valid or accessible != want_valid:
                    errors.append(f"release of {node.name}: is_valid={valid}, want {want_valid}")
            elif valid or accessible:
                errors.append(f"release of {node.name}: empty record reported valid")
        policy = node.release_policy
        retryable = resolved_set(policy.retryable)
        if len(recs) > 1 + policy.retries:
            errors.append(f"release of {node.name}: {len(recs)} attempts > 1 + retries")
        for k in range(1, len(recs)):
            prev, cur = recs[k - 1], recs[k]
            if prev.end_seq is None or prev.end_seq > cur.start_seq:
                errors.append(f"release of {node.name}: attempt {k} overlapped attempt {k - 1}")
                continue
            ok = (
                prev.outcome == "raise"
                and prev.exc is not None
                and is_retryable(prev.exc, retryable)
            ) or (
                prev.outcome == "cancelled"
                and policy.timeout is not None
                and is_retryable(TimeoutError(), retryable)
            )
            if not ok:
                errors.append(
                    f"release of {node.name}: attempt {k} after nonretryable {prev.outcome}"
                )
            low, high = policy.delay_bounds(k - 1)
            assert prev.end_t is not None
            waited = cur.start_t - prev.end_t
            if waited < low - EARLY_SLACK or waited > high + LATE_SLACK:
                errors.append(
                    f"release of {node.name}: waited {waited:.5f}s before retry {k - 1}, "
                    f"outside [{low:.5f}, {high:.5f}]"
                )
        last = recs[-1]
        final = last.number == policy.retries
        if last.outcome == "raise":
            assert last.exc is not None
            if final or not is_retryable(last.exc, retryable):
                expects.append(
                    Expect("obj", "release", idx, required=True, obj=last.exc, attempts=len(recs))
                )
            else:
                errors.append(f"release of {node.name}: retryable failure was not retried")
        elif last.outcome == "selfcancel":
            expects.append(
                Expect("obj", "release", idx, required=True, obj=last.exc, attempts=len(recs))
            )
        elif last.outcome == "cancelled":
            if policy.timeout is None:
                errors.append(f"release of {node.name} was cancelled (releases are shielded)")
            elif final or not is_retryable(TimeoutError(), retryable):
                expects.append(Expect("timeout", "release", idx, required=True, attempts=len(recs)))
            else:
                errors.append(f"release of {node.name}: timeout was not retried")
        elif last.outcome == "retval":
            expects.append(Expect("result", "release", idx, required=True, attempts=len(recs)))
        if policy.timeout is not None and node.release_style == "async":
            for rec in recs:
                if rec.outcome in ("cancelled", "swallowed") and rec.end_t is not None:
                    limit = policy.timeout + node.release_step(rec.number).drain + LATE_SLACK
                    if rec.end_t - rec.start_t > limit:
                        errors.append(f"release of {node.name} #{rec.number} ran past timeout")

    # release order: a resource's release waits for the releases of resources depending on it
    dependents = _owned_dependents(scenario, active)
    for idx, start in release_starts.items():
        for dependent in dependents.get(idx, ()):
            end = release_ends.get(dependent)
            if end is not None and end > start:
                errors.append(
                    f"release of {node_name(idx)} started before the release of its "
                    f"dependent {node_name(dependent)} completed"
                )

    # -------------------------------------------------------------- caller cancellations
    body = state.body
    outcome_seq = state.outcome_seq if state.outcome_seq is not None else 10**9
    delivered = [c for c in state.cancels if c.delivered]
    late = [c for c in delivered if c.seq > outcome_seq]
    # A cancellation pending at entry reaches the runtime only if the run ever suspends; if
    # it never does, the caller catches it afterwards (merged with any later request).
    saw_cancel = isinstance(state.outcome, asyncio.CancelledError) or (
        isinstance(state.outcome, BaseExceptionGroup)
        and any(
            isinstance(leaf, asyncio.CancelledError) and leaf.args[:1] != ("self-cancel",)
            for leaf in state.outcome.exceptions
        )
    )
    pending_late = [
        c
        for c in delivered
        if c.issuer == "pending at entry" and state.late and not saw_cancel and body is None
    ]
    if bool(late) != bool(state.late) and not pending_late:
        errors.append(f"late cancellations {late} vs caught after the run {state.late}")
    runtime_cancels = [c for c in delivered if c.seq < outcome_seq and c not in pending_late]
    body_cancels: list[CancelRec] = []
    if body is not None:
        body_cancels = [
            c
            for c in runtime_cancels
            if body.start_seq < c.seq < (body.end_seq if body.end_seq is not None else 10**9)
            # pending at entry and the forward phase never suspended: it lands in the body
            or (c.issuer == "pending at entry" and body.outcome == "cancelled")
        ]
        runtime_cancels = [c for c in runtime_cancels if c not in body_cancels]
        before_body = [c for c in runtime_cancels if c.seq < body.start_seq]
        if before_body:
            errors.append(f"the body ran although the caller was cancelled before: {before_body}")
        if body_cancels and body.outcome != "cancelled":
            errors.append("a cancellation requested during the body did not reach the body")
    # A cancellation delivered at seq s reaches the caller's task at its next step, which
    # begins by throwing it in; whatever that task starts afterwards is started knowingly.
    suspended_cancels = [c for c in runtime_cancels if c.issuer != "pending at entry"]
    if suspended_cancels:
        first = min(c.seq for c in suspended_cancels)
        for (role, idx), recs in state.attempts.items():
            for rec in recs:
                if role == "node" and rec.in_caller and rec.start_seq > first:
                    errors.append(
                        f"{node_name(idx)} attempt {rec.number} started in the caller's task "
                        "after the caller's cancellation was delivered (SPEC 7.9 step 2)"
                    )
    cancel_landed_forward_possible = any(
        c.seq < min(release_starts.values(), default=10**9) for c in runtime_cancels
    )

    # -------------------------------------------------------------- the primary
    primary: BaseException | None = None
    primary_is_cancel = False
    demoted: BaseException | None = None
    if body is not None and body.outcome == "cancelled":
        primary = body.caught[0] if body.caught else None
        primary_is_cancel = True
    elif runtime_cancels:
        primary_is_cancel = True
        if body is not None and body.outcome == "raise":
            demoted = body.exc
    elif body is not None and body.outcome == "raise":
        primary = body.exc
    if demoted is not None:
        expects.append(Expect("demoted", "body", -1, required=True, obj=demoted))

    outcome = state.outcome
    leaves: Sequence[BaseException] = ()
    if primary_is_cancel:
        if type(outcome) is not asyncio.CancelledError:
            errors.append(f"caller was cancelled: expected CancelledError, got {outcome!r}")
        elif primary is not None and outcome is not primary:
            errors.append("the CancelledError raised is not the one the body raised")
        elif primary is None:
            msgs = {c.msg for c in runtime_cancels}
            if not (outcome.args and outcome.args[0] in msgs) and not (
                not outcome.args and swallowed_caller_cancel
            ):
                errors.append(
                    f"the CancelledError raised {outcome.args} is not the caller's ({msgs})"
                )
        if isinstance(outcome, BaseException):
            leaves = failures(outcome)
            _check_note(outcome, leaves, errors)
    elif primary is not None:
        if outcome is not primary:
            errors.append(f"the body's exception is not re-raised as itself: got {outcome!r}")
        if isinstance(outcome, BaseException):
            leaves = failures(outcome)
            _check_note(outcome, leaves, errors)
    elif outcome is not None:
        if isinstance(outcome, BaseExceptionGroup):
            leaves = outcome.exceptions
            if all(isinstance(leaf, Exception) for leaf in leaves):
                if not isinstance(outcome, ExecutionError):
                    errors.append(f"group of Exceptions is not an ExecutionError: {outcome!r}")
            elif isinstance(outcome, Exception):
                errors.append("a group holding a BaseException must not be an Exception")
        else:
            errors.append(f"unexpected exception {outcome!r} (no primary, SPEC 7.11)")

    # match leaves to expectations
    unexplained: list[BaseException] = []
    for leaf in leaves:
        if not _match(leaf, expects, raised_ids):
            unexplained.append(leaf)
    for leaf in unexplained:
        notes = getattr(leaf, "__notes__", None)
        errors.append(f"unexplained failure {type(leaf).__name__}({leaf}) notes={notes}")
    for expect in expects:
        if expect.required and not expect.matched:
            errors.append(
                f"missing failure: {expect.kind} of {expect.role} {node_name(expect.idx)} "
                f"{expect.obj!r}"
            )
    for leaf in leaves:
        if BAD_VALUE in str(leaf):
            errors.append(f"a failure message shows a graph value: {leaf!r}")

    forward_failed = any(
        e.matched and e.role == "node" and e.kind in ("obj", "timeout", "output", "input")
        for e in expects
    )
    aborted = forward_failed or cancel_landed_forward_possible
    if not aborted:
        if incomplete:
            errors.append(f"run not aborted but nodes did not complete: {incomplete}")
        if any_cancelled_by_runtime:
            errors.append("a node without timeout was cancelled although nothing aborted")
    if body is not None and forward_failed:
        errors.append("the body ran although the forward phase failed")
    if scenario.mode == "open" and body is None and not aborted:
        errors.append("the body never ran although nothing failed or cancelled the forward phase")

    expected_result = None
    if not incomplete:
        expected_result = {
            node_name(o): state.records("node", o)[-1].value for o in scenario.outputs
        }
    if primary is None and not primary_is_cancel and not leaves and outcome is None:
        if state.result != expected_result:
            errors.append(f"result {state.result!r} != expected {expected_result!r}")
    if body is not None and expected_result is not None and state.body_values != expected_result:
        errors.append(f"body values {state.body_values!r} != {expected_result!r}")
    # SPEC 9: logs name nodes, never values (nor exception messages, which may hold them);
    # retries are WARNINGs and failures ERRORs naming the node
    for _level, message in state.log_messages:
        if BAD_VALUE in message or "injected" in message:
            errors.append(f"a log message shows a value or exception message: {message!r}")
    for idx in sorted(active):
        if len(state.records("node", idx)) > 1 and not any(
            level == logging.WARNING and names_node(message, idx)
            for level, message in state.log_messages
        ):
            errors.append(f"no WARNING names {node_name(idx)}, which was retried")
    for expect in expects:
        if expect.matched and expect.kind != "demoted":
            if not any(
                level == logging.ERROR and names_node(message, expect.idx)
                for level, message in state.log_messages
            ):
                errors.append(f"no ERROR names {node_name(expect.idx)}, which failed")
            if expect.attempts is not None and expect.leaf is not None:
                notes = getattr(expect.leaf, "__notes__", None) or []
                if not any(
                    names_node(note, expect.idx)
                    and re.search(rf"\b{expect.attempts} attempt", note)
                    for note in notes
                ):
                    errors.append(
                        f"failure of {expect.role} {node_name(expect.idx)} lacks a note with "
                        f"its attempt count {expect.attempts}: {notes}"
                    )
    return errors


def _check_note(exc: BaseException, attached: Sequence[BaseException], errors: list[str]) -> None:
    notes = getattr(exc, "__notes__", None) or []
    has_note = DIAGNOSTICS_NOTE in notes
    if attached and not has_note:
        errors.append("primary with diagnostics lacks the failures() note")
    if not attached and has_note:
        errors.append("primary without diagnostics carries the failures() note")
    if notes.count(DIAGNOSTICS_NOTE) > 1:
        errors.append("the failures() note was added more than once")


def _names_in_notes(leaf: BaseException, idx: int) -> bool:
    return any(names_node(note, idx) for note in getattr(leaf, "__notes__", None) or [])


def _match(leaf: BaseException, expects: list[Expect], raised_ids: set[int]) -> bool:
    # required expectations first: notes of a node's and of its release's failure both
    # name the node, and a runtime-made TimeoutError is otherwise indistinguishable
    for expect in sorted(expects, key=lambda e: not e.required):
        if expect.matched:
            continue
        if expect.kind in ("obj", "demoted"):
            if leaf is expect.obj:
                expect.matched = True
                expect.leaf = leaf
                if expect.kind == "obj" and not _names_in_notes(leaf, expect.idx):
                    raise Violation(f"failure {leaf!r} lacks a note naming {node_name(expect.idx)}")
                return True
            continue
        if id(leaf) in raised_ids:
            continue
        idx = expect.idx
        if expect.kind == "timeout":
            if type(leaf) is TimeoutError and _names_in_notes(leaf, idx):
                expect.matched = True
                expect.leaf = leaf
                return True
        elif expect.kind == "output":
            if type(leaf) is TypeError and f"Invalid output from {node_name(idx)}" in str(leaf):
                expect.matched = True
                expect.leaf = leaf
                return True
        elif expect.kind == "input":
            if type(leaf) is TypeError and f"Invalid input for {node_name(idx)}." in str(leaf):
                expect.matched = True
                expect.leaf = leaf
                return True
        elif expect.kind == "result":
            if (
                type(leaf) is TypeError
                and "Shutdown must return None" in str(leaf)
                and names_node(str(leaf), idx)
            ):
                expect.matched = True
                expect.leaf = leaf
                return True
    return False


def _owned_dependents(scenario: Scenario, active: frozenset[int]) -> dict[int, set[int]]:
    """owned idx -> owned active nodes that depend on it transitively (through anything)."""
    by_idx = {node.idx: node for node in scenario.nodes}
    consumers: dict[int, list[int]] = {}
    for node in scenario.nodes:
        if node.idx in active:
            for dep in node.deps:
                consumers.setdefault(dep, []).append(node.idx)
    result: dict[int, set[int]] = {}
    for node in scenario.nodes:
        if not node.owned or node.idx not in active:
            continue
        seen: set[int] = set()
        stack = list(consumers.get(node.idx, ()))
        while stack:
            cur = stack.pop()
            if cur in seen:
                continue
            seen.add(cur)
            stack.extend(consumers.get(cur, ()))
        result[node.idx] = {i for i in seen if by_idx[i].owned}
    return result


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


def run_and_check(scenario: Scenario, runs: int = 1, concurrent: int = 1) -> list[RunState]:
    """Compile, run ``runs`` times (one loop), check every run; dispose the module."""
    compiled = compile_scenario(scenario)
    try:
        states = run_scenario(compiled, runs, concurrent)
        for state in states:
            check_run(compiled, state)
        return states
    finally:
        compiled.dispose()
