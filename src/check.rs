//! `Check`: a requirement on a value, as the driver's type checks state it (`_types.py`),
//! evaluated where a run's values are read in Rust (the inline carrier, the value table).

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

/// A requirement on a value: a class (`isinstance`, which is all the check of a class of
/// the plain metaclass does) or a predicate to call.
pub(crate) enum Check {
    Class(Py<PyAny>),
    Predicate(Py<PyAny>),
}

impl Check {
    pub(crate) fn new((check, is_class): (Py<PyAny>, bool)) -> Self {
        if is_class {
            Check::Class(check)
        } else {
            Check::Predicate(check)
        }
    }

    pub(crate) fn object(&self) -> &Py<PyAny> {
        match self {
            Check::Class(check) | Check::Predicate(check) => check,
        }
    }

    /// Whether `value` passes. A predicate that raises an `Exception` fails (the driver
    /// runs it again and reports that); anything else it raises (`KeyboardInterrupt`,
    /// `SystemExit`) propagates, as out of the driver's own checks.
    pub(crate) fn passes(&self, value: &Bound<'_, PyAny>) -> PyResult<bool> {
        let py = value.py();
        let outcome = match self {
            Check::Class(cls) => value.is_instance(cls.bind(py)),
            Check::Predicate(check) => check.bind(py).call1((value,)).and_then(|ok| ok.is_truthy()),
        };
        match outcome {
            Ok(ok) => Ok(ok),
            Err(e) if e.is_instance_of::<PyException>(py) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Whether each `(key, check)` finds its key in `values` and the value there passes.
pub(crate) fn all_pass(
    checks: &[(Py<PyString>, Check)],
    values: &Bound<'_, PyDict>,
) -> PyResult<bool> {
    let py = values.py();
    for (key, check) in checks {
        let Some(value) = values.get_item(key.bind(py))? else {
            return Ok(false);
        };
        if !check.passes(&value)? {
            return Ok(false);
        }
    }
    Ok(true)
}
