//! `Policy`: the Python-type rules of SPEC 2.2 over the core's range validation, and the
//! shared helpers that name values in messages.

use pyo3::basic::CompareOp;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyFloat, PyInt, PyString, PyTuple, PyType};

use sdax_core::Policy;

const MODULE: &str = "sdax_hamilton._core";

/// `repr(obj)` for messages; falls back to the type name when `repr` itself fails (the
/// error being reported must not be replaced by an error of the value's `__repr__`).
fn safe_repr(obj: &Bound<'_, PyAny>) -> String {
    match obj.repr() {
        Ok(s) => {
            let s = s.to_string();
            if s.chars().count() > 200 {
                let cut: String = s.chars().take(200).collect();
                format!("{cut}...")
            } else {
                s
            }
        }
        Err(_) => format!("<{} object>", type_name(obj)),
    }
}

pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".to_owned())
}

/// `type(obj) in (int, float)`: bool and other subclasses excluded.
fn is_plain_number(obj: &Bound<'_, PyAny>) -> bool {
    obj.is_exact_instance_of::<PyInt>() || obj.is_exact_instance_of::<PyFloat>()
}

/// A plain int/float as f64; an int too large for a float counts as infinite.
fn number_value(obj: &Bound<'_, PyAny>) -> f64 {
    obj.extract::<f64>().unwrap_or(f64::INFINITY)
}

fn check_number(
    obj: &Bound<'_, PyAny>,
    name: &str,
    requirement: &str,
    ok: impl Fn(f64) -> bool,
) -> PyResult<f64> {
    if !is_plain_number(obj) {
        return Err(PyTypeError::new_err(format!(
            "Invalid {name}: {} ({}); {requirement}",
            safe_repr(obj),
            type_name(obj)
        )));
    }
    let v = number_value(obj);
    if !ok(v) {
        return Err(PyValueError::new_err(format!(
            "Invalid {name}: {}; {requirement}",
            safe_repr(obj)
        )));
    }
    Ok(v)
}

const RETRIES_REQ: &str = "retries must be a nonnegative integer";
const TIMEOUT_REQ: &str = "timeout must be a finite number greater than 0 or None";
const DELAY_REQ: &str = "initial_delay must be a finite number greater than or equal to 0";
const FACTOR_REQ: &str = "backoff_factor must be a finite number greater than 0";
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
        for never in [cancelled, &interrupt, &exit] {
            if never.is_subclass(&member)? {
                return Err(PyValueError::new_err(format!(
                    "Invalid retryable_exceptions member: {}; {NEVER_RETRYABLE} \
                     (a retryable class must not be, or be a superclass of, \
                     CancelledError, KeyboardInterrupt or SystemExit)",
                    safe_repr(&member)
                )));
            }
        }
    }
    // A plain tuple copy (the argument may be a tuple subclass).
    Ok(Some(PyTuple::new(py, tuple.iter())?))
}

/// A validated attempt policy (SPEC 2.2).
#[pyclass(frozen, module = "sdax_hamilton._core", name = "Policy")]
pub(crate) struct PyPolicy {
    pub(crate) core: Policy,
    /// The retries value as given (the core saturates at `u32::MAX`).
    retries: Py<PyInt>,
    retryable: Option<Py<PyTuple>>,
}

impl PyPolicy {
    /// Validation in SPEC 2.2 order; `None` (the Rust option) = argument not given.
    fn build(
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
        retries: Option<&Bound<'_, PyAny>>,
        retryable_exceptions: Option<&Bound<'_, PyAny>>,
        initial_delay: Option<&Bound<'_, PyAny>>,
        backoff_factor: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let (retries_obj, retries_core) = match retries {
            None => (0u32.into_pyobject(py)?.cast_into::<PyInt>()?, 0u32),
            Some(r) => {
                if !r.is_exact_instance_of::<PyInt>() {
                    return Err(PyTypeError::new_err(format!(
                        "Invalid retries: {} ({}); {RETRIES_REQ}",
                        safe_repr(r),
                        type_name(r)
                    )));
                }
                if r.lt(0)? {
                    return Err(PyValueError::new_err(format!(
                        "Invalid retries: {}; {RETRIES_REQ}",
                        safe_repr(r)
                    )));
                }
                let v = r.extract::<u32>().unwrap_or(u32::MAX);
                (r.cast::<PyInt>()?.clone(), v)
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
        let core = Policy::new(timeout_v, retries_core, delay_v, factor_v)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(PyPolicy {
            core,
            retries: retries_obj.unbind(),
            retryable,
        })
    }
}

#[pymethods]
impl PyPolicy {
    /// Keyword-only; an argument that is not given takes its default, while an explicit
    /// `None` is only valid for `timeout` and `retryable_exceptions`.
    #[new]
    #[pyo3(signature = (**kwargs))]
    fn py_new(py: Python<'_>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let mut args: [Option<Bound<'_, PyAny>>; 5] = [None, None, None, None, None];
        const NAMES: [&str; 5] = [
            "timeout",
            "retries",
            "retryable_exceptions",
            "initial_delay",
            "backoff_factor",
        ];
        if let Some(kwargs) = kwargs {
            for (key, value) in kwargs.iter() {
                let key = key.cast::<PyString>()?.to_str()?.to_owned();
                match NAMES.iter().position(|n| *n == key) {
                    Some(i) => args[i] = Some(value),
                    None => {
                        return Err(PyTypeError::new_err(format!(
                            "Policy() got an unexpected keyword argument '{key}'"
                        )))
                    }
                }
            }
        }
        let [timeout, retries, retryable_exceptions, initial_delay, backoff_factor] = args;
        Self::build(
            py,
            timeout.as_ref(),
            retries.as_ref(),
            retryable_exceptions.as_ref(),
            initial_delay.as_ref(),
            backoff_factor.as_ref(),
        )
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
        if !retry.is_instance_of::<PyInt>() || retry.lt(0)? {
            return Err(PyValueError::new_err(format!(
                "Invalid retry: {}; retry must be a nonnegative integer",
                safe_repr(retry)
            )));
        }
        let k = retry.extract::<u32>().unwrap_or(u32::MAX);
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
        format!(
            "Policy(timeout={timeout}, retries={}, retryable_exceptions={retryable}, \
             initial_delay={}, backoff_factor={})",
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
            ],
        )?;
        Ok((make, args))
    }
}

/// Unpickling helper for `Policy` (positional form of the keyword-only constructor).
#[pyfunction]
pub(crate) fn _make_policy(
    py: Python<'_>,
    timeout: &Bound<'_, PyAny>,
    retries: &Bound<'_, PyAny>,
    retryable_exceptions: &Bound<'_, PyAny>,
    initial_delay: &Bound<'_, PyAny>,
    backoff_factor: &Bound<'_, PyAny>,
) -> PyResult<PyPolicy> {
    PyPolicy::build(
        py,
        Some(timeout),
        Some(retries),
        Some(retryable_exceptions),
        Some(initial_delay),
        Some(backoff_factor),
    )
}
