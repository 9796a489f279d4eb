//! `Policy`: the Python-type rules of docs/contract.md#policy-validation over the core's range
//! validation, and the shared helpers that name values in messages.

use pyo3::basic::CompareOp;
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString, PyTuple, PyType};

use sdax_core::{Number, Policy};

const MODULE: &str = "sdax_hamilton._core";

/// `repr(obj)` for messages; falls back to the type name when `repr` itself fails (the
/// error being reported must not be replaced by an error of the value's `__repr__`).
pub(crate) fn safe_repr(obj: &Bound<'_, PyAny>) -> String {
    match obj.repr() {
        Ok(s) => shorten(s.to_string()),
        Err(_) => format!("<{} object>", type_name(obj)),
    }
}

/// `text` cut after 200 characters.
fn shorten(text: String) -> String {
    match text.char_indices().nth(200) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text,
    }
}

pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned())
}

/// `obj` read as a number without running any of its own code
/// (docs/contract.md#hostile-bindings): an `int` or a `float`, subclasses included
/// (`numpy.float64` is a float), but not a `bool`; `None` for anything else. An int is read
/// exactly, whatever its size: what its class says of it (`__index__`, `__float__`,
/// comparisons) is not asked.
pub(crate) fn read_number(obj: &Bound<'_, PyAny>) -> PyResult<Option<Number>> {
    if let Ok(float) = obj.cast::<PyFloat>() {
        return Ok(Some(Number::Float(float.value())));
    }
    if !obj.is_instance_of::<PyInt>() || obj.is_instance_of::<PyBool>() {
        return Ok(None);
    }
    // For an int (subclasses too) this reads the value itself, never `__index__`.
    if let Ok(i) = obj.extract::<i64>() {
        return Ok(Some(Number::Int(i)));
    }
    // Beyond i64: `int`'s own methods, never a subclass's.
    let py = obj.py();
    let int = py.get_type::<PyInt>();
    let negative = int
        .getattr(intern!(py, "__lt__"))?
        .call1((obj, 0))?
        .is_truthy()?;
    let magnitude = match int.getattr(intern!(py, "__float__"))?.call1((obj,)) {
        Ok(rounded) => Some(rounded.cast::<PyFloat>()?.value().abs()),
        Err(e) if e.is_instance_of::<PyOverflowError>(py) => None,
        Err(e) => return Err(e),
    };
    Ok(Some(Number::Big {
        negative,
        magnitude,
    }))
}

/// The value of an int (of a subclass too) as a plain `int`, without its class's code.
fn plain_int<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyInt>> {
    if obj.is_exact_instance_of::<PyInt>() {
        return Ok(obj.cast::<PyInt>()?.clone());
    }
    let py = obj.py();
    let copy = py
        .get_type::<PyInt>()
        .getattr(intern!(py, "__int__"))?
        .call1((obj,))?;
    Ok(copy.cast_into::<PyInt>()?)
}

/// `repr(obj)` for messages; a number by its own class's `repr` (`int`'s or `float`'s),
/// never a subclass's.
pub(crate) fn number_repr(obj: &Bound<'_, PyAny>) -> String {
    let py = obj.py();
    let base = if obj.is_instance_of::<PyBool>() {
        None
    } else if obj.is_instance_of::<PyFloat>() {
        Some(py.get_type::<PyFloat>())
    } else if obj.is_instance_of::<PyInt>() {
        Some(py.get_type::<PyInt>())
    } else {
        None
    };
    match base {
        Some(base) if !obj.get_type().is(&base) => {
            let text = base
                .getattr(intern!(py, "__repr__"))
                .and_then(|r| r.call1((obj,)))
                .and_then(|text| Ok(text.cast_into::<PyString>()?.to_string()));
            match text {
                Ok(text) => shorten(text),
                Err(_) => format!("<{} object>", type_name(obj)),
            }
        }
        _ => safe_repr(obj),
    }
}

pub(crate) fn check_number(
    obj: &Bound<'_, PyAny>,
    name: &str,
    requirement: &str,
    ok: impl Fn(f64) -> bool,
) -> PyResult<f64> {
    let Some(number) = read_number(obj)? else {
        return Err(PyTypeError::new_err(format!(
            "Invalid {name}: {} ({}); {requirement}",
            safe_repr(obj),
            type_name(obj)
        )));
    };
    let v = number.to_f64();
    if !ok(v) {
        return Err(PyValueError::new_err(format!(
            "Invalid {name}: {}; {requirement}",
            number_repr(obj)
        )));
    }
    Ok(v)
}

const RETRIES_REQ: &str = "retries must be a nonnegative integer";
const TIMEOUT_REQ: &str = "timeout must be a finite number greater than 0 or None";
const DELAY_REQ: &str = "initial_delay must be a finite number greater than or equal to 0";
const FACTOR_REQ: &str = "backoff_factor must be a finite number greater than 0";
const MAX_DELAY_REQ: &str = "max_delay must be a number greater than or equal to 0 or None";
const HOOK_REQ: &str = "retry_after must be a callable taking the exception, or None";
const SET_REQ: &str = "retryable_exceptions must be a nonempty tuple of exception classes";
const MEMBER_REQ: &str = "retryable_exceptions must contain exception classes";
const NEVER_RETRYABLE: &str = "External cancellation and process termination cannot be retryable";

static CANCELLED_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

fn validate_retryable<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let py = obj.py();
    if obj.is_none() {
        return Ok(None);
    }
    let Ok(tuple) = obj.cast::<PyTuple>() else {
        return Err(PyTypeError::new_err(format!(
            "Invalid retryable_exceptions: {} ({}); {SET_REQ} or None",
            safe_repr(obj),
            type_name(obj)
        )));
    };
    if tuple.is_empty() {
        return Err(PyValueError::new_err(format!(
            "Invalid retryable_exceptions: (); {SET_REQ} or None"
        )));
    }
    let base = py.get_type::<pyo3::exceptions::PyBaseException>();
    for member in tuple.iter() {
        let is_exception_class = match member.cast::<PyType>() {
            Ok(t) => t.is_subclass(base.as_any())?,
            Err(_) => false,
        };
        if !is_exception_class {
            return Err(PyTypeError::new_err(format!(
                "Invalid retryable_exceptions member: {} ({}); {MEMBER_REQ}",
                safe_repr(&member),
                type_name(&member)
            )));
        }
    }
    let cancelled = CANCELLED_ERROR.import(py, "asyncio", "CancelledError")?;
    let interrupt = py.get_type::<pyo3::exceptions::PyKeyboardInterrupt>();
    let exit = py.get_type::<pyo3::exceptions::PySystemExit>();
    for member in tuple.iter() {
        let class = member.cast::<PyType>()?;
        for never in [cancelled, &interrupt, &exit] {
            // A class that would catch one of them: equal, a superclass, a subclass (raised
            // by a node, it is the same interruption), or one whose metaclass claims their
            // instances.
            let catches = never.is_subclass(&member)?
                || class.is_subclass(never)?
                || never.call0()?.is_instance(&member)?;
            if catches {
                return Err(PyValueError::new_err(format!(
                    "Invalid retryable_exceptions member: {}; {NEVER_RETRYABLE} \
                     (a retryable class must not be CancelledError, KeyboardInterrupt or \
                     SystemExit, a superclass or a subclass of one, or claim their \
                     instances): list the exceptions to retry, e.g. (ConnectionError,)",
                    safe_repr(&member)
                )));
            }
        }
    }
    // A plain tuple copy (the argument may be a tuple subclass).
    Ok(Some(PyTuple::new(py, tuple.iter())?))
}

/// A validated attempt policy (docs/contract.md#policy-validation).
#[pyclass(frozen, module = "sdax_hamilton._core", name = "Policy")]
pub(crate) struct PyPolicy {
    pub(crate) core: Policy,
    /// The retries value as given (the core saturates at `u32::MAX`).
    retries: Py<PyInt>,
    retryable: Option<Py<PyTuple>>,
    /// The `retry_after` hook (the core only knows whether there is one).
    retry_after: Option<Py<PyAny>>,
}

impl PyPolicy {
    /// Validation in docs/contract.md#policy-validation order, then `max_delay` and `retry_after`;
    /// `None` (the Rust option) = argument not given.
    #[allow(clippy::too_many_arguments)]
    fn build(
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
        retries: Option<&Bound<'_, PyAny>>,
        retryable_exceptions: Option<&Bound<'_, PyAny>>,
        initial_delay: Option<&Bound<'_, PyAny>>,
        backoff_factor: Option<&Bound<'_, PyAny>>,
        max_delay: Option<&Bound<'_, PyAny>>,
        retry_after: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let (retries_obj, retries_core) = match retries {
            None => (0u32.into_pyobject(py)?.cast_into::<PyInt>()?, 0u32),
            Some(r) => {
                let number = read_number(r)?;
                if !matches!(number, Some(Number::Int(_) | Number::Big { .. })) {
                    return Err(PyTypeError::new_err(format!(
                        "Invalid retries: {} ({}); {RETRIES_REQ}",
                        safe_repr(r),
                        type_name(r)
                    )));
                }
                let Some(count) = number.and_then(Number::saturating_count) else {
                    return Err(PyValueError::new_err(format!(
                        "Invalid retries: {}; {RETRIES_REQ}",
                        number_repr(r)
                    )));
                };
                (plain_int(r)?, count)
            }
        };
        // timeout
        let timeout_v = match timeout {
            Some(t) if !t.is_none() => Some(check_number(t, "timeout", TIMEOUT_REQ, |v| {
                v.is_finite() && v > 0.0
            })?),
            _ => None,
        };
        let delay_v = match initial_delay {
            None => 1.0,
            Some(d) => check_number(d, "initial_delay", DELAY_REQ, |v| v.is_finite() && v >= 0.0)?,
        };
        let factor_v = match backoff_factor {
            None => 2.0,
            Some(b) => check_number(b, "backoff_factor", FACTOR_REQ, |v| {
                v.is_finite() && v > 0.0
            })?,
        };
        let retryable = match retryable_exceptions {
            None => None,
            Some(e) => validate_retryable(e)?.map(Bound::unbind),
        };
        let max_delay_v = match max_delay {
            Some(m) if !m.is_none() => Some(check_number(m, "max_delay", MAX_DELAY_REQ, |v| {
                !v.is_nan() && v >= 0.0
            })?),
            _ => None,
        };
        let hook = match retry_after {
            Some(h) if !h.is_none() => {
                if !h.is_callable() {
                    return Err(PyTypeError::new_err(format!(
                        "Invalid retry_after: {} ({}); {HOOK_REQ}",
                        safe_repr(h),
                        type_name(h)
                    )));
                }
                Some(h.clone().unbind())
            }
            _ => None,
        };
        let core = Policy::new(timeout_v, retries_core, delay_v, factor_v)
            .and_then(|p| p.with_max_delay(max_delay_v))
            .map_err(|e| PyValueError::new_err(e.to_string()))?
            .with_retry_after(hook.is_some());
        Ok(PyPolicy {
            core,
            retries: retries_obj.unbind(),
            retryable,
            retry_after: hook,
        })
    }
}

#[pymethods]
impl PyPolicy {
    /// Keyword-only; an argument that is not given takes its default, while an explicit
    /// `None` is only valid for `timeout`, `retryable_exceptions`, `max_delay` and
    /// `retry_after`.
    #[new]
    #[pyo3(signature = (**kwargs))]
    fn py_new(py: Python<'_>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let mut args: [Option<Bound<'_, PyAny>>; 7] = [None, None, None, None, None, None, None];
        const NAMES: [&str; 7] = [
            "timeout",
            "retries",
            "retryable_exceptions",
            "initial_delay",
            "backoff_factor",
            "max_delay",
            "retry_after",
        ];
        if let Some(kwargs) = kwargs {
            // A snapshot (keys and values taken together), never the dict itself: nothing
            // read below can be changed under the loop.
            let (keys, values) = (kwargs.keys(), kwargs.values());
            for (key, value) in keys.iter().zip(values.iter()) {
                let known = key
                    .cast::<PyString>()
                    .ok()
                    .and_then(|k| k.to_str().ok())
                    .and_then(|k| NAMES.iter().position(|n| *n == k));
                match known {
                    Some(i) => args[i] = Some(value),
                    None => {
                        return Err(PyTypeError::new_err(format!(
                            "Policy() got an unexpected keyword argument {}",
                            safe_repr(&key)
                        )))
                    }
                }
            }
        }
        let [timeout, retries, retryable_exceptions, initial_delay, backoff_factor, max_delay, retry_after] =
            args;
        Self::build(
            py,
            timeout.as_ref(),
            retries.as_ref(),
            retryable_exceptions.as_ref(),
            initial_delay.as_ref(),
            backoff_factor.as_ref(),
            max_delay.as_ref(),
            retry_after.as_ref(),
        )
    }

    #[getter]
    fn max_delay(&self) -> Option<f64> {
        self.core.max_delay()
    }

    #[getter]
    fn retry_after(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.retry_after.as_ref().map(|h| h.clone_ref(py))
    }
    #[getter]
    fn timeout(&self) -> Option<f64> {
        self.core.timeout()
    }

    #[getter]
    fn retries(&self, py: Python<'_>) -> Py<PyInt> {
        self.retries.clone_ref(py)
    }

    #[getter]
    fn retryable_exceptions(&self, py: Python<'_>) -> Option<Py<PyTuple>> {
        self.retryable.as_ref().map(|t| t.clone_ref(py))
    }

    #[getter]
    fn initial_delay(&self) -> f64 {
        self.core.initial_delay()
    }

    #[getter]
    fn backoff_factor(&self) -> f64 {
        self.core.backoff_factor()
    }

    /// `(low, high)` of the wait before retry `retry` (0-based).
    fn delay_bounds(&self, retry: &Bound<'_, PyAny>) -> PyResult<(f64, f64)> {
        let Some(k) = read_number(retry)?.and_then(Number::saturating_count) else {
            return Err(PyValueError::new_err(format!(
                "Invalid retry: {}; retry must be a nonnegative integer",
                number_repr(retry)
            )));
        };
        Ok(self.core.delay_bounds(k))
    }

    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<Py<PyAny>> {
        let py = other.py();
        let Ok(other) = other.cast::<PyPolicy>() else {
            return Ok(py.NotImplemented());
        };
        let other = other.get();
        let eq = match op {
            CompareOp::Eq | CompareOp::Ne => {
                self.core == other.core
                    && self
                        .retries
                        .bind(py)
                        .as_any()
                        .eq(other.retries.bind(py).as_any())?
                    && match (&self.retryable, &other.retryable) {
                        (None, None) => true,
                        (Some(a), Some(b)) => a.bind(py).as_any().eq(b.bind(py).as_any())?,
                        _ => false,
                    }
                    && match (&self.retry_after, &other.retry_after) {
                        (None, None) => true,
                        (Some(a), Some(b)) => a.bind(py).is(b.bind(py)),
                        _ => false,
                    }
            }
            _ => return Ok(py.NotImplemented()),
        };
        let result = if matches!(op, CompareOp::Eq) { eq } else { !eq };
        Ok(pyo3::types::PyBool::new(py, result)
            .to_owned()
            .into_any()
            .unbind())
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        let key = PyTuple::new(
            py,
            [
                self.core.timeout().into_pyobject(py)?.into_any(),
                self.retries.bind(py).clone().into_any(),
                self.core.initial_delay().into_pyobject(py)?.into_any(),
                self.core.backoff_factor().into_pyobject(py)?.into_any(),
                match &self.retryable {
                    Some(t) => t.bind(py).clone().into_any(),
                    None => py.None().into_bound(py),
                },
                self.core.max_delay().into_pyobject(py)?.into_any(),
                // identity: the hook's own __hash__ (or its absence) does not matter
                match &self.retry_after {
                    Some(h) => (h.as_ptr() as usize).into_pyobject(py)?.into_any(),
                    None => py.None().into_bound(py),
                },
            ],
        )?;
        key.hash()
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let timeout = match self.core.timeout() {
            Some(t) => safe_repr(&PyFloat::new(py, t).into_any()),
            None => "None".to_owned(),
        };
        let retryable = match &self.retryable {
            Some(t) => {
                let names: Vec<String> = t
                    .bind(py)
                    .iter()
                    .map(|c| match c.cast::<PyType>() {
                        Ok(t) => t
                            .qualname()
                            .map(|q| q.to_string())
                            .unwrap_or_else(|_| "?".to_owned()),
                        Err(_) => "?".to_owned(),
                    })
                    .collect();
                if names.len() == 1 {
                    format!("({},)", names[0])
                } else {
                    format!("({})", names.join(", "))
                }
            }
            None => "None".to_owned(),
        };
        let mut extra = String::new();
        if let Some(m) = self.core.max_delay() {
            extra.push_str(&format!(
                ", max_delay={}",
                safe_repr(&PyFloat::new(py, m).into_any())
            ));
        }
        if let Some(h) = &self.retry_after {
            let h = h.bind(py);
            let name = h
                .getattr("__qualname__")
                .and_then(|q| q.extract::<String>())
                .unwrap_or_else(|_| format!("<{} object>", type_name(h)));
            extra.push_str(&format!(", retry_after={name}"));
        }
        format!(
            "Policy(timeout={timeout}, retries={}, retryable_exceptions={retryable}, \
             initial_delay={}, backoff_factor={}{extra})",
            safe_repr(self.retries.bind(py).as_any()),
            safe_repr(&PyFloat::new(py, self.core.initial_delay()).into_any()),
            safe_repr(&PyFloat::new(py, self.core.backoff_factor()).into_any()),
        )
    }

    fn __copy__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __deepcopy__(slf: Py<Self>, _memo: &Bound<'_, PyAny>) -> Py<Self> {
        slf
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let this = slf.get();
        let module = py.import(MODULE)?;
        let make = module.getattr("_make_policy")?;
        let args = PyTuple::new(
            py,
            [
                this.core.timeout().into_pyobject(py)?.into_any(),
                this.retries.bind(py).clone().into_any(),
                match &this.retryable {
                    Some(t) => t.bind(py).clone().into_any(),
                    None => py.None().into_bound(py),
                },
                this.core.initial_delay().into_pyobject(py)?.into_any(),
                this.core.backoff_factor().into_pyobject(py)?.into_any(),
                this.core.max_delay().into_pyobject(py)?.into_any(),
                match &this.retry_after {
                    Some(h) => h.bind(py).clone(),
                    None => py.None().into_bound(py),
                },
            ],
        )?;
        Ok((make, args))
    }
}

/// Unpickling helper for `Policy` (positional form of the keyword-only constructor).
/// `max_delay` and `retry_after` are optional so pickles of older policies still load.
#[pyfunction]
#[pyo3(signature = (timeout, retries, retryable_exceptions, initial_delay, backoff_factor, max_delay=None, retry_after=None))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn _make_policy(
    py: Python<'_>,
    timeout: &Bound<'_, PyAny>,
    retries: &Bound<'_, PyAny>,
    retryable_exceptions: &Bound<'_, PyAny>,
    initial_delay: &Bound<'_, PyAny>,
    backoff_factor: &Bound<'_, PyAny>,
    max_delay: Option<&Bound<'_, PyAny>>,
    retry_after: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyPolicy> {
    PyPolicy::build(
        py,
        Some(timeout),
        Some(retries),
        Some(retryable_exceptions),
        Some(initial_delay),
        Some(backoff_factor),
        max_delay,
        retry_after,
    )
}

/// Check a run's `timeout` (the forward phase's budget): `None`, or a number
/// (`read_number`) that is `>= 0` and not NaN; `inf` means no deadline. Returns the budget as a
/// float (`None` for none).
#[pyfunction]
pub(crate) fn run_budget(timeout: &Bound<'_, PyAny>) -> PyResult<Option<f64>> {
    if timeout.is_none() {
        return Ok(None);
    }
    let v = check_number(timeout, "timeout", RUN_TIMEOUT_REQ, |v| {
        !v.is_nan() && v >= 0.0
    })?;
    Ok(v.is_finite().then_some(v))
}

const RUN_TIMEOUT_REQ: &str =
    "the run's timeout must be a number of seconds greater than or equal to 0, or None";

/// Whether `obj` is a number as the core reads one (`read_number`): an int or a float,
/// subclasses included, not a bool. What the driver says of an unusable `retry_after`
/// value depends on it.
#[pyfunction]
pub(crate) fn is_number(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(read_number(obj)?.is_some())
}
