//! `sdax-core`: the Python-free core of `sdax_hamilton`.
//!
//! * [`policy`]: attempt policies, retry decision, jittered exponential backoff;
//! * [`graph`]: graph compilation, selection, topological and shutdown structure;
//! * [`run`]: the per-run state machine driven by events, answering with commands;
//! * [`shared`]: bulkheads, circuit breakers, retry budgets and latency windows shared across
//!   runs;
//! * [`hedge`]: one hedged round of a node's calls (not yet driven by runs).

#![forbid(unsafe_code)]
#![warn(missing_debug_implementations)]

pub mod graph;
pub mod hedge;
pub mod policy;
pub mod run;
pub mod shared;
#[doc(hidden)]
pub mod testing;

pub use graph::{Graph, GraphError, NodeDef, Plan};
pub use policy::{Number, Policy, PolicyError};
pub use run::{Command, Failure, Hint, JobState, Op, RetryGate, Run, RunError};
