//! Fixtures shared by the crate's unit tests and its integration tests (`core/tests/`).
//! Integration tests see only the crate's public items, so this module is public, but it is
//! no part of the API (hidden from the docs): nothing outside the tests uses it.

use std::sync::Arc;

use crate::graph::{Graph, NodeDef, Plan};
use crate::policy::Policy;

/// A fan-out plan: `conn` (owned) and `src` feed a two-node branch `first -> second`,
/// collected by `col`. `first` takes `src`'s items and `conn`; each branch node is given as
/// its name and whether it is owned (an acquisition released at shutdown). The jobs come
/// back as `[conn, src, first, second, col]`.
pub fn fan_plan(first: (&str, bool), second: (&str, bool)) -> (Arc<Plan>, [usize; 5]) {
    let node = |def: NodeDef, owned: bool| {
        if owned {
            def.owned(Policy::default())
        } else {
            def
        }
    };
    let nodes = vec![
        NodeDef::new("conn", &[]).owned(Policy::default()),
        NodeDef::new("src", &[]),
        node(NodeDef::new(first.0, &["src", "conn"]), first.1),
        node(NodeDef::new(second.0, &[first.0]), second.1),
        NodeDef::new("col", &[second.0]),
    ];
    let plan = Arc::new(
        Graph::new(nodes)
            .unwrap()
            .select(&["col"], &[] as &[&str])
            .unwrap(),
    );
    let ix = |name: &str| plan.index(name).unwrap() as usize;
    let jobs = [ix("conn"), ix("src"), ix(first.0), ix(second.0), ix("col")];
    (plan, jobs)
}
