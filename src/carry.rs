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
//!   `(CARRIED, job, 0, HandBack)` for the driver to go on with: `HandBack` names how the
//!   call ended, what it raised, returned or yielded, a node's keyword arguments (kept for
//!   its retries), a stepped release's phase-task cancellation count before the call, the
//!   START's timeout and, with one, the loop's and the monotonic clock's time before the
//!   call (its timer counts from there).
//!
//! A timeout cannot expire while a call runs without suspending (timers need the loop), so
//! a START with one is carried out too; only a suspended call needs its timer.
//!
//! A node with a bulkhead or a circuit breaker (docs/resilience.md) is carried out too when
//! its attempt can be admitted at once: the breaker closed and a permit free with nobody
//! queued (`CircuitBreaker::admit_if_closed`, `Bulkhead::try_acquire_free` in
//! core/src/shared/). Otherwise nothing is taken and the START stays a command: the driver
//! admits it (python/sdax_hamilton/_executor/guards.py), which may queue it, reject it or let
//! it through as a probe. A carried attempt that is over gives its permit back and its
//! success to the breaker here; a permit passed on to a waiter is woken through the
//! carrier's `wake`, and a breaker transition becomes a `CARRIED_BREAKER` command for the
//! driver to log. One handed back says it was admitted (`HandBack.admitted`): the driver
//! gives its permit back and records its outcome when it ends, as for one it admitted.
//!
//! This decides nothing: which job starts is the core's; what each outcome means is the
//! driver's (`outcomes.py`), which sees every failure.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::iterator::PySendResult;
use pyo3::types::{PyDict, PyIterator, PyList, PyString, PyTuple};
use pyo3::{PyTraverseError, PyVisit};

use crate::check::Check;
use crate::seq::items;
use crate::shared::{admit_at_once, end_unprobed, PyBulkhead, PyCircuitBreaker};

/// The opcode of a carried START handed back (outside the core's `Op` range).
pub(crate) const CARRIED: u8 = 0x80;

/// How a carried START ended, when the driver must go on with it (`HandBack.how`).
pub(crate) const RAISED: u32 = 0;
pub(crate) const RETURNED: u32 = 1;
pub(crate) const SUSPENDED: u32 = 2;
pub(crate) const AWAITABLE: u32 = 3;
/// An input check raised (a `KeyboardInterrupt` out of a metaclass's `__instancecheck__`,
/// say; an `Exception` only fails the check): nothing was called.
pub(crate) const REJECTED: u32 = 4;

/// The opcode telling the driver that a carried attempt's outcome changed its breaker's
/// state: `(CARRIED_BREAKER, job, 0, transition)`, the transition as `CircuitBreaker.record`
/// names it. The run's commands come after it.
pub(crate) const CARRIED_BREAKER: u8 = 0x81;

/// What a guarded node's carried attempt holds.
struct Admitted {
    /// The permit of this bulkhead.
    permit: bool,
    /// Admitted by this breaker, closed (no probe).
    breaker: bool,
}

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
    /// Its STARTs stay commands: the driver carries them out.
    declined: bool,
    /// The shared bulkhead and breaker that admit its attempts.
    bulkhead: Option<Py<PyBulkhead>>,
    breaker: Option<Py<PyCircuitBreaker>>,
}

type CheckSpec = (Py<PyString>, Py<PyAny>, bool);

/// How to call one forward node inline, as the plan gives it (`Carrier`'s `nodes`).
#[pyclass(frozen, module = "sdax_hamilton._core", name = "CarriedNode")]
pub(crate) struct CarriedNode {
    call: Py<PyAny>,
    name: Py<PyString>,
    args: Vec<(Py<PyString>, Py<PyString>)>,
    defaults: Option<Py<PyDict>>,
    checks: Vec<CheckSpec>,
    output_check: Option<(Py<PyAny>, bool)>,
    output_type: Py<PyAny>,
    owned: bool,
    positional: bool,
    declined: bool,
    bulkhead: Option<Py<PyBulkhead>>,
    breaker: Option<Py<PyCircuitBreaker>>,
}

#[pymethods]
impl CarriedNode {
    /// ``call``: the node's function; ``args``: ``(keyword, value-table key)`` pairs;
    /// ``defaults``: keyword defaults or ``None``; ``checks``: ``(keyword, check,
    /// is_class)``; ``output_check``: ``(check, is_class)`` or ``None``; ``owned``: it
    /// owns an acquisition; ``positional``: ``args`` are the function's first parameters,
    /// in order (``_takes_positionally``); ``declined``: the driver carries out its
    /// STARTs; ``bulkhead``, ``breaker``: the shared objects (their ``_core``) that admit
    /// each of its attempts first.
    #[new]
    #[pyo3(signature = (*, call, name, args, defaults, checks, output_check, output_type, owned, positional, declined=false, bulkhead=None, breaker=None))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        call: Py<PyAny>,
        name: Py<PyString>,
        args: &Bound<'_, PyAny>,
        defaults: Option<Py<PyDict>>,
        checks: &Bound<'_, PyAny>,
        output_check: Option<(Py<PyAny>, bool)>,
        output_type: Py<PyAny>,
        owned: bool,
        positional: bool,
        declined: bool,
        bulkhead: Option<Py<PyBulkhead>>,
        breaker: Option<Py<PyCircuitBreaker>>,
    ) -> PyResult<Self> {
        let args = items(args, "CarriedNode: args")?;
        let checks = items(checks, "CarriedNode: checks")?;
        Ok(CarriedNode {
            call,
            name,
            args,
            defaults,
            checks,
            output_check,
            output_type,
            owned,
            positional,
            declined,
            bulkhead,
            breaker,
        })
    }

    #[getter]
    fn name(&self, py: Python<'_>) -> Py<PyString> {
        self.name.clone_ref(py)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.call)?;
        visit.call(&self.name)?;
        for (keyword, key) in &self.args {
            visit.call(keyword)?;
            visit.call(key)?;
        }
        if let Some(defaults) = &self.defaults {
            visit.call(defaults)?;
        }
        for (keyword, check, _) in &self.checks {
            visit.call(keyword)?;
            visit.call(check)?;
        }
        if let Some((check, _)) = &self.output_check {
            visit.call(check)?;
        }
        if let Some(bulkhead) = &self.bulkhead {
            visit.call(bulkhead)?;
        }
        if let Some(breaker) = &self.breaker {
            visit.call(breaker)?;
        }
        visit.call(&self.output_type)
    }
}

/// How a plan's jobs are called inline; built once per plan, shared by its runs.
#[pyclass(frozen, module = "sdax_hamilton._core", name = "Carrier")]
pub(crate) struct PyCarrier {
    nodes: Vec<NodeCall>,
    releases: Vec<Option<Py<PyAny>>>,
    acquisition: Py<PyAny>,
    isawaitable: Py<PyAny>,
    coroutine_type: Py<PyAny>,
    monotonic: Py<PyAny>,
    /// `wake(bulkhead, waiter)`: wake the waiter a carried attempt's permit went to.
    wake: Option<Py<PyAny>>,
}

#[pymethods]
impl PyCarrier {
    /// `nodes[i]`: how to call active node `i` (a `CarriedNode`); `releases[i]`: its
    /// release function or `None`; `wake(bulkhead, waiter)`: wakes the waiter a permit
    /// given back by a carried attempt went to (required when a node has a bulkhead).
    #[new]
    #[pyo3(signature = (nodes, releases, acquisition, isawaitable, coroutine_type, monotonic, *, wake=None))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        py: Python<'_>,
        nodes: &Bound<'_, PyAny>,
        releases: &Bound<'_, PyAny>,
        acquisition: Py<PyAny>,
        isawaitable: Py<PyAny>,
        coroutine_type: Py<PyAny>,
        monotonic: Py<PyAny>,
        wake: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let nodes: Vec<PyRef<'_, CarriedNode>> = items(nodes, "Carrier: nodes")?;
        if wake.is_none() && nodes.iter().any(|node| node.bulkhead.is_some()) {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "Carrier: a node has a bulkhead but no wake function was given",
            ));
        }
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
            .map(|spec| NodeCall::new(py, &spec))
            .collect::<PyResult<_>>()?;
        Ok(PyCarrier {
            nodes,
            releases,
            acquisition,
            isawaitable,
            coroutine_type,
            monotonic,
            wake,
        })
    }

    fn __len__(&self) -> usize {
        self.nodes.len()
    }

    /// The keyword arguments of the first attempt of forward job `job`, read from `values`
    /// and checked as a carried START's are: a missing value raises `KeyError`, a value
    /// that fails its check `TypeError` ("Invalid input for node.keyword"), a check that
    /// raises what it raised.
    fn arguments<'py>(
        &self,
        job: usize,
        values: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let Some(node) = self.nodes.get(job) else {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "Carrier.arguments: no forward job {job}"
            )));
        };
        match node.read_kwargs(values, true)? {
            Ok(kwargs) => Ok(kwargs),
            Err(Refused::Missing(key)) => Err(pyo3::exceptions::PyKeyError::new_err(key.unbind())),
            Err(Refused::Invalid(keyword)) => Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "Invalid input for {}.{}",
                node.name.bind(values.py()),
                keyword
            ))),
        }
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
            if let Some(bulkhead) = &node.bulkhead {
                visit.call(bulkhead)?;
            }
            if let Some(breaker) = &node.breaker {
                visit.call(breaker)?;
            }
            visit.call(&node.output_type)?;
        }
        for release in self.releases.iter().flatten() {
            visit.call(release)?;
        }
        visit.call(&self.acquisition)?;
        visit.call(&self.isawaitable)?;
        visit.call(&self.coroutine_type)?;
        visit.call(&self.monotonic)?;
        if let Some(wake) = &self.wake {
            visit.call(wake)?;
        }
        Ok(())
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
    /// Carried out; the driver goes on with it.
    HandBack(Back<'py>),
}

/// What a carried call hands back to the driver, before the caller adds the START's
/// timeout and clocks (`HandBack`).
pub(crate) struct Back<'py> {
    pub(crate) how: u32,
    pub(crate) payload: Bound<'py, PyAny>,
    pub(crate) yielded: Option<Bound<'py, PyAny>>,
    pub(crate) kwargs: Option<Bound<'py, PyAny>>,
    pub(crate) cancelling: Option<i64>,
    /// A guarded node's attempt admitted by the carrier.
    pub(crate) admitted: bool,
}

impl<'py> Back<'py> {
    /// A hand-back with nothing yielded and no cancellation count.
    fn plain(how: u32, payload: Bound<'py, PyAny>, kwargs: Option<Bound<'py, PyAny>>) -> Self {
        Back {
            how,
            payload,
            yielded: None,
            kwargs,
            cancelling: None,
            admitted: false,
        }
    }
}

/// A carried START handed back to the driver: the `arg` of a `CARRIED` command.
#[pyclass(frozen, module = "sdax_hamilton._core", name = "HandBack")]
pub(crate) struct HandBack {
    /// How the call ended: `CARRIED_RAISED`, `_RETURNED`, `_SUSPENDED` or `_AWAITABLE`.
    #[pyo3(get)]
    how: u32,
    /// What it raised or returned; the coroutine that suspended; the awaitable returned.
    #[pyo3(get)]
    payload: Py<PyAny>,
    /// What a suspended coroutine's first step yielded (`None` otherwise).
    #[pyo3(get)]
    yielded: Option<Py<PyAny>>,
    /// A node's keyword arguments (kept for its retries); `None` for a release.
    #[pyo3(get)]
    kwargs: Option<Py<PyAny>>,
    /// For a release whose coroutine was stepped: its phase task's `cancelling()` count
    /// before the call (the driver tells whether the release cancelled its own task).
    #[pyo3(get)]
    cancelling: Option<i64>,
    /// The START's timeout.
    #[pyo3(get)]
    timeout: Option<f64>,
    /// `(loop time, monotonic time)` before the call, when it has a timeout (its timer
    /// counts from there); `None` otherwise.
    #[pyo3(get)]
    started: Option<Py<PyAny>>,
    /// A guarded node's attempt the carrier admitted: it holds a permit of the node's
    /// bulkhead and was let through by its closed breaker (no probe); the driver gives the
    /// permit back and records the outcome when it ends.
    #[pyo3(get)]
    admitted: bool,
}

impl HandBack {
    pub(crate) fn new(
        back: Back<'_>,
        timeout: Option<f64>,
        started: Option<Bound<'_, PyAny>>,
    ) -> Self {
        HandBack {
            how: back.how,
            payload: back.payload.unbind(),
            yielded: back.yielded.map(Bound::unbind),
            kwargs: back.kwargs.map(Bound::unbind),
            cancelling: back.cancelling,
            timeout,
            started: started.map(Bound::unbind),
            admitted: back.admitted,
        }
    }
}

#[pymethods]
impl HandBack {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.payload)?;
        if let Some(yielded) = &self.yielded {
            visit.call(yielded)?;
        }
        if let Some(kwargs) = &self.kwargs {
            visit.call(kwargs)?;
        }
        if let Some(started) = &self.started {
            visit.call(started)?;
        }
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!(
            "<HandBack how={} timeout={:?} admitted={}>",
            self.how, self.timeout, self.admitted
        )
    }
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
    fn new(py: Python<'_>, spec: &CarriedNode) -> PyResult<Self> {
        let args: Vec<(Py<PyString>, Py<PyString>)> = spec
            .args
            .iter()
            .map(|(keyword, key)| (keyword.clone_ref(py), key.clone_ref(py)))
            .collect();
        let defaults = spec.defaults.as_ref().map(|d| d.clone_ref(py));
        let checks: Vec<(Py<PyString>, Check)> = spec
            .checks
            .iter()
            .map(|(keyword, check, is_class)| {
                (
                    keyword.clone_ref(py),
                    Check::new((check.clone_ref(py), *is_class)),
                )
            })
            .collect();
        let output_check = spec
            .output_check
            .as_ref()
            .map(|(check, is_class)| (check.clone_ref(py), *is_class));
        let positional = spec.positional;
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
            call: spec.call.clone_ref(py),
            name: spec.name.clone_ref(py),
            args,
            defaults,
            checks,
            output_check: output_check.map(Check::new),
            output_type: spec.output_type.clone_ref(py),
            owned: spec.owned,
            positional,
            declined: spec.declined,
            bulkhead: spec.bulkhead.as_ref().map(|b| b.clone_ref(py)),
            breaker: spec.breaker.as_ref().map(|b| b.clone_ref(py)),
        })
    }

    /// The keyword arguments of the first attempt, read from the run's values and
    /// checked: the one reading both call paths use (a carried START, and the driver's own
    /// through `Carrier.arguments`). `Err` says which argument was refused: the carried
    /// path then leaves the START to the driver, which reports it.
    /// `strict`: a check that raises raises out of here (the driver reports it); otherwise
    /// it refuses the argument, as one that fails (the carried path declines the START).
    fn read_kwargs<'py>(
        &self,
        values: &Bound<'py, PyDict>,
        strict: bool,
    ) -> PyResult<Result<Bound<'py, PyDict>, Refused<'py>>> {
        let py = values.py();
        let kwargs = match &self.defaults {
            Some(defaults) => defaults.bind(py).copy()?,
            None => PyDict::new(py),
        };
        for (keyword, key) in &self.args {
            match values.get_item(key.bind(py))? {
                Some(value) => kwargs.set_item(keyword.bind(py), value)?,
                None => return Ok(Err(Refused::Missing(key.bind(py).clone()))),
            }
        }
        for (keyword, check) in &self.checks {
            let keyword = keyword.bind(py);
            let Some(value) = kwargs.get_item(keyword)? else {
                return Ok(Err(Refused::Missing(keyword.clone())));
            };
            let ok = if strict {
                passes_or_raises(check, &value)?
            } else {
                check.passes(&value)?
            };
            if !ok {
                return Ok(Err(Refused::Invalid(keyword.clone())));
            }
        }
        Ok(Ok(kwargs))
    }

    /// `read_kwargs`, `None` when an argument is refused.
    fn kwargs<'py>(&self, values: &Bound<'py, PyDict>) -> PyResult<Option<Bound<'py, PyDict>>> {
        Ok(self.read_kwargs(values, false)?.ok())
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

/// Whether `value` passes `check`, anything the check raises raised (`Check::passes`
/// takes an `Exception` for a failed check).
fn passes_or_raises(check: &Check, value: &Bound<'_, PyAny>) -> PyResult<bool> {
    let py = value.py();
    match check {
        Check::Class(cls) => value.is_instance(cls.bind(py)),
        Check::Predicate(predicate) => predicate.bind(py).call1((value,))?.is_truthy(),
    }
}

/// An argument of a node's first attempt that could not be passed.
enum Refused<'py> {
    /// Its value-table key (or its keyword, for a check) has no value.
    Missing(Bound<'py, PyString>),
    /// Its value fails the node's input check.
    Invalid(Bound<'py, PyString>),
}

/// What a call returned, before the caller adds what the driver needs with a hand-back.
enum Settled<'py> {
    /// A value, and whether it came from stepping a coroutine.
    Value(Bound<'py, PyAny>, bool),
    /// `(how, payload, yielded, stepped)`: the driver goes on with it.
    Back(u32, Bound<'py, PyAny>, Option<Bound<'py, PyAny>>, bool),
}

impl PyCarrier {
    pub(crate) fn forward_count(&self) -> usize {
        self.nodes.len()
    }

    /// What a call (its `outcome`) came to: a value, or what the driver must go on with.
    fn settle<'py>(&self, py: Python<'py>, outcome: PyResult<Bound<'py, PyAny>>) -> Settled<'py> {
        let result = match outcome {
            Ok(result) => result,
            Err(e) => return Settled::Back(RAISED, exception(e, py), None, false),
        };
        if result.get_type().is(self.coroutine_type.bind(py)) {
            return match step(&result) {
                Ok(Ok(value)) => Settled::Value(value, true),
                Ok(Err(yielded)) => Settled::Back(SUSPENDED, result, Some(yielded), true),
                Err(e) => Settled::Back(RAISED, exception(e, py), None, true),
            };
        }
        match self
            .isawaitable
            .bind(py)
            .call1((&result,))
            .and_then(|a| a.is_truthy())
        {
            Ok(false) => Settled::Value(result, false),
            Ok(true) => Settled::Back(AWAITABLE, result, None, false),
            Err(e) => Settled::Back(RAISED, exception(e, py), None, false),
        }
    }

    /// Carry out the first attempt of forward job `job`. A transition of its breaker its
    /// outcome caused is pushed on `transitions` for the driver to log.
    pub(crate) fn call_node<'py>(
        &self,
        py: Python<'py>,
        job: usize,
        carrying: &Carrying,
        transitions: &mut Vec<(u32, &'static str)>,
    ) -> PyResult<Carried<'py>> {
        let values = carrying.values.bind(py);
        let Some(node) = self.nodes.get(job) else {
            return Ok(Carried::Declined);
        };
        if node.declined {
            return Ok(Carried::Declined);
        }
        // What a check raised (it is not a failed check) ends the attempt before the call.
        let rejected = |e: PyErr| Carried::HandBack(Back::plain(REJECTED, exception(e, py), None));
        let passed = match &node.positional {
            Some(indexes) => match node.positional_args(values, indexes) {
                Ok(Some(args)) => Passed::Positional(args),
                Ok(None) => return Ok(Carried::Declined),
                Err(e) => return Ok(rejected(e)),
            },
            None => match node.kwargs(values) {
                Ok(Some(kwargs)) => Passed::Keywords(kwargs),
                Ok(None) => return Ok(Carried::Declined),
                Err(e) => return Ok(rejected(e)),
            },
        };
        if node.bulkhead.is_none() && node.breaker.is_none() {
            return self.call_passed(py, job, node, carrying, passed);
        }
        let Some(admitted) = self.admit(node) else {
            return Ok(Carried::Declined); // nothing taken: the driver admits it
        };
        match self.call_passed(py, job, node, carrying, passed) {
            Ok(Carried::HandBack(mut back)) => {
                back.admitted = true; // the driver ends what it holds
                Ok(Carried::HandBack(back))
            }
            Ok(Carried::Done) => {
                let transition = self.end_admitted(py, node, &admitted, true)?;
                if let Some(transition) = transition {
                    transitions.push((job as u32, transition));
                }
                Ok(Carried::Done)
            }
            other => {
                // Not called after all (`call_passed` never declines), or our own
                // bookkeeping failed: nothing to record, the permit still goes back.
                self.end_admitted(py, node, &admitted, false)?;
                other
            }
        }
    }

    /// Admit an attempt of a guarded node at once, or take nothing (`None`): the breaker
    /// first (a rejected attempt takes no permit), then the bulkhead
    /// (`crate::shared::admit_at_once`, which needs no time).
    fn admit(&self, node: &NodeCall) -> Option<Admitted> {
        let bulkhead = node.bulkhead.as_ref().map(Py::get);
        let breaker = node.breaker.as_ref().map(Py::get);
        admit_at_once(bulkhead, breaker).then_some(Admitted {
            permit: bulkhead.is_some(),
            breaker: breaker.is_some(),
        })
    }

    /// A carried attempt admitted by `admit` is over: its permit goes back (to a waiter,
    /// woken, or to the pool) and, when `succeeded`, its success to the breaker; the
    /// breaker's transition, if it made one.
    fn end_admitted(
        &self,
        py: Python<'_>,
        node: &NodeCall,
        admitted: &Admitted,
        succeeded: bool,
    ) -> PyResult<Option<&'static str>> {
        let bulkhead = node.bulkhead.as_ref().filter(|_| admitted.permit);
        let breaker = node.breaker.as_ref().filter(|_| admitted.breaker);
        let now: f64 = match (breaker, succeeded) {
            (Some(_), true) => self.monotonic.bind(py).call0()?.extract()?,
            _ => 0.0, // nothing to record
        };
        let (waiter, transition) = end_unprobed(
            bulkhead.map(Py::get),
            breaker.map(Py::get),
            now,
            succeeded.then_some(true),
        )?;
        if let (Some(waiter), Some(bulkhead), Some(wake)) = (waiter, bulkhead, &self.wake) {
            wake.bind(py).call1((bulkhead, waiter))?;
        }
        Ok(transition)
    }

    /// Call forward job `job` with its arguments and go on with what it returned.
    fn call_passed<'py>(
        &self,
        py: Python<'py>,
        job: usize,
        node: &NodeCall,
        carrying: &Carrying,
        passed: Passed<'py>,
    ) -> PyResult<Carried<'py>> {
        let values = carrying.values.bind(py);
        let call = node.call.bind(py);
        let settled = match &passed {
            Passed::Positional(args) => self.settle(py, call.call1(args)),
            Passed::Keywords(kwargs) => self.settle(py, call.call((), Some(kwargs))),
        };
        // A hand-back carries the keyword arguments (the driver's retries use them).
        let value = match settled {
            Settled::Value(value, _) => value,
            Settled::Back(how, payload, yielded, _) => {
                let kwargs = Some(passed.keywords(node)?);
                return Ok(Carried::HandBack(Back {
                    how,
                    payload,
                    yielded,
                    kwargs,
                    cancelling: None,
                    admitted: false,
                }));
            }
        };
        if let Some(check) = &node.output_check {
            match check.passes(&value) {
                Ok(true) => {}
                // the driver checks again and reports the failure
                Ok(false) => {
                    let kwargs = Some(passed.keywords(node)?);
                    return Ok(Carried::HandBack(Back::plain(RETURNED, value, kwargs)));
                }
                // the check raised (a KeyboardInterrupt): the node's outcome, and what it
                // returned is still what its release gets
                Err(e) => {
                    if node.owned {
                        // best effort: the termination is what must reach the driver
                        let _ = self.record(py, job, &value, node, carrying);
                    }
                    let raised = exception(e, py);
                    let kwargs = Some(passed.keywords(node)?);
                    return Ok(Carried::HandBack(Back::plain(RAISED, raised, kwargs)));
                }
            }
        }
        // The record is Python code (near the recursion limit, say, it can fail): then the
        // driver records the value itself, as for a value it checks.
        if node.owned && self.record(py, job, &value, node, carrying).is_err() {
            let kwargs = Some(passed.keywords(node)?);
            return Ok(Carried::HandBack(Back::plain(RETURNED, value, kwargs)));
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
        let before: i64 = task.call_method0(cancelling)?.extract()?;
        let back = |how, payload, yielded, stepped: bool| {
            Carried::HandBack(Back {
                how,
                payload,
                yielded,
                kwargs: None,
                cancelling: stepped.then_some(before),
                admitted: false,
            })
        };
        let (value, stepped) = match self.settle(py, release.bind(py).call1((record,))) {
            Settled::Value(value, stepped) => (value, stepped),
            Settled::Back(how, payload, yielded, stepped) => {
                return Ok(back(how, payload, yielded, stepped));
            }
        };
        if stepped {
            let after: i64 = task.call_method0(cancelling)?.extract()?;
            if after > before {
                return Ok(back(RETURNED, value, None, true));
            }
        }
        if !value.is_none() {
            return Ok(back(RETURNED, value, None, false)); // refused by the driver
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
