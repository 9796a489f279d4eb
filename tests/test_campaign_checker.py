"""The campaign's checker can fail, rule by rule: real runs, recorded on a virtual-time
loop, pass every rule; each deliberately broken copy of such a run (a release that ran
twice or never, a retry too early, a value that leaked into a log, an observer event that
contradicts the outcome, ...) is refused by the rule that owns the broken promise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from support.campaign import (
    BAD_VALUE,
    AttemptRec,
    CancelRec,
    Hostile,
    NodeDef,
    PolicyDef,
    RunState,
    Scenario,
    Step,
    compile_scenario,
    run_scenario,
)
from support.campaign_check import HOSTILE_RULES, NEVER, RULES, SALVAGED, check, situations

from sdax_hamilton import ExecutionError

RETRYING = PolicyDef(retries=2, initial_delay=0.004, backoff_factor=2.0, retryable=0)
TIMED = PolicyDef(timeout=0.01)


def _node(idx: int, deps: tuple[int, ...] = (), **fields: Any) -> NodeDef:
    values: dict[str, Any] = {
        "idx": idx,
        "deps": deps,
        "uses_input": False,
        "style": "async",
        "policy": PolicyDef(declared=False),
        "steps": (),
        "default": Step(delay=0.001),
        "release_policy": PolicyDef(),
    }
    values.update(fields)
    return NodeDef(**values)


# n000 (owned) <- n001 (retried once) ; n000 <- n002 (owned, released first) <- n003 ;
# n004 selected by nobody
SUCCEEDING = Scenario(
    nodes=(
        _node(0, owned=True),
        _node(1, (0,), policy=RETRYING, steps=(Step(kind="raise", exc="conn", delay=0.001),)),
        _node(2, (0,), owned=True, policy=TIMED),
        _node(3, (2,)),
        _node(4),
    ),
    outputs=(1, 3),
    mode="execute",
    body=Step(),
    check_outputs=True,
    input_value=1,
)
# n000 fails for good (ValueError is not retryable by default); n001 consumes it
FAILING = Scenario(
    nodes=(
        _node(0, owned=True, steps=(Step(kind="raise", exc="value", delay=0.001),)),
        _node(1, (0,)),
    ),
    outputs=(1,),
    mode="open",
    body=Step(),
    check_outputs=True,
    input_value=1,
)


def _run(scenario: Scenario) -> tuple[Any, RunState]:
    compiled = compile_scenario(scenario)
    try:
        (state,) = run_scenario(compiled, observe="all", virtual_time=True, seed=7)
    finally:
        compiled.dispose()
    return compiled, state


def _rules_broken(compiled: Any, state: RunState) -> set[str]:
    return {error[1 : error.index("]")] for error in check(compiled, state).errors}


def test_the_recorded_runs_pass_every_rule() -> None:
    for scenario, reached in (
        (SUCCEEDING, {"run succeeded", "retry taken"}),
        (FAILING, {"release of an empty acquisition"}),
    ):
        compiled, state = _run(scenario)
        run = check(compiled, state)
        assert run.errors == []
        assert reached <= situations(run)
    assert isinstance(_run(FAILING)[1].outcome, ExecutionError)


# ------------------------------------------------------------------------------------------
# Breakages: each takes a recorded run and breaks one promise
# ------------------------------------------------------------------------------------------


def _recs(state: RunState, role: str, idx: int) -> list[AttemptRec]:
    return state.attempts[(role, idx)]


def release_ran_twice(state: RunState) -> None:
    first = _recs(state, "release", 0)[0]
    state.attempts[("release", 0)].append(dataclasses.replace(first, number=1))


def release_never_ran(state: RunState) -> None:
    del state.attempts[("release", 0)]


def release_before_its_dependents_release(state: RunState) -> None:
    _recs(state, "release", 0)[0].start_seq = _recs(state, "release", 2)[0].start_seq


def release_got_an_empty_record(state: RunState) -> None:
    rec = _recs(state, "release", 0)[0]
    rec.acq = (False, False, None, False)


def release_was_cancelled(state: RunState) -> None:
    _recs(state, "release", 0)[-1].outcome = "cancelled"


def one_attempt_too_many(state: RunState) -> None:
    recs = _recs(state, "node", 1)
    last = recs[-1]
    recs.append(dataclasses.replace(last, number=len(recs), start_seq=last.end_seq or 0))


def retry_without_waiting(state: RunState) -> None:
    first, second = _recs(state, "node", 1)[:2]
    assert first.end_t is not None
    second.start_t = first.end_t


def started_before_its_input(state: RunState) -> None:
    _recs(state, "node", 1)[0].start_seq = 0


def received_a_wrong_value(state: RunState) -> None:
    _recs(state, "node", 1)[0].kwargs["n000"] = -1


def unselected_node_ran(state: RunState) -> None:
    state.attempts[("node", 4)] = [AttemptRec("node", 4, 0, 0, 0.0, end_seq=1, outcome="ok")]


def attempt_never_ended(state: RunState) -> None:
    _recs(state, "node", 3)[0].end_seq = None


def attempt_cancelled_twice(state: RunState) -> None:
    _recs(state, "node", 3)[0].cancels_seen = 2


def ran_past_its_timeout(state: RunState) -> None:
    rec = _recs(state, "node", 2)[0]
    rec.outcome = "cancelled"
    rec.end_t = rec.start_t + 60.0


def harness_saw_a_pending_task(state: RunState) -> None:
    state.problems.append("tasks left pending after the run: [<Task>]")


def wrong_result(state: RunState) -> None:
    state.result = {"n001": -1, "n003": -1}


def node_left_incomplete(state: RunState) -> None:
    # n003 "never ran", yet nothing failed and no cancellation aborted the run
    del state.attempts[("node", 3)]
    state.result = None


def exception_without_a_primary(state: RunState) -> None:
    state.outcome = ValueError("not from the run")


def cancellation_lost_after_the_run(state: RunState) -> None:
    state.cancels.append(CancelRec("caller-cancel-9", "test", seq=NEVER - 1, delivered=True))


def value_in_a_log_message(state: RunState) -> None:
    state.log_messages.append((40, f"n000 failed with {BAD_VALUE}"))


def run_finished_reports_another_error(state: RunState) -> None:
    assert state.events is not None
    state.events[-1] = dataclasses.replace(state.events[-1], error=ValueError("other"))


def attempt_started_event_missing(state: RunState) -> None:
    assert state.events is not None
    state.events.remove(next(e for e in state.events if e.kind == "attempt_started"))


def retry_delay_event_out_of_bounds(state: RunState) -> None:
    assert state.events is not None
    index, event = next((i, e) for i, e in enumerate(state.events) if e.kind == "retry_scheduled")
    state.events[index] = dataclasses.replace(event, delay=60.0)


def failure_replaced_by_another(state: RunState) -> None:
    assert isinstance(state.outcome, ExecutionError)
    stranger = ValueError("a stranger")
    stranger.add_note("n000 failed after 1 attempt")
    state.outcome = ExecutionError("run failed", [stranger])


def failure_dropped(state: RunState) -> None:
    state.outcome = None
    state.result = {"n001": 0}


def failure_note_lacks_attempts(state: RunState) -> None:
    assert isinstance(state.outcome, ExecutionError)
    (leaf,) = state.outcome.exceptions
    leaf.__notes__ = ["about n000"]


def failure_not_logged(state: RunState) -> None:
    state.log_messages = [(level, msg) for level, msg in state.log_messages if level < 40]


def body_ran_after_a_failure(state: RunState) -> None:
    state.body = AttemptRec("body", -1, 0, NEVER - 2, 0.0, end_seq=NEVER - 1, outcome="ok")


def failure_event_carries_another_object(state: RunState) -> None:
    assert state.events is not None
    index, event = next((i, e) for i, e in enumerate(state.events) if e.kind == "attempt_failed")
    state.events[index] = dataclasses.replace(event, error=ValueError("another"))


BREAKAGES: list[tuple[Scenario, Callable[[RunState], None], str]] = [
    (SUCCEEDING, release_ran_twice, "release_retries_follow_their_own_policy"),
    (SUCCEEDING, release_never_ran, "releases_run_exactly_once_after_the_forward_phase"),
    (SUCCEEDING, release_before_its_dependents_release, "releases_follow_dependency_order"),
    (SUCCEEDING, release_got_an_empty_record, "releases_receive_the_acquisition_record"),
    (SUCCEEDING, release_was_cancelled, "release_failures_are_expected"),
    (SUCCEEDING, one_attempt_too_many, "node_retries_follow_the_policy"),
    (SUCCEEDING, retry_without_waiting, "node_retries_follow_the_policy"),
    (SUCCEEDING, started_before_its_input, "nodes_start_after_their_inputs"),
    (SUCCEEDING, received_a_wrong_value, "nodes_start_after_their_inputs"),
    (SUCCEEDING, unselected_node_ran, "only_selected_nodes_run"),
    (SUCCEEDING, attempt_never_ended, "attempts_end_drained_and_cancelled_once"),
    (SUCCEEDING, attempt_cancelled_twice, "attempts_end_drained_and_cancelled_once"),
    (SUCCEEDING, ran_past_its_timeout, "attempts_stop_at_their_timeout"),
    (SUCCEEDING, harness_saw_a_pending_task, "harness_saw_no_problem"),
    (SUCCEEDING, wrong_result, "results_are_the_outputs"),
    (SUCCEEDING, node_left_incomplete, "unaborted_runs_complete"),
    (SUCCEEDING, exception_without_a_primary, "primary_is_what_the_caller_gets"),
    (SUCCEEDING, cancellation_lost_after_the_run, "caller_cancellations_land_where_sent"),
    (SUCCEEDING, value_in_a_log_message, "logs_name_nodes_never_values"),
    (SUCCEEDING, run_finished_reports_another_error, "observer_events_match_the_run"),
    (SUCCEEDING, attempt_started_event_missing, "observer_events_match_the_run"),
    (SUCCEEDING, retry_delay_event_out_of_bounds, "observer_events_match_the_run"),
    (FAILING, failure_replaced_by_another, "every_failure_is_explained_and_raised"),
    (FAILING, failure_dropped, "every_failure_is_explained_and_raised"),
    (FAILING, failure_note_lacks_attempts, "failures_note_their_attempt_count"),
    (FAILING, failure_not_logged, "logs_name_nodes_never_values"),
    (FAILING, body_ran_after_a_failure, "unaborted_runs_complete"),
    (FAILING, failure_event_carries_another_object, "observer_events_match_the_run"),
]


@pytest.mark.parametrize(
    ("scenario", "breakage", "rule"),
    BREAKAGES,
    ids=[breakage.__name__ for _, breakage, _ in BREAKAGES],
)
def test_a_broken_run_is_refused_by_its_rule(
    scenario: Scenario, breakage: Callable[[RunState], None], rule: str
) -> None:
    compiled, state = _run(scenario)
    assert check(compiled, state).errors == []
    breakage(state)
    assert rule in _rules_broken(compiled, state)


def test_every_rule_that_can_refuse_a_run_has_a_breakage() -> None:
    """``forward_failures_are_expected`` only derives what the caller must receive; its
    breakages are refused by ``every_failure_is_explained_and_raised``."""
    covered = {rule for _, _, rule in BREAKAGES}
    assert {rule.__name__ for rule in RULES} - covered == {"forward_failures_are_expected"}


# ------------------------------------------------------------------------------------------
# Hostile faults (docs/contract.md#hostile-run): the rules of a run whose fault fired
# ------------------------------------------------------------------------------------------

# SUCCEEDING, whose second value check (after n000 acquired) raises a KeyboardInterrupt.
HOSTILE = dataclasses.replace(SUCCEEDING, hostile=Hostile("type check", KeyboardInterrupt, 1))


def hostile_release_never_ran(state: RunState) -> None:
    del state.attempts[("release", 0)]


def hostile_release_ran_twice(state: RunState) -> None:
    first = _recs(state, "release", 0)[0]
    state.attempts[("release", 0)].append(dataclasses.replace(first, number=1))


def termination_not_primary(state: RunState) -> None:
    state.outcome = ExecutionError("run failed", [ValueError("instead")])


def run_salvaged(state: RunState) -> None:
    assert state.outcome is not None
    state.outcome.add_note(f"sdax_hamilton: the run {SALVAGED} (KeyboardInterrupt ...)")


def hostile_attempt_never_ended(state: RunState) -> None:
    _recs(state, "node", 0)[0].end_seq = None


HOSTILE_BREAKAGES: list[tuple[Callable[[RunState], None], str]] = [
    (hostile_release_never_ran, "releases_run_exactly_once_after_the_forward_phase"),
    (hostile_release_ran_twice, "releases_are_carried_out_exactly_once"),
    (termination_not_primary, "hostile_faults_stop_the_run_or_fail_it"),
    (run_salvaged, "hostile_faults_stop_the_run_or_fail_it"),
    (hostile_attempt_never_ended, "attempts_end_drained_and_cancelled_once"),
]


def test_a_recorded_hostile_run_passes_its_rules() -> None:
    compiled, state = _run(HOSTILE)
    assert isinstance(state.hostile_raised, KeyboardInterrupt)
    assert state.outcome is state.hostile_raised
    run = check(compiled, state)
    assert run.errors == []
    assert situations(run) == {
        "KeyboardInterrupt from the type check",
        "hostile fault before a release",
    }


@pytest.mark.parametrize(
    ("breakage", "rule"),
    HOSTILE_BREAKAGES,
    ids=[breakage.__name__ for breakage, _ in HOSTILE_BREAKAGES],
)
def test_a_broken_hostile_run_is_refused_by_its_rule(
    breakage: Callable[[RunState], None], rule: str
) -> None:
    compiled, state = _run(HOSTILE)
    assert check(compiled, state).errors == []
    breakage(state)
    assert rule in _rules_broken(compiled, state)


def test_every_hostile_rule_of_its_own_has_a_breakage() -> None:
    covered = {rule for _, rule in HOSTILE_BREAKAGES} | {rule for _, _, rule in BREAKAGES}
    assert {rule.__name__ for rule in HOSTILE_RULES} <= covered
