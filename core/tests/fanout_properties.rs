//! Fan-out properties over random event orders: never more branches at once than the
//! limit, the collect node only after every item's branch and the end of the source, the
//! source closed whenever the run stops early, and every acquisition (of the plan and of
//! every branch) released exactly once, branch releases before the outer resource they use.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use proptest::prelude::*;
use sdax_core::{Command, Op, Plan, Run};

/// `conn` (owned) and `src` feed the branch `tx` (owned) -> `q`, collected by `col`.
fn plan() -> (Arc<Plan>, [usize; 5]) {
    sdax_core::testing::fan_plan(("tx", true), ("q", false))
}

#[derive(Debug, Clone)]
struct Case {
    limit: Option<u32>,
    items: u32,
    /// The item whose `q` fails for good, if any.
    fail_item: Option<u32>,
    /// The source raises instead of giving this item, if any.
    fail_draw: Option<u32>,
    /// Which pending event to report next, as an index into the pending ones.
    picks: Vec<usize>,
}

fn cases() -> impl Strategy<Value = Case> {
    (
        prop::option::of(1u32..4),
        0u32..10,
        prop::option::of(0u32..10),
        prop::option::of(0u32..10),
        prop::collection::vec(any::<usize>(), 200),
    )
        .prop_map(|(limit, items, fail_item, fail_draw, picks)| Case {
            limit,
            items,
            fail_item,
            fail_draw,
            picks,
        })
}

proptest! {
    #[test]
    fn fan_out_holds_its_rules_in_any_event_order(case in cases()) {
        let (plan, [conn, src, tx, q, col]) = plan();
        let mut run = Run::new(plan, Some(7))
            .with_fan_out(src, col, &[tx, q], case.limit)
            .unwrap();
        let base = 5usize;
        let item_of = |job: usize| ((job - base) / 2) as u32;
        let mut out: Vec<Command> = Vec::new();
        let mut running: BTreeSet<usize> = BTreeSet::new();
        let mut cancelling: BTreeSet<usize> = BTreeSet::new();
        let mut drawing = false;
        let mut closing = false;
        let mut closed = false;
        let mut exhausted = false;
        let mut drawn = 0u32;
        let mut active: BTreeSet<u32> = BTreeSet::new();
        let mut collect_started = false;
        let mut done_items: BTreeSet<u32> = BTreeSet::new();
        let absorb = |out: &mut Vec<Command>,
                          running: &mut BTreeSet<usize>,
                          cancelling: &mut BTreeSet<usize>,
                          drawing: &mut bool,
                          closing: &mut bool,
                          active: &mut BTreeSet<u32>,
                          collect_started: &mut bool| {
            for c in out.drain(..) {
                let job = c.job as usize;
                match c.op {
                    Op::Start => {
                        if job == col {
                            *collect_started = true;
                        }
                        if job >= base && (job - base) % 2 == 0 {
                            active.insert(item_of(job));
                        }
                        running.insert(job);
                    }
                    Op::Cancel => {
                        running.remove(&job);
                        cancelling.insert(job);
                    }
                    Op::Draw => *drawing = true,
                    Op::StopDraw => {}
                    Op::Close => *closing = true,
                    other => panic!("unexpected {other:?}"),
                }
            }
        };
        run.start(&mut out).unwrap();
        absorb(&mut out, &mut running, &mut cancelling, &mut drawing, &mut closing, &mut active, &mut collect_started);
        let mut picks = case.picks.iter().cycle();
        for _ in 0..2000 {
            // Every event that may be reported now.
            let mut choices: Vec<u8> = Vec::new();
            if drawing { choices.push(0); }
            if closing { choices.push(1); }
            if !running.is_empty() { choices.push(2); }
            if !cancelling.is_empty() { choices.push(3); }
            if choices.is_empty() { break; }
            let pick = *picks.next().unwrap();
            match choices[pick % choices.len()] {
                0 => {
                    drawing = false;
                    if case.fail_draw == Some(drawn) {
                        run.draw_failed(src as i64, &mut out).unwrap();
                        closed = true;
                    } else if drawn < case.items {
                        drawn += 1;
                        run.drawn(src as i64, true, &mut out).unwrap();
                    } else {
                        exhausted = true;
                        run.drawn(src as i64, false, &mut out).unwrap();
                    }
                }
                1 => {
                    closing = false;
                    closed = true;
                    run.closed(src as i64, &mut out).unwrap();
                }
                2 => {
                    let all: Vec<usize> = running.iter().copied().collect();
                    let job = all[(pick / 7) % all.len()];
                    running.remove(&job);
                    let failing = job >= base && (job - base) % 2 == 1 && case.fail_item == Some(item_of(job));
                    if failing {
                        run.failed(job as i64, false, &mut out).unwrap();
                    } else {
                        run.succeeded(job as i64, &mut out).unwrap();
                        if job >= base && (job - base) % 2 == 1 {
                            active.remove(&item_of(job));
                            done_items.insert(item_of(job));
                        }
                    }
                }
                _ => {
                    let job = *cancelling.iter().next().unwrap();
                    cancelling.remove(&job);
                    if job >= base && (job - base) % 2 == 1 {
                        active.remove(&item_of(job));
                    }
                    if job >= base && (job - base) % 2 == 0 {
                        active.remove(&item_of(job)); // its q never starts
                    }
                    run.drained(job as i64, &mut out).unwrap();
                }
            }
            absorb(&mut out, &mut running, &mut cancelling, &mut drawing, &mut closing, &mut active, &mut collect_started);
            if let Some(limit) = case.limit {
                prop_assert!(active.len() as u32 <= limit, "{} branches over {}", active.len(), limit);
            }
            if collect_started {
                prop_assert!(exhausted);
                prop_assert_eq!(done_items.len() as u32, case.items);
            }
        }
        prop_assert_eq!(run.pending(), 0);
        if run.aborted() {
            // Stopped early: the source was closed, or ended by raising.
            prop_assert!(closed || exhausted);
        } else {
            prop_assert!(collect_started);
        }
        // Shutdown: each owed release exactly once, every tx[i] before conn.
        run.begin_shutdown(&mut out).unwrap();
        let n = run.job_count();
        let mut started: HashMap<usize, u32> = HashMap::new();
        let mut order: Vec<usize> = Vec::new();
        let mut queue: Vec<usize> = Vec::new();
        for c in out.drain(..) {
            prop_assert_eq!(c.op, Op::Start);
            queue.push(c.job as usize - n);
        }
        while let Some(i) = queue.pop() {
            *started.entry(i).or_default() += 1;
            order.push(i);
            run.succeeded((n + i) as i64, &mut out).unwrap();
            for c in out.drain(..) {
                queue.push(c.job as usize - n);
            }
        }
        prop_assert!(run.finished());
        prop_assert!(started.values().all(|&k| k == 1));
        prop_assert_eq!(started.len() as u32, run.owed_releases());
        if let Some(at) = order.iter().position(|&i| i == conn) {
            prop_assert_eq!(at, order.len() - 1, "conn is released last");
        }
    }
}
