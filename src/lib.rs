//! Thin PyO3 bindings over `sdax-core`: module `sdax_hamilton._core`.
//!
//! All scheduling logic lives in the core crate; this layer converts Python values,
//! applies the Python-type rules of docs/contract.md#policy-validation and maps core errors onto
//! Python exceptions (`ValueError` for graph/selection errors, `RuntimeError` for run-protocol
//! misuse). A few more pieces live here because they call Python: the inline carrier
//! (`carry.rs`), with which a `Run` carries out its own lone STARTs, the value table of a
//! run's inputs (`inputs.rs`), and the catcher of a 3.11 phase task's first step
//! (`step.rs`); they decide nothing.

#![deny(unsafe_code)] // exceptions, explained where they are: carry::step, step::has_room, text::join_ascii

mod carry;
mod check;
mod graph;
mod hedge;
mod inputs;
mod latency;
mod policy;
mod run;
mod seq;
mod shared;
mod step;
mod text;

use pyo3::prelude::*;

use carry::PyCarrier;
use graph::{PyGraph, PyPlan};
use hedge::{check_hedging, PyHedgeRound};
use inputs::InputTable;
use latency::{PyLatency, PyLatencyWindow};
use policy::{_make_policy, is_number, run_budget, PyPolicy};
use run::PyRun;
use shared::{PyBulkhead, PyCircuitBreaker, PyGuard, PyRetryBudget};
use step::StepCatcher;

/// Rust core of sdax_hamilton: policy validation and jitter, graph compilation and
/// selection, and the per-run scheduling state machine.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("START", sdax_core::Op::Start as u8)?;
    m.add("SLEEP", sdax_core::Op::Sleep as u8)?;
    m.add("CANCEL", sdax_core::Op::Cancel as u8)?;
    m.add("STOP_SLEEP", sdax_core::Op::StopSleep as u8)?;
    m.add("HINT", sdax_core::Op::Hint as u8)?;
    m.add("NO_ROOM", sdax_core::Op::NoRoom as u8)?;
    m.add("EXPIRE", sdax_core::Op::Expire as u8)?;
    m.add("START_CLIPPED", sdax_core::Op::StartClipped as u8)?;
    m.add("BAD_HINT", sdax_core::Op::BadHint as u8)?;
    m.add("NO_BUDGET", sdax_core::Op::NoBudget as u8)?;
    m.add("FALLBACK", sdax_core::Op::Fallback as u8)?;
    m.add("DRAW", sdax_core::Op::Draw as u8)?;
    m.add("CLOSE", sdax_core::Op::Close as u8)?;
    m.add("STOP_DRAW", sdax_core::Op::StopDraw as u8)?;
    m.add("CARRIED", carry::CARRIED)?;
    m.add("CARRIED_RAISED", carry::RAISED)?;
    m.add("CARRIED_RETURNED", carry::RETURNED)?;
    m.add("CARRIED_SUSPENDED", carry::SUSPENDED)?;
    m.add("CARRIED_AWAITABLE", carry::AWAITABLE)?;
    m.add("CARRIED_REJECTED", carry::REJECTED)?;
    m.add("CARRIED_BREAKER", carry::CARRIED_BREAKER)?;
    m.add_class::<PyPolicy>()?;
    m.add_class::<PyGraph>()?;
    m.add_class::<PyPlan>()?;
    m.add_class::<PyRun>()?;
    m.add_class::<run::HintDecision>()?;
    m.add_class::<carry::HandBack>()?;
    m.add_class::<carry::CarriedNode>()?;
    m.add_class::<PyCarrier>()?;
    m.add_class::<StepCatcher>()?;
    m.add_class::<InputTable>()?;
    m.add_class::<PyBulkhead>()?;
    m.add_class::<PyCircuitBreaker>()?;
    m.add_class::<PyRetryBudget>()?;
    m.add_class::<PyGuard>()?;
    m.add_class::<PyLatency>()?;
    m.add_class::<PyLatencyWindow>()?;
    m.add_class::<PyHedgeRound>()?;
    m.add_function(wrap_pyfunction!(_make_policy, m)?)?;
    m.add_function(wrap_pyfunction!(check_hedging, m)?)?;
    m.add_function(wrap_pyfunction!(run_budget, m)?)?;
    m.add_function(wrap_pyfunction!(is_number, m)?)?;
    m.add_function(wrap_pyfunction!(step::has_room, m)?)?;
    m.add_function(wrap_pyfunction!(text::join_ascii, m)?)?;
    Ok(())
}
