//! A hedged round (docs/contract.md#hedged-rounds): scenarios under a virtual clock (every
//! `now` handed in), and property tests against a reference model over random sequences of
//! clock steps, hedges started or skipped, successes, failures, drains and aborts: never more
//! than `1 + hedges` calls, a hedge only when due, the winner is the first valid value, the
//! round fails only when every call failed (with call 0's exception), and it never completes
//! while a loser is still draining.

use proptest::prelude::*;
use sdax_core::hedge::{Call, Completion, Report, Round};

#[test]
fn a_slow_first_call_is_hedged_and_the_hedge_wins() {
    let mut round = Round::new(10.0, 1);
    assert_eq!(round.next_due(0.005), Some(10.005));
    assert!(!round.due(10.004, 0.005));
    assert_eq!(round.start_hedge(10.004, 0.005), None);
    assert_eq!(round.start_hedge(10.005, 0.005), Some(1));
    // 1 + hedges calls started: no further one is ever due.
    assert_eq!(round.next_due(0.005), None);
    assert_eq!(round.start_hedge(99.0, 0.005), None);
    assert_eq!(round.succeeded(1), Report::Won { cancel: vec![0] });
    assert_eq!(round.winner(), Some(1));
    assert_eq!(round.call(0), Some(Call::Cancelling));
    // The loser still unwinds: nothing completes, nothing downstream sees the value yet.
    assert_eq!(round.completion(), None);
    assert_eq!(round.drained(0), Report::Recorded);
    assert_eq!(round.completion(), Some(Completion::Won { winner: 1 }));
}

#[test]
fn each_hedge_is_due_after_the_latest_call_started() {
    // Times that floating point holds exactly.
    let mut round = Round::new(0.0, 3);
    assert_eq!(round.start_hedge(0.25, 0.25), Some(1));
    assert_eq!(round.next_due(0.25), Some(0.5));
    // Started late (the loop was busy): the next is due after this start, not the schedule.
    assert_eq!(round.start_hedge(0.625, 0.25), Some(2));
    assert_eq!(round.next_due(0.25), Some(0.875));
    // A skipped hedge starts nothing; the next one is due `hedge_after` after the skip.
    assert!(round.skip_hedge(0.875, 0.25));
    assert_eq!(round.started(), 3);
    assert_eq!(round.next_due(0.25), Some(1.125));
    assert!(!round.skip_hedge(1.0, 0.25));
    assert_eq!(round.start_hedge(1.125, 0.25), Some(3));
    assert_eq!(round.next_due(0.25), None);
    assert_eq!(round.started(), 4);
}

#[test]
fn failures_end_nothing_until_every_call_failed_then_call_0_is_raised() {
    let mut round = Round::new(0.0, 2);
    assert_eq!(round.start_hedge(1.0, 1.0), Some(1));
    assert_eq!(round.failed(0), Report::Recorded);
    assert_eq!(round.completion(), None);
    // Call 1 still runs: the round may still hedge.
    assert_eq!(round.start_hedge(2.0, 1.0), Some(2));
    assert_eq!(round.failed(2), Report::Recorded);
    assert_eq!(round.completion(), None);
    assert_eq!(round.failed(1), Report::Recorded);
    assert_eq!(
        round.completion(),
        Some(Completion::Failed { others: vec![1, 2] })
    );
    assert_eq!(round.next_due(1.0), None);
}

#[test]
fn a_lone_call_failing_fails_the_round_without_waiting_for_a_hedge() {
    let mut round = Round::new(0.0, 1);
    assert_eq!(round.failed(0), Report::Recorded);
    assert_eq!(
        round.completion(),
        Some(Completion::Failed { others: vec![] })
    );
    assert_eq!(round.start_hedge(5.0, 0.1), None);
}

#[test]
fn a_failure_after_an_earlier_failure_and_a_success_keeps_the_success() {
    let mut round = Round::new(0.0, 2);
    round.start_hedge(0.1, 0.1);
    round.start_hedge(0.2, 0.1);
    assert_eq!(round.failed(0), Report::Recorded);
    assert_eq!(round.succeeded(2), Report::Won { cancel: vec![1] });
    // The loser raised while unwinding: drained all the same.
    assert_eq!(round.failed(1), Report::Recorded);
    assert_eq!(round.call(1), Some(Call::Drained));
    assert_eq!(round.completion(), Some(Completion::Won { winner: 2 }));
}

#[test]
fn a_second_value_is_a_loser_never_a_winner() {
    let mut round = Round::new(0.0, 1);
    round.start_hedge(1.0, 1.0);
    assert_eq!(round.succeeded(0), Report::Won { cancel: vec![1] });
    assert_eq!(round.succeeded(1), Report::Recorded); // returned before it saw the cancel
    assert_eq!(round.winner(), Some(0));
    assert_eq!(round.completion(), Some(Completion::Won { winner: 0 }));
}

#[test]
fn an_abort_cancels_every_running_call_and_completes_once_they_ended() {
    let mut round = Round::new(0.0, 2);
    round.start_hedge(1.0, 1.0);
    round.start_hedge(2.0, 1.0);
    round.failed(1);
    assert_eq!(round.abort(), vec![0, 2]);
    assert_eq!(round.next_due(1.0), None);
    assert_eq!(round.succeeded(0), Report::Recorded); // too late: drained, no winner
    assert_eq!(round.winner(), None);
    assert_eq!(round.completion(), None);
    assert_eq!(round.drained(2), Report::Recorded);
    assert_eq!(round.completion(), Some(Completion::Aborted));
    assert_eq!(round.abort(), Vec::<usize>::new());
}

#[test]
fn reports_about_unknown_or_finished_calls_change_nothing() {
    let mut round = Round::new(f64::NAN, 1);
    assert_eq!(round.succeeded(7), Report::Ignored);
    assert_eq!(round.failed(usize::MAX), Report::Ignored);
    assert_eq!(round.drained(0), Report::Ignored); // running, not told to stop
    assert_eq!(round.failed(0), Report::Recorded);
    assert_eq!(round.failed(0), Report::Ignored);
    assert_eq!(round.succeeded(0), Report::Ignored);
    for odd in [f64::NAN, -1.0, f64::NEG_INFINITY] {
        assert_eq!(Round::new(0.0, 5).next_due(odd), None);
    }
    assert_eq!(Round::new(0.0, 0).next_due(0.0), None); // no hedges allowed
}

// ------------------------------------------------------------------- properties

#[derive(Clone, Debug)]
enum Op {
    /// Advance the clock by this many milliseconds.
    Tick(u16),
    /// Start the due hedge, if any.
    Hedge,
    /// Skip the due hedge, if any.
    Skip,
    Succeed(usize),
    Fail(usize),
    Drain(usize),
    Abort,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u16..20).prop_map(Op::Tick),
        3 => Just(Op::Hedge),
        1 => Just(Op::Skip),
        2 => (0usize..6).prop_map(Op::Succeed),
        2 => (0usize..6).prop_map(Op::Fail),
        2 => (0usize..6).prop_map(Op::Drain),
        1 => Just(Op::Abort),
    ]
}

/// The reference: the rules written the plain way.
#[derive(Debug, Default)]
struct Model {
    /// Per call: `None` running; `Some(true)` ended with a value; `Some(false)` ended otherwise.
    ended: Vec<Option<bool>>,
    told_to_stop: Vec<bool>,
    first_value: Option<usize>,
    aborted: bool,
    failed_on_their_own: Vec<bool>,
}

impl Model {
    fn decided(&self) -> bool {
        self.first_value.is_some() || self.aborted
    }
    fn anyone_running(&self) -> bool {
        self.ended.iter().any(|e| e.is_none())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn follows_the_reference(
        hedges in 0u32..4,
        hedge_after_ms in 0u16..15,
        ops in proptest::collection::vec(op(), 0..80),
    ) {
        let hedge_after = hedge_after_ms as f64 / 1000.0;
        let mut now = 0.0f64;
        let mut round = Round::new(now, hedges);
        let mut model = Model {
            ended: vec![None],
            told_to_stop: vec![false],
            failed_on_their_own: vec![false],
            ..Model::default()
        };
        let mut latest = now;
        for op in ops {
            match op {
                Op::Tick(ms) => now += ms as f64 / 1000.0,
                Op::Hedge | Op::Skip => {
                    let may = !model.decided()
                        && model.anyone_running()
                        && model.ended.len() < 1 + hedges as usize;
                    let due = may && now >= latest + hedge_after;
                    prop_assert_eq!(round.due(now, hedge_after), due);
                    if matches!(op, Op::Hedge) {
                        let started = round.start_hedge(now, hedge_after);
                        prop_assert_eq!(started, due.then_some(model.ended.len()));
                        if due {
                            model.ended.push(None);
                            model.told_to_stop.push(false);
                            model.failed_on_their_own.push(false);
                            latest = now;
                        }
                    } else {
                        prop_assert_eq!(round.skip_hedge(now, hedge_after), due);
                        if due {
                            latest = now;
                        }
                    }
                }
                Op::Succeed(i) => {
                    let report = round.succeeded(i);
                    let running = model.ended.get(i) == Some(&None);
                    if running && !model.told_to_stop[i] && !model.decided() {
                        // The first valid value wins; every other running call is cancelled.
                        let cancel: Vec<usize> = (0..model.ended.len())
                            .filter(|&j| j != i && model.ended[j].is_none())
                            .collect();
                        prop_assert_eq!(report, Report::Won { cancel: cancel.clone() });
                        model.first_value = Some(i);
                        model.ended[i] = Some(true);
                        for j in cancel {
                            model.told_to_stop[j] = true;
                        }
                    } else if running && model.told_to_stop[i] {
                        prop_assert_eq!(report, Report::Recorded);
                        model.ended[i] = Some(false);
                    } else {
                        prop_assert_eq!(report, Report::Ignored);
                    }
                }
                Op::Fail(i) | Op::Drain(i) => {
                    let drain = matches!(op, Op::Drain(_));
                    let report = if drain { round.drained(i) } else { round.failed(i) };
                    let running = model.ended.get(i) == Some(&None);
                    let stopping = running && model.told_to_stop[i];
                    if stopping || (running && !drain) {
                        prop_assert_eq!(report, Report::Recorded);
                        model.ended[i] = Some(false);
                        if !stopping {
                            model.failed_on_their_own[i] = true;
                        }
                    } else {
                        prop_assert_eq!(report, Report::Ignored);
                    }
                }
                Op::Abort => {
                    let cancel = round.abort();
                    if model.decided() {
                        prop_assert!(cancel.is_empty());
                    } else {
                        let expected: Vec<usize> = (0..model.ended.len())
                            .filter(|&j| model.ended[j].is_none())
                            .collect();
                        prop_assert_eq!(cancel, expected.clone());
                        for j in expected {
                            model.told_to_stop[j] = true;
                        }
                    }
                    model.aborted = true;
                }
            }
            // Invariants after every step.
            prop_assert!(round.started() <= 1 + hedges as usize);
            prop_assert_eq!(round.started(), model.ended.len());
            prop_assert_eq!(round.winner(), model.first_value);
            let completion = round.completion();
            if model.anyone_running() {
                // Never complete while a call runs or a loser drains.
                prop_assert_eq!(completion, None);
            } else if let Some(winner) = model.first_value {
                prop_assert_eq!(completion, Some(Completion::Won { winner }));
            } else if model.failed_on_their_own.iter().all(|f| *f) {
                let others: Vec<usize> = (1..model.ended.len()).collect();
                prop_assert_eq!(completion, Some(Completion::Failed { others }));
            } else {
                prop_assert!(model.aborted);
                prop_assert_eq!(completion, Some(Completion::Aborted));
            }
        }
    }
}

#[test]
fn hedging_arguments_are_checked_in_order() {
    use sdax_core::hedge::hedging;
    use sdax_core::shared::SharedError;
    assert_eq!(hedging(None, 1), Ok((None, 1)));
    assert_eq!(hedging(Some(0.0), 3), Ok((Some(0.0), 3)));
    assert_eq!(hedging(Some(0.25), i64::MAX), Ok((Some(0.25), u32::MAX)));
    for bad in [-0.5, f64::INFINITY, f64::NEG_INFINITY] {
        assert_eq!(hedging(Some(bad), 1), Err(SharedError::HedgeAfter(bad)));
    }
    assert!(matches!(hedging(Some(f64::NAN), 1), Err(SharedError::HedgeAfter(v)) if v.is_nan()));
    assert_eq!(hedging(Some(-1.0), 0), Err(SharedError::HedgeAfter(-1.0)));
    assert_eq!(hedging(Some(1.0), 0), Err(SharedError::Hedges(0)));
    assert_eq!(hedging(None, -3), Err(SharedError::Hedges(-3)));
    assert_eq!(SharedError::Hedges(0).argument(), "hedges");
}
