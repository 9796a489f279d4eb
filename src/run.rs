//! `Run`: the per-run state machine, commands out as plain tuples.

use std::sync::Arc;

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyList};

use sdax_core::{Command, Failure, Run};

use crate::graph::PyPlan;
use crate::policy::type_name;

fn run_err(e: sdax_core::RunError) -> PyErr {
    PyRuntimeError::new_err(e.to_string())
}

/// Job ids from Python: any int; values outside i64 are unknown jobs, reported as given.
fn job_id(job: &Bound<'_, PyAny>, event: &str) -> PyResult<i64> {
    match job.extract::<i64>() {
        Ok(j) => Ok(j),
        Err(e) => {
            if job.is_instance_of::<PyInt>() {
                Err(PyRuntimeError::new_err(format!(
                    "Run.{event}: {job} is not a job of this run"
                )))
            } else {
                Err(e)
            }
        }
    }
}

/// Scheduling state of one execution of a `Plan`.
#[pyclass(module = "sdax_hamilton._core", name = "Run")]
pub(crate) struct PyRun {
    core: Run,
    out: Vec<Command>,
}

impl PyRun {
    fn commands<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::new(
            py,
            self.out
                .iter()
                .map(|c| (c.op as u8, c.job, c.attempt, c.arg)),
        );
        self.out.clear();
        list
    }
}

#[pymethods]
impl PyRun {
    #[new]
    #[pyo3(signature = (plan, seed=None, *, instant_retries=false))]
    fn py_new(
        plan: &Bound<'_, PyPlan>,
        seed: Option<&Bound<'_, PyAny>>,
        instant_retries: bool,
    ) -> PyResult<Self> {
        let seed = match seed {
            None => None,
            Some(s) if s.is_none() => None,
            Some(s) => {
                if !s.is_instance_of::<PyInt>() {
                    return Err(PyTypeError::new_err(format!(
                        "seed must be an int or None, got {}",
                        type_name(s)
                    )));
                }
                // Any int: reduced modulo 2**64.
                match s.extract::<u64>() {
                    Ok(v) => Some(v),
                    Err(_) => {
                        let mask = u64::MAX.into_pyobject(s.py())?;
                        Some(s.bitand(mask)?.extract::<u64>()?)
                    }
                }
            }
        };
        Ok(PyRun {
            core: Run::new(Arc::clone(&plan.get().core), seed)
                .with_instant_retries(instant_retries),
            out: Vec::with_capacity(8),
        })
    }

    fn start<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.core.start(&mut self.out).map_err(run_err)?;
        self.commands(py)
    }

    fn succeeded<'py>(
        &mut self,
        py: Python<'py>,
        job: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        self.core
            .succeeded(job_id(job, "succeeded")?, &mut self.out)
            .map_err(run_err)?;
        self.commands(py)
    }

    fn failed<'py>(
        &mut self,
        py: Python<'py>,
        job: &Bound<'py, PyAny>,
        retryable: bool,
    ) -> PyResult<(Option<f64>, Bound<'py, PyList>)> {
        let decided = self
            .core
            .failed(job_id(job, "failed")?, retryable, &mut self.out)
            .map_err(run_err)?;
        let delay = match decided {
            Failure::Retry { delay } => Some(delay),
            Failure::Final | Failure::Ignored => None,
        };
        Ok((delay, self.commands(py)?))
    }

    fn elapsed<'py>(
        &mut self,
        py: Python<'py>,
        job: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        self.core
            .elapsed(job_id(job, "elapsed")?, &mut self.out)
            .map_err(run_err)?;
        self.commands(py)
    }

    fn drained<'py>(
        &mut self,
        py: Python<'py>,
        job: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        self.core
            .drained(job_id(job, "drained")?, &mut self.out)
            .map_err(run_err)?;
        self.commands(py)
    }

    fn unstarted<'py>(
        &mut self,
        py: Python<'py>,
        job: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        self.core
            .unstarted(job_id(job, "unstarted")?, &mut self.out)
            .map_err(run_err)?;
        self.commands(py)
    }

    fn rejected<'py>(
        &mut self,
        py: Python<'py>,
        job: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        self.core
            .rejected(job_id(job, "rejected")?, &mut self.out)
            .map_err(run_err)?;
        self.commands(py)
    }

    #[getter]
    fn instant_retries(&self) -> bool {
        self.core.instant_retries()
    }

    fn cancel<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.core.cancel(&mut self.out);
        self.commands(py)
    }

    fn begin_shutdown<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.core.begin_shutdown(&mut self.out).map_err(run_err)?;
        self.commands(py)
    }

    #[getter]
    fn pending(&self) -> u32 {
        self.core.pending()
    }

    #[getter]
    fn aborted(&self) -> bool {
        self.core.aborted()
    }

    #[getter]
    fn finished(&self) -> bool {
        self.core.finished()
    }

    fn attempts(&self, job: &Bound<'_, PyAny>) -> PyResult<u32> {
        self.core
            .attempts(job_id(job, "attempts")?)
            .map_err(run_err)
    }

    fn started(&self, job: &Bound<'_, PyAny>) -> PyResult<bool> {
        self.core.started(job_id(job, "started")?).map_err(run_err)
    }

    fn succeeded_jobs(&self) -> Vec<u32> {
        self.core.succeeded_jobs()
    }

    fn __repr__(&self) -> String {
        format!(
            "<Run of {} jobs: pending={}, aborted={}, finished={}>",
            self.core.plan().len(),
            self.core.pending(),
            self.core.aborted(),
            self.core.finished()
        )
    }
}
