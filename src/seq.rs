//! Sequence arguments read without trusting their `__len__`.
//!
//! pyo3's `Vec<T>` extraction sizes the vector by what the object's `__len__` says before
//! reading a single item: a sequence that claims `sys.maxsize` items makes that a capacity
//! overflow (a panic) or a failed allocation (the process aborts). Every sequence argument
//! of the bindings is read by iterating it instead, which allocates only for the items
//! there are (docs/contract.md#hostile-bindings).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyString;

/// The items of `obj` (`what` names it in the error), each extracted as `T`, read by
/// iterating it; a `str` is refused, as pyo3 refuses one for a `Vec`.
pub(crate) fn items<'py, T>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Vec<T>>
where
    T: FromPyObjectOwned<'py>,
{
    if obj.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a sequence, not a str"
        )));
    }
    let mut out = Vec::new();
    for item in obj.try_iter()? {
        out.push(item?.extract::<T>().map_err(Into::into)?);
    }
    Ok(out)
}
