//! Property tests: random DAGs (owned nodes, borrows, replaced nodes) driven by random
//! event orders, checking the run protocol's invariants.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use proptest::prelude::*;
use sdax_core::{Command, Failure, Graph, GraphError, JobState, NodeDef, Op, Plan, Policy, Run};

#[derive(Clone, Debug)]
struct NodeSpec {
    inputs: Vec<usize>,
    externals: u8,
    owned: Option<u32>,
    borrows: Vec<usize>,
    retries: u32,
}

#[derive(Clone, Debug)]
struct Case {
    nodes: Vec<NodeSpec>,
    finals: Vec<usize>,
    replaced: Vec<usize>,
    choices: Vec<u16>,
    seed: u64,
    instant: bool,
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..16)
        .prop_flat_map(|n| {
            let nodes = (0..n)
                .map(|i| {
                    (
                        proptest::collection::vec(0..i.max(1), 0..=i.min(3)),
                        0u8..2,
                        proptest::option::weighted(0.4, 0u32..3),
                        proptest::collection::vec(0..i.max(1), 0..=i.min(2)),
                        0u32..4,
                    )
                        .prop_map(
                            move |(inputs, externals, owned, borrows, retries)| NodeSpec {
                                inputs: if i == 0 { vec![] } else { inputs },
                                externals,
                                owned,
                                borrows: if i == 0 { vec![] } else { borrows },
                                retries,
                            },
                        )
                })
                .collect::<Vec<_>>();
            (
                nodes,
                proptest::collection::vec(0..n, 1..=n.min(4)),
                proptest::collection::vec(0..n, 0..=1),
                proptest::collection::vec(any::<u16>(), 0..200),
                any::<u64>(),
                any::<bool>(),
            )
        })
        .prop_map(
            |(mut nodes, mut finals, replaced, choices, seed, instant)| {
                // the last node usually reaches much of the graph
                finals.push(nodes.len() - 1);
                // borrows must name owned nodes
                let owned: Vec<bool> = nodes.iter().map(|s| s.owned.is_some()).collect();
                for s in &mut nodes {
                    s.borrows.retain(|&b| owned[b]);
                    // an owned node never has forward retries (the graph refuses them)
                    if s.owned.is_some() {
                        s.retries = 0;
                    }
                }
                Case {
                    nodes,
                    finals,
                    replaced,
                    choices,
                    seed,
                    instant,
                }
            },
        )
}

fn name(i: usize) -> String {
    format!("n{i}")
}

fn build(case: &Case) -> Arc<Plan> {
    let defs: Vec<NodeDef> = case
        .nodes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut inputs: Vec<String> = s.inputs.iter().map(|&j| name(j)).collect();
            for e in 0..s.externals {
                inputs.push(format!("ext{e}"));
            }
            NodeDef {
                name: name(i),
                inputs,
                borrows: s.borrows.iter().map(|&j| name(j)).collect(),
                policy: Policy::new(None, s.retries, 0.25, 2.0).unwrap(),
                release: s
                    .owned
                    .map(|r| Policy::new(Some(1.0), r, 0.0, 1.0).unwrap()),
            }
        })
        // define in reverse order: compile must not care
        .rev()
        .collect();
    let graph = Graph::new(defs).unwrap();
    let finals: Vec<String> = case.finals.iter().map(|&i| name(i)).collect();
    let replaced: Vec<String> = case.replaced.iter().map(|&i| name(i)).collect();
    Arc::new(graph.select(&finals, &replaced).unwrap())
}

/// Whether `consumer` depends on `producer` through any path of active dependencies.
fn depends_on(plan: &Plan, consumer: u32, producer: u32) -> bool {
    let mut stack = vec![consumer];
    let mut seen = HashSet::new();
    while let Some(j) = stack.pop() {
        for &d in plan.dependencies(j) {
            if d == producer {
                return true;
            }
            if seen.insert(d) {
                stack.push(d);
            }
        }
    }
    false
}

#[derive(Default)]
struct Driver {
    /// job -> attempt number of the outstanding START
    running: HashMap<u32, u32>,
    cancelled: HashSet<u32>,
    sleeping: HashMap<u32, u32>,
    stopped: HashSet<u32>,
    attempts: HashMap<u32, u32>,
    succeeded: HashSet<u32>,
    /// forward jobs whose first attempt started and was not withdrawn
    started: HashSet<u32>,
    release_done: HashSet<u32>,
    release_started: HashSet<u32>,
    forward_starts_after_abort: u32,
}

impl Driver {
    fn apply(&mut self, run: &Run, plan: &Plan, cmds: &[Command], aborted_before: bool) {
        let n = plan.len() as u32;
        for c in cmds {
            match c.op {
                Op::Start => {
                    assert!(
                        !self.running.contains_key(&c.job),
                        "START while an attempt is outstanding: {c:?}"
                    );
                    let prev = self.attempts.get(&c.job).copied().unwrap_or(0);
                    assert_eq!(c.attempt, prev, "attempts are numbered in order");
                    if c.job < n {
                        assert!(!aborted_before, "forward START after abort: {c:?}");
                        if run.aborted() {
                            self.forward_starts_after_abort += 1;
                        }
                        let retries = plan.policy(c.job).retries();
                        assert!(c.attempt <= retries, "too many attempts: {c:?}");
                        for &d in plan.dependencies(c.job) {
                            assert!(self.succeeded.contains(&d), "START before dependency");
                        }
                        if c.attempt == 0 {
                            self.started.insert(c.job);
                        }
                        assert_eq!(c.arg, plan.policy(c.job).timeout());
                    } else {
                        let o = c.job - n;
                        let rel = plan.release(o).expect("release START for unowned node");
                        assert!(c.attempt <= rel.retries());
                        assert_eq!(c.arg, rel.timeout());
                        if c.attempt == 0 {
                            assert!(self.started.contains(&o), "release for unstarted node");
                            assert!(self.release_started.insert(o), "second release chain");
                            // every owned, started node depending on o is released already
                            for p in 0..n {
                                if p != o
                                    && plan.release(p).is_some()
                                    && self.started.contains(&p)
                                    && depends_on(plan, p, o)
                                {
                                    assert!(
                                        self.release_done.contains(&p),
                                        "release of n? started before a dependent release"
                                    );
                                }
                            }
                        }
                    }
                    self.attempts.insert(c.job, c.attempt + 1);
                    self.running.insert(c.job, c.attempt);
                }
                Op::Sleep => {
                    let d = c.arg.unwrap();
                    assert!(d.is_finite() && d >= 0.0);
                    if run.instant_retries() {
                        assert_eq!(d, 0.0, "instant retries wait 0");
                    } else {
                        let policy = if c.job < n {
                            *plan.policy(c.job)
                        } else {
                            *plan.release(c.job - n).unwrap()
                        };
                        let (low, high) = policy.delay_bounds(c.attempt);
                        assert!(low <= d && d <= high, "delay {d} outside [{low}, {high}]");
                    }
                    self.sleeping.insert(c.job, c.attempt);
                }
                Op::Cancel => {
                    assert!(c.job < n, "releases are never cancelled");
                    assert_eq!(self.running.get(&c.job), Some(&c.attempt));
                    assert!(self.cancelled.insert(c.job));
                }
                Op::StopSleep => {
                    assert_eq!(self.sleeping.remove(&c.job), Some(c.attempt));
                    self.stopped.insert(c.job);
                }
            }
        }
    }
}

/// The next scripted choice in `0..m`; once the script is used up, `default` (which
/// always makes progress, so every run terminates).
fn pick(choices: &[u16], k: &mut usize, m: usize, default: usize) -> usize {
    let c = choices.get(*k).map_or(default, |&c| c as usize);
    *k += 1;
    c % m
}

fn drive(case: &Case) {
    let plan = build(case);
    let n = plan.len() as u32;
    let mut run = Run::new(Arc::clone(&plan), Some(case.seed)).with_instant_retries(case.instant);
    let mut d = Driver::default();
    let mut out = Vec::new();
    let mut k = 0usize;
    run.start(&mut out).unwrap();
    d.apply(&run, &plan, &out, false);
    let mut steps = 0;
    // forward phase
    loop {
        steps += 1;
        assert!(steps < 10_000, "forward phase does not converge");
        let outstanding = d.running.len() + d.sleeping.len();
        assert_eq!(
            run.pending() as usize,
            outstanding,
            "pending mirrors the driver"
        );
        if outstanding == 0 {
            break;
        }
        out.clear();
        let aborted_before = run.aborted();
        let action = pick(&case.choices, &mut k, 16, 0);
        if action == 15 {
            run.cancel(&mut out);
            assert!(run.aborted());
            d.apply(&run, &plan, &out, aborted_before);
            continue;
        }
        // stale elapsed for a stopped sleeper: ignored
        if action == 14 {
            if let Some(&j) = d.stopped.iter().next() {
                let before = (run.pending(), run.aborted());
                run.elapsed(j as i64, &mut out).unwrap();
                assert!(out.is_empty());
                assert_eq!(before, (run.pending(), run.aborted()));
                continue;
            }
        }
        // misuse: elapsed on a running job changes nothing
        if action == 13 {
            if let Some((&j, _)) = d.running.iter().next() {
                let before = (run.pending(), run.aborted(), run.state(j));
                assert!(run.elapsed(j as i64, &mut out).is_err());
                assert!(out.is_empty());
                assert_eq!(before, (run.pending(), run.aborted(), run.state(j)));
                continue;
            }
        }
        let mut jobs: Vec<u32> = d.running.keys().chain(d.sleeping.keys()).copied().collect();
        jobs.sort_unstable();
        let job = jobs[pick(&case.choices, &mut k, jobs.len(), 0)];
        if let Some(&_attempt) = d.sleeping.get(&job) {
            d.sleeping.remove(&job);
            run.elapsed(job as i64, &mut out).unwrap();
            d.running.remove(&job); // the failed attempt is over
            d.apply(&run, &plan, &out, aborted_before);
            continue;
        }
        let attempt = d.running[&job];
        if d.cancelled.contains(&job) {
            match pick(&case.choices, &mut k, 4, 2) {
                0 => {
                    // stale success first: ignored, still pending
                    run.succeeded(job as i64, &mut out).unwrap();
                    assert!(out.is_empty());
                    assert_eq!(run.state(job), Some(JobState::Cancelling));
                }
                1 => {
                    d.running.remove(&job);
                    d.cancelled.remove(&job);
                    run.unstarted(job as i64, &mut out).unwrap();
                    if attempt == 0 {
                        d.started.remove(&job);
                    }
                    d.attempts.insert(job, attempt);
                    run.drained(job as i64, &mut out).unwrap(); // repeat ignored
                }
                _ => {
                    d.running.remove(&job);
                    d.cancelled.remove(&job);
                    run.drained(job as i64, &mut out).unwrap();
                }
            }
            assert!(out.is_empty());
            continue;
        }
        match pick(&case.choices, &mut k, 8, 0) {
            0..=3 => {
                d.running.remove(&job);
                run.succeeded(job as i64, &mut out).unwrap();
                d.succeeded.insert(job);
            }
            4 | 5 => {
                let decided = run.failed(job as i64, true, &mut out).unwrap();
                let retried = out.iter().any(|c| c.op == Op::Sleep && c.job == job);
                assert_eq!(retried, attempt < plan.policy(job).retries());
                match decided {
                    Failure::Retry { delay } => {
                        assert!(retried);
                        assert_eq!(out[0].arg, Some(delay), "the SLEEP carries the delay");
                    }
                    Failure::Final => assert!(!retried),
                    Failure::Ignored => panic!("a running job's failure is never ignored"),
                }
                if !retried {
                    d.running.remove(&job);
                    assert!(run.aborted());
                }
                // keep `running` until elapsed for a retried job (START check uses it)
                if retried {
                    d.running.remove(&job);
                }
            }
            6 => {
                d.running.remove(&job);
                let decided = run.failed(job as i64, false, &mut out).unwrap();
                assert_eq!(decided, Failure::Final);
                assert!(run.aborted());
                assert!(!out.iter().any(|c| c.op == Op::Sleep));
            }
            7 if attempt == 0 && pick(&case.choices, &mut k, 2, 1) == 0 => {
                // the input was rejected before attempt 0 called anything
                d.running.remove(&job);
                run.rejected(job as i64, &mut out).unwrap();
                assert_eq!(run.state(job), Some(JobState::Rejected));
                d.started.remove(&job);
                d.attempts.insert(job, 0);
                assert!(run.aborted());
                assert!(!out.iter().any(|c| c.op == Op::Sleep || c.op == Op::Start));
            }
            _ => {
                d.running.remove(&job);
                run.unstarted(job as i64, &mut out).unwrap();
                if attempt == 0 {
                    d.started.remove(&job);
                }
                d.attempts.insert(job, attempt);
                assert!(run.aborted());
            }
        }
        d.apply(&run, &plan, &out, aborted_before);
    }
    assert_eq!(d.forward_starts_after_abort, 0);
    for j in 0..n {
        assert_eq!(
            run.started(j as i64).unwrap(),
            d.started.contains(&j),
            "started({j})"
        );
        let a = run.attempts(j as i64).unwrap();
        assert!(a <= 1 + plan.policy(j).retries());
    }
    let ok: BTreeSet<u32> = run.succeeded_jobs().into_iter().collect();
    assert_eq!(ok, d.succeeded.iter().copied().collect());
    if !run.aborted() {
        assert_eq!(
            ok.len(),
            plan.len(),
            "an unaborted run completes every node"
        );
    }
    // shutdown phase
    out.clear();
    run.begin_shutdown(&mut out).unwrap();
    d.apply(&run, &plan, &out, true);
    let mut steps = 0;
    while !run.finished() {
        steps += 1;
        assert!(steps < 10_000, "shutdown does not converge");
        out.clear();
        assert_eq!(run.pending() as usize, d.running.len() + d.sleeping.len());
        let mut jobs: Vec<u32> = d.running.keys().chain(d.sleeping.keys()).copied().collect();
        assert!(!jobs.is_empty(), "shutdown stuck with nothing outstanding");
        jobs.sort_unstable();
        let job = jobs[pick(&case.choices, &mut k, jobs.len(), 0)];
        if d.sleeping.remove(&job).is_some() {
            run.elapsed(job as i64, &mut out).unwrap();
            d.apply(&run, &plan, &out, true);
            continue;
        }
        d.running.remove(&job);
        let o = job - n;
        let action = pick(&case.choices, &mut k, 5, 0);
        if action == 4 {
            run.cancel(&mut out); // no effect during shutdown
            assert!(out.is_empty());
        }
        match action {
            0 | 1 => {
                run.succeeded(job as i64, &mut out).unwrap();
                d.release_done.insert(o);
            }
            2 => {
                let decided = run.failed(job as i64, true, &mut out).unwrap();
                let retried = out.iter().any(|c| c.op == Op::Sleep && c.job == job);
                assert_eq!(matches!(decided, Failure::Retry { .. }), retried);
                if !retried {
                    d.release_done.insert(o);
                }
            }
            _ => {
                run.failed(job as i64, false, &mut out).unwrap();
                d.release_done.insert(o);
            }
        }
        d.apply(&run, &plan, &out, true);
    }
    assert_eq!(run.pending(), 0);
    assert!(d.running.is_empty() && d.sleeping.is_empty());
    assert_eq!(d.release_started, d.release_done);
    let owed: HashSet<u32> = d
        .started
        .iter()
        .copied()
        .filter(|&j| plan.release(j).is_some())
        .collect();
    assert_eq!(
        d.release_done, owed,
        "exactly the started owned nodes are released"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 600, ..ProptestConfig::default() })]

    #[test]
    fn random_dags_and_event_orders_keep_the_invariants(case in case()) {
        drive(&case);
    }

    /// The picture's shutdown edges are the run's order: their transitive closure relates
    /// exactly the owned nodes that depend on each other.
    #[test]
    fn release_edges_close_to_the_dependency_order(case in case()) {
        let plan = build(&case);
        let n = plan.len() as u32;
        let edges = plan.release_edges();
        let mut closure: HashSet<(u32, u32)> = edges.iter().copied().collect();
        loop {
            let more: Vec<(u32, u32)> = closure
                .iter()
                .flat_map(|&(a, b)| {
                    closure
                        .iter()
                        .filter(move |&&(c, _)| c == b)
                        .map(move |&(_, d)| (a, d))
                })
                .filter(|e| !closure.contains(e))
                .collect();
            if more.is_empty() {
                break;
            }
            closure.extend(more);
        }
        for p in 0..n {
            for o in 0..n {
                let both = plan.release(p).is_some() && plan.release(o).is_some();
                let expect = both && p != o && depends_on(&plan, p, o);
                prop_assert_eq!(closure.contains(&(p, o)), expect, "({}, {})", p, o);
            }
        }
        // nearest only: each edge is a path of consumers whose inner nodes own nothing
        for &(p, o) in &edges {
            let mut stack: Vec<u32> = plan.consumers(o).to_vec();
            let mut seen = HashSet::new();
            let mut found = false;
            while let Some(c) = stack.pop() {
                if c == p {
                    found = true;
                    break;
                }
                if seen.insert(c) && plan.release(c).is_none() {
                    stack.extend_from_slice(plan.consumers(c));
                }
            }
            prop_assert!(found, "edge ({}, {}) crosses another owned node", p, o);
        }
    }

    /// An owned node with forward retries is refused, naming it; release retries are fine.
    #[test]
    fn owned_forward_retries_are_refused(retries in 1u32..5, release_retries in 0u32..5, at in 0usize..4) {
        let mut defs: Vec<NodeDef> = (0..4).map(|i| NodeDef::new(name(i), &[])).collect();
        let release = Policy::new(None, release_retries, 0.0, 1.0).unwrap();
        defs[at] = NodeDef::new(name(at), &[])
            .with_policy(Policy::new(None, retries, 0.0, 1.0).unwrap())
            .owned(release);
        let err = Graph::new(defs.clone()).unwrap_err();
        prop_assert_eq!(err, GraphError::RetriedAcquisition(name(at)));
        defs[at] = NodeDef::new(name(at), &[]).owned(release);
        prop_assert!(Graph::new(defs).is_ok());
    }
}

#[test]
fn shutdown_order_matches_a_full_run() {
    // conn <- tx <- query; conn <- (plain) mid <- other; projection borrows tx
    let owned = |s: &str, i: &[&str]| NodeDef::new(s, i).owned(Policy::default());
    let g = Graph::new(vec![
        owned("conn", &[]),
        owned("tx", &["conn"]),
        NodeDef::new("field", &[]).borrowing(&["tx"]),
        NodeDef::new("query", &["field"]),
        NodeDef::new("mid", &["conn"]),
        owned("other", &["mid"]),
    ])
    .unwrap();
    let plan = Arc::new(g.select(&["query", "other"], &[] as &[&str]).unwrap());
    assert_eq!(
        plan.shutdown_order(),
        vec![
            vec!["other".to_owned(), "tx".to_owned()],
            vec!["conn".to_owned()]
        ]
    );
    let n = plan.len() as u32;
    let mut run = Run::new(Arc::clone(&plan), None);
    let mut out = Vec::new();
    run.start(&mut out).unwrap();
    while let Some(c) = out.pop() {
        let mut more = Vec::new();
        run.succeeded(c.job as i64, &mut more).unwrap();
        out.extend(more);
    }
    assert_eq!(run.succeeded_jobs().len(), plan.len());
    run.begin_shutdown(&mut out).unwrap();
    let mut first: Vec<String> = out
        .iter()
        .map(|c| plan.names()[(c.job - n) as usize].clone())
        .collect();
    first.sort();
    assert_eq!(first, ["other", "tx"]);
    let jobs: Vec<u32> = out.iter().map(|c| c.job).collect();
    out.clear();
    run.succeeded(jobs[0] as i64, &mut out).unwrap();
    assert!(out.is_empty(), "conn waits for both releases");
    run.succeeded(jobs[1] as i64, &mut out).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(plan.names()[(out[0].job - n) as usize], "conn");
}
