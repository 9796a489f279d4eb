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

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::iterator::PySendResult;
use pyo3::types::{PyDict, PyIterator, PyList, PyString, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use crate::check::{all_pass, Check};
use crate::seq::items;

/// The opcode of a carried START handed back (outside the core's `Op` range).
pub(crate) const CARRIED: u8 = 0x80;

/// How a carried START ended, when the driver must go on with it (`CARRIED`'s `attempt`).
pub(crate) const RAISED: u32 = 0;
pub(crate) const RETURNED: u32 = 1;
pub(crate) const SUSPENDED: u32 = 2;
pub(crate) const AWAITABLE: u32 = 3;
/// An input check raised (a `KeyboardInterrupt` out of a metaclass's `__instancecheck__`,
/// say; an `Exception` only fails the check): nothing was called.
pub(crate) const REJECTED: u32 = 4;

/// How to call one forward node inline.
struct NodeCall {
    call: Py<PyAny>,
    name: Py<PyString>,
    args: Vec<(Py<PyString>, Py<PyString>)>,
    defaults: Option<Py<PyDict>>,
    /// `(keyword, requirement)` for each checked argument (positionally, found by the
    /// index in `positional`).
    checks: Vec<(Py<PyString>, Check)>,
    output_check: Option<Check>,
    output_type: Py<PyAny>,
    owned: bool,
    /// `args` are the function's first parameters, in order, and nothing else is passed:
    /// it is called with them positionally (no keyword dictionary to build and unpack);
    /// the index into `args` of each check's keyword.
    positional: Option<Vec<usize>>,
}

type CheckSpec = (Py<PyString>, Py<PyAny>, bool);

/// A node's spec as given: its two lists are read by `crate::seq::items`.
type NodeSpec<'py> = (
    Py<PyAny>,
    Py<PyString>,
    Bound<'py, PyAny>,
    Option<Py<PyDict>>,
    Bound<'py, PyAny>,
    Option<(Py<PyAny>, bool)>,
    Py<PyAny>,
    bool,
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
    /// `nodes[i]`: `(call, name, args, defaults, checks, output_check, output_type, owned,
    /// positional)` of active node `i`, a check being `(keyword, check, is_class)` and the
    /// output check `(check, is_class)`; `releases[i]`: its release function or `None`.
    #[new]
    fn py_new(
        py: Python<'_>,
        nodes: &Bound<'_, PyAny>,
        releases: &Bound<'_, PyAny>,
        acquisition: Py<PyAny>,
        isawaitable: Py<PyAny>,
        coroutine_type: Py<PyAny>,
        monotonic: Py<PyAny>,
    ) -> PyResult<Self> {
        let nodes: Vec<NodeSpec<'_>> = items(nodes, "Carrier: nodes")?;
        let releases: Vec<Option<Py<PyAny>>> = items(releases, "Carrier: releases")?;
        if releases.len() != nodes.len() {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "Carrier: {} nodes but {} release entries",
                nodes.len(),
                releases.len()
            )));
        }
        let nodes = nodes
            .into_iter()
            .map(|spec| NodeCall::new(py, spec))
            .collect::<PyResult<_>>()?;
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
                visit.call(check.object())?;
            }
            if let Some(check) = &node.output_check {
                visit.call(check.object())?;
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

impl NodeCall {
    fn new(py: Python<'_>, spec: NodeSpec<'_>) -> PyResult<Self> {
        let (call, name, args, defaults, checks, output_check, output_type, owned, positional) =
            spec;
        let args: Vec<(Py<PyString>, Py<PyString>)> = items(&args, "Carrier: a node's args")?;
        let checks: Vec<CheckSpec> = items(&checks, "Carrier: a node's checks")?;
        let checks: Vec<(Py<PyString>, Check)> = checks
            .into_iter()
            .map(|(keyword, check, is_class)| (keyword, Check::new((check, is_class))))
            .collect();
        // Positionally: each check's keyword must be one of the arguments (it is, when
        // nothing comes from defaults); otherwise the keyword dictionary is built.
        let positional = if positional && defaults.is_none() {
            let mut indexes = Vec::with_capacity(checks.len());
            for (keyword, _) in &checks {
                let keyword = keyword.bind(py);
                let mut found = None;
                for (i, (k, _)) in args.iter().enumerate() {
                    if k.bind(py).as_any().eq(keyword)? {
                        found = Some(i);
                        break;
                    }
                }
                match found {
                    Some(i) => indexes.push(i),
                    None => break,
                }
            }
            (indexes.len() == checks.len()).then_some(indexes)
        } else {
            None
        };
        Ok(NodeCall {
            call,
            name,
            args,
            defaults,
            checks,
            output_check: output_check.map(Check::new),
            output_type,
            owned,
            positional,
        })
    }

    /// The keyword arguments of the first attempt; `None` when one is missing or fails its
    /// check (the driver then reads and checks them itself, and reports).
    fn kwargs<'py>(&self, values: &Bound<'py, PyDict>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let py = values.py();
        let kwargs = match &self.defaults {
            Some(defaults) => defaults.bind(py).copy()?,
            None => PyDict::new(py),
        };
        for (keyword, key) in &self.args {
            match values.get_item(key.bind(py))? {
                Some(value) => kwargs.set_item(keyword.bind(py), value)?,
                None => return Ok(None),
            }
        }
        Ok(all_pass(&self.checks, &kwargs)?.then_some(kwargs))
    }

    /// The positional arguments of the first attempt (`indexes`: each check's argument);
    /// `None` as for `kwargs`.
    fn positional_args<'py>(
        &self,
        values: &Bound<'py, PyDict>,
        indexes: &[usize],
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let py = values.py();
        let mut read = Vec::with_capacity(self.args.len());
        for (_, key) in &self.args {
            match values.get_item(key.bind(py))? {
                Some(value) => read.push(value),
                None => return Ok(None),
            }
        }
        for (&index, (_, check)) in indexes.iter().zip(&self.checks) {
            let Some(value) = read.get(index) else {
                return Ok(None);
            };
            if !check.passes(value)? {
                return Ok(None);
            }
        }
        PyTuple::new(py, read).map(Some)
    }

    /// The keyword arguments a positional call had: what the driver keeps for retries.
    fn keywords_of<'py>(&self, args: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyAny>> {
        let py = args.py();
        let kwargs = PyDict::new(py);
        for ((keyword, _), value) in self.args.iter().zip(args.iter()) {
            kwargs.set_item(keyword.bind(py), value)?;
        }
        Ok(kwargs.into_any())
    }
}

/// What a call returned, before the caller adds what the driver needs with a hand-back.
enum Settled<'py> {
    /// A value, and whether it came from stepping a coroutine.
    Value(Bound<'py, PyAny>, bool),
    /// `(kind, payload, stepped)`: the driver goes on with it.
    Back(u32, Bound<'py, PyAny>, bool),
}

impl PyCarrier {
    pub(crate) fn forward_count(&self) -> usize {
        self.nodes.len()
    }

    /// What a call (its `outcome`) came to: a value, or what the driver must go on with.
    fn settle<'py>(&self, py: Python<'py>, outcome: PyResult<Bound<'py, PyAny>>) -> Settled<'py> {
        let result = match outcome {
            Ok(result) => result,
            Err(e) => return Settled::Back(RAISED, exception(e, py), false),
        };
        if result.get_type().is(self.coroutine_type.bind(py)) {
            return match step(&result) {
                Ok(Ok(value)) => Settled::Value(value, true),
                Ok(Err(yielded)) => match PyTuple::new(py, [result, yielded]) {
                    Ok(payload) => Settled::Back(SUSPENDED, payload.into_any(), true),
                    Err(e) => Settled::Back(RAISED, exception(e, py), true),
                },
                Err(e) => Settled::Back(RAISED, exception(e, py), true),
            };
        }
        match self
            .isawaitable
            .bind(py)
            .call1((&result,))
            .and_then(|a| a.is_truthy())
        {
            Ok(false) => Settled::Value(result, false),
            Ok(true) => Settled::Back(AWAITABLE, result, false),
            Err(e) => Settled::Back(RAISED, exception(e, py), false),
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
        let Some(node) = self.nodes.get(job) else {
            return Ok(Carried::Declined);
        };
        let call = node.call.bind(py);
        // What a check raised (it is not a failed check) ends the attempt before the call.
        let rejected =
            |e: PyErr| Carried::HandBack(REJECTED, exception(e, py), py.None().into_bound(py));
        let (passed, settled) = match &node.positional {
            Some(indexes) => {
                let args = match node.positional_args(values, indexes) {
                    Ok(Some(args)) => args,
                    Ok(None) => return Ok(Carried::Declined),
                    Err(e) => return Ok(rejected(e)),
                };
                let settled = self.settle(py, call.call1(&args));
                (Passed::Positional(args), settled)
            }
            None => {
                let kwargs = match node.kwargs(values) {
                    Ok(Some(kwargs)) => kwargs,
                    Ok(None) => return Ok(Carried::Declined),
                    Err(e) => return Ok(rejected(e)),
                };
                let settled = self.settle(py, call.call((), Some(&kwargs)));
                (Passed::Keywords(kwargs), settled)
            }
        };
        // A hand-back carries the keyword arguments (the driver's retries use them).
        let value = match settled {
            Settled::Value(value, _) => value,
            Settled::Back(kind, payload, _) => {
                return Ok(Carried::HandBack(kind, payload, passed.keywords(node)?));
            }
        };
        if let Some(check) = &node.output_check {
            match check.passes(&value) {
                Ok(true) => {}
                // the driver checks again and reports the failure
                Ok(false) => return Ok(Carried::HandBack(RETURNED, value, passed.keywords(node)?)),
                // the check raised (a KeyboardInterrupt): the node's outcome, and what it
                // returned is still what its release gets
                Err(e) => {
                    if node.owned {
                        // best effort: the termination is what must reach the driver
                        let _ = self.record(py, job, &value, node, carrying);
                    }
                    let raised = exception(e, py);
                    return Ok(Carried::HandBack(RAISED, raised, passed.keywords(node)?));
                }
            }
        }
        // The record is Python code (near the recursion limit, say, it can fail): then the
        // driver records the value itself, as for a value it checks.
        if node.owned && self.record(py, job, &value, node, carrying).is_err() {
            return Ok(Carried::HandBack(RETURNED, value, passed.keywords(node)?));
        }
        values.set_item(node.name.bind(py), value)?;
        Ok(Carried::Done)
    }

    /// Record what owner `job` returned for its release.
    fn record(
        &self,
        py: Python<'_>,
        job: usize,
        value: &Bound<'_, PyAny>,
        node: &NodeCall,
        carrying: &Carrying,
    ) -> PyResult<()> {
        let record = self
            .acquisition
            .bind(py)
            .call1((value, node.output_type.bind(py)))?;
        carrying.acquisitions.bind(py).set_item(job, record)
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
        let (value, stepped) = match self.settle(py, release.bind(py).call1((record,))) {
            Settled::Value(value, stepped) => (value, stepped),
            Settled::Back(kind, payload, stepped) => {
                let extra = if stepped { count } else { none };
                return Ok(Carried::HandBack(kind, payload, extra));
            }
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

/// How a node's arguments were passed.
enum Passed<'py> {
    Positional(Bound<'py, PyTuple>),
    Keywords(Bound<'py, PyDict>),
}

impl<'py> Passed<'py> {
    /// The keyword arguments of the call: what the driver keeps for retries.
    fn keywords(self, node: &NodeCall) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Passed::Keywords(kwargs) => Ok(kwargs.into_any()),
            Passed::Positional(args) => node.keywords_of(&args),
        }
    }
}

/// The exception object of `e`, which goes back to the driver.
fn exception<'py>(e: PyErr, py: Python<'py>) -> Bound<'py, PyAny> {
    e.into_value(py).into_bound(py).into_any()
}
