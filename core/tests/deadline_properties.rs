//! Property tests for run deadlines, capped waits and hints: random graphs and policies,
//! a random deadline and a virtual clock moved by random attempt durations and late timers;
//! every command is checked against the time it was emitted at.

use std::collections::HashMap;
use std::sync::Arc;

use proptest::prelude::*;
use sdax_core::{Command, Graph, Hint, NodeDef, Op, Plan, Policy, Run};

#[derive(Clone, Debug)]
struct Spec {
    inputs: Vec<usize>,
    timeout: Option<f64>,
    retries: u32,
    max_delay: Option<f64>,
    hook: bool,
    owned: bool,
}

#[derive(Clone, Debug)]
struct Case {
    nodes: Vec<Spec>,
    deadline: f64,
    durations: Vec<f64>,
    outcomes: Vec<u8>,
    hints: Vec<Option<f64>>,
    lateness: Vec<f64>,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..8)
        .prop_flat_map(|n| {
            let nodes = (0..n)
                .map(|i| {
                    (
                        proptest::collection::vec(0..i.max(1), 0..=i.min(2)),
                        proptest::option::of(0.05f64..3.0),
                        0u32..4,
                        proptest::option::of(0.0f64..2.0),
                        any::<bool>(),
                        proptest::bool::weighted(0.3),
                    )
                        .prop_map(
                            move |(inputs, timeout, retries, max_delay, hook, owned)| Spec {
                                inputs: if i == 0 { vec![] } else { inputs },
                                timeout,
                                retries,
                                max_delay,
                                hook,
                                owned,
                            },
                        )
                })
                .collect::<Vec<_>>();
            (
                nodes,
                0.0f64..6.0,
                proptest::collection::vec(0.0f64..4.0, 64),
                proptest::collection::vec(0u8..5, 64),
                proptest::collection::vec(proptest::option::of(-1.0f64..5.0), 64),
                proptest::collection::vec(0.0f64..0.05, 64),
                any::<u64>(),
            )
        })
        .prop_map(
            |(nodes, deadline, durations, outcomes, hints, lateness, seed)| Case {
                nodes,
                deadline,
                durations,
                outcomes,
                hints,
                lateness,
                seed,
            },
        )
}

fn policy(s: &Spec, retries: u32) -> Policy {
    Policy::new(s.timeout, retries, 0.2, 2.0)
        .unwrap()
        .with_max_delay(s.max_delay)
        .unwrap()
        .with_retry_after(s.hook)
}

fn build(case: &Case) -> Arc<Plan> {
    let names: Vec<String> = (0..case.nodes.len()).map(|i| format!("n{i}")).collect();
    let defs: Vec<NodeDef> = case
        .nodes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let inputs: Vec<&str> = s.inputs.iter().map(|&j| names[j].as_str()).collect();
            let node = NodeDef::new(&names[i], &inputs);
            if s.owned {
                // owned acquisitions have no forward retries; their release does
                node.with_policy(policy(s, 0)).owned(policy(s, s.retries))
            } else {
                node.with_policy(policy(s, s.retries))
            }
        })
        .collect();
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    Arc::new(
        Graph::new(defs)
            .unwrap()
            .select(&all, &[] as &[&str])
            .unwrap(),
    )
}

const EPS: f64 = 1e-9;

enum Pending {
    Running { at: f64, timeout: Option<f64> },
    Sleeping { until: f64 },
}

fn drive(case: &Case) {
    let plan = build(case);
    let n = plan.len() as u32;
    let mut run = Run::new(Arc::clone(&plan), Some(case.seed));
    let deadline = case.deadline;
    run.set_deadline(Some(deadline));
    let mut now = 0.0f64;
    let mut k = 0usize;
    let next = |v: &[f64], k: &mut usize| {
        let x = v[*k % v.len()];
        *k += 1;
        x
    };
    let mut pending: HashMap<u32, Pending> = HashMap::new();
    let mut queue: Vec<Command> = Vec::new();
    run.clock(now);
    run.start(&mut queue).unwrap();
    let mut shutdown = false;
    let mut steps = 0;
    loop {
        steps += 1;
        assert!(steps < 10_000, "the run terminates");
        // carry out and check every command at the time it was emitted
        let mut i = 0;
        while i < queue.len() {
            let c = queue[i];
            i += 1;
            let forward = c.job < n;
            match c.op {
                Op::Start | Op::StartClipped => {
                    let own = if forward {
                        plan.policy(c.job).timeout()
                    } else {
                        plan.release(c.job - n).unwrap().timeout()
                    };
                    if forward && !shutdown {
                        let left = deadline - now;
                        assert!(left > 0.0, "no forward START at or past the deadline");
                        let t = c
                            .arg
                            .expect("a forward attempt under a deadline has a timeout");
                        assert!(
                            now + t <= deadline + EPS,
                            "the attempt ends by the deadline"
                        );
                        let clipped = own.is_none_or(|o| o > left);
                        assert_eq!(c.op == Op::StartClipped, clipped, "{c:?} at {now}");
                        assert_eq!(t, if clipped { left } else { own.unwrap() });
                    } else {
                        assert_eq!(c.op, Op::Start, "releases are never clipped");
                        assert_eq!(c.arg, own);
                    }
                    pending.insert(
                        c.job,
                        Pending::Running {
                            at: now,
                            timeout: c.arg,
                        },
                    );
                }
                Op::Sleep => {
                    let d = c.arg.unwrap();
                    assert!(d >= 0.0 && d.is_finite());
                    let s = &case.nodes[(if forward { c.job } else { c.job - n }) as usize];
                    if let Some(cap) = s.max_delay {
                        assert!(d <= cap + EPS, "every wait is capped: {d} > {cap}");
                    }
                    if forward {
                        assert!(
                            now + d < deadline,
                            "a forward wait ends before the deadline"
                        );
                    }
                    pending.insert(c.job, Pending::Sleeping { until: now + d });
                }
                Op::Hint => {
                    let hint = match case.hints[k % case.hints.len()] {
                        Some(v) => Hint::Wait(v),
                        None => Hint::Backoff,
                    };
                    k += 1;
                    let mut out = Vec::new();
                    run.hinted(c.job as i64, hint, &mut out).unwrap();
                    if let (Hint::Wait(v), Some(cmd)) = (hint, out.first()) {
                        if cmd.op == Op::Sleep {
                            let s = &case.nodes[(if forward { c.job } else { c.job - n }) as usize];
                            let expect = s.max_delay.map_or(v, |m| v.min(m));
                            assert_eq!(cmd.arg, Some(expect), "a hinted wait is exact");
                        }
                        if v < 0.0 {
                            assert_eq!(cmd.op, Op::BadHint);
                        }
                    }
                    queue.splice(i..i, out);
                }
                Op::NoRoom => {
                    assert!(forward);
                    match c.arg {
                        Some(d) => assert!(now + d >= deadline),
                        None => assert!(now >= deadline),
                    }
                }
                Op::Expire => {
                    assert!(
                        forward && now >= deadline,
                        "EXPIRE only once the deadline passed"
                    );
                }
                Op::BadHint => {}
                Op::NoBudget | Op::Fallback => unreachable!("no retry budget or fallback here"),
                Op::Draw | Op::Close | Op::StopDraw => unreachable!("no fan-out here"),
                Op::Cancel => {
                    pending.remove(&c.job);
                    let mut out = Vec::new();
                    run.drained(c.job as i64, &mut out).unwrap();
                    assert!(out.is_empty());
                }
                Op::StopSleep => {
                    pending.remove(&c.job);
                }
            }
        }
        queue.clear();
        if !shutdown && run.pending() == 0 {
            assert!(pending.is_empty());
            shutdown = true;
            run.clock(now);
            run.begin_shutdown(&mut queue).unwrap();
            continue;
        }
        if shutdown && run.finished() {
            break;
        }
        // the next event: the earliest of the pending ones (ties by job id)
        // outcomes: 0, 1 return; 2 raises retryably; 3 raises; 4 overruns its timeout (a
        // blocking call, or one that swallows its cancellation) and returns
        let mut best: Option<(f64, u32, bool, u8)> = None;
        let mut jobs: Vec<u32> = pending.keys().copied().collect();
        jobs.sort();
        for job in jobs {
            let (t, timed_out, outcome) = match pending[&job] {
                Pending::Running { at, timeout } => {
                    let d = next(&case.durations, &mut k);
                    let outcome = case.outcomes[k % case.outcomes.len()];
                    k += 1;
                    match timeout {
                        Some(t) if d >= t && outcome != 4 => (at + t, true, outcome),
                        _ => (at + d, false, outcome),
                    }
                }
                Pending::Sleeping { until } => (until + next(&case.lateness, &mut k), false, 0),
            };
            if best.is_none_or(|(bt, _, _, _)| t < bt) {
                best = Some((t, job, timed_out, outcome));
            }
        }
        let (t, job, timed_out, outcome) = best.expect("something is pending");
        now = now.max(t);
        run.clock(now);
        match pending.remove(&job).unwrap() {
            Pending::Running { .. } => {
                if timed_out || outcome == 2 || outcome == 3 {
                    let retryable = timed_out || outcome == 2;
                    run.failed(job as i64, retryable, &mut queue).unwrap();
                } else {
                    run.succeeded(job as i64, &mut queue).unwrap();
                }
            }
            Pending::Sleeping { .. } => {
                run.elapsed(job as i64, &mut queue).unwrap();
            }
        }
    }
    assert!(run.aborted() || run.succeeded_jobs().len() == plan.len());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn deadlines_bound_every_forward_attempt_and_wait(case in case()) {
        drive(&case);
    }
}
