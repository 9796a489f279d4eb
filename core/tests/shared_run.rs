//! A run drawing on the shared objects: the retry gate (retry budget) and fallbacks.

use std::sync::{Arc, Mutex};

use sdax_core::shared::RetryBudget;
use sdax_core::{Command, Graph, JobState, NodeDef, Op, Plan, Policy, RetryGate, Run};

fn plan(retries: u32) -> Arc<Plan> {
    let mut a = NodeDef::new("a", &[]);
    a.policy = Policy::new(None, retries, 0.0, 1.0).unwrap();
    let b = NodeDef::new("b", &["a"]);
    Arc::new(
        Graph::new(vec![a, b])
            .unwrap()
            .select(&["b"], &[] as &[&str])
            .unwrap(),
    )
}

/// A gate over a shared budget on a hand-moved clock.
struct Budgeted {
    budget: Arc<Mutex<RetryBudget>>,
    now: Arc<Mutex<f64>>,
}

impl RetryGate for Budgeted {
    fn first_attempt(&mut self) {
        let now = *self.now.lock().unwrap();
        self.budget.lock().unwrap().deposit(now);
    }
    fn allow_retry(&mut self) -> bool {
        let now = *self.now.lock().unwrap();
        self.budget.lock().unwrap().try_take(now)
    }
}

fn ops(out: &[Command]) -> Vec<(Op, u32)> {
    out.iter().map(|c| (c.op, c.job)).collect()
}

#[test]
fn first_attempts_deposit_and_a_refused_retry_is_final() {
    // ratio 0.5, no floor: two first attempts allow one retry within the window.
    let budget = Arc::new(Mutex::new(RetryBudget::new(0.5, 0.0, 10.0).unwrap()));
    let now = Arc::new(Mutex::new(0.0));
    let mut runs: Vec<Run> = (0..2)
        .map(|_| {
            Run::new(plan(3), Some(1)).with_retry_gate(Box::new(Budgeted {
                budget: Arc::clone(&budget),
                now: Arc::clone(&now),
            }))
        })
        .collect();
    let mut out = Vec::new();
    for run in &mut runs {
        run.start(&mut out).unwrap();
        assert_eq!(ops(&out), vec![(Op::Start, 0)]);
        out.clear();
    }
    assert_eq!(budget.lock().unwrap().counts(0.0), (2, 0));
    // The first run's failure is retried: the budget allows one.
    runs[0].failed(0, true, &mut out).unwrap();
    assert_eq!(ops(&out), vec![(Op::Sleep, 0)]);
    out.clear();
    // The second run's is refused: NO_BUDGET, then the run aborts.
    runs[1].failed(0, true, &mut out).unwrap();
    assert_eq!(out[0].op, Op::NoBudget);
    assert_eq!(runs[1].state(0), Some(JobState::Failed));
    assert!(runs[1].aborted());
    assert_eq!(budget.lock().unwrap().counts(0.0), (2, 1));
    // A retry is no first attempt: no deposit.
    out.clear();
    runs[0].elapsed(0, &mut out).unwrap();
    assert_eq!(ops(&out), vec![(Op::Start, 0)]);
    assert_eq!(budget.lock().unwrap().counts(0.0), (2, 1));
    // Outside the window the tokens have expired.
    *now.lock().unwrap() = 11.0;
    assert_eq!(budget.lock().unwrap().counts(11.0), (0, 0));
}

#[test]
fn a_final_failure_with_a_fallback_emits_fallback_once() {
    let mut run = Run::new(plan(0), Some(1)).with_fallbacks(&[0]);
    let mut out = Vec::new();
    run.start(&mut out).unwrap();
    out.clear();
    run.failed(0, false, &mut out).unwrap();
    assert_eq!(ops(&out), vec![(Op::Fallback, 0)]);
    assert_eq!(run.state(0), Some(JobState::Running));
    assert!(!run.aborted());
    out.clear();
    // Its value: the run goes on.
    run.succeeded(0, &mut out).unwrap();
    assert_eq!(ops(&out), vec![(Op::Start, 1)]);

    // The fallback raising: the failure is final, no second fallback.
    let mut run = Run::new(plan(0), Some(1)).with_fallbacks(&[0]);
    out.clear();
    run.start(&mut out).unwrap();
    run.failed(0, false, &mut out).unwrap();
    out.clear();
    run.failed(0, false, &mut out).unwrap();
    assert!(!out.iter().any(|c| c.op == Op::Fallback));
    assert_eq!(run.state(0), Some(JobState::Failed));
    assert!(run.aborted());
}

#[test]
fn no_fallback_while_the_run_is_stopping() {
    let mut a = NodeDef::new("a", &[]);
    a.policy = Policy::new(None, 0, 0.0, 1.0).unwrap();
    let c = NodeDef::new("c", &[]);
    let b = NodeDef::new("b", &["a", "c"]);
    let plan = Arc::new(
        Graph::new(vec![a, c, b])
            .unwrap()
            .select(&["b"], &[] as &[&str])
            .unwrap(),
    );
    let mut run = Run::new(plan, Some(1)).with_fallbacks(&[0]);
    let mut out = Vec::new();
    run.start(&mut out).unwrap();
    out.clear();
    // c fails for good: the run aborts and a is cancelled.
    run.failed(1, false, &mut out).unwrap();
    assert!(out.iter().any(|c| c.op == Op::Cancel && c.job == 0));
    out.clear();
    // a's attempt ends with an error all the same: no fallback.
    run.failed(0, false, &mut out).unwrap();
    assert!(!out.iter().any(|c| c.op == Op::Fallback));
}
