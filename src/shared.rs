//! Bindings of the shared objects of docs/contract.md#shared-objects (core/src/shared/):
//! `Bulkhead`, `CircuitBreaker`, `RetryBudget`. Each holds its core state machine behind one
//! `Mutex` (one lock per object: every run, loop and thread naming it goes through it). The Python
//! types of the arguments are decided here, as for `Policy` (src/policy.rs); their values by the
//! core. Every method taking `now` is handed `time.monotonic()` by the caller.

use std::sync::{Mutex, MutexGuard};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyString};
use pyo3::{PyTraverseError, PyVisit};

use sdax_core::shared::{
    Acquire, Admission, Bulkhead, CircuitBreaker, Probe, RetryBudget, SharedError, Transition,
};

use crate::policy::{check_number, read_number, safe_repr, type_name};
use sdax_core::Number;

/// A lock never held across Python code nor a panic of ours; should it be poisoned all
/// the same, its state is still consistent (every core method leaves it so).
pub(crate) fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An `int` argument (subclasses too, read without their own code; `bool` refused),
/// saturated to the `i64` range so that the core judges the value.
pub(crate) fn int_arg(obj: &Bound<'_, PyAny>, name: &str, requirement: &str) -> PyResult<i64> {
    match read_number(obj)? {
        Some(Number::Int(v)) => Ok(v),
        Some(Number::Big { negative: true, .. }) => Ok(i64::MIN),
        Some(Number::Big {
            negative: false, ..
        }) => Ok(i64::MAX),
        _ => Err(PyTypeError::new_err(format!(
            "Invalid {name}: {} ({}); {requirement}",
            safe_repr(obj),
            type_name(obj)
        ))),
    }
}

/// A number argument (an `int` or a `float`, subclasses too, not `bool`), read exactly as
/// `f64` (docs/contract.md#hostile-bindings); the core judges the value.
pub(crate) fn float_arg(obj: &Bound<'_, PyAny>, name: &str, requirement: &str) -> PyResult<f64> {
    check_number(obj, name, requirement, |_| true)
}

fn name_arg(obj: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
    if obj.is_none() {
        return Ok(None);
    }
    match obj.cast::<PyString>() {
        Ok(s) => Ok(Some(s.to_str()?.to_owned())),
        Err(_) => Err(PyTypeError::new_err(format!(
            "Invalid name: {} ({}); name must be a str or None",
            safe_repr(obj),
            type_name(obj)
        ))),
    }
}

/// A core refusal as `ValueError`, showing the argument as the caller wrote it.
pub(crate) fn value_error(err: SharedError, args: &[(&str, &Bound<'_, PyAny>)]) -> PyErr {
    let shown = args
        .iter()
        .find(|(n, _)| *n == err.argument())
        .map(|(_, obj)| safe_repr(obj))
        .unwrap_or_default();
    PyValueError::new_err(format!(
        "Invalid {}: {shown}; {}",
        err.argument(),
        err.requirement()
    ))
}

/// The requirement text of an argument (for `TypeError`s, which the core never sees).
fn req(argument: &str) -> &'static str {
    let probe = match argument {
        "max_concurrent" => SharedError::MaxConcurrent(0),
        "max_waiting" => SharedError::MaxWaiting(0),
        "failure_ratio" => SharedError::FailureRatio(0.0),
        "min_calls" => SharedError::MinCalls(0),
        "window" => SharedError::Window(0.0),
        "break_for" => SharedError::BreakFor(0.0),
        "probes" => SharedError::Probes(0),
        "ratio" => SharedError::Ratio(0.0),
        _ => SharedError::MinPerSecond(0.0),
    };
    probe.requirement()
}

fn repr_name(name: &Option<String>) -> String {
    match name {
        Some(n) => format!("{n:?}"),
        None => "None".to_owned(),
    }
}

fn transition_str(t: Option<Transition>) -> Option<&'static str> {
    t.map(|t| match t {
        Transition::Opened => "open",
        Transition::HalfOpened => "half_open",
        Transition::Closed => "closed",
    })
}

// ------------------------------------------------------------------------ Bulkhead

/// docs/contract.md#bulkhead: permits for at most `max_concurrent` calls at once, up to
/// `max_waiting` callers queued first in, first out.
#[pyclass(frozen, module = "sdax_hamilton._core", name = "Bulkhead")]
pub(crate) struct PyBulkhead {
    inner: Mutex<Bulkhead>,
    name: Option<String>,
}

#[pymethods]
impl PyBulkhead {
    #[new]
    #[pyo3(signature = (max_concurrent, max_waiting, name))]
    fn py_new(
        max_concurrent: &Bound<'_, PyAny>,
        max_waiting: &Bound<'_, PyAny>,
        name: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let c = int_arg(max_concurrent, "max_concurrent", req("max_concurrent"))?;
        let w = int_arg(max_waiting, "max_waiting", req("max_waiting"))?;
        let name = name_arg(name)?;
        let core = Bulkhead::new(c, w).map_err(|e| {
            value_error(
                e,
                &[
                    ("max_concurrent", max_concurrent),
                    ("max_waiting", max_waiting),
                ],
            )
        })?;
        Ok(PyBulkhead {
            inner: Mutex::new(core),
            name,
        })
    }

    #[getter]
    fn name(&self) -> Option<String> {
        self.name.clone()
    }
    #[getter]
    fn max_concurrent(&self) -> u64 {
        locked(&self.inner).max_concurrent()
    }
    #[getter]
    fn max_waiting(&self) -> u64 {
        locked(&self.inner).max_waiting()
    }
    #[getter]
    fn in_use(&self) -> u64 {
        locked(&self.inner).in_use()
    }
    #[getter]
    fn waiting(&self) -> u64 {
        locked(&self.inner).waiting()
    }

    /// `"granted"` (a permit is taken), `"rejected"` (fail with `BulkheadFull`), or the
    /// waiter id (an int) under which the caller is queued.
    fn try_acquire<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let got = locked(&self.inner).try_acquire();
        Ok(match got {
            Acquire::Granted => pyo3::intern!(py, "granted").clone().into_any(),
            Acquire::Rejected => pyo3::intern!(py, "rejected").clone().into_any(),
            Acquire::Queued(id) => id.into_pyobject(py)?.into_any(),
        })
    }

    /// Give a permit back: the id of the waiter it went to (wake it), or `None`.
    fn release(&self) -> PyResult<Option<u64>> {
        locked(&self.inner)
            .release()
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// A woken waiter takes its permit: `False` if it holds none (cancelled meanwhile).
    fn claim(&self, waiter: u64) -> bool {
        locked(&self.inner).claim(waiter)
    }

    /// The waiter goes away, queued or granted: the id of a waiter its permit went to
    /// (wake it), or `None`.
    fn cancel_waiter(&self, waiter: u64) -> Option<u64> {
        match locked(&self.inner).cancel_waiter(waiter) {
            sdax_core::shared::CancelWaiter::PassedOn(next) => next,
            _ => None,
        }
    }

    fn __repr__(&self) -> String {
        let g = locked(&self.inner);
        format!(
            "Bulkhead(name={}, max_concurrent={}, max_waiting={}, in_use={}, waiting={})",
            repr_name(&self.name),
            g.max_concurrent(),
            g.max_waiting(),
            g.in_use(),
            g.waiting()
        )
    }
}

/// What the inline carrier asks of a bulkhead (src/carry.rs).
impl PyBulkhead {
    /// A permit if one is free with nobody queued; `false` changes nothing.
    pub(crate) fn acquire_free(&self) -> bool {
        locked(&self.inner).try_acquire_free()
    }

    /// Give a carried attempt's permit back: the waiter it went to (wake it), or `None`.
    pub(crate) fn give_back(&self) -> PyResult<Option<u64>> {
        self.release()
    }
}

// ------------------------------------------------------------------------ CircuitBreaker

/// docs/contract.md#circuit-breaker: closed, open for `break_for`, half-open with up to `probes`
/// probes.
#[pyclass(frozen, module = "sdax_hamilton._core", name = "CircuitBreaker")]
pub(crate) struct PyCircuitBreaker {
    inner: Mutex<CircuitBreaker>,
    name: Option<String>,
}

#[pymethods]
impl PyCircuitBreaker {
    #[new]
    #[pyo3(signature = (failure_ratio, min_calls, window, break_for, probes, name))]
    fn py_new(
        failure_ratio: &Bound<'_, PyAny>,
        min_calls: &Bound<'_, PyAny>,
        window: &Bound<'_, PyAny>,
        break_for: &Bound<'_, PyAny>,
        probes: &Bound<'_, PyAny>,
        name: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let r = float_arg(failure_ratio, "failure_ratio", req("failure_ratio"))?;
        let m = int_arg(min_calls, "min_calls", req("min_calls"))?;
        let w = float_arg(window, "window", req("window"))?;
        let b = float_arg(break_for, "break_for", req("break_for"))?;
        let p = int_arg(probes, "probes", req("probes"))?;
        let name = name_arg(name)?;
        let core = CircuitBreaker::new(r, m, w, b, p).map_err(|e| {
            value_error(
                e,
                &[
                    ("failure_ratio", failure_ratio),
                    ("min_calls", min_calls),
                    ("window", window),
                    ("break_for", break_for),
                    ("probes", probes),
                ],
            )
        })?;
        Ok(PyCircuitBreaker {
            inner: Mutex::new(core),
            name,
        })
    }

    #[getter]
    fn name(&self) -> Option<String> {
        self.name.clone()
    }
    #[getter]
    fn failure_ratio(&self) -> f64 {
        locked(&self.inner).failure_ratio()
    }
    #[getter]
    fn min_calls(&self) -> u64 {
        locked(&self.inner).min_calls()
    }
    #[getter]
    fn window(&self) -> f64 {
        locked(&self.inner).window()
    }
    #[getter]
    fn break_for(&self) -> f64 {
        locked(&self.inner).break_for()
    }
    #[getter]
    fn probes(&self) -> u64 {
        locked(&self.inner).probes()
    }

    /// `"closed"`, `"open"` or `"half_open"` at `now`.
    fn state(&self, now: f64) -> &'static str {
        locked(&self.inner).state(now).as_str()
    }

    /// `(successes, failures)` recorded within the window at `now`.
    fn outcomes(&self, now: f64) -> (u64, u64) {
        locked(&self.inner).outcomes(now)
    }

    /// `(admission, transition)`: admission `None` (go ahead), an int (go ahead as this
    /// probe; hand it to `record` or `forget_probe`) or a float (rejected: `retry_after`);
    /// transition `"half_open"` when this call ended the break, else `None`.
    fn admit<'py>(
        &self,
        py: Python<'py>,
        now: f64,
    ) -> PyResult<(Bound<'py, PyAny>, Option<&'static str>)> {
        let (admission, transition, _) = self.admit_now(py, now)?;
        Ok((admission, transition))
    }

    /// The outcome of an admitted attempt (`probe` as `admit` gave it): the transition it
    /// caused, `"open"` or `"closed"`, else `None`.
    #[pyo3(signature = (now, success, probe))]
    fn record(&self, now: f64, success: bool, probe: Option<u64>) -> Option<&'static str> {
        transition_str(locked(&self.inner).record(now, success, probe.map(Probe)))
    }

    /// A probe ended with nothing to record: its place goes to another attempt.
    fn forget_probe(&self, probe: u64) {
        locked(&self.inner).forget_probe(Probe(probe));
    }

    fn __repr__(&self) -> String {
        let g = locked(&self.inner);
        format!(
            "CircuitBreaker(name={}, failure_ratio={:?}, min_calls={}, window={:?}, \
             break_for={:?}, probes={})",
            repr_name(&self.name),
            g.failure_ratio(),
            g.min_calls(),
            g.window(),
            g.break_for(),
            g.probes()
        )
    }
}

/// What the inline carrier (src/carry.rs) and a node's `Guard` ask of a breaker.
impl PyCircuitBreaker {
    /// `admit` at `now`, and the state it left the breaker in.
    fn admit_now<'py>(
        &self,
        py: Python<'py>,
        now: f64,
    ) -> PyResult<(Bound<'py, PyAny>, Option<&'static str>, &'static str)> {
        let mut breaker = locked(&self.inner);
        let (admission, transition) = breaker.admit(now);
        let state = breaker.state(now).as_str();
        drop(breaker);
        let a = match admission {
            Admission::Allowed { probe: None } => py.None().into_bound(py),
            Admission::Allowed {
                probe: Some(Probe(p)),
            } => p.into_pyobject(py)?.into_any(),
            Admission::Rejected { retry_after } => PyFloat::new(py, retry_after).into_any(),
        };
        Ok((a, transition_str(transition), state))
    }

    /// Admitted without a probe if closed; `false` changes nothing.
    pub(crate) fn admit_if_closed(&self) -> bool {
        locked(&self.inner).admit_if_closed()
    }

    /// The outcome of an attempt admitted by `admit_if_closed`: the transition it caused.
    pub(crate) fn record_unprobed(&self, now: f64, success: bool) -> Option<&'static str> {
        transition_str(locked(&self.inner).record(now, success, None))
    }
}

// ------------------------------------------------------------------------ admission at once

/// Admit an attempt without waiting and without a probe, or take nothing: its breaker (if
/// any) closed (`CircuitBreaker::admit_if_closed`, which needs no time), then a permit of
/// its bulkhead (if any) free with nobody queued (`Bulkhead::try_acquire_free`). `false`:
/// the caller admits it the way that may queue, refuse it or let it through as a probe.
pub(crate) fn admit_at_once(
    bulkhead: Option<&PyBulkhead>,
    breaker: Option<&PyCircuitBreaker>,
) -> bool {
    if let Some(breaker) = breaker {
        if !breaker.admit_if_closed() {
            return false;
        }
    }
    // A closed breaker's admission holds nothing: a full bulkhead leaves it so.
    bulkhead.is_none_or(|bulkhead| bulkhead.acquire_free())
}

/// An attempt admitted without a probe is over: the permit it holds goes back to
/// `bulkhead` (if given) and `success` (if not `None`) to `breaker` (if given). The waiter
/// the permit went to (wake it) and the breaker's transition, if any.
pub(crate) fn end_unprobed(
    bulkhead: Option<&PyBulkhead>,
    breaker: Option<&PyCircuitBreaker>,
    now: f64,
    success: Option<bool>,
) -> PyResult<(Option<u64>, Option<&'static str>)> {
    let waiter = match bulkhead {
        Some(bulkhead) => bulkhead.give_back()?,
        None => None,
    };
    let transition = match (breaker, success) {
        (Some(breaker), Some(success)) => breaker.record_unprobed(now, success),
        _ => None,
    };
    Ok((waiter, transition))
}

/// One guarded node's bulkhead and breaker, asked together in one crossing for each attempt
/// the driver admits (python/sdax_hamilton/_executor/guards.py), as the carrier asks them for
/// a lone first attempt (src/carry.rs). It is handed the clock (`time.monotonic`, read only
/// when there is an outcome to give a breaker) and `wake(bulkhead, waiter)`, which wakes the
/// waiter a permit given back went to (`permits.wake`).
#[pyclass(frozen, module = "sdax_hamilton._core", name = "Guard")]
pub(crate) struct PyGuard {
    bulkhead: Option<Py<PyBulkhead>>,
    breaker: Option<Py<PyCircuitBreaker>>,
    clock: Py<PyAny>,
    wake: Py<PyAny>,
}

impl PyGuard {
    fn now(&self, py: Python<'_>) -> PyResult<f64> {
        self.clock.bind(py).call0()?.extract()
    }
}

#[pymethods]
impl PyGuard {
    #[new]
    #[pyo3(signature = (bulkhead, breaker, clock, wake))]
    fn py_new(
        bulkhead: Option<Py<PyBulkhead>>,
        breaker: Option<Py<PyCircuitBreaker>>,
        clock: Py<PyAny>,
        wake: Py<PyAny>,
    ) -> Self {
        PyGuard {
            bulkhead,
            breaker,
            clock,
            wake,
        }
    }

    #[getter]
    fn bulkhead(&self, py: Python<'_>) -> Option<Py<PyBulkhead>> {
        self.bulkhead.as_ref().map(|b| b.clone_ref(py))
    }

    #[getter]
    fn breaker(&self, py: Python<'_>) -> Option<Py<PyCircuitBreaker>> {
        self.breaker.as_ref().map(|b| b.clone_ref(py))
    }

    /// Admit an attempt at once (`admit_at_once`, no clock read): `True` when it holds a
    /// permit of the bulkhead (if any) and was let through by the closed breaker (if any),
    /// without a probe; `False` when nothing was taken (the driver admits it the way that
    /// may queue it, refuse it or let it through as a probe).
    fn admit(&self) -> bool {
        admit_at_once(
            self.bulkhead.as_ref().map(Py::get),
            self.breaker.as_ref().map(Py::get),
        )
    }

    /// An attempt `admit` let through is over (`end_unprobed`): its permit goes back (the
    /// waiter it went to is woken) and `success` (`None`: nothing to record) to the
    /// breaker. The breaker's transition, if it made one.
    #[pyo3(signature = (success))]
    fn end(&self, py: Python<'_>, success: Option<bool>) -> PyResult<Option<&'static str>> {
        let breaker = self.breaker.as_ref().map(Py::get);
        let now = match (breaker, success) {
            (Some(_), Some(_)) => self.now(py)?,
            _ => 0.0, // nothing to record
        };
        let bulkhead = self.bulkhead.as_ref();
        let (waiter, transition) = end_unprobed(bulkhead.map(Py::get), breaker, now, success)?;
        if let (Some(waiter), Some(bulkhead)) = (waiter, bulkhead) {
            self.wake.bind(py).call1((bulkhead, waiter))?;
        }
        Ok(transition)
    }

    /// The breaker's admission at the clock's time, the way that may refuse an attempt or
    /// let it through as a probe (`CircuitBreaker.admit`), for an attempt `admit` took
    /// nothing for: `(admission, transition, state)`, admission `None` (go ahead), an int
    /// (go ahead as this probe) or a float (refused: `retry_after`); the transition this
    /// call made (`"half_open"`) or `None`; the breaker's state after it. Without a
    /// breaker: `(None, None, "closed")`.
    fn ask<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyAny>, Option<&'static str>, &'static str)> {
        match &self.breaker {
            Some(breaker) => {
                let now = self.now(py)?;
                breaker.get().admit_now(py, now)
            }
            None => Ok((py.None().into_bound(py), None, "closed")),
        }
    }

    /// The outcome of an attempt `ask` let through (`probe` as it gave it) at the clock's
    /// time: the transition it caused, `"open"` or `"closed"`, else `None` (and without a
    /// breaker).
    #[pyo3(signature = (success, probe))]
    fn record(
        &self,
        py: Python<'_>,
        success: bool,
        probe: Option<u64>,
    ) -> PyResult<Option<&'static str>> {
        match &self.breaker {
            Some(breaker) => {
                let now = self.now(py)?;
                Ok(breaker.get().record(now, success, probe))
            }
            None => Ok(None),
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(bulkhead) = &self.bulkhead {
            visit.call(bulkhead)?;
        }
        if let Some(breaker) = &self.breaker {
            visit.call(breaker)?;
        }
        visit.call(&self.clock)?;
        visit.call(&self.wake)
    }

    fn __repr__(&self) -> String {
        format!(
            "<Guard bulkhead={} breaker={}>",
            self.bulkhead.is_some(),
            self.breaker.is_some()
        )
    }
}

// ------------------------------------------------------------------------ RetryBudget

/// docs/contract.md#retry-budget: retries at most `ratio` × first attempts + `min_per_second` ×
/// `window` within the trailing window.
#[pyclass(frozen, module = "sdax_hamilton._core", name = "RetryBudget")]
pub(crate) struct PyRetryBudget {
    inner: Mutex<RetryBudget>,
}

#[pymethods]
impl PyRetryBudget {
    #[new]
    #[pyo3(signature = (ratio, min_per_second, window))]
    fn py_new(
        ratio: &Bound<'_, PyAny>,
        min_per_second: &Bound<'_, PyAny>,
        window: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let r = float_arg(ratio, "ratio", req("ratio"))?;
        let m = float_arg(min_per_second, "min_per_second", req("min_per_second"))?;
        let w = float_arg(window, "window", req("window"))?;
        let core = RetryBudget::new(r, m, w).map_err(|e| {
            value_error(
                e,
                &[
                    ("ratio", ratio),
                    ("min_per_second", min_per_second),
                    ("window", window),
                ],
            )
        })?;
        Ok(PyRetryBudget {
            inner: Mutex::new(core),
        })
    }

    #[getter]
    fn ratio(&self) -> f64 {
        locked(&self.inner).ratio()
    }
    #[getter]
    fn min_per_second(&self) -> f64 {
        locked(&self.inner).min_per_second()
    }
    #[getter]
    fn window(&self) -> f64 {
        locked(&self.inner).window()
    }

    /// A first attempt started at `now`.
    pub(crate) fn deposit(&self, now: f64) {
        locked(&self.inner).deposit(now);
    }

    /// A retry wants to start at `now`: `True` (and counted) if the budget allows it.
    pub(crate) fn try_take(&self, now: f64) -> bool {
        locked(&self.inner).try_take(now)
    }

    /// Retries the budget would allow at `now` (docs/contract.md#shared-objects), never below 0.
    fn available(&self, now: f64) -> f64 {
        locked(&self.inner).available(now)
    }

    /// `(first attempts, retries taken)` within the window at `now`.
    fn counts(&self, now: f64) -> (u64, u64) {
        locked(&self.inner).counts(now)
    }

    fn __repr__(&self) -> String {
        let g = locked(&self.inner);
        format!(
            "RetryBudget(ratio={:?}, min_per_second={:?}, window={:?})",
            g.ratio(),
            g.min_per_second(),
            g.window()
        )
    }
}

/// A run's [`sdax_core::RetryGate`] over a shared `RetryBudget`: the core decides when a
/// first attempt deposits and when a retry asks; this reads the clock the budget is kept
/// on (`time.monotonic`, the one `RetryBudget.available` reads) and hands it in.
pub(crate) struct BudgetGate {
    budget: Py<PyRetryBudget>,
    clock: Py<PyAny>,
}

impl BudgetGate {
    pub(crate) fn new(budget: Py<PyRetryBudget>, clock: Py<PyAny>) -> Self {
        BudgetGate { budget, clock }
    }

    fn now(&self) -> Option<f64> {
        Python::attach(|py| {
            self.clock
                .bind(py)
                .call0()
                .and_then(|t| t.extract::<f64>())
                .ok()
        })
    }
}

impl sdax_core::RetryGate for BudgetGate {
    fn first_attempt(&mut self) {
        if let Some(now) = self.now() {
            self.budget.get().deposit(now);
        }
    }

    fn allow_retry(&mut self) -> bool {
        // A clock that cannot be read allows no retry: the budget is never exceeded.
        match self.now() {
            Some(now) => self.budget.get().try_take(now),
            None => false,
        }
    }
}
