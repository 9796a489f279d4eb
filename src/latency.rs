//! Bindings of a node's latency (docs/contract.md#latency, core/src/shared/latency.rs):
//! `Latency`, the validated configuration behind `sdax_hamilton.Latency`, and `LatencyWindow`,
//! one node's window shared by every run and thread of a Driver (its core state behind one
//! `Mutex`). Argument types are decided here, values by the core; `now` is handed in.

use std::sync::Mutex;

use pyo3::prelude::*;

use sdax_core::shared::{Latency, LatencyWindow, SharedError};

use crate::shared::{float_arg, int_arg, locked, value_error};

/// docs/contract.md#latency: the percentile of a node's successful attempts' durations within
/// the trailing window, `initial` until `min_samples`.
#[pyclass(frozen, module = "sdax_hamilton._core", name = "Latency")]
pub(crate) struct PyLatency {
    config: Latency,
}

#[pymethods]
impl PyLatency {
    #[new]
    #[pyo3(signature = (percentile, window, min_samples, initial))]
    fn py_new(
        percentile: &Bound<'_, PyAny>,
        window: &Bound<'_, PyAny>,
        min_samples: &Bound<'_, PyAny>,
        initial: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let p = float_arg(
            percentile,
            "percentile",
            SharedError::Percentile(0.0).requirement(),
        )?;
        let w = float_arg(window, "window", SharedError::Window(0.0).requirement())?;
        let m = int_arg(
            min_samples,
            "min_samples",
            SharedError::MinSamples(0).requirement(),
        )?;
        let i = float_arg(initial, "initial", SharedError::Initial(0.0).requirement())?;
        let config = Latency::new(p, w, m, i).map_err(|e| {
            value_error(
                e,
                &[
                    ("percentile", percentile),
                    ("window", window),
                    ("min_samples", min_samples),
                    ("initial", initial),
                ],
            )
        })?;
        Ok(PyLatency { config })
    }

    #[getter]
    fn percentile(&self) -> f64 {
        self.config.percentile()
    }
    #[getter]
    fn window(&self) -> f64 {
        self.config.window()
    }
    #[getter]
    fn min_samples(&self) -> u64 {
        self.config.min_samples()
    }
    #[getter]
    fn initial(&self) -> f64 {
        self.config.initial()
    }
    /// Samples a window of this configuration holds at most (its fixed memory).
    #[getter]
    fn capacity(&self) -> usize {
        self.config.capacity()
    }

    /// A new, empty window of this configuration (one per node and Driver).
    fn new_window(&self) -> PyLatencyWindow {
        PyLatencyWindow {
            inner: Mutex::new(LatencyWindow::new(self.config)),
        }
    }

    fn __repr__(&self) -> String {
        format!(
            "Latency(percentile={:?}, window={:?}, min_samples={}, initial={:?})",
            self.config.percentile(),
            self.config.window(),
            self.config.min_samples(),
            self.config.initial()
        )
    }
}

/// One node's latency window, shared across runs and threads.
#[pyclass(frozen, module = "sdax_hamilton._core", name = "LatencyWindow")]
pub(crate) struct PyLatencyWindow {
    inner: Mutex<LatencyWindow>,
}

#[pymethods]
impl PyLatencyWindow {
    /// A successful attempt that took `duration` seconds ended at `now`.
    fn record(&self, now: f64, duration: f64) {
        locked(&self.inner).record(now, duration);
    }

    /// The delay after which a hedge is due at `now` (seconds).
    fn hedge_after(&self, now: f64) -> f64 {
        locked(&self.inner).hedge_after(now)
    }

    /// Successes within the window at `now` that the window holds.
    fn samples(&self, now: f64) -> usize {
        locked(&self.inner).samples(now)
    }

    fn __repr__(&self) -> String {
        let config = locked(&self.inner).config();
        format!(
            "<LatencyWindow percentile={:?} window={:?} min_samples={} initial={:?}>",
            config.percentile(),
            config.window(),
            config.min_samples(),
            config.initial()
        )
    }
}
