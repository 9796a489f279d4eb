//! Graph compilation (once per Driver) and selection (once per prepared plan).
//!
//! Everything here is iterative: a 100,000-node chain or fan-out compiles and selects in
//! time linear in nodes + edges, without recursion.

use std::collections::HashMap;
use std::fmt;

use crate::policy::Policy;

/// One node handed to [`Graph::new`].
#[derive(Clone, Debug, PartialEq)]
pub struct NodeDef {
    /// Unique node name.
    pub name: String,
    /// Names this node consumes: other nodes, or external inputs / config / overrides.
    pub inputs: Vec<String>,
    /// Owned nodes this node borrows from (it waits on them and keeps them alive).
    pub borrows: Vec<String>,
    /// The node's forward attempt policy.
    pub policy: Policy,
    /// The release policy when the node owns a resource, `None` otherwise.
    pub release: Option<Policy>,
}

impl NodeDef {
    /// A node with the default policy and no release.
    pub fn new(name: impl Into<String>, inputs: &[&str]) -> Self {
        NodeDef {
            name: name.into(),
            inputs: inputs.iter().map(|s| (*s).to_owned()).collect(),
            borrows: Vec::new(),
            policy: Policy::default(),
            release: None,
        }
    }

    /// Builder: set the forward policy.
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Builder: make the node an owned acquisition released under `release`.
    pub fn owned(mut self, release: Policy) -> Self {
        self.release = Some(release);
        self
    }

    /// Builder: borrow from the named owned nodes.
    pub fn borrowing(mut self, owners: &[&str]) -> Self {
        self.borrows = owners.iter().map(|s| (*s).to_owned()).collect();
        self
    }
}

/// Why a graph could not be compiled or a selection made. Messages name nodes only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GraphError {
    /// Two nodes share a name.
    DuplicateNode(String),
    /// More nodes than job ids can number (`2 * n` must fit in `u32`).
    TooManyNodes(usize),
    /// `node` borrows from `borrow`, which is not a node.
    UnknownBorrow { node: String, borrow: String },
    /// `node` borrows from `borrow`, which owns no resource.
    BorrowOfUnowned { node: String, borrow: String },
    /// An owned acquisition with forward retries: a failed attempt may have acquired
    /// something that no release would ever see (the release gets one value per node).
    RetriedAcquisition(String),
    /// A final var is not a node.
    UnknownSelected(String),
    /// The selection contains a cycle; the nodes on it, each depending on the next, the
    /// first repeated at the end.
    Cycle(Vec<String>),
}

/// Characters of one name a message shows before cutting it (a name comes from user code
/// and may be huge).
pub const MAX_NAME: usize = 80;

/// Names of a cycle shown before the rest is counted.
pub const MAX_LISTED: usize = 10;

/// `name` for a message: at most [`MAX_NAME`] characters, and the full length when cut.
fn cut(name: &str) -> (&str, Option<usize>) {
    match name.char_indices().nth(MAX_NAME) {
        None => (name, None),
        Some((end, _)) => (&name[..end], Some(name.chars().count())),
    }
}

/// `'name'`, cut past [`MAX_NAME`] characters with its length given.
pub fn quoted(name: &str) -> String {
    match cut(name) {
        (head, None) => format!("'{head}'"),
        (head, Some(n)) => format!("'{head}'… ({n} characters)"),
    }
}

/// `"name"` (escaped as Rust's `Debug` does), cut like [`quoted`].
fn debug_quoted(name: &str) -> String {
    match cut(name) {
        (head, None) => format!("{head:?}"),
        (head, Some(n)) => format!("{head:?}… ({n} characters)"),
    }
}

/// `name` unquoted, cut like [`quoted`].
fn bare(name: &str) -> String {
    match cut(name) {
        (head, None) => head.to_owned(),
        (head, Some(n)) => format!("{head}… ({n} characters)"),
    }
}

impl fmt::Display for GraphError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GraphError::DuplicateNode(n) => {
                write!(f, "Duplicate node name: {}", debug_quoted(n))
            }
            GraphError::TooManyNodes(n) => write!(f, "Too many nodes: {n}"),
            GraphError::UnknownBorrow { node, borrow } => write!(
                f,
                "Node {} borrows from unknown node {}",
                debug_quoted(node),
                debug_quoted(borrow)
            ),
            GraphError::BorrowOfUnowned { node, borrow } => write!(
                f,
                "Node {} borrows from {}, which owns no resource",
                debug_quoted(node),
                debug_quoted(borrow)
            ),
            GraphError::RetriedAcquisition(n) => write!(
                f,
                "Acquisition retries require attempt cleanup: {} (it has a shutdown, and a \
                 failed attempt may have acquired something its release would never see): \
                 set retries=0 in its execution(...), or retry inside the function, \
                 cleaning up after each failed try",
                bare(n)
            ),
            GraphError::UnknownSelected(n) => write!(f, "Unknown selected node: {}", quoted(n)),
            GraphError::Cycle(path) => {
                f.write_str("Dependency cycle among nodes: ")?;
                for (i, n) in path.iter().take(MAX_LISTED).enumerate() {
                    if i > 0 {
                        f.write_str(" -> ")?;
                    }
                    f.write_str(&quoted(n))?;
                }
                if path.len() > MAX_LISTED {
                    write!(f, " -> … ({} nodes in all)", path.len())?;
                }
                f.write_str(
                    " (each depends on the next): a node cannot depend on itself; rename a \
                     parameter so it names another node or an input",
                )
            }
        }
    }
}

impl std::error::Error for GraphError {}

/// Compressed adjacency: the neighbours of `i` are `items[offsets[i]..offsets[i + 1]]`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Csr {
    offsets: Vec<u32>,
    items: Vec<u32>,
}

impl Csr {
    fn with_capacity(rows: usize, items: usize) -> Self {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        Csr {
            offsets,
            items: Vec::with_capacity(items),
        }
    }

    #[inline]
    fn push_item(&mut self, item: u32) {
        self.items.push(item);
    }

    #[inline]
    fn end_row(&mut self) {
        self.offsets.push(self.items.len() as u32);
    }

    #[inline]
    pub(crate) fn row(&self, i: usize) -> &[u32] {
        &self.items[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    #[inline]
    pub(crate) fn row_len(&self, i: usize) -> u32 {
        self.offsets[i + 1] - self.offsets[i]
    }
}

/// All nodes of a Driver, compiled once.
#[derive(Clone, Debug)]
pub struct Graph {
    names: Vec<String>,
    index: HashMap<String, u32>,
    /// Node dependencies (inputs that are nodes, then borrows), deduplicated.
    deps: Csr,
    /// External input names per node, as indices into `ext_names`.
    ext: Csr,
    ext_names: Vec<String>,
    policies: Vec<Policy>,
    releases: Vec<Option<Policy>>,
}

impl Graph {
    /// Compile a node list: duplicate names, an owned node with forward retries, borrows of
    /// unknown or unowned nodes are errors (checked in that order, each over all nodes in
    /// definition order). Cycles are reported by [`Graph::select`] (only the selected part
    /// must be acyclic).
    pub fn new(nodes: Vec<NodeDef>) -> Result<Self, GraphError> {
        let n = nodes.len();
        if n >= (u32::MAX / 2) as usize {
            // Job ids are u32 and releases use n + i.
            return Err(GraphError::TooManyNodes(n));
        }
        let mut index: HashMap<String, u32> = HashMap::with_capacity(n);
        for (i, node) in nodes.iter().enumerate() {
            if index.insert(node.name.clone(), i as u32).is_some() {
                return Err(GraphError::DuplicateNode(node.name.clone()));
            }
        }
        if let Some(node) = nodes
            .iter()
            .find(|d| d.release.is_some() && d.policy.retries() > 0)
        {
            return Err(GraphError::RetriedAcquisition(node.name.clone()));
        }
        for node in &nodes {
            for b in &node.borrows {
                match index.get(b.as_str()) {
                    None => {
                        return Err(GraphError::UnknownBorrow {
                            node: node.name.clone(),
                            borrow: b.clone(),
                        })
                    }
                    Some(&j) if nodes[j as usize].release.is_none() => {
                        return Err(GraphError::BorrowOfUnowned {
                            node: node.name.clone(),
                            borrow: b.clone(),
                        })
                    }
                    Some(_) => {}
                }
            }
        }
        let edges: usize = nodes.iter().map(|d| d.inputs.len() + d.borrows.len()).sum();
        let mut deps = Csr::with_capacity(n, edges);
        let mut ext = Csr::with_capacity(n, 0);
        let mut ext_index: HashMap<String, u32> = HashMap::new();
        let mut ext_names: Vec<String> = Vec::new();
        // seen[j] == i + 1 when node j is already a dependency of node i; same for ext_seen.
        let mut seen: Vec<u32> = vec![0; n];
        let mut ext_seen: Vec<u32> = Vec::new();
        let mut names = Vec::with_capacity(n);
        let mut policies = Vec::with_capacity(n);
        let mut releases = Vec::with_capacity(n);
        for (i, node) in nodes.into_iter().enumerate() {
            let mark = i as u32 + 1;
            for name in node.inputs.iter().chain(node.borrows.iter()) {
                if let Some(&j) = index.get(name.as_str()) {
                    if seen[j as usize] != mark {
                        seen[j as usize] = mark;
                        deps.push_item(j);
                    }
                } else {
                    let e = match ext_index.get(name.as_str()) {
                        Some(&e) => e,
                        None => {
                            let e = ext_names.len() as u32;
                            ext_names.push(name.clone());
                            ext_index.insert(name.clone(), e);
                            ext_seen.push(0);
                            e
                        }
                    };
                    if ext_seen[e as usize] != mark {
                        ext_seen[e as usize] = mark;
                        ext.push_item(e);
                    }
                }
            }
            deps.end_row();
            ext.end_row();
            names.push(node.name);
            policies.push(node.policy);
            releases.push(node.release);
        }
        Ok(Graph {
            names,
            index,
            deps,
            ext,
            ext_names,
            policies,
            releases,
        })
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Whether `name` is a node.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// Node names, in definition order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Walk from `final_vars` through inputs and borrows (iteratively, depth first).
    ///
    /// `replaced` nodes are reached but not walked and are not active; names in `replaced`
    /// that are not nodes are ignored. Active nodes come out in a topological order
    /// (dependencies first).
    pub fn select<S, R>(&self, final_vars: &[S], replaced: &[R]) -> Result<Plan, GraphError>
    where
        S: AsRef<str>,
        R: AsRef<str>,
    {
        const NEW: u8 = 0;
        const OPEN: u8 = 1;
        const DONE: u8 = 2;
        const REPLACED: u8 = 3;
        let n = self.names.len();
        let mut roots = Vec::with_capacity(final_vars.len());
        for v in final_vars {
            match self.index.get(v.as_ref()) {
                Some(&i) => roots.push(i),
                None => return Err(GraphError::UnknownSelected(v.as_ref().to_owned())),
            }
        }
        let mut state: Vec<u8> = vec![NEW; n];
        let mut is_replaced: Vec<bool> = vec![false; n];
        for r in replaced {
            if let Some(&i) = self.index.get(r.as_ref()) {
                is_replaced[i as usize] = true;
            }
        }
        let mut reached: Vec<u32> = Vec::new();
        let mut order: Vec<u32> = Vec::new();
        // (node, position of the next dependency to visit)
        let mut stack: Vec<(u32, u32)> = Vec::new();
        for &root in &roots {
            if state[root as usize] != NEW {
                continue;
            }
            if is_replaced[root as usize] {
                state[root as usize] = REPLACED;
                reached.push(root);
                continue;
            }
            state[root as usize] = OPEN;
            reached.push(root);
            stack.push((root, 0));
            while let Some(top) = stack.last_mut() {
                let (node, pos) = *top;
                let deps = self.deps.row(node as usize);
                if (pos as usize) < deps.len() {
                    top.1 += 1;
                    let d = deps[pos as usize];
                    match state[d as usize] {
                        NEW => {
                            reached.push(d);
                            if is_replaced[d as usize] {
                                state[d as usize] = REPLACED;
                            } else {
                                state[d as usize] = OPEN;
                                stack.push((d, 0));
                            }
                        }
                        OPEN => {
                            let start = stack.iter().position(|&(s, _)| s == d).unwrap_or(0);
                            let mut path: Vec<String> = stack[start..]
                                .iter()
                                .map(|&(s, _)| self.names[s as usize].clone())
                                .collect();
                            path.push(self.names[d as usize].clone());
                            return Err(GraphError::Cycle(path));
                        }
                        _ => {}
                    }
                } else {
                    state[node as usize] = DONE;
                    order.push(node);
                    stack.pop();
                }
            }
        }
        Ok(self.build_plan(order, reached, &state, REPLACED))
    }

    fn build_plan(&self, order: Vec<u32>, reached: Vec<u32>, state: &[u8], replaced: u8) -> Plan {
        let n = self.names.len();
        let m = order.len();
        // job id of each graph node, u32::MAX when inactive
        let mut job_of: Vec<u32> = vec![u32::MAX; n];
        for (job, &g) in order.iter().enumerate() {
            job_of[g as usize] = job as u32;
        }
        let mut deps = Csr::with_capacity(m, 0);
        let mut n_consumers: Vec<u32> = vec![0; m];
        let mut ext_mark: Vec<bool> = vec![false; self.ext_names.len()];
        let mut external: Vec<String> = Vec::new();
        for &g in &order {
            for &d in self.deps.row(g as usize) {
                let j = job_of[d as usize];
                if j != u32::MAX {
                    deps.push_item(j);
                    n_consumers[j as usize] += 1;
                }
            }
            deps.end_row();
            for &e in self.ext.row(g as usize) {
                if !ext_mark[e as usize] {
                    ext_mark[e as usize] = true;
                    external.push(self.ext_names[e as usize].clone());
                }
            }
        }
        external.sort_unstable();
        // consumers CSR, built by counting
        let mut offsets: Vec<u32> = Vec::with_capacity(m + 1);
        let mut acc = 0u32;
        offsets.push(0);
        for &c in &n_consumers {
            acc += c;
            offsets.push(acc);
        }
        let mut fill: Vec<u32> = offsets[..m].to_vec();
        let mut items: Vec<u32> = vec![0; acc as usize];
        for job in 0..m {
            for &d in deps.row(job) {
                items[fill[d as usize] as usize] = job as u32;
                fill[d as usize] += 1;
            }
        }
        let consumers = Csr { offsets, items };
        let names: Vec<String> = order
            .iter()
            .map(|&g| self.names[g as usize].clone())
            .collect();
        let index: HashMap<String, u32> = names
            .iter()
            .enumerate()
            .map(|(j, s)| (s.clone(), j as u32))
            .collect();
        let policies: Vec<Policy> = order.iter().map(|&g| self.policies[g as usize]).collect();
        let releases: Vec<Option<Policy>> =
            order.iter().map(|&g| self.releases[g as usize]).collect();
        let roots: Vec<u32> = (0..m as u32)
            .filter(|&j| deps.row_len(j as usize) == 0)
            .collect();
        let reached_names: Vec<String> = reached
            .iter()
            .map(|&g| self.names[g as usize].clone())
            .collect();
        let replaced_names: Vec<String> = reached
            .iter()
            .filter(|&&g| state[g as usize] == replaced)
            .map(|&g| self.names[g as usize].clone())
            .collect();
        let owned = releases.iter().filter(|r| r.is_some()).count();
        Plan {
            names,
            index,
            deps,
            consumers,
            roots,
            policies,
            releases,
            owned,
            reached: reached_names,
            replaced: replaced_names,
            external,
        }
    }
}

/// The selected, active part of a graph: jobs `0..len()` in topological order.
#[derive(Clone, Debug)]
pub struct Plan {
    names: Vec<String>,
    index: HashMap<String, u32>,
    pub(crate) deps: Csr,
    pub(crate) consumers: Csr,
    pub(crate) roots: Vec<u32>,
    pub(crate) policies: Vec<Policy>,
    pub(crate) releases: Vec<Option<Policy>>,
    owned: usize,
    reached: Vec<String>,
    replaced: Vec<String>,
    external: Vec<String>,
}

impl Plan {
    /// Number of active nodes (= forward jobs).
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether nothing is active.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Active node names; index = job id.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Job id of an active node.
    pub fn index(&self, name: &str) -> Option<u32> {
        self.index.get(name).copied()
    }

    /// Every node reached by the walk (replaced ones included), in discovery order.
    pub fn reached(&self) -> &[String] {
        &self.reached
    }

    /// Reached nodes that were replaced (not active), in discovery order.
    pub fn replaced(&self) -> &[String] {
        &self.replaced
    }

    /// Names consumed by active nodes that are not nodes of the graph, sorted.
    pub fn external(&self) -> &[String] {
        &self.external
    }

    /// Active dependencies of `job` (inputs and borrows that are active nodes).
    pub fn dependencies(&self, job: u32) -> &[u32] {
        self.deps.row(job as usize)
    }

    /// Active consumers of `job`.
    pub fn consumers(&self, job: u32) -> &[u32] {
        self.consumers.row(job as usize)
    }

    /// Forward policy of `job`.
    pub fn policy(&self, job: u32) -> &Policy {
        &self.policies[job as usize]
    }

    /// Release policy of `job` when it is an owned node.
    pub fn release(&self, job: u32) -> Option<&Policy> {
        self.releases[job as usize].as_ref()
    }

    /// Number of owned active nodes.
    pub fn owned_count(&self) -> usize {
        self.owned
    }

    /// The shutdown order as edges `(dependent, owner)` of job ids: the release of
    /// `dependent` completes before the release of `owner` starts (when both are owed).
    ///
    /// Only the nearest owned dependents are listed: the walk from `owner` along consumers
    /// stops at owned nodes, whose own edges carry the order further. This is the relation
    /// [`crate::Run::begin_shutdown`] enforces (a node completes when all its consumers
    /// have completed and its own release, if owed, has completed). Sorted.
    pub fn release_edges(&self) -> Vec<(u32, u32)> {
        let m = self.names.len();
        // seen[j] == owner + 1 when j was already visited in owner's walk
        let mut seen: Vec<u32> = vec![0; m];
        let mut stack: Vec<u32> = Vec::new();
        let mut edges: Vec<(u32, u32)> = Vec::new();
        for owner in 0..m {
            if self.releases[owner].is_none() {
                continue;
            }
            let mark = owner as u32 + 1;
            stack.extend_from_slice(self.consumers.row(owner));
            while let Some(c) = stack.pop() {
                if seen[c as usize] == mark {
                    continue;
                }
                seen[c as usize] = mark;
                if self.releases[c as usize].is_some() {
                    edges.push((c, owner as u32));
                } else {
                    stack.extend_from_slice(self.consumers.row(c as usize));
                }
            }
        }
        edges.sort_unstable();
        edges
    }

    /// Owned active nodes grouped in release waves, assuming every one of them started and
    /// each release takes the same time: wave 0 releases first.
    pub fn shutdown_order(&self) -> Vec<Vec<String>> {
        let m = self.names.len();
        // wave[j]: number of owned releases (j's own included) that must happen up to and
        // including j's own; consumers come later in topological order, so walk backwards.
        let mut depth: Vec<u32> = vec![0; m];
        let mut waves: Vec<Vec<String>> = Vec::new();
        for j in (0..m).rev() {
            let after = self
                .consumers
                .row(j)
                .iter()
                .map(|&c| depth[c as usize])
                .max()
                .unwrap_or(0);
            if self.releases[j].is_some() {
                depth[j] = after + 1;
                let w = after as usize;
                if waves.len() <= w {
                    waves.resize_with(w + 1, Vec::new);
                }
                waves[w].push(self.names[j].clone());
            } else {
                depth[j] = after;
            }
        }
        for w in &mut waves {
            w.sort_unstable();
        }
        waves
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(name: &str, inputs: &[&str]) -> NodeDef {
        NodeDef::new(name, inputs).owned(Policy::default())
    }

    #[test]
    fn duplicate_names_are_refused() {
        let err = Graph::new(vec![NodeDef::new("a", &[]), NodeDef::new("a", &[])]).unwrap_err();
        assert_eq!(err, GraphError::DuplicateNode("a".into()));
        assert!(err.to_string().contains("\"a\""));
    }

    #[test]
    fn borrow_checks_name_both_nodes() {
        let err = Graph::new(vec![NodeDef::new("p", &[]).borrowing(&["x"])]).unwrap_err();
        assert_eq!(
            err,
            GraphError::UnknownBorrow {
                node: "p".into(),
                borrow: "x".into()
            }
        );
        let err = Graph::new(vec![
            NodeDef::new("a", &[]),
            NodeDef::new("p", &["a"]).borrowing(&["a"]),
        ])
        .unwrap_err();
        assert_eq!(
            err,
            GraphError::BorrowOfUnowned {
                node: "p".into(),
                borrow: "a".into()
            }
        );
        let msg = err.to_string();
        assert!(msg.contains("\"p\"") && msg.contains("\"a\""), "{msg}");
    }

    #[test]
    fn select_orders_dependencies_first_and_finds_externals() {
        let g = Graph::new(vec![
            NodeDef::new("c", &["b", "z"]),
            NodeDef::new("b", &["a", "y"]),
            NodeDef::new("a", &["x", "x"]),
            NodeDef::new("unused", &["w"]),
        ])
        .unwrap();
        assert_eq!(g.len(), 4);
        assert!(g.contains("a") && !g.contains("x"));
        let p = g.select(&["c"], &[] as &[&str]).unwrap();
        assert_eq!(p.names(), ["a", "b", "c"]);
        assert_eq!(p.external(), ["x", "y", "z"]);
        assert_eq!(p.reached(), ["c", "b", "a"]);
        assert_eq!(p.dependencies(2), [1]);
        assert_eq!(p.consumers(0), [1]);
        assert_eq!(p.index("b"), Some(1));
        assert_eq!(p.index("unused"), None);
    }

    #[test]
    fn unknown_final_var() {
        let g = Graph::new(vec![NodeDef::new("a", &["x"])]).unwrap();
        let err = g.select(&["x"], &[] as &[&str]).unwrap_err();
        assert_eq!(err.to_string(), "Unknown selected node: 'x'");
    }

    #[test]
    fn replaced_nodes_are_reached_not_walked() {
        let g = Graph::new(vec![
            NodeDef::new("a", &["x"]),
            NodeDef::new("b", &["a"]),
            NodeDef::new("c", &["b", "a"]),
        ])
        .unwrap();
        let p = g.select(&["c"], &["b", "not_a_node"]).unwrap();
        assert_eq!(p.names(), ["a", "c"]);
        assert_eq!(p.replaced(), ["b"]);
        let mut reached = p.reached().to_vec();
        reached.sort();
        assert_eq!(reached, ["a", "b", "c"]);
        assert_eq!(p.dependencies(1), [0]);
        // replacing the only path to `a` leaves it out entirely
        let p = g.select(&["c"], &["a", "b"]).unwrap();
        assert_eq!(p.names(), ["c"]);
        assert!(p.external().is_empty());
        let p = g.select(&["c"], &["c"]).unwrap();
        assert!(p.is_empty());
        assert_eq!(p.reached(), ["c"]);
    }

    #[test]
    fn cycles_name_their_nodes() {
        let g = Graph::new(vec![
            NodeDef::new("root", &["a"]),
            NodeDef::new("a", &["b"]),
            NodeDef::new("b", &["c"]),
            NodeDef::new("c", &["a"]),
            NodeDef::new("selfish", &["selfish"]),
        ])
        .unwrap();
        let err = g.select(&["root"], &[] as &[&str]).unwrap_err();
        assert_eq!(
            err,
            GraphError::Cycle(vec!["a".into(), "b".into(), "c".into(), "a".into()])
        );
        assert!(err.to_string().contains("'a' -> 'b' -> 'c' -> 'a'"));
        let err = g.select(&["selfish"], &[] as &[&str]).unwrap_err();
        assert_eq!(
            err,
            GraphError::Cycle(vec!["selfish".into(), "selfish".into()])
        );
        // replacing a node on the cycle breaks it
        let p = g.select(&["root"], &["b"]).unwrap();
        assert_eq!(p.names(), ["a", "root"]);
    }

    #[test]
    fn messages_are_bounded() {
        let long = "é".repeat(1_000_000);
        let err = GraphError::UnknownSelected(long.clone());
        let message = err.to_string();
        assert!(message.len() < 300, "{} bytes", message.len());
        assert!(message.contains("(1000000 characters)"), "{message}");
        for err in [
            GraphError::DuplicateNode(long.clone()),
            GraphError::RetriedAcquisition(long.clone()),
            GraphError::UnknownBorrow {
                node: long.clone(),
                borrow: long.clone(),
            },
        ] {
            assert!(err.to_string().len() < 800, "{err:?}");
        }
        let cycle: Vec<String> = (0..100_000).map(|i| format!("n{i}")).collect();
        let message = GraphError::Cycle(cycle).to_string();
        assert!(
            message.contains("'n9' -> … (100000 nodes in all)"),
            "{message}"
        );
        assert!(message.len() < 500);
    }

    #[test]
    fn borrows_are_dependencies() {
        let g = Graph::new(vec![
            owned("conn", &[]),
            NodeDef::new("field", &[]).borrowing(&["conn"]),
            NodeDef::new("use", &["field", "conn"]),
        ])
        .unwrap();
        let p = g.select(&["use"], &[] as &[&str]).unwrap();
        assert_eq!(p.names(), ["conn", "field", "use"]);
        assert_eq!(p.consumers(0), [1, 2]);
        assert_eq!(p.owned_count(), 1);
    }

    #[test]
    fn shutdown_waves_follow_dependencies() {
        // conn <- tx <- query ; conn <- other(owned, via plain node)
        let g = Graph::new(vec![
            owned("conn", &[]),
            owned("tx", &["conn"]),
            NodeDef::new("query", &["tx"]),
            NodeDef::new("mid", &["conn"]),
            owned("other", &["mid"]),
            owned("lonely", &[]),
        ])
        .unwrap();
        let p = g
            .select(&["query", "other", "lonely"], &[] as &[&str])
            .unwrap();
        assert_eq!(
            p.shutdown_order(),
            vec![vec!["lonely", "other", "tx"], vec!["conn"]]
        );
    }

    #[test]
    fn owned_nodes_with_forward_retries_are_refused() {
        let retried = Policy::new(None, 1, 0.0, 2.0).unwrap();
        let err = Graph::new(vec![
            NodeDef::new("plain", &[]).with_policy(retried),
            NodeDef::new("conn", &[])
                .with_policy(retried)
                .owned(Policy::default()),
        ])
        .unwrap_err();
        assert_eq!(err, GraphError::RetriedAcquisition("conn".into()));
        let message = err.to_string();
        assert!(message.starts_with("Acquisition retries require attempt cleanup: conn ("));
        assert!(
            message.contains("set retries=0"),
            "says what to do: {message}"
        );
        // retries on the release itself are fine
        let g = Graph::new(vec![NodeDef::new("conn", &[]).owned(retried)]);
        assert!(g.is_ok());
    }

    #[test]
    fn release_edges_name_the_nearest_owned_dependents() {
        let g = Graph::new(vec![
            owned("conn", &[]),
            owned("tx", &["conn"]),
            NodeDef::new("query", &["tx"]),
            owned("deep", &["query", "conn"]),
            NodeDef::new("mid", &["conn"]),
            owned("other", &["mid"]),
            owned("lonely", &[]),
        ])
        .unwrap();
        let p = g
            .select(&["deep", "other", "lonely"], &[] as &[&str])
            .unwrap();
        let named: Vec<(&str, &str)> = p
            .release_edges()
            .into_iter()
            .map(|(d, o)| {
                (
                    p.names()[d as usize].as_str(),
                    p.names()[o as usize].as_str(),
                )
            })
            .collect();
        let mut expect = vec![
            ("tx", "conn"),
            ("deep", "conn"),
            ("other", "conn"),
            ("deep", "tx"),
        ];
        expect.sort_by_key(|&(d, o)| (p.index(d), p.index(o)));
        assert_eq!(named, expect);
    }

    #[test]
    fn large_chain_and_fan_out_are_linear_and_iterative() {
        let n = 100_000;
        let mut nodes = vec![NodeDef::new("n0", &["x"])];
        for i in 1..n {
            nodes.push(NodeDef {
                name: format!("n{i}"),
                inputs: vec![format!("n{}", i - 1)],
                borrows: vec![],
                policy: Policy::default(),
                release: None,
            });
        }
        let g = Graph::new(nodes).unwrap();
        let p = g.select(&[format!("n{}", n - 1)], &[] as &[&str]).unwrap();
        assert_eq!(p.len(), n);
        assert_eq!(p.names()[0], "n0");
        assert_eq!(p.external(), ["x"]);

        let mut nodes = vec![NodeDef::new("src", &[])];
        let mut leaves = Vec::new();
        for i in 0..n {
            nodes.push(NodeDef::new(format!("leaf{i}"), &["src"]));
            leaves.push(format!("leaf{i}"));
        }
        nodes.push(NodeDef {
            name: "sink".into(),
            inputs: leaves.clone(),
            borrows: vec![],
            policy: Policy::default(),
            release: None,
        });
        let g = Graph::new(nodes).unwrap();
        let p = g.select(&["sink"], &[] as &[&str]).unwrap();
        assert_eq!(p.len(), n + 2);
        assert_eq!(p.consumers(0).len(), n);
        assert_eq!(p.dependencies(p.index("sink").unwrap()).len(), n);
    }
}
