//! The inline carrier: a `Run` carrying out its own lone STARTs while every call is quick.
//!
//! The asyncio driver awaits a lone attempt (nothing else running or waiting) in the phase's
//! task itself (docs/internals.md, "How the driver carries out STARTs"). Most of the cost of
//! a small run is the driver's bookkeeping around those calls, not the calls. With a
//! `Carrier` attached (`Run.carry_with`), the START the core emits as the only command while
//! the job is the only one pending is carried out here, in the same task and at the same
//! point the driver would have: the arguments read and checked, the function called, a
//! coroutine stepped once. When that step finishes the call (it returned without
//! suspending), its value is stored and the core told, and the next lone START is carried
//! out the same way. Everything else is handed back to the driver unchanged:
//!
//! * a START that is not lone, is a retry, or whose input check fails (the checks are
//!   pure: the driver runs them again and reports the failure) stays a command;
//! * a call that raised, a coroutine that suspended, an awaitable that is not a coroutine,
//!   or a value that needs the driver (an output check that fails, a release that returned
//!   something, a release that cancelled its own task) comes back as one `CARRIED` command
//!   `(CARRIED, job, kind, (payload, extra, timeout, started))` for the driver to go on
//!   with; `extra` is the node's keyword arguments (kept for its retries) or, for a release
//!   whose coroutine was stepped, its phase task's cancellation count before the call
//!   (`None` otherwise); `timeout` is the START's, and `started` the loop's and the
//!   monotonic clock's time before the call when it has one (its timer counts from there).
//!
//! A timeout cannot expire while a call runs without suspending (timers need the loop), so
//! a START with one is carried out too; only a suspended call needs its timer.
//!
//! This decides nothing: which job starts is the core's; what each outcome means is the
//! driver's (`outcomes.py`), which sees every failure.

use pyo3::exceptions::PyException;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::iterator::PySendResult;
use pyo3::types::{PyDict, PyIterator, PyList, PyString, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

/// The opcode of a carried START handed back (outside the core's `Op` range).
pub(crate) const CARRIED: u8 = 0x80;

/// How a carried START ended, when the driver must go on with it (`CARRIED`'s `attempt`).
pub(crate) const RAISED: u32 = 0;
pub(crate) const RETURNED: u32 = 1;
pub(crate) const SUSPENDED: u32 = 2;
pub(crate) const AWAITABLE: u32 = 3;

/// How to call one forward node inline.
struct NodeCall {
    call: Py<PyAny>,
    name: Py<PyString>,
    args: Vec<(Py<PyString>, Py<PyString>)>,
    defaults: Option<Py<PyDict>>,
    checks: Vec<(Py<PyString>, Py<PyAny>)>,
    output_check: Option<Py<PyAny>>,
    output_type: Py<PyAny>,
    owned: bool,
}

type NodeSpec = (
    Py<PyAny>,
    Py<PyString>,
    Vec<(Py<PyString>, Py<PyString>)>,
    Option<Py<PyDict>>,
    Vec<(Py<PyString>, Py<PyAny>)>,
    Option<Py<PyAny>>,
    Py<PyAny>,
    bool,
);

/// How a plan's jobs are called inline; built once per plan, shared by its runs.
#[pyclass(frozen, module = "sdax_hamilton._core", name = "Carrier")]
pub(crate) struct PyCarrier {
    nodes: Vec<NodeCall>,
    releases: Vec<Option<Py<PyAny>>>,
    acquisition: Py<PyAny>,
    isawaitable: Py<PyAny>,
    coroutine_type: Py<PyAny>,
    monotonic: Py<PyAny>,
}

#[pymethods]
impl PyCarrier {
    /// `nodes[i]`: `(call, name, args, defaults, checks, output_check, output_type, owned)`
    /// of active node `i`; `releases[i]`: its release function or `None`.
    #[new]
    fn py_new(
        nodes: Vec<NodeSpec>,
        releases: Vec<Option<Py<PyAny>>>,
        acquisition: Py<PyAny>,
        isawaitable: Py<PyAny>,
        coroutine_type: Py<PyAny>,
        monotonic: Py<PyAny>,
    ) -> PyResult<Self> {
        if releases.len() != nodes.len() {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "Carrier: {} nodes but {} release entries",
                nodes.len(),
                releases.len()
            )));
        }
        let nodes = nodes
            .into_iter()
            .map(
                |(call, name, args, defaults, checks, output_check, output_type, owned)| NodeCall {
                    call,
                    name,
                    args,
                    defaults,
                    checks,
                    output_check,
                    output_type,
                    owned,
                },
            )
            .collect();
        Ok(PyCarrier {
            nodes,
            releases,
            acquisition,
            isawaitable,
            coroutine_type,
            monotonic,
        })
    }

    fn __len__(&self) -> usize {
        self.nodes.len()
    }

    /// The collector sees what a carrier refers to (functions, and through them their
    /// modules): a plan in a reference cycle is freed in one collection, with them.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        for node in &self.nodes {
            visit.call(&node.call)?;
            visit.call(&node.name)?;
            for (keyword, key) in &node.args {
                visit.call(keyword)?;
                visit.call(key)?;
            }
            if let Some(defaults) = &node.defaults {
                visit.call(defaults)?;
            }
            for (keyword, check) in &node.checks {
                visit.call(keyword)?;
                visit.call(check)?;
            }
            if let Some(check) = &node.output_check {
                visit.call(check)?;
            }
            visit.call(&node.output_type)?;
        }
        for release in self.releases.iter().flatten() {
            visit.call(release)?;
        }
        visit.call(&self.acquisition)?;
        visit.call(&self.isawaitable)?;
        visit.call(&self.coroutine_type)?;
        visit.call(&self.monotonic)
    }
}

/// What a run carries with: the plan's carrier, this run's tables, its phase task and
/// its loop's clock (``loop.time``).
pub(crate) struct Carrying {
    pub(crate) carrier: Py<PyCarrier>,
    pub(crate) values: Py<PyDict>,
    pub(crate) acquisitions: Py<PyList>,
    pub(crate) task: Py<PyAny>,
    pub(crate) clock: Py<PyAny>,
}

impl Carrying {
    pub(crate) fn clone_ref(&self, py: Python<'_>) -> Self {
        Carrying {
            carrier: self.carrier.clone_ref(py),
            values: self.values.clone_ref(py),
            acquisitions: self.acquisitions.clone_ref(py),
            task: self.task.clone_ref(py),
            clock: self.clock.clone_ref(py),
        }
    }

    pub(crate) fn traverse(&self, visit: &PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.carrier)?;
        visit.call(&self.values)?;
        visit.call(&self.acquisitions)?;
        visit.call(&self.task)?;
        visit.call(&self.clock)
    }

    /// ``(loop time, monotonic time)`` now: where a timed attempt's timer counts from.
    pub(crate) fn now<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let loop_time = self.clock.bind(py).call0()?;
        let monotonic = self.carrier.get().monotonic.bind(py).call0()?;
        Ok(PyTuple::new(py, [loop_time, monotonic])?.into_any())
    }
}

/// The outcome of one carried call.
pub(crate) enum Carried<'py> {
    /// Over and reported as succeeded to the core by the caller.
    Done,
    /// The START was not carried out: leave it to the driver.
    Declined,
    /// Carried out; the driver goes on with it: `(kind, payload, extra)`.
    HandBack(u32, Bound<'py, PyAny>, Bound<'py, PyAny>),
}

/// Step a coroutine once: `Ok(Ok(value))` when it returned, `Ok(Err(yielded))` when it
/// suspended, `Err` when it raised.
fn step<'py>(coro: &Bound<'py, PyAny>) -> PyResult<Result<Bound<'py, PyAny>, Bound<'py, PyAny>>> {
    let py = coro.py();
    // SAFETY: `PyIterator::send` only calls `PyIter_Send`, which CPython defines for any
    // object whose type has `am_send` (coroutines do) as well as for iterators; the
    // `PyIterator` view is used for that one call and never escapes.
    #[allow(unsafe_code)]
    let sender = unsafe { coro.cast_unchecked::<PyIterator>() };
    match sender.send(&py.None().into_bound(py))? {
        PySendResult::Return(value) => Ok(Ok(value)),
        PySendResult::Next(yielded) => Ok(Err(yielded)),
    }
}

impl PyCarrier {
    pub(crate) fn forward_count(&self) -> usize {
        self.nodes.len()
    }

    /// The keyword arguments of node `job`'s first attempt; `None` when one is missing or
    /// fails its check (the driver then reads and checks them itself, and reports).
    fn kwargs<'py>(
        &self,
        py: Python<'py>,
        job: usize,
        values: &Bound<'py, PyDict>,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(node) = self.nodes.get(job) else {
            return Ok(None);
        };
        let kwargs = match &node.defaults {
            Some(defaults) => defaults.bind(py).copy()?,
            None => PyDict::new(py),
        };
        for (keyword, key) in &node.args {
            match values.get_item(key.bind(py))? {
                Some(value) => kwargs.set_item(keyword.bind(py), value)?,
                None => return Ok(None),
            }
        }
        for (keyword, check) in &node.checks {
            let Some(value) = kwargs.get_item(keyword.bind(py))? else {
                return Ok(None);
            };
            if !passes(check.bind(py), &value)? {
                return Ok(None);
            }
        }
        Ok(Some(kwargs))
    }

    /// What a call returned: a value (and whether it came from stepping a coroutine), or a
    /// hand-back. A hand-back after stepping a coroutine carries `stepped`, otherwise
    /// `plain`, as its `extra`.
    fn settle<'py>(
        &self,
        result: Bound<'py, PyAny>,
        stepped: &Bound<'py, PyAny>,
        plain: &Bound<'py, PyAny>,
    ) -> Result<(Bound<'py, PyAny>, bool), Carried<'py>> {
        let py = result.py();
        if result.get_type().is(self.coroutine_type.bind(py)) {
            return match step(&result) {
                Ok(Ok(value)) => Ok((value, true)),
                Ok(Err(yielded)) => {
                    let payload = PyTuple::new(py, [result, yielded]).map(Bound::into_any);
                    Err(hand_back(SUSPENDED, payload, stepped))
                }
                Err(e) => Err(raised(e, stepped)),
            };
        }
        match self
            .isawaitable
            .bind(py)
            .call1((&result,))
            .and_then(|a| a.is_truthy())
        {
            Ok(false) => Ok((result, false)),
            Ok(true) => Err(Carried::HandBack(AWAITABLE, result, plain.clone())),
            Err(e) => Err(raised(e, plain)),
        }
    }

    /// Carry out the first attempt of forward job `job`.
    pub(crate) fn call_node<'py>(
        &self,
        py: Python<'py>,
        job: usize,
        carrying: &Carrying,
    ) -> PyResult<Carried<'py>> {
        let values = carrying.values.bind(py);
        let Some(kwargs) = self.kwargs(py, job, values)? else {
            return Ok(Carried::Declined);
        };
        let Some(node) = self.nodes.get(job) else {
            return Ok(Carried::Declined);
        };
        let args = kwargs.clone().into_any();
        let value = match node.call.bind(py).call((), Some(&kwargs)) {
            Ok(result) => match self.settle(result, &args, &args) {
                Ok((value, _)) => value,
                Err(carried) => return Ok(carried),
            },
            Err(e) => return Ok(raised(e, &args)),
        };
        if let Some(check) = &node.output_check {
            if !passes(check.bind(py), &value)? {
                // the driver checks again and reports the failure
                return Ok(Carried::HandBack(RETURNED, value, args));
            }
        }
        if node.owned {
            let record = self
                .acquisition
                .bind(py)
                .call1((&value, node.output_type.bind(py)))?;
            carrying.acquisitions.bind(py).set_item(job, record)?;
        }
        values.set_item(node.name.bind(py), value)?;
        Ok(Carried::Done)
    }

    /// Carry out the first attempt of the release of forward job `owner`.
    pub(crate) fn call_release<'py>(
        &self,
        py: Python<'py>,
        owner: usize,
        carrying: &Carrying,
    ) -> PyResult<Carried<'py>> {
        let Some(Some(release)) = self.releases.get(owner) else {
            return Ok(Carried::Declined);
        };
        let acquisitions = carrying.acquisitions.bind(py);
        let mut record = acquisitions.get_item(owner)?;
        if record.is_none() {
            record = self.acquisition.bind(py).call0()?;
            acquisitions.set_item(owner, &record)?;
        }
        // The phase task's cancellation count before the call: a release awaited inline
        // that cancels its own task is recorded by the driver (``_carried``, as ``_inline``
        // does); a plain function's result is not awaited, and nothing is checked.
        let task = carrying.task.bind(py);
        let cancelling = intern!(py, "cancelling");
        let count = task.call_method0(cancelling)?;
        let none = py.None().into_bound(py);
        let (value, stepped) = match release.bind(py).call1((record,)) {
            Ok(result) => match self.settle(result, &count, &none) {
                Ok(settled) => settled,
                Err(carried) => return Ok(carried),
            },
            Err(e) => return Ok(raised(e, &none)),
        };
        if stepped {
            let before: i64 = count.extract()?;
            let after: i64 = task.call_method0(cancelling)?.extract()?;
            if after > before {
                return Ok(Carried::HandBack(RETURNED, value, count));
            }
        }
        if !value.is_none() {
            return Ok(Carried::HandBack(RETURNED, value, none)); // refused by the driver
        }
        Ok(Carried::Done)
    }
}

/// Whether `value` passes `check`. A check that raises an `Exception` fails (the driver
/// runs it again and reports that); anything else it raises (`KeyboardInterrupt`,
/// `SystemExit`) propagates, as out of the driver's own checks.
fn passes(check: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = check.py();
    match check.call1((value,)).and_then(|ok| ok.is_truthy()) {
        Ok(ok) => Ok(ok),
        Err(e) if e.is_instance_of::<PyException>(py) => Ok(false),
        Err(e) => Err(e),
    }
}

fn hand_back<'py>(
    kind: u32,
    payload: PyResult<Bound<'py, PyAny>>,
    extra: &Bound<'py, PyAny>,
) -> Carried<'py> {
    match payload {
        Ok(p) => Carried::HandBack(kind, p, extra.clone()),
        Err(e) => raised(e, extra),
    }
}

/// The call raised `e`: the exception object goes back to the driver.
fn raised<'py>(e: PyErr, extra: &Bound<'py, PyAny>) -> Carried<'py> {
    let py = extra.py();
    Carried::HandBack(
        RAISED,
        e.into_value(py).into_bound(py).into_any(),
        extra.clone(),
    )
}
