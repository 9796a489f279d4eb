//! `Run`: the per-run state machine, commands out as plain tuples.

use std::sync::Arc;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyList};
use pyo3::{PyTraverseError, PyVisit};

use sdax_core::{Command, Failure, Hint, Op, Run};

use crate::carry::{Carried, Carrying, HandBack, PyCarrier, CARRIED, CARRIED_BREAKER};
use crate::graph::PyPlan;
use crate::policy::{number_repr, read_number, type_name};
use crate::shared::{BudgetGate, PyRetryBudget};

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
                    "Run.{event}: {} is not a job of this run",
                    number_repr(job)
                )))
            } else {
                Err(e)
            }
        }
    }
}

/// The wait of a retry the core scheduled; `None` when it did not (yet) schedule one: a
/// final failure, an ignored report, or a HINT to carry out first.
fn retry_delay(decided: Failure) -> Option<f64> {
    match decided {
        Failure::Retry { delay } => Some(delay),
        Failure::Final | Failure::Ignored | Failure::AskHook => None,
    }
}

/// What the core decided about a `retry_after` hint (`Run.hinted`, `Run.hint_failed`).
#[pyclass(frozen, module = "sdax_hamilton._core", name = "HintDecision")]
pub(crate) struct HintDecision {
    /// The wait before the retry, or `None` when the failure is final (or was ignored).
    #[pyo3(get)]
    delay: Option<f64>,
    /// The commands to carry out, in order.
    #[pyo3(get)]
    commands: Py<PyList>,
    /// Why the hint was refused (the failure is final): what the hook returned, in words
    /// that never include the value; `None` when it was not refused.
    #[pyo3(get)]
    refused: Option<String>,
}

#[pymethods]
impl HintDecision {
    fn __repr__(&self) -> String {
        format!(
            "HintDecision(delay={:?}, refused={:?})",
            self.delay, self.refused
        )
    }
}

/// Why a hint the core refused was unusable: a value of another type (the bindings'
/// classification) or a wait the policy cannot take (the core's).
fn refusal(hint: &Bound<'_, PyAny>, classified: &Hint) -> String {
    match classified {
        Hint::Unusable => {
            let kind = hint
                .get_type()
                .qualname()
                .map(|n| n.to_string())
                .unwrap_or_else(|_| type_name(hint));
            format!("returned a {kind} instead of a number or None")
        }
        _ => "returned an unusable wait (negative, NaN, or infinite without max_delay)".to_owned(),
    }
}

/// `Run.carry_with`'s argument: `(carrier, values, acquisitions, task, clock)`.
type CarryingArgs = (Py<PyCarrier>, Py<PyDict>, Py<PyList>, Py<PyAny>, Py<PyAny>);

/// Scheduling state of one execution of a `Plan`.
/// `(source, collect, templates, limit)`: one fan-out handed to `Run(fan_outs=)`.
type FanOutArgs = (usize, usize, Vec<usize>, Option<u32>);

#[pyclass(module = "sdax_hamilton._core", name = "Run")]
pub(crate) struct PyRun {
    core: Run,
    out: Vec<Command>,
    /// Set while a phase carries out its lone STARTs inline (src/carry.rs).
    carrying: Option<Carrying>,
}

impl PyRun {
    /// The core's commands, after carrying out the lone STARTs among them while a carrier
    /// is attached (src/carry.rs): a START the carrier declines stays a command; one it
    /// hands back becomes the only command, ``(CARRIED, job, 0, HandBack)``. Breaker
    /// transitions the carried attempts caused come first, ``(CARRIED_BREAKER, job, 0,
    /// transition)``.
    fn carried<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let Some(carrying) = self.carrying.as_ref() else {
            return self.commands(py);
        };
        let carrying = carrying.clone_ref(py);
        let carrier = carrying.carrier.get();
        let n = carrier.forward_count();
        let mut transitions: Vec<(u32, &'static str)> = Vec::new();
        while let [c] = self.out[..] {
            if c.op != Op::Start || c.attempt != 0 || !self.core.lone() {
                break;
            }
            let job = c.job as usize;
            let started = match c.arg {
                Some(_) => Some(carrying.now(py)?),
                None => None,
            };
            let outcome = if job < n {
                carrier.call_node(py, job, &carrying, &mut transitions)?
            } else {
                carrier.call_release(py, job - n, &carrying)?
            };
            match outcome {
                Carried::Declined => break,
                Carried::Done => {
                    self.out.clear();
                    self.core
                        .succeeded(i64::from(c.job), &mut self.out)
                        .map_err(run_err)?;
                }
                Carried::HandBack(back) => {
                    self.out.clear();
                    let handed = Py::new(py, HandBack::new(back, c.arg, started))?;
                    let list = Self::transitions(py, &transitions)?;
                    list.append((CARRIED, c.job, c.attempt, handed))?;
                    return Ok(list);
                }
            }
        }
        if transitions.is_empty() {
            return self.commands(py);
        }
        let list = Self::transitions(py, &transitions)?;
        for c in self.out.drain(..) {
            list.append((c.op as u8, c.job, c.attempt, c.arg))?;
        }
        Ok(list)
    }

    /// ``(CARRIED_BREAKER, job, 0, transition)`` for each transition.
    fn transitions<'py>(
        py: Python<'py>,
        transitions: &[(u32, &'static str)],
    ) -> PyResult<Bound<'py, PyList>> {
        PyList::new(
            py,
            transitions
                .iter()
                .map(|&(job, t)| (CARRIED_BREAKER, job, 0u32, t)),
        )
    }

    /// Whether the commands just decided refuse the hint of `job` (BAD_HINT).
    fn refused(&self, job: i64) -> bool {
        self.out
            .iter()
            .any(|c| c.op == Op::BadHint && i64::from(c.job) == job)
    }

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
    #[pyo3(signature = (plan, seed=None, *, instant_retries=false, retry_budget=None, fallbacks=None, fan_outs=None))]
    fn py_new(
        plan: &Bound<'_, PyPlan>,
        seed: Option<&Bound<'_, PyAny>>,
        instant_retries: bool,
        retry_budget: Option<Py<PyRetryBudget>>,
        fallbacks: Option<Vec<usize>>,
        fan_outs: Option<Vec<FanOutArgs>>,
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
                // Any int: reduced modulo 2**64 (by `int`'s own `&`, never a subclass's).
                match s.extract::<u64>() {
                    Ok(v) => Some(v),
                    Err(_) => {
                        let py = s.py();
                        let reduced = py
                            .get_type::<PyInt>()
                            .getattr(pyo3::intern!(py, "__and__"))?
                            .call1((s, u64::MAX))?;
                        Some(reduced.extract::<u64>()?)
                    }
                }
            }
        };
        let mut core =
            Run::new(Arc::clone(&plan.get().core), seed).with_instant_retries(instant_retries);
        if let Some(budget) = retry_budget {
            let py = plan.py();
            let clock = py.import("time")?.getattr("monotonic")?.unbind();
            core = core.with_retry_gate(Box::new(BudgetGate::new(budget, clock)));
        }
        if let Some(jobs) = fallbacks {
            core = core.with_fallbacks(&jobs);
        }
        for (source, collect, templates, limit) in fan_outs.unwrap_or_default() {
            core = core
                .with_fan_out(source, collect, &templates, limit)
                .map_err(|e| PyValueError::new_err(e.to_string()))?;
        }
        Ok(PyRun {
            core,
            out: Vec::with_capacity(8),
            carrying: None,
        })
    }

    /// Attach ``(carrier, values, acquisitions, task, clock)`` for the phase carried out by
    /// ``task`` on the loop whose ``time`` is ``clock``: from now on ``start``,
    /// ``succeeded`` and ``begin_shutdown`` carry out lone STARTs inline (src/carry.rs).
    /// ``None`` detaches them.
    /// A carrier built for another plan (a different number of nodes) is a `ValueError`.
    fn carry_with(&mut self, carrying: Option<CarryingArgs>) -> PyResult<()> {
        if let Some((carrier, ..)) = &carrying {
            let (carried, planned) = (carrier.get().forward_count(), self.core.plan().len());
            if carried != planned {
                return Err(PyValueError::new_err(format!(
                    "Run.carry_with: the carrier has {carried} node(s), the plan {planned}"
                )));
            }
        }
        self.carrying = carrying.map(|(carrier, values, acquisitions, task, clock)| Carrying {
            carrier,
            values,
            acquisitions,
            task,
            clock,
        });
        Ok(())
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        match &self.carrying {
            Some(carrying) => carrying.traverse(&visit),
            None => Ok(()),
        }
    }

    fn __clear__(&mut self) {
        self.carrying = None;
    }

    fn start<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.core.start(&mut self.out).map_err(run_err)?;
        self.carried(py)
    }

    fn succeeded<'py>(
        &mut self,
        py: Python<'py>,
        job: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        self.core
            .succeeded(job_id(job, "succeeded")?, &mut self.out)
            .map_err(run_err)?;
        self.carried(py)
    }

    /// `succeeded(job)`, but `None` when the only command is the first attempt of job
    /// `next` with no timeout: a fan-out item's task carries that START out itself
    /// (python/sdax_hamilton/_executor/fanout.py, `Items._onward`), with no list made.
    fn succeeded_before<'py>(
        &mut self,
        py: Python<'py>,
        job: &Bound<'py, PyAny>,
        next: i64,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        self.core
            .succeeded(job_id(job, "succeeded_before")?, &mut self.out)
            .map_err(run_err)?;
        if self.carrying.is_none() {
            if let [c] = self.out[..] {
                if c.op == Op::Start
                    && c.attempt == 0
                    && c.arg.is_none()
                    && i64::from(c.job) == next
                {
                    self.out.clear();
                    return Ok(None);
                }
            }
        }
        self.carried(py).map(Some)
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
        Ok((retry_delay(decided), self.commands(py)?))
    }

    /// What the job's `retry_after` hook returned: a number (an int or a float, subclasses
    /// included, not a bool: read exactly, `crate::policy::read_number`) is the wait, `None`
    /// asks for the backoff, anything else is unusable (a failure for good).
    fn hinted<'py>(
        &mut self,
        py: Python<'py>,
        job: &Bound<'py, PyAny>,
        hint: &Bound<'py, PyAny>,
    ) -> PyResult<HintDecision> {
        let classified = if hint.is_none() {
            Hint::Backoff
        } else {
            match read_number(hint)? {
                Some(number) => Hint::Wait(number.to_f64()),
                None => Hint::Unusable,
            }
        };
        let job = job_id(job, "hinted")?;
        let decided = self
            .core
            .hinted(job, classified, &mut self.out)
            .map_err(run_err)?;
        let refused = self.refused(job).then(|| refusal(hint, &classified));
        Ok(HintDecision {
            delay: retry_delay(decided),
            commands: self.commands(py)?.unbind(),
            refused,
        })
    }

    /// The job's `retry_after` hook raised: the failure is final (``refused``: ``None``,
    /// the caller knows what the hook raised).
    fn hint_failed<'py>(
        &mut self,
        py: Python<'py>,
        job: &Bound<'py, PyAny>,
    ) -> PyResult<HintDecision> {
        let decided = self
            .core
            .hinted(job_id(job, "hint_failed")?, Hint::Unusable, &mut self.out)
            .map_err(run_err)?;
        Ok(HintDecision {
            delay: retry_delay(decided),
            commands: self.commands(py)?.unbind(),
            refused: None,
        })
    }

    /// Give the forward phase a deadline on the driver's clock (`None`: none).
    fn set_deadline(&mut self, at: Option<f64>) {
        self.core.set_deadline(at);
    }

    /// The driver's current time, on the deadline's clock.
    fn clock(&mut self, now: f64) {
        self.core.clock(now);
    }

    #[getter]
    fn deadline(&self) -> Option<f64> {
        self.core.deadline()
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

    /// Fan-out: the draw of the source of `job` (DRAW) ended with an item or, `item`
    /// false, with the source exhausted.
    fn drawn<'py>(
        &mut self,
        py: Python<'py>,
        job: &Bound<'py, PyAny>,
        item: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        self.core
            .drawn(job_id(job, "drawn")?, item, &mut self.out)
            .map_err(run_err)?;
        self.commands(py)
    }

    /// Fan-out: the draw of the source of `job` raised.
    fn draw_failed<'py>(
        &mut self,
        py: Python<'py>,
        job: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        self.core
            .draw_failed(job_id(job, "draw_failed")?, &mut self.out)
            .map_err(run_err)?;
        self.commands(py)
    }

    /// Fan-out: the close of the source of `job` (CLOSE) has finished.
    fn closed<'py>(
        &mut self,
        py: Python<'py>,
        job: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        self.core
            .closed(job_id(job, "closed")?, &mut self.out)
            .map_err(run_err)?;
        self.commands(py)
    }

    /// The number of forward jobs, grown ones included.
    #[getter]
    fn job_count(&self) -> usize {
        self.core.job_count()
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
        self.carried(py)
    }

    /// Fan-out: the driver's bookkeeping failed and the run is about to be abandoned: a
    /// CLOSE for each source that may still be open, carried out before ``abandon`` and
    /// not reported (the core's `Run::close_sources`).
    fn close_sources<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.core.close_sources(&mut self.out).map_err(run_err)?;
        self.commands(py)
    }

    /// The driver's bookkeeping of the forward phase failed: take it as over and begin
    /// the shutdown phase (the core's `Run::abandon`).
    fn abandon<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        self.core.abandon(&mut self.out).map_err(run_err)?;
        self.carried(py)
    }

    /// ``carry_with(carrying)`` and ``start()`` in one call: the forward phase of a run
    /// carried out in ``carrying``'s task.
    fn start_carried<'py>(
        &mut self,
        py: Python<'py>,
        carrying: CarryingArgs,
    ) -> PyResult<Bound<'py, PyList>> {
        self.carry_with(Some(carrying))?;
        self.start(py)
    }

    /// ``begin_shutdown()``; ``None`` when that leaves the run finished with nothing to
    /// carry out, the carrier detached as by ``carry_with(None)``: how a run the core
    /// carried out alone ends, in one call.
    fn begin_shutdown_or_finish<'py>(
        &mut self,
        py: Python<'py>,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        let commands = self.begin_shutdown(py)?;
        if commands.is_empty() && self.core.finished() {
            self.carrying = None;
            return Ok(None);
        }
        Ok(Some(commands))
    }

    #[getter]
    fn pending(&self) -> u32 {
        self.core.pending()
    }

    /// Exactly one job is pending: a START now is the run's only work (the core's rule
    /// for carrying it out inline, by the carrier or the driver).
    #[getter]
    fn lone(&self) -> bool {
        self.core.lone()
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
