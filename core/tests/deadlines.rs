//! Deadlines, capped waits and `retry_after` hints under tokio's paused virtual clock.
//!
//! The executor is the one of `virtual_time.rs`, extended with what a run with a deadline
//! needs: it tells the run the (virtual) time before every event, carries out clipped
//! STARTs, answers HINTs from a script and records NO_ROOM / EXPIRE / BAD_HINT. Jittered
//! waits are recomputed independently from the seed; hinted waits are exact.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::SeedableRng;
use sdax_core::{Command, Graph, Hint, NodeDef, Op, Plan, Policy, Run};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

mod common;

use common::{spawn_attempt, spawn_sleep, Event, Outcome};

#[derive(Clone, Debug, PartialEq)]
enum Entry {
    Start {
        job: u32,
        attempt: u32,
        timeout: Option<f64>,
        clipped: bool,
    },
    Sleep {
        job: u32,
        delay: f64,
    },
    Cancel {
        job: u32,
    },
    StopSleep {
        job: u32,
    },
    Hint {
        job: u32,
        attempt: u32,
    },
    NoRoom {
        job: u32,
        attempt: u32,
        delay: Option<f64>,
    },
    Expire {
        job: u32,
        attempt: u32,
    },
    BadHint {
        job: u32,
        attempt: u32,
    },
    Ended {
        job: u32,
    },
}

struct Script {
    attempts: HashMap<(u32, u32), (f64, Outcome)>,
    hints: HashMap<(u32, u32), Hint>,
    deadline: Option<f64>,
    cancel_at: Option<f64>,
}

impl Script {
    fn new() -> Self {
        Script {
            attempts: HashMap::new(),
            hints: HashMap::new(),
            deadline: None,
            cancel_at: None,
        }
    }

    fn attempt(mut self, job: u32, attempt: u32, secs: f64, outcome: Outcome) -> Self {
        self.attempts.insert((job, attempt), (secs, outcome));
        self
    }

    fn hint(mut self, job: u32, attempt: u32, hint: Hint) -> Self {
        self.hints.insert((job, attempt), hint);
        self
    }

    fn deadline(mut self, secs: f64) -> Self {
        self.deadline = Some(secs);
        self
    }
}

struct Exec {
    run: Run,
    tx: mpsc::UnboundedSender<Event>,
    t0: Instant,
    log: Vec<(f64, Entry)>,
    tasks: HashMap<u32, JoinHandle<()>>,
    timers: HashMap<u32, JoinHandle<()>>,
}

impl Exec {
    fn now(&self) -> f64 {
        (Instant::now() - self.t0).as_secs_f64()
    }

    /// Tell the run the time, as a driver does before every event it reports.
    fn tick(&mut self) {
        let now = self.now();
        self.run.clock(now);
    }

    async fn carry_out(&mut self, script: &Script, cmds: Vec<Command>) {
        let mut queue: std::collections::VecDeque<Command> = cmds.into();
        while let Some(c) = queue.pop_front() {
            let t = self.now();
            match c.op {
                Op::Start | Op::StartClipped => {
                    self.log.push((
                        t,
                        Entry::Start {
                            job: c.job,
                            attempt: c.attempt,
                            timeout: c.arg,
                            clipped: c.op == Op::StartClipped,
                        },
                    ));
                    let (secs, outcome) = script
                        .attempts
                        .get(&(c.job, c.attempt))
                        .copied()
                        .unwrap_or((0.0, Outcome::Return));
                    let attempt = spawn_attempt(self.tx.clone(), c.job, secs, outcome, c.arg);
                    self.tasks.insert(c.job, attempt);
                }
                Op::Sleep => {
                    let delay = c.arg.unwrap();
                    self.log.push((t, Entry::Sleep { job: c.job, delay }));
                    let wait = spawn_sleep(self.tx.clone(), c.job, delay);
                    self.timers.insert(c.job, wait);
                }
                Op::Cancel => {
                    self.log.push((t, Entry::Cancel { job: c.job }));
                    if let Some(h) = self.tasks.remove(&c.job) {
                        h.abort();
                        let _ = h.await;
                    }
                    let mut out = Vec::new();
                    self.tick();
                    self.run.drained(c.job as i64, &mut out).unwrap();
                    assert!(out.is_empty());
                }
                Op::StopSleep => {
                    self.log.push((t, Entry::StopSleep { job: c.job }));
                    if let Some(h) = self.timers.remove(&c.job) {
                        h.abort();
                    }
                }
                Op::Hint => {
                    self.log.push((
                        t,
                        Entry::Hint {
                            job: c.job,
                            attempt: c.attempt,
                        },
                    ));
                    let hint = script
                        .hints
                        .get(&(c.job, c.attempt))
                        .copied()
                        .unwrap_or(Hint::Backoff);
                    let mut out = Vec::new();
                    self.tick();
                    self.run.hinted(c.job as i64, hint, &mut out).unwrap();
                    for (k, cmd) in out.into_iter().enumerate() {
                        queue.insert(k, cmd);
                    }
                }
                Op::NoRoom => self.log.push((
                    t,
                    Entry::NoRoom {
                        job: c.job,
                        attempt: c.attempt,
                        delay: c.arg,
                    },
                )),
                Op::Expire => self.log.push((
                    t,
                    Entry::Expire {
                        job: c.job,
                        attempt: c.attempt,
                    },
                )),
                Op::BadHint => self.log.push((
                    t,
                    Entry::BadHint {
                        job: c.job,
                        attempt: c.attempt,
                    },
                )),
                Op::NoBudget | Op::Fallback => unreachable!("no retry budget or fallback here"),
                Op::Draw | Op::Close | Op::StopDraw => unreachable!("no fan-out here"),
            }
        }
    }
}

/// Drive `plan` to the end of its shutdown; returns the timestamped log and the run.
async fn execute(plan: Arc<Plan>, seed: u64, script: Script) -> (Vec<(f64, Entry)>, Run) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut run = Run::new(plan, Some(seed));
    run.set_deadline(script.deadline);
    let mut ex = Exec {
        run,
        tx,
        t0: Instant::now(),
        log: Vec::new(),
        tasks: HashMap::new(),
        timers: HashMap::new(),
    };
    let mut out = Vec::new();
    ex.tick();
    ex.run.start(&mut out).unwrap();
    ex.carry_out(&script, std::mem::take(&mut out)).await;
    let cancel_at = script.cancel_at.map(|s| ex.t0 + Duration::from_secs_f64(s));
    let mut cancelled = false;
    let mut shutdown = false;
    loop {
        if !shutdown && ex.run.pending() == 0 {
            shutdown = true;
            ex.tick();
            ex.run.begin_shutdown(&mut out).unwrap();
            ex.carry_out(&script, std::mem::take(&mut out)).await;
        }
        if shutdown && ex.run.finished() {
            break;
        }
        let event = tokio::select! {
            ev = rx.recv() => ev.unwrap(),
            _ = tokio::time::sleep_until(cancel_at.unwrap_or(ex.t0)), if cancel_at.is_some() && !cancelled => {
                cancelled = true;
                ex.run.cancel(&mut out);
                ex.carry_out(&script, std::mem::take(&mut out)).await;
                continue;
            }
        };
        let t = ex.now();
        ex.tick();
        match event {
            Event::Returned(job) => {
                ex.tasks.remove(&job);
                ex.log.push((t, Entry::Ended { job }));
                ex.run.succeeded(job as i64, &mut out).unwrap();
            }
            Event::Raised(job, retryable) => {
                ex.tasks.remove(&job);
                ex.log.push((t, Entry::Ended { job }));
                ex.run.failed(job as i64, retryable, &mut out).unwrap();
            }
            Event::TimedOut(job) => {
                ex.tasks.remove(&job);
                ex.log.push((t, Entry::Ended { job }));
                ex.run.failed(job as i64, true, &mut out).unwrap();
            }
            Event::Elapsed(job) => {
                ex.timers.remove(&job);
                ex.run.elapsed(job as i64, &mut out).unwrap();
            }
        }
        ex.carry_out(&script, std::mem::take(&mut out)).await;
    }
    (ex.log, ex.run)
}

/// tokio's timer wheel has millisecond resolution: each timer may fire up to 1 ms late.
fn close(actual: f64, expected: f64, timers: u32) -> bool {
    actual >= expected - 1e-9 && actual <= expected + 1e-3 * f64::from(timers) + 1e-9
}

fn starts(log: &[(f64, Entry)], job: u32) -> Vec<(f64, Option<f64>, bool)> {
    log.iter()
        .filter_map(|(t, e)| match e {
            Entry::Start {
                job: j,
                timeout,
                clipped,
                ..
            } if *j == job => Some((*t, *timeout, *clipped)),
            _ => None,
        })
        .collect()
}

fn sleeps(log: &[(f64, Entry)], job: u32) -> Vec<f64> {
    log.iter()
        .filter_map(|(_, e)| match e {
            Entry::Sleep { job: j, delay } if *j == job => Some(*delay),
            _ => None,
        })
        .collect()
}

fn find(log: &[(f64, Entry)], pred: impl Fn(&Entry) -> bool) -> Option<(f64, Entry)> {
    log.iter().find(|(_, e)| pred(e)).cloned()
}

fn single(policy: Policy, release: Option<Policy>) -> Arc<Plan> {
    let mut node = NodeDef::new("fetch", &[]).with_policy(policy);
    node.release = release;
    Arc::new(
        Graph::new(vec![node])
            .unwrap()
            .select(&["fetch"], &[] as &[&str])
            .unwrap(),
    )
}

const FAIL: Outcome = Outcome::Raise { retryable: true };

#[tokio::test(start_paused = true)]
async fn capped_waits_are_the_seeded_draws_of_the_capped_formula() {
    let policy = Policy::new(None, 5, 1.0, 3.0)
        .unwrap()
        .with_max_delay(Some(4.0))
        .unwrap();
    let seed = 99;
    let mut script = Script::new();
    for k in 0..6 {
        script = script.attempt(0, k, 0.0, FAIL);
    }
    let (log, run) = execute(single(policy, None), seed, script).await;
    let mut rng = SmallRng::seed_from_u64(seed);
    let uncapped = Policy::new(None, 5, 1.0, 3.0).unwrap();
    let mut expected = Vec::new();
    for k in 0..5 {
        // the same jitter draw, applied to min(max_delay, base)
        let d = uncapped.delay(k, &mut rng);
        let jitter = d / uncapped.base_delay(k);
        expected.push(uncapped.base_delay(k).min(4.0) * jitter);
    }
    let delays = sleeps(&log, 0);
    assert_eq!(delays.len(), 5);
    for (k, (d, e)) in delays.iter().zip(&expected).enumerate() {
        assert!((d - e).abs() < 1e-12, "retry {k}: {d} vs {e}");
        assert!(*d <= 4.0 && *d >= 0.5 * uncapped.base_delay(k as u32).min(4.0));
    }
    // waits 2..5 would be 9, 27, 81 s uncapped: all are at most 4 s
    let s = starts(&log, 0);
    let mut t = 0.0;
    for k in 0..5 {
        t += delays[k];
        assert!(
            close(s[k + 1].0, t, 2 * (k as u32 + 1)),
            "attempt {}",
            k + 2
        );
    }
    assert!(run.aborted());
    assert_eq!(run.attempts(0).unwrap(), 6);
}

#[tokio::test(start_paused = true)]
async fn retry_after_hints_set_exact_waits_capped_by_max_delay() {
    let policy = Policy::new(None, 4, 1.0, 2.0)
        .unwrap()
        .with_max_delay(Some(5.0))
        .unwrap()
        .with_retry_after(true);
    let seed = 5;
    let script = Script::new()
        .attempt(0, 0, 0.0, FAIL)
        .attempt(0, 1, 0.0, FAIL)
        .attempt(0, 2, 0.0, FAIL)
        .attempt(0, 3, 0.0, FAIL)
        .hint(0, 0, Hint::Wait(3.0)) // exact, no jitter
        .hint(0, 1, Hint::Wait(60.0)) // capped to 5
        .hint(0, 2, Hint::Backoff) // the seeded backoff draw for retry 2
        .hint(0, 3, Hint::Wait(0.0));
    let (log, run) = execute(single(policy, None), seed, script).await;
    let mut rng = SmallRng::seed_from_u64(seed);
    let backoff = policy.delay(2, &mut rng); // the first and only draw
    assert_eq!(sleeps(&log, 0), [3.0, 5.0, backoff, 0.0]);
    let hints: Vec<u32> = log
        .iter()
        .filter_map(|(_, e)| match e {
            Entry::Hint { attempt, .. } => Some(*attempt),
            _ => None,
        })
        .collect();
    assert_eq!(hints, [0, 1, 2, 3], "asked once per retryable failure");
    let s = starts(&log, 0);
    assert!(close(s[1].0, 3.0, 1) && close(s[2].0, 8.0, 2));
    assert!(close(s[3].0, 8.0 + backoff, 3) && close(s[4].0, 8.0 + backoff, 4));
    assert_eq!(run.succeeded_jobs(), [0]);
}

#[tokio::test(start_paused = true)]
async fn hooks_are_not_asked_for_failures_that_are_not_retried() {
    let policy = Policy::new(None, 1, 0.5, 2.0)
        .unwrap()
        .with_retry_after(true);
    // nonretryable first failure: no hint, final
    let script = Script::new().attempt(0, 0, 0.0, Outcome::Raise { retryable: false });
    let (log, run) = execute(single(policy, None), 1, script).await;
    assert!(find(&log, |e| matches!(e, Entry::Hint { .. })).is_none());
    assert!(run.aborted());
    // retries exhausted: asked for the first failure only
    let script = Script::new()
        .attempt(0, 0, 0.0, FAIL)
        .attempt(0, 1, 0.0, FAIL)
        .hint(0, 0, Hint::Wait(0.25));
    let (log, _) = execute(single(policy, None), 1, script).await;
    let hints = log
        .iter()
        .filter(|(_, e)| matches!(e, Entry::Hint { .. }))
        .count();
    assert_eq!(hints, 1);
    assert_eq!(sleeps(&log, 0), [0.25]);
}

#[tokio::test(start_paused = true)]
async fn an_unusable_hint_makes_the_failure_final() {
    for bad in [
        Hint::Unusable,
        Hint::Wait(-1.0),
        Hint::Wait(f64::NAN),
        Hint::Wait(f64::INFINITY),
    ] {
        let policy = Policy::new(None, 3, 0.5, 2.0)
            .unwrap()
            .with_retry_after(true);
        let g = Graph::new(vec![
            NodeDef::new("fetch", &[]).with_policy(policy),
            NodeDef::new("other", &[]),
        ])
        .unwrap();
        let plan = Arc::new(g.select(&["fetch", "other"], &[] as &[&str]).unwrap());
        let script = Script::new()
            .attempt(0, 0, 1.0, FAIL)
            .attempt(1, 0, 10.0, Outcome::Return)
            .hint(0, 0, bad);
        let (log, run) = execute(plan, 1, script).await;
        let (t, _) = find(&log, |e| *e == Entry::BadHint { job: 0, attempt: 0 }).unwrap();
        assert!(close(t, 1.0, 1), "{bad:?}");
        assert!(sleeps(&log, 0).is_empty(), "{bad:?}");
        assert!(find(&log, |e| *e == Entry::Cancel { job: 1 }).is_some());
        assert_eq!(run.attempts(0).unwrap(), 1);
        assert!(run.aborted());
    }
}

#[tokio::test(start_paused = true)]
async fn attempts_are_clipped_to_the_time_left() {
    // timeout 1 s per attempt, waits 0.1 s, deadline 2.5 s: attempts at 0, 1.1, 2.2; the
    // third gets 0.3 s (clipped) and times out at the deadline; no retry fits after it.
    let policy = Policy::new(Some(1.0), 10, 0.1, 1.0)
        .unwrap()
        .with_max_delay(Some(0.1))
        .unwrap();
    let mut script = Script::new().deadline(2.5);
    for k in 0..10 {
        script = script.attempt(0, k, 60.0, Outcome::Return);
    }
    let (log, run) = execute(single(policy, None), 3, script).await;
    let s = starts(&log, 0);
    let delays = sleeps(&log, 0);
    assert_eq!(s.len(), delays.len() + 1);
    for (i, (t, timeout, clipped)) in s.iter().enumerate() {
        let left = 2.5 - t;
        if i + 1 < s.len() {
            assert!(!clipped && *timeout == Some(1.0), "attempt {i}: {s:?}");
        } else {
            assert!(*clipped, "the last attempt is clipped: {s:?}");
            assert!((timeout.unwrap() - left).abs() < 1e-9);
        }
    }
    let (t, e) = find(&log, |e| matches!(e, Entry::NoRoom { .. })).unwrap();
    assert!(close(t, 2.5, s.len() as u32 * 2));
    assert_eq!(
        e,
        Entry::NoRoom {
            job: 0,
            attempt: s.len() as u32 - 1,
            delay: None
        }
    );
    assert!(run.aborted() && run.finished());
    let (end, _) = log.last().unwrap();
    assert!(
        *end <= 2.5 + 1e-2,
        "the forward phase ends by the deadline: {end}"
    );
}

#[tokio::test(start_paused = true)]
async fn attempts_without_a_timeout_are_clipped_too() {
    let policy = Policy::new(None, 0, 1.0, 2.0).unwrap();
    let script = Script::new()
        .deadline(1.5)
        .attempt(0, 0, 100.0, Outcome::Return);
    let (log, run) = execute(single(policy, None), 3, script).await;
    assert_eq!(starts(&log, 0), [(0.0, Some(1.5), true)]);
    let ended = log
        .iter()
        .find_map(|(t, e)| matches!(e, Entry::Ended { job: 0 }).then_some(*t))
        .unwrap();
    assert!(close(ended, 1.5, 1));
    assert!(run.aborted());
}

#[tokio::test(start_paused = true)]
async fn a_retry_whose_wait_would_pass_the_deadline_is_not_taken() {
    let policy = Policy::new(None, 5, 1.0, 2.0)
        .unwrap()
        .with_retry_after(true);
    let g = Graph::new(vec![
        NodeDef::new("fetch", &[]).with_policy(policy),
        NodeDef::new("slow", &[]),
    ])
    .unwrap();
    let plan = Arc::new(g.select(&["fetch", "slow"], &[] as &[&str]).unwrap());
    // first retry: hinted 2 s, fits (ends at 3 < 10); second: hinted 30 s, does not
    let script = Script::new()
        .deadline(10.0)
        .attempt(0, 0, 1.0, FAIL)
        .attempt(0, 1, 1.0, FAIL)
        .attempt(1, 0, 60.0, Outcome::Return)
        .hint(0, 0, Hint::Wait(2.0))
        .hint(0, 1, Hint::Wait(30.0));
    let (log, run) = execute(plan, 1, script).await;
    assert_eq!(sleeps(&log, 0), [2.0]);
    let (t, e) = find(&log, |e| matches!(e, Entry::NoRoom { .. })).unwrap();
    assert!(close(t, 4.0, 3), "failed at once, not at the deadline: {t}");
    assert_eq!(
        e,
        Entry::NoRoom {
            job: 0,
            attempt: 1,
            delay: Some(30.0)
        }
    );
    let (tc, _) = find(&log, |e| *e == Entry::Cancel { job: 1 }).unwrap();
    assert!(close(tc, 4.0, 3));
    // the sibling had been clipped to the deadline
    assert_eq!(starts(&log, 1), [(0.0, Some(10.0), true)]);
    assert_eq!(run.attempts(0).unwrap(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_backoff_wait_past_the_deadline_is_not_taken() {
    // waits in [2, 4] after the first failure at 1 s; deadline 2.5 s
    let policy = Policy::new(None, 3, 4.0, 2.0).unwrap();
    let script = Script::new().deadline(2.5).attempt(0, 0, 1.0, FAIL);
    let (log, _) = execute(single(policy, None), 8, script).await;
    let mut rng = SmallRng::seed_from_u64(8);
    let d = policy.delay(0, &mut rng);
    let (t, e) = find(&log, |e| matches!(e, Entry::NoRoom { .. })).unwrap();
    assert!(close(t, 1.0, 1));
    assert_eq!(
        e,
        Entry::NoRoom {
            job: 0,
            attempt: 0,
            delay: Some(d)
        }
    );
    assert!(sleeps(&log, 0).is_empty());
}

#[tokio::test(start_paused = true)]
async fn releases_still_run_after_expiry_under_their_own_policy() {
    // conn (owned) <- query; query is clipped at the deadline (2 s). conn's release then
    // fails once (wait exactly 3 s by its hint) and succeeds: 3 s past the deadline, it is
    // bound by its own policy only (timeout 10 s, not clipped).
    let g = Graph::new(vec![
        NodeDef::new("conn", &[]).owned(
            Policy::new(Some(10.0), 1, 1.0, 2.0)
                .unwrap()
                .with_retry_after(true),
        ),
        NodeDef::new("query", &["conn"]),
    ])
    .unwrap();
    let plan = Arc::new(g.select(&["query"], &[] as &[&str]).unwrap());
    let (conn, query) = (plan.index("conn").unwrap(), plan.index("query").unwrap());
    let n = plan.len() as u32;
    let script = Script::new()
        .deadline(2.0)
        .attempt(conn, 0, 0.5, Outcome::Return)
        .attempt(query, 0, 60.0, Outcome::Return)
        .attempt(n + conn, 0, 1.0, FAIL)
        .attempt(n + conn, 1, 0.5, Outcome::Return)
        .hint(n + conn, 0, Hint::Wait(3.0));
    let (log, run) = execute(Arc::clone(&plan), 2, script).await;
    assert_eq!(starts(&log, conn), [(0.0, Some(2.0), true)]);
    let q = starts(&log, query);
    assert!(q[0].2 && (q[0].1.unwrap() - 1.5).abs() < 1e-3);
    let rel = starts(&log, n + conn);
    assert_eq!(rel.len(), 2);
    assert!(close(rel[0].0, 2.0, 2) && rel[0].1 == Some(10.0) && !rel[0].2);
    assert!(close(rel[1].0, 6.0, 4) && rel[1].1 == Some(10.0) && !rel[1].2);
    assert_eq!(sleeps(&log, n + conn), [3.0]);
    assert!(run.finished() && run.aborted());
    let (end, _) = log.last().unwrap();
    assert!(close(*end, 6.5, 6));
}

#[tokio::test(start_paused = true)]
async fn caller_cancellation_before_the_deadline_still_stops_clipped_attempts() {
    let policy = Policy::new(Some(5.0), 2, 1.0, 2.0).unwrap();
    let mut script = Script::new()
        .deadline(3.0)
        .attempt(0, 0, 60.0, Outcome::Return);
    script.cancel_at = Some(1.0);
    let (log, run) = execute(single(policy, None), 1, script).await;
    assert_eq!(starts(&log, 0), [(0.0, Some(3.0), true)]);
    let (t, _) = find(&log, |e| *e == Entry::Cancel { job: 0 }).unwrap();
    assert!(close(t, 1.0, 1));
    assert!(find(&log, |e| matches!(
        e,
        Entry::NoRoom { .. } | Entry::Expire { .. }
    ))
    .is_none());
    assert!(run.aborted() && run.finished());
}

#[tokio::test(start_paused = true)]
async fn no_deadline_changes_nothing() {
    let policy = Policy::new(Some(1.0), 2, 0.5, 2.0).unwrap();
    let script =
        Script::new()
            .attempt(0, 0, 5.0, Outcome::Return)
            .attempt(0, 1, 0.1, Outcome::Return);
    let (log, run) = execute(single(policy, None), 4, script).await;
    let s = starts(&log, 0);
    assert_eq!(s.len(), 2);
    assert!(s.iter().all(|(_, t, c)| *t == Some(1.0) && !c));
    assert_eq!(run.succeeded_jobs(), [0]);
    assert_eq!(run.deadline(), None);
}
