//! `StepCatcher`: stands in for a loop's `call_soon` while a phase task is created on
//! Python 3.11, which has no eager tasks (`_driver/context.py`, `_phase_task`).
//!
//! `asyncio.Task` hands its first step to `loop.call_soon(step, context=ctx)`; the catcher
//! keeps that step for the driver to run at once. It is a Rust object rather than a Python
//! one only because it is called once per run: a call of it costs no Python frame.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::{PyTraverseError, PyVisit};

#[pyclass(module = "sdax_hamilton._core", name = "StepCatcher")]
#[derive(Default)]
pub(crate) struct StepCatcher {
    caught: Option<(Py<PyAny>, Py<PyAny>)>,
}

#[pymethods]
impl StepCatcher {
    #[new]
    fn py_new() -> Self {
        StepCatcher::default()
    }

    /// What the loop's `call_soon` is called with by a task: keep `callback` and
    /// `context` (a call with arguments for the callback is refused by the signature).
    #[pyo3(signature = (callback, *, context = None))]
    fn __call__(
        &mut self,
        py: Python<'_>,
        callback: Py<PyAny>,
        context: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        if self.caught.is_some() {
            return Err(PyTypeError::new_err(
                "StepCatcher: expected one call_soon(callback, context=...)",
            ));
        }
        self.caught = Some((callback, context.unwrap_or_else(|| py.None())));
        Ok(())
    }

    /// `(step, context)` caught since the last `take()`, or `None`; the catcher keeps no
    /// reference to them.
    fn take(&mut self) -> Option<(Py<PyAny>, Py<PyAny>)> {
        self.caught.take()
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some((step, context)) = &self.caught {
            visit.call(step)?;
            visit.call(context)?;
        }
        Ok(())
    }

    fn __clear__(&mut self) {
        self.caught = None;
    }
}

/// Whether `frames` more levels of recursion fit below the interpreter's recursion limit
/// now (Python 3.11, where Python frames and C calls count against the same limit and no
/// API reads the depth): the recursion counter is entered `frames` times, as that many
/// nested calls would, and left as many times. Nothing runs meanwhile; a `RecursionError`
/// the probe met is cleared (the driver raises its own).
#[pyfunction]
pub(crate) fn has_room(py: Python<'_>, frames: u32) -> bool {
    let mut entered = 0;
    while entered < frames {
        // SAFETY: `Py_EnterRecursiveCall` only counts (and, at the limit, sets a
        // RecursionError and returns nonzero); each successful enter is matched by one
        // `Py_LeaveRecursiveCall` below, with the GIL held throughout (`py`).
        #[allow(unsafe_code)]
        let refused = unsafe { pyo3::ffi::Py_EnterRecursiveCall(c" in has_room".as_ptr()) } != 0;
        if refused {
            drop(PyErr::take(py));
            break;
        }
        entered += 1;
    }
    for _ in 0..entered {
        // SAFETY: see above: one leave per successful enter.
        #[allow(unsafe_code)]
        unsafe {
            pyo3::ffi::Py_LeaveRecursiveCall()
        };
    }
    entered == frames
}
