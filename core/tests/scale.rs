//! 100,000-node chains and fan-outs compile, select, run and shut down without recursion,
//! in time linear in nodes + edges.

use std::sync::Arc;

use sdax_core::{Graph, NodeDef, Op, Policy, Run};

const N: usize = 100_000;

fn def(name: String, inputs: Vec<String>, release: Option<Policy>) -> NodeDef {
    NodeDef {
        name,
        inputs,
        borrows: Vec::new(),
        policy: Policy::default(),
        release,
    }
}

/// Run every START to success, breadth first; returns how many jobs succeeded.
fn run_all(run: &mut Run) -> usize {
    let mut queue = Vec::new();
    run.start(&mut queue).unwrap();
    let mut out = Vec::new();
    let mut done = 0;
    while let Some(c) = queue.pop() {
        assert_eq!(c.op, Op::Start);
        run.succeeded(c.job as i64, &mut out).unwrap();
        done += 1;
        queue.append(&mut out);
    }
    done
}

#[test]
fn chain_of_100k_owned_nodes_runs_and_releases_in_reverse() {
    // every 10th node owns a resource
    let mut nodes = Vec::with_capacity(N);
    for i in 0..N {
        let inputs = if i == 0 {
            vec!["seed".to_owned()]
        } else {
            vec![format!("c{}", i - 1)]
        };
        let release = (i % 10 == 0).then(Policy::default);
        nodes.push(def(format!("c{i}"), inputs, release));
    }
    let graph = Graph::new(nodes).unwrap();
    let plan = Arc::new(
        graph
            .select(&[format!("c{}", N - 1)], &[] as &[&str])
            .unwrap(),
    );
    assert_eq!(plan.len(), N);
    let mut run = Run::new(Arc::clone(&plan), Some(0));
    assert_eq!(run_all(&mut run), N);
    let mut out = Vec::new();
    run.begin_shutdown(&mut out).unwrap();
    let n = N as u32;
    let mut released = Vec::new();
    while let Some(c) = out.pop() {
        released.push(c.job - n);
        let mut more = Vec::new();
        run.succeeded(c.job as i64, &mut more).unwrap();
        assert!(more.len() <= 1, "a chain releases one at a time");
        out.extend(more);
    }
    assert!(run.finished());
    let expected: Vec<u32> = (0..n).rev().filter(|i| i % 10 == 0).collect();
    assert_eq!(released, expected);
}

#[test]
fn fan_out_and_in_of_100k_runs() {
    let mut nodes = vec![def("src".into(), vec![], Some(Policy::default()))];
    let mut leaves = Vec::with_capacity(N);
    for i in 0..N {
        nodes.push(def(format!("l{i}"), vec!["src".into()], None));
        leaves.push(format!("l{i}"));
    }
    nodes.push(def("sink".into(), leaves, None));
    let plan = Arc::new(
        Graph::new(nodes)
            .unwrap()
            .select(&["sink"], &[] as &[&str])
            .unwrap(),
    );
    let mut run = Run::new(Arc::clone(&plan), None);
    let mut out = Vec::new();
    run.start(&mut out).unwrap();
    assert_eq!(out.len(), 1);
    let src = out[0].job;
    out.clear();
    run.succeeded(src as i64, &mut out).unwrap();
    assert_eq!(out.len(), N, "all leaves start together");
    assert_eq!(run.pending() as usize, N);
    let leaves: Vec<u32> = out.iter().map(|c| c.job).collect();
    out.clear();
    for &l in &leaves[..N - 1] {
        run.succeeded(l as i64, &mut out).unwrap();
    }
    assert!(out.is_empty());
    run.succeeded(leaves[N - 1] as i64, &mut out).unwrap();
    assert_eq!(out.len(), 1, "the sink starts last");
    // abort with 1 job running: cancel it
    let mut cancel = Vec::new();
    run.cancel(&mut cancel);
    assert_eq!(cancel.len(), 1);
    assert_eq!(cancel[0].op, Op::Cancel);
    run.drained(cancel[0].job as i64, &mut cancel).unwrap();
    cancel.clear();
    run.begin_shutdown(&mut cancel).unwrap();
    assert_eq!(cancel.len(), 1, "src released after all its consumers");
    assert_eq!(cancel[0].job, plan.len() as u32 + src);
}
