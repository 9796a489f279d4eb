//! Exact retry / backoff / timeout sequences under tokio's paused virtual clock.
//!
//! A tiny executor drives a [`Run`] with simulated attempts: each (job, attempt) sleeps a
//! scripted virtual duration and then returns or raises; timeouts use
//! `tokio::time::timeout` (which drops the attempt, so it is drained at once). With a
//! seeded run the jittered delays are recomputed independently and every attempt's start
//! time is asserted against the schedule they imply.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::SeedableRng;
use sdax_core::{Command, Graph, NodeDef, Op, Plan, Policy, Run};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

mod common;

use common::{spawn_attempt, spawn_sleep, Event, Outcome};

#[derive(Clone, Debug, PartialEq)]
enum Entry {
    Start { job: u32, attempt: u32 },
    Sleep { job: u32, delay: f64 },
    Cancel { job: u32 },
    StopSleep { job: u32 },
    Ended { job: u32 },
}

struct Script {
    /// (job, attempt) -> (virtual seconds, outcome); default: returns at once.
    attempts: HashMap<(u32, u32), (f64, Outcome)>,
    timeout_retryable: bool,
    cancel_at: Option<f64>,
}

impl Script {
    fn new() -> Self {
        Script {
            attempts: HashMap::new(),
            timeout_retryable: true,
            cancel_at: None,
        }
    }

    fn attempt(mut self, job: u32, attempt: u32, secs: f64, outcome: Outcome) -> Self {
        self.attempts.insert((job, attempt), (secs, outcome));
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

    async fn carry_out(&mut self, script: &Script, cmds: Vec<Command>) {
        for c in cmds {
            let t = self.now();
            match c.op {
                Op::Start => {
                    self.log.push((
                        t,
                        Entry::Start {
                            job: c.job,
                            attempt: c.attempt,
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
                        let _ = h.await; // drained
                    }
                    let mut out = Vec::new();
                    self.run.drained(c.job as i64, &mut out).unwrap();
                    assert!(out.is_empty());
                }
                Op::StopSleep => {
                    self.log.push((t, Entry::StopSleep { job: c.job }));
                    if let Some(h) = self.timers.remove(&c.job) {
                        h.abort();
                    }
                }
                other => panic!("{other:?} without a deadline or a retry_after hook"),
            }
        }
    }
}

/// Drive `plan` to the end of its shutdown; returns the timestamped log and the run.
async fn execute(plan: Arc<Plan>, seed: u64, script: Script) -> (Vec<(f64, Entry)>, Run) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut ex = Exec {
        run: Run::new(plan, Some(seed)),
        tx,
        t0: Instant::now(),
        log: Vec::new(),
        tasks: HashMap::new(),
        timers: HashMap::new(),
    };
    let mut out = Vec::new();
    ex.run.start(&mut out).unwrap();
    ex.carry_out(&script, std::mem::take(&mut out)).await;
    let cancel_at = script.cancel_at.map(|s| ex.t0 + Duration::from_secs_f64(s));
    let mut cancelled = false;
    let mut shutdown = false;
    loop {
        if !shutdown && ex.run.pending() == 0 {
            shutdown = true;
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
                ex.run
                    .failed(job as i64, script.timeout_retryable, &mut out)
                    .unwrap();
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

fn starts(log: &[(f64, Entry)], job: u32) -> Vec<f64> {
    log.iter()
        .filter_map(|(t, e)| match e {
            Entry::Start { job: j, .. } if *j == job => Some(*t),
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

#[tokio::test(start_paused = true)]
async fn timeouts_and_retries_follow_the_seeded_schedule() {
    let policy = Policy::new(Some(1.0), 3, 0.5, 2.0).unwrap();
    let seed = 2024;
    let script = Script::new()
        .attempt(0, 0, 5.0, Outcome::Return) // times out at 1.0
        .attempt(0, 1, 0.25, Outcome::Raise { retryable: true })
        .attempt(0, 2, 5.0, Outcome::Return) // times out
        .attempt(0, 3, 0.1, Outcome::Return);
    let (log, run) = execute(single(policy, None), seed, script).await;

    // the delays are exactly the seeded draws of the formula
    let mut rng = SmallRng::seed_from_u64(seed);
    let expected: Vec<f64> = (0..3).map(|k| policy.delay(k, &mut rng)).collect();
    let delays = sleeps(&log, 0);
    assert_eq!(delays, expected);
    for (k, d) in delays.iter().enumerate() {
        let (lo, hi) = policy.delay_bounds(k as u32);
        assert!(lo <= *d && *d <= hi);
    }
    let s = starts(&log, 0);
    assert_eq!(s.len(), 4, "1 + retries attempts");
    let e0 = 1.0 + expected[0];
    let e1 = e0 + 0.25 + expected[1];
    let e2 = e1 + 1.0 + expected[2];
    assert_eq!(s[0], 0.0);
    assert!(close(s[1], e0, 2), "{} vs {e0}", s[1]);
    assert!(close(s[2], e1, 4), "{} vs {e1}", s[2]);
    assert!(close(s[3], e2, 6), "{} vs {e2}", s[3]);
    // the wait sits outside the timeout: each retry starts a full delay after the failure
    let ends: Vec<f64> = log
        .iter()
        .filter_map(|(t, e)| matches!(e, Entry::Ended { job: 0 }).then_some(*t))
        .collect();
    for k in 0..3 {
        assert!(close(s[k + 1] - ends[k], delays[k], 1), "retry {k}");
    }
    assert_eq!(run.succeeded_jobs(), [0]);
    assert_eq!(run.attempts(0).unwrap(), 4);
    assert!(!run.aborted());
}

#[tokio::test(start_paused = true)]
async fn exhausted_retries_fail_after_the_last_attempt() {
    let policy = Policy::new(None, 2, 1.0, 3.0).unwrap();
    let fail = Outcome::Raise { retryable: true };
    let script = Script::new()
        .attempt(0, 0, 0.5, fail)
        .attempt(0, 1, 0.5, fail)
        .attempt(0, 2, 0.5, fail);
    let (log, run) = execute(single(policy, None), 7, script).await;
    let delays = sleeps(&log, 0);
    assert_eq!(delays.len(), 2);
    assert!((0.5..=1.0).contains(&delays[0]) && (1.5..=3.0).contains(&delays[1]));
    let s = starts(&log, 0);
    assert_eq!(s.len(), 3);
    assert!(close(s[2], 1.0 + delays[0] + delays[1], 4));
    assert!(run.aborted());
    assert!(run.succeeded_jobs().is_empty());
    let (end, _) = log.last().unwrap();
    assert!(close(*end, 1.5 + delays[0] + delays[1], 5));
}

#[tokio::test(start_paused = true)]
async fn nonretryable_timeout_cancels_siblings_then_releases() {
    // `slow` times out (timeouts not retryable here); `conn` (owned) is cancelled and
    // drained at that moment; its release then runs for 0.5 s.
    let g = Graph::new(vec![
        NodeDef::new("slow", &[]).with_policy(Policy::new(Some(1.0), 3, 0.1, 2.0).unwrap()),
        NodeDef::new("conn", &[]).owned(Policy::new(Some(2.0), 0, 1.0, 2.0).unwrap()),
        NodeDef::new("never", &["conn"]),
    ])
    .unwrap();
    let plan = Arc::new(g.select(&["slow", "never"], &[] as &[&str]).unwrap());
    let slow = plan.index("slow").unwrap();
    let conn = plan.index("conn").unwrap();
    let never = plan.index("never").unwrap();
    let n = plan.len() as u32;
    let mut script = Script::new()
        .attempt(slow, 0, 10.0, Outcome::Return)
        .attempt(conn, 0, 10.0, Outcome::Return)
        .attempt(n + conn, 0, 0.5, Outcome::Return);
    script.timeout_retryable = false;
    let (log, run) = execute(Arc::clone(&plan), 1, script).await;
    assert_eq!(starts(&log, slow).len(), 1);
    assert!(
        starts(&log, never).is_empty(),
        "nothing starts after the failure"
    );
    let cancel_t = log
        .iter()
        .find_map(|(t, e)| matches!(e, Entry::Cancel { job } if *job == conn).then_some(*t))
        .unwrap();
    assert!(close(cancel_t, 1.0, 1));
    let release = starts(&log, n + conn);
    assert_eq!(release.len(), 1);
    assert!(close(release[0], 1.0, 1));
    let (end, last) = log.last().unwrap();
    assert_eq!(*last, Entry::Ended { job: n + conn });
    assert!(close(*end, 1.5, 2));
    assert!(run.finished() && run.aborted());
}

#[tokio::test(start_paused = true)]
async fn cancellation_during_the_wait_stops_retrying() {
    let policy = Policy::new(None, 5, 1.0, 2.0).unwrap();
    let mut script = Script::new().attempt(0, 0, 0.0, Outcome::Raise { retryable: true });
    script.cancel_at = Some(0.2); // the wait is in [0.5, 1.0]
    let (log, run) = execute(single(policy, None), 3, script).await;
    assert_eq!(starts(&log, 0).len(), 1);
    let stop = log
        .iter()
        .find_map(|(t, e)| matches!(e, Entry::StopSleep { job: 0 }).then_some(*t))
        .unwrap();
    assert!(close(stop, 0.2, 1));
    assert!(run.aborted() && run.finished());
    assert_eq!(run.attempts(0).unwrap(), 1);
}

#[tokio::test(start_paused = true)]
async fn releases_wait_for_dependent_releases_and_retry_under_their_own_policy() {
    // conn <- tx <- query, cache unrelated. Releases: tx 0.2 s, cache 0.1 s, conn fails once
    // (retryable, delay in [0.05, 0.1]) then takes 0.3 s.
    let g = Graph::new(vec![
        NodeDef::new("conn", &[]).owned(Policy::new(None, 1, 0.1, 2.0).unwrap()),
        NodeDef::new("tx", &["conn"]).owned(Policy::default()),
        NodeDef::new("query", &["tx"]),
        NodeDef::new("cache", &[]).owned(Policy::default()),
    ])
    .unwrap();
    let plan = Arc::new(g.select(&["query", "cache"], &[] as &[&str]).unwrap());
    let idx = |s: &str| plan.index(s).unwrap();
    let n = plan.len() as u32;
    let (conn, tx, query, cache) = (idx("conn"), idx("tx"), idx("query"), idx("cache"));
    let script = Script::new()
        .attempt(conn, 0, 0.1, Outcome::Return)
        .attempt(tx, 0, 0.1, Outcome::Return)
        .attempt(query, 0, 1.0, Outcome::Return)
        .attempt(cache, 0, 0.05, Outcome::Return)
        .attempt(n + tx, 0, 0.2, Outcome::Return)
        .attempt(n + cache, 0, 0.1, Outcome::Return)
        .attempt(n + conn, 0, 0.0, Outcome::Raise { retryable: true })
        .attempt(n + conn, 1, 0.3, Outcome::Return);
    let (log, run) = execute(Arc::clone(&plan), 11, script).await;
    assert_eq!(run.succeeded_jobs().len(), 4);
    let forward_end = 1.2;
    assert!(close(starts(&log, n + tx)[0], forward_end, 3));
    assert!(close(starts(&log, n + cache)[0], forward_end, 3));
    let conn_starts = starts(&log, n + conn);
    assert_eq!(conn_starts.len(), 2);
    assert!(
        close(conn_starts[0], forward_end + 0.2, 4),
        "{conn_starts:?}"
    );
    let d = sleeps(&log, n + conn)[0];
    assert!((0.05..=0.1).contains(&d));
    assert!(close(conn_starts[1], forward_end + 0.2 + d, 5));
    assert!(run.finished());
    assert_eq!(run.attempts((n + conn) as i64).unwrap(), 2);
}
