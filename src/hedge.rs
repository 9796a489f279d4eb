//! Bindings of a hedged round (docs/contract.md#hedged-rounds, core/src/hedge.rs): the state
//! machine of one round of a node's calls, for the driver that will carry hedges out. One
//! round belongs to one attempt of one run, on the loop thread; the `Mutex` only makes the
//! frozen class safe to share. `now` is handed in.

use std::sync::Mutex;

use pyo3::prelude::*;

use sdax_core::hedge::{hedging, Completion, Report, Round};
use sdax_core::shared::SharedError;

use crate::shared::{float_arg, int_arg, locked, value_error};

fn report(r: Report) -> (&'static str, Vec<usize>) {
    match r {
        Report::Won { cancel } => ("won", cancel),
        Report::Recorded => ("recorded", Vec::new()),
        Report::Ignored => ("ignored", Vec::new()),
    }
}

/// One hedged round: call 0 starts at `now`; at most `hedges` more.
#[pyclass(frozen, module = "sdax_hamilton._core", name = "HedgeRound")]
pub(crate) struct PyHedgeRound {
    inner: Mutex<Round>,
}

#[pymethods]
impl PyHedgeRound {
    #[new]
    fn py_new(now: f64, hedges: u32) -> Self {
        PyHedgeRound {
            inner: Mutex::new(Round::new(now, hedges)),
        }
    }

    /// Calls started so far.
    #[getter]
    fn started(&self) -> usize {
        locked(&self.inner).started()
    }

    /// The winning call, once one has won.
    #[getter]
    fn winner(&self) -> Option<usize> {
        locked(&self.inner).winner()
    }

    /// When the next hedge is due (`None`: no further call will start).
    fn next_due(&self, hedge_after: f64) -> Option<f64> {
        locked(&self.inner).next_due(hedge_after)
    }

    /// Start the due hedge at `now`: its call number, or `None` when none is due.
    fn start_hedge(&self, now: f64, hedge_after: f64) -> Option<usize> {
        locked(&self.inner).start_hedge(now, hedge_after)
    }

    /// The due hedge was skipped at `now`: `False` when none was due.
    fn skip_hedge(&self, now: f64, hedge_after: f64) -> bool {
        locked(&self.inner).skip_hedge(now, hedge_after)
    }

    /// Call `call` returned a valid value: `("won", calls to cancel)`, `("recorded", [])`
    /// (a loser's value) or `("ignored", [])`.
    fn succeeded(&self, call: usize) -> (&'static str, Vec<usize>) {
        report(locked(&self.inner).succeeded(call))
    }

    /// Call `call` failed: `("recorded", [])` or `("ignored", [])`.
    fn failed(&self, call: usize) -> (&'static str, Vec<usize>) {
        report(locked(&self.inner).failed(call))
    }

    /// Call `call`, told to stop, has ended: `("recorded", [])` or `("ignored", [])`.
    fn drained(&self, call: usize) -> (&'static str, Vec<usize>) {
        report(locked(&self.inner).drained(call))
    }

    /// The round is aborted: the running calls to cancel.
    fn abort(&self) -> Vec<usize> {
        locked(&self.inner).abort()
    }

    /// `None` while a call runs or drains; else `("won", [winner])`, `("failed", [the
    /// calls noted beside call 0])` or `("aborted", [])`.
    fn completion(&self) -> Option<(&'static str, Vec<usize>)> {
        locked(&self.inner).completion().map(|c| match c {
            Completion::Won { winner } => ("won", vec![winner]),
            Completion::Failed { others } => ("failed", others),
            Completion::Aborted => ("aborted", Vec::new()),
        })
    }

    fn __repr__(&self) -> String {
        let g = locked(&self.inner);
        let winner = g.winner().map_or("None".to_owned(), |w| w.to_string());
        format!("<HedgeRound started={} winner={winner}>", g.started())
    }
}

/// `execution(hedge_after=, hedges=)` checked (docs/contract.md#hedging): `hedge_after` a
/// number or `None` (a `Latency` is passed as `None`: it was checked when made), `hedges` an
/// int; types here (`bool` refused), values by the core. Returns them as the core keeps them.
#[pyfunction]
pub(crate) fn check_hedging(
    hedge_after: &Bound<'_, PyAny>,
    hedges: &Bound<'_, PyAny>,
) -> PyResult<(Option<f64>, u32)> {
    let after = if hedge_after.is_none() {
        None
    } else {
        Some(float_arg(
            hedge_after,
            "hedge_after",
            SharedError::HedgeAfter(0.0).requirement(),
        )?)
    };
    let count = int_arg(hedges, "hedges", SharedError::Hedges(0).requirement())?;
    hedging(after, count)
        .map_err(|e| value_error(e, &[("hedge_after", hedge_after), ("hedges", hedges)]))
}
