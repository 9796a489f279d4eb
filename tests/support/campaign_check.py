"""The campaign's checker: one function per rule of docs/contract.md#running, each run
checked against every rule, and the named situations a run reached.

Rules run in the order of :data:`RULES` on one :class:`RunCheck`, which holds the run and
the facts the rules derive for later rules (the failures to expect, when the releases
started, which caller cancellations reached the runtime, the primary exception, the leaves
the caller got). A rule appends ``"[rule_name] message"`` to ``errors``; a rule never raises.

Everything that is legitimately nondeterministic (which of two concurrently failing nodes
failed first, whether a cancellation landed in the forward phase or in cleanup) is derived
from what the harness recorded; everything else is checked.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sdax_hamilton import ExecutionError, RunEvent, RunReport, failures
from support.campaign import (
    BAD_VALUE,
    DIAGNOSTICS_NOTE,
    EARLY_SLACK,
    HOSTILE_KINDS,
    HOSTILE_PLACES,
    LATE_SLACK,
    AttemptRec,
    CancelRec,
    Compiled,
    Named,
    NodeDef,
    PolicyDef,
    RunState,
    Scenario,
    compile_scenario,
    is_retryable,
    names_node,
    node_name,
    resolved_set,
    run_scenario,
)

NEVER = 10**9
"""A sequence number after every event of a run."""


def _bad(value: Any) -> bool:
    """What a ``bad`` step returned: ``BAD_VALUE``, or a ``Named`` (a hostile scenario's)."""
    return type(value) is Named or (type(value) is str and value == BAD_VALUE)


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


@dataclass
class RunCheck:
    """One run under check: the run, the errors found, and facts derived by earlier rules."""

    compiled: Compiled
    state: RunState
    errors: list[str] = field(default_factory=list)
    rule: str = ""
    """The rule running now (prefixes its errors)."""
    # facts (each set by the rule named in its comment)
    expects: list[Expect] = field(default_factory=list)  # forward/release failures, primary
    incomplete: list[str] = field(default_factory=list)  # forward_failures_are_expected
    cancelled_without_timeout: bool = False  # forward_failures_are_expected
    release_starts: dict[int, int] = field(default_factory=dict)  # releases_run_exactly_once
    release_ends: dict[int, int] = field(default_factory=dict)  # releases_run_exactly_once
    runtime_cancels: list[CancelRec] = field(default_factory=list)  # caller_cancellations_land
    body_cancels: list[CancelRec] = field(default_factory=list)  # caller_cancellations_land
    cancel_before_shutdown: bool = False  # caller_cancellations_land
    swallowed_caller_cancel: bool = False  # caller_cancellations_land
    primary: BaseException | None = None  # primary_is_what_the_caller_gets
    primary_is_cancel: bool = False  # primary_is_what_the_caller_gets
    leaves: Sequence[BaseException] = ()  # primary_is_what_the_caller_gets

    @property
    def scenario(self) -> Scenario:
        return self.compiled.scenario

    @property
    def active(self) -> frozenset[int]:
        return self.compiled.active

    @property
    def nodes(self) -> list[NodeDef]:
        return sorted(self.scenario.nodes, key=lambda node: node.idx)

    def fail(self, message: str) -> None:
        self.errors.append(f"[{self.rule}] {message}")

    def forward_failed(self) -> bool:
        return any(
            e.matched and e.role == "node" and e.kind in ("obj", "timeout", "output", "input")
            for e in self.expects
        )


# ------------------------------------------------------------------------------------------
# Rules of every attempt
# ------------------------------------------------------------------------------------------


def attempts_end_drained_and_cancelled_once(run: RunCheck) -> None:
    """Every attempt (node or release) ends, and before the run returns to its caller
    (docs/contract.md#shutdown-phase, #execute); a cancelled attempt is awaited until it
    finishes, never closed or abandoned (#timeouts); the run cancels an attempt at most
    once, further caller cancellations are absorbed (#open-algorithm step 2); a timeout
    fires (#timeouts); no call receives an input of the wrong type (#forward-phase)."""
    state = run.state
    for (role, idx), recs in state.attempts.items():
        for rec in recs:
            what = f"{role} {node_name(idx)} attempt {rec.number}"
            if rec.cancels_seen > 1:
                run.fail(f"{what} was cancelled {rec.cancels_seen} times")
            if rec.end_seq is None:
                run.fail(f"{what} never ended")
            elif state.outcome_seq is not None and rec.end_seq > state.outcome_seq:
                run.fail(f"{what} ended after the run returned to its caller")
            if rec.outcome == "closed":
                run.fail(f"{what} was closed/abandoned mid-flight (not drained)")
            if rec.outcome == "overran":
                run.fail(f"{role} {node_name(idx)} overran: its timeout never fired")
            if rec.outcome == "bad_input":
                run.fail(f"{node_name(idx)} started with an input that is not an int")


def harness_saw_no_problem(run: RunCheck) -> None:
    """What the harness noticed while the run went on: a release given something other
    than an ``Acquisition`` (docs/contract.md#acquisition), tasks left pending, loop
    exception-handler calls and Runtime/Resource warnings (#open-algorithm: nothing is left
    behind)."""
    for problem in run.state.problems:
        run.fail(problem)


# ------------------------------------------------------------------------------------------
# Forward phase
# ------------------------------------------------------------------------------------------


def only_selected_nodes_run(run: RunCheck) -> None:
    """Nothing outside the selection ever runs (docs/contract.md#plan-properties)."""
    for node in run.nodes:
        if node.idx not in run.active and run.state.records("node", node.idx):
            run.fail(f"{node.name} is not selected but ran")


def nodes_start_after_their_inputs(run: RunCheck) -> None:
    """A node starts only once each input has produced its value, and receives exactly
    those values and the run's inputs (docs/contract.md#forward-phase)."""
    state = run.state
    for node in run.nodes:
        if node.idx not in run.active:
            continue
        for rec in state.records("node", node.idx):
            for dep in node.deps:
                dep_recs = [r for r in state.records("node", dep) if r.returned]
                if not dep_recs:
                    run.fail(f"{node.name} started before its dependency {node_name(dep)}")
                    continue
                dep_rec = dep_recs[-1]
                if dep_rec.end_seq is not None and dep_rec.end_seq > rec.start_seq:
                    run.fail(f"{node.name} #{rec.number} started before {node_name(dep)} returned")
                if rec.kwargs.get(node_name(dep)) != dep_rec.value:
                    run.fail(f"{node.name} got the wrong value for {node_name(dep)}")
            if node.uses_input and rec.kwargs.get("x") != run.scenario.input_value:
                run.fail(f"{node.name} got the wrong value for input x")


def _retry_rules(run: RunCheck, what: str, recs: list[AttemptRec], policy: PolicyDef) -> None:
    """The retry loop's rules for the attempts of one node or one release."""
    retryable = resolved_set(policy.retryable)
    if len(recs) > 1 + policy.retries:
        run.fail(f"{what}: {len(recs)} attempts > 1 + retries ({policy.retries})")
    for k in range(1, len(recs)):
        prev, cur = recs[k - 1], recs[k]
        if prev.end_seq is None or prev.end_seq > cur.start_seq:
            run.fail(f"{what}: attempt {k} overlapped attempt {k - 1}")
            continue
        if prev.outcome in ("ok", "swallowed", "retval"):
            run.fail(f"{what}: attempt {k} after a success")
            continue
        retried_for_cause = (
            prev.outcome == "raise" and prev.exc is not None and is_retryable(prev.exc, retryable)
        ) or (
            prev.outcome == "cancelled"
            and policy.timeout is not None
            and is_retryable(TimeoutError(), retryable)
        )
        if not retried_for_cause:
            run.fail(f"{what}: attempt {k} after a nonretryable {prev.outcome} {prev.exc!r}")
        low, high = policy.delay_bounds(k - 1)
        assert prev.end_t is not None
        waited = cur.start_t - prev.end_t
        if waited < low - EARLY_SLACK or waited > high + LATE_SLACK:
            run.fail(
                f"{what}: waited {waited:.5f}s before retry {k - 1}, outside "
                f"[{low:.5f}, {high:.5f}]"
            )


def node_retries_follow_the_policy(run: RunCheck) -> None:
    """At most ``1 + retries`` attempts, one after the other, each retry after a failure
    the retryable set retries (a timeout counts as ``TimeoutError``), none after a success,
    waiting within the jitter bounds ``[0.5, 1] x initial_delay x backoff_factor**k``
    (docs/contract.md#retry-loop, #timeouts)."""
    for node in run.nodes:
        if node.idx in run.active:
            recs = run.state.records("node", node.idx)
            _retry_rules(run, node.name, recs, node.policy)


def attempts_stop_at_their_timeout(run: RunCheck) -> None:
    """A timed-out attempt is cancelled when its time is up and ends once it has drained
    (docs/contract.md#timeouts); sync calls cannot be interrupted and are exempt."""
    for node in run.nodes:
        if node.idx not in run.active or node.policy.timeout is None or node.style == "sync":
            continue
        for rec in run.state.records("node", node.idx):
            if rec.outcome in ("cancelled", "swallowed") and rec.end_t is not None:
                limit = node.policy.timeout + node.step(rec.number).drain + LATE_SLACK
                if rec.end_t - rec.start_t > limit:
                    run.fail(f"{node.name} #{rec.number} ran past its timeout")


def forward_failures_are_expected(run: RunCheck) -> None:
    """Derives, from each node's last attempt, the failure the caller must (or, when the
    run was already aborting, may) receive: a final or nonretryable exception, a
    self-cancellation, a timeout with no retry left, an output or input of the wrong type
    (docs/contract.md#forward-phase, #retry-loop, #outcomes); and which nodes did not
    complete, for the liveness rule."""
    state = run.state
    for node in run.nodes:
        idx = node.idx
        if idx not in run.active:
            continue
        retryable = resolved_set(node.policy.retryable)
        recs = state.records("node", idx)
        if not recs:
            # never started: legitimate only when the run aborted (checked by the liveness
            # rule), or when its input check failed (check_outputs=False, a bad value)
            dep_values = [[r for r in state.records("node", d) if r.returned] for d in node.deps]
            if all(dep_values) and any(_bad(v[-1].value) for v in dep_values):
                if not run.scenario.check_outputs:
                    run.expects.append(Expect("input", "node", idx, required=False))
            run.incomplete.append(node.name)
            continue
        last = recs[-1]
        final = last.number == node.policy.retries
        attempts = len(recs)
        if last.outcome == "raise":
            assert last.exc is not None
            # a retryable failure while the run aborted may be kept as a drain diagnostic
            required = final or not is_retryable(last.exc, retryable)
            run.expects.append(Expect("obj", "node", idx, required, last.exc, attempts=attempts))
            run.incomplete.append(node.name)
        elif last.outcome == "selfcancel":
            run.expects.append(Expect("obj", "node", idx, True, last.exc, attempts=attempts))
            run.incomplete.append(node.name)
        elif last.outcome == "cancelled":
            if node.policy.timeout is not None and (
                final or not is_retryable(TimeoutError(), retryable)
            ):
                run.expects.append(Expect("timeout", "node", idx, False, attempts=attempts))
            if node.policy.timeout is None:
                run.cancelled_without_timeout = True
            run.incomplete.append(node.name)
        elif last.outcome in ("ok", "swallowed"):
            if run.scenario.check_outputs and _bad(last.value):
                # optional: a value returned while the run was already aborting is drained
                # (the liveness rule still demands it when nothing else failed)
                run.expects.append(Expect("output", "node", idx, False, attempts=attempts))
                run.incomplete.append(node.name)
        else:
            run.incomplete.append(node.name)


# ------------------------------------------------------------------------------------------
# Shutdown phase
# ------------------------------------------------------------------------------------------


def releases_run_exactly_once_after_the_forward_phase(run: RunCheck) -> None:
    """A release runs exactly once for each owned node whose first attempt started, never
    for one that did not start, only after the forward phase has drained and (``open()``)
    after the body has exited (docs/contract.md#shutdown-phase, #open-algorithm)."""
    state = run.state
    forward_end = max(
        (
            rec.end_seq
            for (role, _idx), recs in state.attempts.items()
            if role == "node"
            for rec in recs
            if rec.end_seq is not None
        ),
        default=-1,
    )
    for node in run.nodes:
        if not node.owned:
            continue
        recs = state.records("release", node.idx)
        owed = node.idx in run.active and bool(state.records("node", node.idx))
        if not owed:
            if recs:
                run.fail(f"release of {node.name} ran but its node never started")
            continue
        if not recs:
            run.fail(f"release of {node.name} never ran")
            continue
        run.release_starts[node.idx] = recs[0].start_seq
        run.release_ends[node.idx] = max(r.end_seq or NEVER for r in recs)
        if recs[0].start_seq < forward_end:
            run.fail(f"release of {node.name} started before the forward phase drained")
        body = state.body
        if body is not None and body.end_seq is not None and recs[0].start_seq < body.end_seq:
            run.fail(f"release of {node.name} started before the body exited")


def releases_receive_the_acquisition_record(run: RunCheck) -> None:
    """The release gets the outcome of the acquisition call: empty when it never returned,
    else the returned object, valid only when its annotation accepts it
    (docs/contract.md#acquisition)."""
    for idx in run.release_starts:
        name = node_name(idx)
        owner = run.state.records("node", idx)[0]
        for rec in run.state.records("release", idx):
            if rec.acq is None:
                continue
            has_value, valid, raw, accessible = rec.acq
            if has_value != owner.returned:
                returned = "returned" if owner.returned else "never returned"
                run.fail(f"release of {name}: has_value={has_value} but the node {returned}")
            elif has_value:
                if raw != owner.value:
                    run.fail(f"release of {name}: raw_value is not what it returned")
                want_valid = type(owner.value) is int
                if valid != want_valid or accessible != want_valid:
                    run.fail(f"release of {name}: is_valid={valid}, want {want_valid}")
            elif valid or accessible:
                run.fail(f"release of {name}: empty record reported valid")


def release_retries_follow_their_own_policy(run: RunCheck) -> None:
    """A release is attempted under its own shutdown policy: the retry loop's rules apply
    with the release's budget, set and waits (docs/contract.md#shutdown-phase, #retry-loop);
    a release that overruns its timeout is cancelled and drained (#timeouts)."""
    for node in run.nodes:
        if node.idx not in run.release_starts:
            continue
        recs = run.state.records("release", node.idx)
        policy = node.release_policy
        _retry_rules(run, f"release of {node.name}", recs, policy)
        if policy.timeout is not None and node.release_style == "async":
            for rec in recs:
                if rec.outcome in ("cancelled", "swallowed") and rec.end_t is not None:
                    limit = policy.timeout + node.release_step(rec.number).drain + LATE_SLACK
                    if rec.end_t - rec.start_t > limit:
                        run.fail(f"release of {node.name} #{rec.number} ran past timeout")


def release_failures_are_expected(run: RunCheck) -> None:
    """A release's final failure, its timeout with no retry left and a non-``None`` result
    are failures the caller receives; a retryable failure is retried; releases are never
    cancelled by the run (docs/contract.md#shutdown-phase, #outcomes)."""
    for node in run.nodes:
        idx = node.idx
        if idx not in run.release_starts:
            continue
        recs = run.state.records("release", idx)
        policy = node.release_policy
        retryable = resolved_set(policy.retryable)
        last = recs[-1]
        final = last.number == policy.retries
        attempts = len(recs)
        if last.outcome == "raise":
            assert last.exc is not None
            if final or not is_retryable(last.exc, retryable):
                run.expects.append(Expect("obj", "release", idx, True, last.exc, attempts=attempts))
            else:
                run.fail(f"release of {node.name}: retryable failure was not retried")
        elif last.outcome == "selfcancel":
            run.expects.append(Expect("obj", "release", idx, True, last.exc, attempts=attempts))
        elif last.outcome == "cancelled":
            if policy.timeout is None:
                run.fail(f"release of {node.name} was cancelled (releases are shielded)")
            elif final or not is_retryable(TimeoutError(), retryable):
                run.expects.append(Expect("timeout", "release", idx, True, attempts=attempts))
            else:
                run.fail(f"release of {node.name}: timeout was not retried")
        elif last.outcome == "retval":
            run.expects.append(Expect("result", "release", idx, True, attempts=attempts))


def releases_follow_dependency_order(run: RunCheck) -> None:
    """A resource's release starts only after every release of a resource that depends on
    it has completed (docs/contract.md#shutdown-phase)."""
    dependents = _owned_dependents(run.scenario, run.active)
    for idx, start in run.release_starts.items():
        for dependent in dependents.get(idx, ()):
            end = run.release_ends.get(dependent)
            if end is not None and end > start:
                run.fail(
                    f"release of {node_name(idx)} started before the release of its "
                    f"dependent {node_name(dependent)} completed"
                )


# ------------------------------------------------------------------------------------------
# Caller cancellation and what the caller receives
# ------------------------------------------------------------------------------------------


def caller_cancellations_land_where_sent(run: RunCheck) -> None:
    """A caller cancellation delivered while the run is in progress reaches the runtime
    (never a later await of the caller), one during the body reaches the body, the body
    never runs after one, and nothing starts in the caller's own task after it
    (docs/contract.md#open-algorithm steps 2, 4, 6). Derives which cancellations reached
    the runtime and whether one arrived before the shutdown phase."""
    state = run.state
    body = state.body
    caller_msgs = {cancel.msg for cancel in state.cancels}
    for recs in state.attempts.values():
        for rec in recs:
            if rec.outcome == "swallowed" and any(
                caught.args and caught.args[0] in caller_msgs for caught in rec.caught
            ):
                run.swallowed_caller_cancel = True
    outcome_seq = state.outcome_seq if state.outcome_seq is not None else NEVER
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
        run.fail(f"late cancellations {late} vs caught after the run {state.late}")
    runtime_cancels = [c for c in delivered if c.seq < outcome_seq and c not in pending_late]
    if body is not None:
        body_end = body.end_seq if body.end_seq is not None else NEVER
        run.body_cancels = [
            c
            for c in runtime_cancels
            if body.start_seq < c.seq < body_end
            # pending at entry and the forward phase never suspended: it lands in the body
            or (c.issuer == "pending at entry" and body.outcome == "cancelled")
        ]
        runtime_cancels = [c for c in runtime_cancels if c not in run.body_cancels]
        before_body = [c for c in runtime_cancels if c.seq < body.start_seq]
        if before_body:
            run.fail(f"the body ran although the caller was cancelled before: {before_body}")
        if run.body_cancels and body.outcome != "cancelled":
            run.fail("a cancellation requested during the body did not reach the body")
    run.runtime_cancels = runtime_cancels
    # A cancellation delivered at seq s reaches the caller's task at its next step, which
    # begins by throwing it in; whatever that task starts afterwards is started knowingly.
    suspended = [c for c in runtime_cancels if c.issuer != "pending at entry"]
    if suspended:
        first = min(c.seq for c in suspended)
        for (role, idx), recs in state.attempts.items():
            for rec in recs:
                if role == "node" and rec.in_caller and rec.start_seq > first:
                    run.fail(
                        f"{node_name(idx)} attempt {rec.number} started in the caller's task "
                        "after the caller's cancellation was delivered"
                    )
    first_release = min(run.release_starts.values(), default=NEVER)
    run.cancel_before_shutdown = any(c.seq < first_release for c in runtime_cancels)


def primary_is_what_the_caller_gets(run: RunCheck) -> None:
    """The caller receives the primary exception itself: the caller's cancellation (the
    same object), else the body's exception (the same object, demoted to a diagnostic by a
    cancellation during cleanup); with diagnostics attached and the ``failures()`` note only
    when there are any. Without a primary: an ``ExecutionError`` of the failures, or a
    ``BaseExceptionGroup`` when a leaf is a ``BaseException``
    (docs/contract.md#open-algorithm steps 5-8, #diagnostics, #outcomes)."""
    state = run.state
    body = state.body
    demoted: BaseException | None = None
    primary: BaseException | None = None
    primary_is_cancel = False
    if body is not None and body.outcome == "cancelled":
        primary = body.caught[0] if body.caught else None
        primary_is_cancel = True
    elif run.runtime_cancels:
        primary_is_cancel = True
        if body is not None and body.outcome == "raise":
            demoted = body.exc
    elif body is not None and body.outcome == "raise":
        primary = body.exc
    if demoted is not None:
        run.expects.append(Expect("demoted", "body", -1, required=True, obj=demoted))
    run.primary, run.primary_is_cancel = primary, primary_is_cancel

    outcome = state.outcome
    if primary_is_cancel:
        if type(outcome) is not asyncio.CancelledError:
            run.fail(f"caller was cancelled: expected CancelledError, got {outcome!r}")
        elif primary is not None and outcome is not primary:
            run.fail("the CancelledError raised is not the one the body raised")
        elif primary is None:
            msgs = {c.msg for c in run.runtime_cancels}
            if not (outcome.args and outcome.args[0] in msgs) and not (
                not outcome.args and run.swallowed_caller_cancel
            ):
                run.fail(f"the CancelledError raised {outcome.args} is not the caller's ({msgs})")
        if isinstance(outcome, BaseException):
            run.leaves = failures(outcome)
            _check_note(run, outcome, run.leaves)
    elif primary is not None:
        if outcome is not primary:
            run.fail(f"the body's exception is not re-raised as itself: got {outcome!r}")
        if isinstance(outcome, BaseException):
            run.leaves = failures(outcome)
            _check_note(run, outcome, run.leaves)
    elif outcome is not None:
        if isinstance(outcome, BaseExceptionGroup):
            run.leaves = outcome.exceptions
            if all(isinstance(leaf, Exception) for leaf in run.leaves):
                if not isinstance(outcome, ExecutionError):
                    run.fail(f"group of Exceptions is not an ExecutionError: {outcome!r}")
            elif isinstance(outcome, Exception):
                run.fail("a group holding a BaseException must not be an Exception")
        else:
            run.fail(f"unexpected exception {outcome!r} with no primary")


def every_failure_is_explained_and_raised(run: RunCheck) -> None:
    """The failures the caller receives are exactly the expected ones: each expected
    failure is there (the original object, noted with its node), nothing else is, and no
    message shows a value of the graph (docs/contract.md#outcomes, #diagnostics,
    #logging)."""
    raised_ids = {id(exc) for exc in run.state.raised}
    for leaf in run.leaves:
        if not _match(run, leaf, raised_ids):
            notes = getattr(leaf, "__notes__", None)
            run.fail(f"unexplained failure {type(leaf).__name__}({leaf}) notes={notes}")
    for expect in run.expects:
        if expect.required and not expect.matched:
            run.fail(
                f"missing failure: {expect.kind} of {expect.role} {node_name(expect.idx)} "
                f"{expect.obj!r}"
            )
    for leaf in run.leaves:
        if BAD_VALUE in str(leaf):
            run.fail(f"a failure message shows a graph value: {leaf!r}")


def unaborted_runs_complete(run: RunCheck) -> None:
    """Unless a node failed or the caller cancelled before the shutdown phase, every
    active node completes and none is cancelled; the body runs exactly when the forward
    phase succeeded (docs/contract.md#forward-phase, #open-algorithm step 4)."""
    forward_failed = run.forward_failed()
    aborted = forward_failed or run.cancel_before_shutdown
    if not aborted:
        if run.incomplete:
            run.fail(f"run not aborted but nodes did not complete: {run.incomplete}")
        if run.cancelled_without_timeout:
            run.fail("a node without timeout was cancelled although nothing aborted")
    body = run.state.body
    if body is not None and forward_failed:
        run.fail("the body ran although the forward phase failed")
    if run.scenario.mode == "open" and body is None and not aborted:
        run.fail("the body never ran although nothing failed or cancelled the forward phase")


def results_are_the_outputs(run: RunCheck) -> None:
    """A successful ``execute()`` returns, and the ``open()`` body receives, each output's
    value in ``outputs`` order (docs/contract.md#execute, #open-algorithm step 4)."""
    state = run.state
    expected = None
    if not run.incomplete:
        expected = {node_name(o): state.records("node", o)[-1].value for o in run.scenario.outputs}
    if run.primary is None and not run.primary_is_cancel and not run.leaves:
        if state.outcome is None and state.result != expected:
            run.fail(f"result {state.result!r} != expected {expected!r}")
    if state.body is not None and expected is not None and state.body_values != expected:
        run.fail(f"body values {state.body_values!r} != {expected!r}")


def logs_name_nodes_never_values(run: RunCheck) -> None:
    """Log records name nodes, never values nor exception messages (which may hold them);
    a retried node is named by a WARNING, a failed one by an ERROR
    (docs/contract.md#logging)."""
    state = run.state
    for _level, message in state.log_messages:
        if BAD_VALUE in message or "injected" in message:
            run.fail(f"a log message shows a value or exception message: {message!r}")
    for idx in sorted(run.active):
        if len(state.records("node", idx)) > 1 and not any(
            level == logging.WARNING and names_node(message, idx)
            for level, message in state.log_messages
        ):
            run.fail(f"no WARNING names {node_name(idx)}, which was retried")
    for expect in run.expects:
        if expect.matched and expect.kind != "demoted":
            if not any(
                level == logging.ERROR and names_node(message, expect.idx)
                for level, message in state.log_messages
            ):
                run.fail(f"no ERROR names {node_name(expect.idx)}, which failed")


def failures_note_their_attempt_count(run: RunCheck) -> None:
    """Every node or release failure carries a note naming the node and the number of
    attempts made (docs/contract.md#diagnostics, #open-algorithm step 7)."""
    for expect in run.expects:
        if not expect.matched or expect.kind == "demoted" or expect.attempts is None:
            continue
        if expect.leaf is None:
            continue
        notes = getattr(expect.leaf, "__notes__", None) or []
        if not any(
            names_node(note, expect.idx) and re.search(rf"\b{expect.attempts} attempt", note)
            for note in notes
        ):
            run.fail(
                f"failure of {expect.role} {node_name(expect.idx)} lacks a note with its "
                f"attempt count {expect.attempts}: {notes}"
            )


# ------------------------------------------------------------------------------------------
# The observer's view of the run
# ------------------------------------------------------------------------------------------

_TERMINAL = {"attempt_succeeded", "attempt_failed", "attempt_cancelled"}
_FAILED = {"attempt_failed", "attempt_cancelled"}
"""The outcomes that carry what an attempt raised (a cancelled one: besides the
cancellation)."""


def observer_events_match_the_run(run: RunCheck) -> None:
    """The events an observer received tell the story the caller and the functions saw:
    ``run_started`` first and ``run_finished`` last, once each, ``run_finished.error``
    being the very exception the caller got; per node, as many ``attempt_started`` as
    calls made (plus attempts cancelled before their first step), each with exactly one
    outcome; one ``retry_scheduled`` per retry made or dropped, its ``delay`` within the
    policy's bounds; a failure event carrying the original exception object the caller
    finds among the failures; the releases after ``shutdown_started``, one
    ``release_started`` per release call; and a ``RunReport`` fed the same events reports
    the caller's outcome, the calls and the releases (docs/contract.md#run-events,
    #run-report, #retry-loop, #outcomes)."""
    events = run.state.events
    if events is None:
        return
    kinds = [e.kind for e in events]
    if not events or kinds[0] != "run_started" or kinds.count("run_started") != 1:
        run.fail(f"the events do not open with one run_started: {kinds[:3]}")
        return
    if kinds[-1] != "run_finished" or kinds.count("run_finished") != 1:
        run.fail(f"the events do not close with one run_finished: {kinds[-3:]}")
        return
    finished = events[-1]
    if finished.error is not run.state.outcome:
        run.fail(f"run_finished.error {finished.error!r} is not what the caller got")
    active = {node_name(idx) for idx in run.active}
    if set(events[0].nodes) != active:
        run.fail(f"run_started names {sorted(events[0].nodes)}, the active nodes are {active}")
    _check_report(run, events)
    if len({e.run for e in events}) != 1:
        run.fail("the events of one run carry different run ids")
    times = [e.time for e in events]
    if times != sorted(times):
        run.fail("event times go backwards")
    shutdown_at = kinds.index("shutdown_started") if "shutdown_started" in kinds else None
    raised = {id(leaf) for leaf in run.leaves}
    by_node: dict[str, list[RunEvent]] = {}
    for position, event in enumerate(events):
        if event.kind.startswith("release"):
            if shutdown_at is None or position < shutdown_at:
                run.fail(f"{event.kind} of {event.node} before shutdown_started")
        if event.node:
            by_node.setdefault(event.node, []).append(event)
    for node in run.nodes:
        node_events = [e for e in by_node.get(node.name, []) if not e.kind.startswith("release")]
        _check_node_events(run, node, node_events, raised)
        release_events = [e for e in by_node.get(node.name, []) if e.kind.startswith("release")]
        started = sum(e.kind == "release_started" for e in release_events)
        calls = len(run.state.records("release", node.idx))
        if started != calls:
            run.fail(f"{started} release_started events for {calls} release calls of {node.name}")
        for event in release_events:
            if event.kind == "release_failed" and event.error is not None:
                if id(event.error) not in raised and event.error in run.state.raised:
                    retried = any(
                        e.kind == "release_retry_scheduled" and e.attempt == event.attempt
                        for e in release_events
                    )
                    if not retried:
                        run.fail(
                            f"release_failed of {node.name} carries {event.error!r}, "
                            "which the caller did not get"
                        )


def _check_report(run: RunCheck, events: list[RunEvent]) -> None:
    """A ``RunReport`` fed the events tells the caller's outcome and the calls made
    (docs/contract.md#run-report)."""
    report = RunReport()
    for event in events:
        report(event)
    outcome = run.state.outcome
    expected = (
        "succeeded"
        if outcome is None
        else "cancelled"
        if isinstance(outcome, asyncio.CancelledError)
        else "failed"
    )
    if report.outcome != expected:
        run.fail(f"the run report says {report.outcome}, the caller got {outcome!r}")
    for node in run.nodes:
        if node.idx not in run.active:
            continue
        calls = len(run.state.records("node", node.idx))
        reported = report.nodes[node.name].attempts
        if reported < calls:
            run.fail(f"the run report counts {reported} attempts of {node.name}, {calls} calls")
    released = {
        node_name(idx) for (role, idx), recs in run.state.attempts.items() if role == "release"
    }
    if set(report.releases) != released:
        run.fail(f"the run report's releases {sorted(report.releases)} != {sorted(released)}")


def _check_node_events(
    run: RunCheck, node: NodeDef, events: list[RunEvent], raised: set[int]
) -> None:
    recs = run.state.records("node", node.idx)
    started = [e.attempt for e in events if e.kind == "attempt_started"]
    if started != list(range(1, len(started) + 1)):
        run.fail(f"{node.name}: attempt_started numbers {started}")
        return
    outcomes: dict[int, list[str]] = {}
    for e in events:
        if e.kind in _TERMINAL:
            outcomes.setdefault(e.attempt, []).append(e.kind)
    for attempt in started:
        if len(outcomes.get(attempt, [])) != 1:
            run.fail(f"{node.name}: attempt {attempt} has outcomes {outcomes.get(attempt)}")
    # attempts the harness never saw were cancelled before their first step
    for attempt in started[len(recs) :]:
        if outcomes.get(attempt) != ["attempt_cancelled"]:
            run.fail(f"{node.name}: attempt {attempt} was never called but {outcomes.get(attempt)}")
    if len(started) < len(recs):
        run.fail(f"{node.name}: {len(started)} attempt_started for {len(recs)} calls")
    scheduled = [e for e in events if e.kind == "retry_scheduled"]
    dropped = sum(e.kind == "retry_cancelled" for e in events)
    if len(scheduled) != max(0, len(started) - 1) + dropped:
        run.fail(
            f"{node.name}: {len(scheduled)} retry_scheduled for {len(started)} attempts and "
            f"{dropped} dropped waits"
        )
    for e in scheduled:
        low, high = node.policy.delay_bounds(e.attempt - 1)
        if e.delay is None or not (low - EARLY_SLACK <= e.delay <= high + EARLY_SLACK):
            run.fail(f"{node.name}: retry delay {e.delay} outside [{low}, {high}]")
    # failures reported are the objects the attempts raised; the final one is what the
    # caller got
    for e in events:
        if e.kind == "attempt_failed" and e.error is not None and 0 < e.attempt <= len(recs):
            rec = recs[e.attempt - 1]
            if rec.outcome in ("raise", "selfcancel") and e.error is not rec.exc:
                run.fail(
                    f"{node.name}: attempt_failed {e.attempt} carries {e.error!r}, "
                    f"the attempt raised {rec.exc!r}"
                )
    for expect in run.expects:
        if expect.role == "node" and expect.idx == node.idx and expect.matched:
            if expect.kind == "input":
                if not any(e.kind == "input_rejected" for e in events):
                    run.fail(f"{node.name}: input rejected without an input_rejected event")
            elif expect.kind == "timeout":
                # a node's and its release's TimeoutErrors are told apart only by notes
                if not any(
                    e.kind == "attempt_failed"
                    and type(e.error) is TimeoutError
                    and id(e.error) in raised
                    for e in events
                ):
                    run.fail(f"{node.name}: no attempt_failed event carries its TimeoutError")
            elif not any(e.kind in _FAILED and e.error is expect.leaf for e in events):
                run.fail(f"{node.name}: no attempt_failed/cancelled event carries the failure")


# ------------------------------------------------------------------------------------------
# The checker
# ------------------------------------------------------------------------------------------

RULES: tuple[Callable[[RunCheck], None], ...] = (
    harness_saw_no_problem,
    attempts_end_drained_and_cancelled_once,
    only_selected_nodes_run,
    nodes_start_after_their_inputs,
    node_retries_follow_the_policy,
    attempts_stop_at_their_timeout,
    forward_failures_are_expected,
    releases_run_exactly_once_after_the_forward_phase,
    releases_receive_the_acquisition_record,
    release_retries_follow_their_own_policy,
    release_failures_are_expected,
    releases_follow_dependency_order,
    caller_cancellations_land_where_sent,
    primary_is_what_the_caller_gets,
    every_failure_is_explained_and_raised,
    unaborted_runs_complete,
    results_are_the_outputs,
    logs_name_nodes_never_values,
    failures_note_their_attempt_count,
    observer_events_match_the_run,
)
"""Every rule, in the order their derived facts need."""


# ------------------------------------------------------------------------------------------
# Hostile faults (docs/contract.md#hostile-run)
# ------------------------------------------------------------------------------------------

_TERMINATION = (KeyboardInterrupt, SystemExit)
SALVAGED = "could not go on"
"""Part of the note of a run whose own bookkeeping failed (``RunContext._salvage``)."""


def releases_are_carried_out_exactly_once(run: RunCheck) -> None:
    """Every acquisition is released exactly once whatever is raised, from where: each
    release owed ran (``releases_run_exactly_once_after_the_forward_phase``), never again
    once an attempt of it completed, and no more often than its policy allows
    (docs/contract.md#hostile-run, #shutdown-phase)."""
    for node in run.nodes:
        if not node.owned or node.idx not in run.release_starts:
            continue
        recs = run.state.records("release", node.idx)
        if len(recs) > 1 + node.release_policy.retries:
            run.fail(f"release of {node.name} ran {len(recs)} times")
        if any(rec.outcome in ("ok", "swallowed") for rec in recs[:-1]):
            run.fail(f"release of {node.name} ran again after it completed")


def hostile_faults_stop_the_run_or_fail_it(run: RunCheck) -> None:
    """A ``KeyboardInterrupt``/``SystemExit`` out of user code the driver calls (a check,
    a note, a retryable class, an observer) is what the caller gets, the same object;
    another exception from there never escapes the run as is once a node ran; either is
    handled where it was raised, never by giving the run up (docs/contract.md#hostile-run)."""
    state = run.state
    hostile = state.hostile_raised
    assert hostile is not None
    outcome = state.outcome
    if isinstance(hostile, _TERMINATION):
        if outcome is not hostile:
            run.fail(f"the run raised {outcome!r}, not the {hostile!r} raised in it")
    elif outcome is hostile:
        ran = [rec for recs in state.attempts.values() for rec in recs]
        if ran:
            run.fail(f"{hostile!r} escaped the run as is after {len(ran)} attempts ran")
    if outcome is not None:
        items: list[BaseException] = [outcome, *failures(outcome)]
        if isinstance(outcome, BaseExceptionGroup):
            items.extend(outcome.exceptions)
        for item in items:
            if any(SALVAGED in note for note in getattr(item, "__notes__", []) or []):
                run.fail(f"the run was given up and salvaged: {item!r}")


HOSTILE_RULES: tuple[Callable[[RunCheck], None], ...] = (
    harness_saw_no_problem,
    attempts_end_drained_and_cancelled_once,
    only_selected_nodes_run,
    nodes_start_after_their_inputs,
    releases_run_exactly_once_after_the_forward_phase,
    releases_receive_the_acquisition_record,
    releases_are_carried_out_exactly_once,
    releases_follow_dependency_order,
    hostile_faults_stop_the_run_or_fail_it,
)
"""The rules of a run whose hostile fault fired: what it must keep whatever was raised
(every other rule of :data:`RULES` describes runs whose failures come from nodes and
releases, and applies to a hostile scenario's runs whose fault did not fire)."""


def check(compiled: Compiled, state: RunState) -> RunCheck:
    """Run every rule over one run; the result holds the errors and the derived facts."""
    run = RunCheck(compiled, state)
    for rule in RULES if state.hostile_raised is None else HOSTILE_RULES:
        run.rule = rule.__name__
        rule(run)
    return run


def check_run(compiled: Compiled, state: RunState) -> RunCheck:
    """Raise :class:`Violation` naming every rule of docs/contract.md the run broke."""
    run = check(compiled, state)
    if run.errors:
        raise Violation(
            "campaign run violated docs/contract.md:\n- "
            + "\n- ".join(run.errors)
            + "\n\nscenario:\n"
            + compiled.scenario.describe()
            + "\n\nlog:\n"
            + format_log(state)
        )
    return run


def format_log(state: RunState) -> str:
    events: list[tuple[int, str]] = []
    for (role, idx), recs in state.attempts.items():
        for rec in recs:
            events.append((rec.start_seq, f"start {role} {node_name(idx)} #{rec.number}"))
            events.append(
                (
                    rec.end_seq if rec.end_seq is not None else NEVER,
                    f"end   {role} {node_name(idx)} #{rec.number} {rec.outcome} "
                    f"{rec.exc!r} cancels_seen={rec.cancels_seen} "
                    f"dt={(rec.end_t or 0) - rec.start_t:.4f}",
                )
            )
    for cancel in state.cancels:
        events.append((cancel.seq, f"cancel {cancel.msg} by {cancel.issuer} -> {cancel.delivered}"))
    if state.body is not None:
        events.append((state.body.start_seq, "body start"))
        events.append((state.body.end_seq or NEVER, f"body end {state.body.outcome}"))
    if state.outcome_seq is not None:
        outcome = state.outcome
        events.append((state.outcome_seq, f"outcome {outcome!r} result={state.result!r}"))
    events.sort()
    lines = [f"{seq:5d} {text}" for seq, text in events]
    if state.events is not None:
        lines.append("observer events:")
        lines += [
            f"  {e.kind} {e.node or '-'} {e.attempt} delay={e.delay} error={e.error!r}"
            for e in state.events
        ]
    return "\n".join(lines)


def _check_note(run: RunCheck, exc: BaseException, attached: Sequence[BaseException]) -> None:
    notes = getattr(exc, "__notes__", None) or []
    has_note = DIAGNOSTICS_NOTE in notes
    if attached and not has_note:
        run.fail("primary with diagnostics lacks the failures() note")
    if not attached and has_note:
        run.fail("primary without diagnostics carries the failures() note")
    if notes.count(DIAGNOSTICS_NOTE) > 1:
        run.fail("the failures() note was added more than once")


def _names_in_notes(leaf: BaseException, idx: int) -> bool:
    return any(names_node(note, idx) for note in getattr(leaf, "__notes__", None) or [])


def _notes_count(leaf: BaseException, attempts: int) -> bool:
    notes = getattr(leaf, "__notes__", None) or []
    return any(re.search(rf"\b{attempts} attempt", note) for note in notes)


def _match(run: RunCheck, leaf: BaseException, raised_ids: set[int]) -> bool:
    # required expectations first: notes of a node's and of its release's failure both
    # name the node, and a runtime-made TimeoutError is otherwise indistinguishable
    for expect in sorted(run.expects, key=lambda e: not e.required):
        if expect.matched:
            continue
        if expect.kind in ("obj", "demoted"):
            if leaf is expect.obj:
                expect.matched = True
                expect.leaf = leaf
                if expect.kind == "obj" and not _names_in_notes(leaf, expect.idx):
                    run.fail(f"failure {leaf!r} lacks a note naming {node_name(expect.idx)}")
                return True
            continue
        if id(leaf) in raised_ids:
            continue
        idx = expect.idx
        if expect.kind == "timeout":
            found = type(leaf) is TimeoutError and _names_in_notes(leaf, idx)
            # a node and its release may both time out: prefer the note with this one's count
            if found and expect.attempts is not None and not _notes_count(leaf, expect.attempts):
                found = not any(
                    other is not expect
                    and not other.matched
                    and other.kind == "timeout"
                    and other.idx == idx
                    and other.attempts is not None
                    and _notes_count(leaf, other.attempts)
                    for other in run.expects
                )
        elif expect.kind == "output":
            found = type(leaf) is TypeError and f"Invalid output from {node_name(idx)}" in str(leaf)
        elif expect.kind == "input":
            found = type(leaf) is TypeError and f"Invalid input for {node_name(idx)}." in str(leaf)
        elif expect.kind == "result":
            found = (
                type(leaf) is TypeError
                and "Shutdown must return None" in str(leaf)
                and names_node(str(leaf), idx)
            )
        else:
            found = False
        if found:
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
# Named situations: what a run reached (the campaign requires each to be reached)
# ------------------------------------------------------------------------------------------


SITUATIONS = frozenset(
    {
        "retry taken",
        "release retried",
        "timeout drained",
        "exception group retried",
        "nonretryable failure stops retries",
        "retries exhausted",
        "swallowed cancellation",
        "attempt cancelled",
        "release failure",
        "release timed out",
        "release returned a value",
        "node timed out",
        "output check failed",
        "input check failed",
        "body exception demoted",
        "self-cancellation",
        "several node failures",
        "caller cancel during forward phase",
        "caller cancel during body",
        "caller cancel during shutdown",
        "repeated caller cancellation",
        "cancel pending at entry",
        "body exception",
        "release of an empty acquisition",
        "release of an invalid value",
        "run succeeded",
        "retry wait dropped",
        "observed timeout",
        "observed release failure",
    }
)
"""Every situation :func:`situations` can report."""


HOSTILE_SITUATIONS = frozenset(
    [f"{kind.__name__} from the {place}" for place in HOSTILE_PLACES for kind in HOSTILE_KINDS]
    + ["hostile fault before a release", "hostile fault in the shutdown phase"]
)
"""Every situation :func:`situations` reports for a run whose hostile fault fired."""


def hostile_situations(run: RunCheck) -> set[str]:
    state = run.state
    hostile = state.hostile_raised
    scenario_hostile = run.scenario.hostile
    assert hostile is not None and scenario_hostile is not None
    found = {f"{type(hostile).__name__} from the {scenario_hostile.place}"}
    if run.release_starts:
        found.add("hostile fault before a release")
        if state.hostile_seq is not None and state.hostile_seq > min(run.release_starts.values()):
            found.add("hostile fault in the shutdown phase")
    assert found <= HOSTILE_SITUATIONS, found - HOSTILE_SITUATIONS
    return found


def situations(run: RunCheck) -> set[str]:
    """The named situations this run reached, from the harness's records and the facts
    the rules derived (and, for observed runs, the events); those of
    :data:`HOSTILE_SITUATIONS` for a run whose hostile fault fired."""
    state = run.state
    if state.hostile_raised is not None:
        return hostile_situations(run)
    found: set[str] = set()
    by_idx = {node.idx: node for node in run.scenario.nodes}
    node_recs = [
        (by_idx[idx], recs) for (role, idx), recs in state.attempts.items() if role == "node"
    ]
    release_recs = [recs for (role, _), recs in state.attempts.items() if role == "release"]
    all_recs = [rec for recs in state.attempts.values() for rec in recs]
    if any(len(recs) > 1 for _, recs in node_recs):
        found.add("retry taken")
    if any(len(recs) > 1 for recs in release_recs):
        found.add("release retried")
    for node, recs in node_recs:
        for rec in recs:
            step = node.step(rec.number)
            if rec.outcome in ("cancelled", "swallowed") and step.reaction != "propagate":
                if node.policy.timeout is not None and step.kind == "overrun":
                    found.add("timeout drained")
        if len(recs) > 1 and any(isinstance(r.exc, ExceptionGroup) for r in recs[:-1]):
            found.add("exception group retried")
        last = recs[-1]
        if (
            last.outcome == "raise"
            and len(recs) < 1 + node.policy.retries
            and last.exc is not None
            and not is_retryable(last.exc, resolved_set(node.policy.retryable))
        ):
            found.add("nonretryable failure stops retries")
        retries = node.policy.retries
        if last.outcome == "raise" and retries > 0 and len(recs) == 1 + retries:
            found.add("retries exhausted")
    if any(rec.outcome == "swallowed" for rec in all_recs):
        found.add("swallowed cancellation")
    if any(rec.outcome == "cancelled" and rec.role == "node" for rec in all_recs):
        found.add("attempt cancelled")
    matched = [e for e in run.expects if e.matched]
    if any(e.role == "release" for e in matched):
        found.add("release failure")
    if any(e.role == "release" and e.kind == "timeout" for e in matched):
        found.add("release timed out")
    if any(e.kind == "result" for e in matched):
        found.add("release returned a value")
    if any(e.kind == "timeout" and e.role == "node" for e in matched):
        found.add("node timed out")
    if any(e.kind == "output" for e in matched):
        found.add("output check failed")
    if any(e.kind == "input" for e in matched):
        found.add("input check failed")
    if any(e.kind == "demoted" for e in matched):
        found.add("body exception demoted")
    if any(e.kind == "obj" and isinstance(e.obj, asyncio.CancelledError) for e in matched):
        found.add("self-cancellation")
    if sum(e.role == "node" for e in matched) > 1:
        found.add("several node failures")
    first_release = min(run.release_starts.values(), default=NEVER)
    if any(c.seq < first_release for c in run.runtime_cancels) and state.body is None:
        found.add("caller cancel during forward phase")
    if run.body_cancels:
        found.add("caller cancel during body")
    if any(c.seq > first_release for c in run.runtime_cancels):
        found.add("caller cancel during shutdown")
    if len(run.runtime_cancels) > 1:
        found.add("repeated caller cancellation")
    if any(c.issuer == "pending at entry" and c.delivered for c in state.cancels):
        found.add("cancel pending at entry")
    if state.body is not None and state.body.outcome == "raise":
        found.add("body exception")
    for recs in release_recs:
        acq = recs[0].acq
        if acq is not None and not acq[0]:
            found.add("release of an empty acquisition")
        if acq is not None and acq[0] and not acq[1]:
            found.add("release of an invalid value")
    if state.outcome is None:
        found.add("run succeeded")
    if state.events is not None:
        kinds = {e.kind for e in state.events}
        if "retry_cancelled" in kinds:
            found.add("retry wait dropped")
        if "attempt_timed_out" in kinds:
            found.add("observed timeout")
        if "release_failed" in kinds or "release_timed_out" in kinds:
            found.add("observed release failure")
    assert found <= SITUATIONS, found - SITUATIONS
    return found


# ------------------------------------------------------------------------------------------
# Compile, run, check
# ------------------------------------------------------------------------------------------


def run_and_check(
    scenario: Scenario,
    runs: int = 1,
    concurrent: int = 1,
    hits: Counter[str] | None = None,
    **run_options: Any,
) -> list[RunState]:
    """Compile, run ``runs`` times (one loop), check every run; dispose the module.
    ``hits`` counts the named situations the runs reached."""
    compiled = compile_scenario(scenario)
    try:
        states = run_scenario(compiled, runs, concurrent, **run_options)
        for state in states:
            checked = check_run(compiled, state)
            if hits is not None:
                hits.update(situations(checked))
        return states
    finally:
        compiled.dispose()


# ------------------------------------------------------------------------------------------
# A run's fingerprint: everything observable, for the determinism re-run
# ------------------------------------------------------------------------------------------


def describe_exception(exc: BaseException | None, depth: int = 0) -> Any:
    """Type, arguments, notes and (for groups and primaries) the failures, recursively."""
    if exc is None:
        return None
    if depth > 4:
        return type(exc).__name__
    described: list[Any] = [
        type(exc).__name__,
        tuple(repr(arg) for arg in exc.args),
        tuple(getattr(exc, "__notes__", None) or ()),
    ]
    if isinstance(exc, BaseExceptionGroup):
        described.append(tuple(describe_exception(leaf, depth + 1) for leaf in exc.exceptions))
    described.append(tuple(describe_exception(leaf, depth + 1) for leaf in failures(exc)))
    return tuple(described)


def fingerprint(state: RunState) -> Any:
    """Everything a run showed, in order: every call (what, when by sequence number and by
    the loop's clock, with which inputs, how it ended), the caller's cancellations, the
    body, the outcome with its notes and failures, the result, the log records and the
    observer's events (without the process-unique run id)."""
    calls = sorted(
        (
            rec.start_seq,
            rec.end_seq,
            rec.role,
            rec.idx,
            rec.number,
            rec.start_t,
            rec.end_t,
            tuple(sorted(rec.kwargs.items())),
            rec.outcome,
            describe_exception(rec.exc),
            rec.cancels_seen,
            repr(rec.acq),
        )
        for recs in state.attempts.values()
        for rec in recs
    )
    cancels = [(c.msg, c.issuer, c.seq, c.delivered) for c in state.cancels]
    body = None
    if state.body is not None:
        body = (state.body.start_seq, state.body.end_seq, state.body.outcome)
    events = None
    if state.events is not None:
        events = [
            (e.kind, e.node, e.attempt, e.time, e.delay, describe_exception(e.error), e.nodes)
            for e in state.events
        ]
    return (
        calls,
        cancels,
        body,
        state.outcome_seq,
        describe_exception(state.outcome),
        repr(state.result),
        [describe_exception(late) for late in state.late],
        list(state.log_messages),
        events,
    )
