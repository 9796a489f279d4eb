//! `InputTable`: a run's fresh value table from its inputs, when they are exactly right.
//!
//! Every run of a plan starts from its config and the inputs the caller passes, which must
//! be exactly the plan's required inputs, each passing its type checks (docs/contract.md,
//! "Run checks"). `fill` builds the table when they are; anything else (a mapping that is
//! not a dict, a missing or extra name, a failed check) gives `None`, and the plan's own
//! checks in `_plan.py` (`PreparedPlan._values`) say what is wrong. It decides nothing
//! those checks would not: it only spares a good run their Python frames.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFrozenSet, PyString};
use pyo3::{PyTraverseError, PyVisit};

use crate::check::{all_pass, Check};

#[pyclass(frozen, module = "sdax_hamilton._core", name = "InputTable")]
pub(crate) struct InputTable {
    names: Py<PyFrozenSet>,
    config: Py<PyDict>,
    checks: Vec<(Py<PyString>, Check)>,
}

#[pymethods]
impl InputTable {
    /// `names`: the required inputs; `config`: what every table starts from; `checks`:
    /// `(name, check, is_class)` for every requirement on an input.
    #[new]
    fn py_new(
        names: Py<PyFrozenSet>,
        config: Py<PyDict>,
        checks: Vec<(Py<PyString>, Py<PyAny>, bool)>,
    ) -> Self {
        let checks = checks
            .into_iter()
            .map(|(name, check, is_class)| (name, Check::new((check, is_class))))
            .collect();
        InputTable {
            names,
            config,
            checks,
        }
    }

    /// A new `{**config, **inputs}`, or `None` when `inputs` (a dict, or `None` for no
    /// inputs) is not exactly the required inputs, each passing its checks. A check that
    /// raises anything but an `Exception` propagates.
    fn fill<'py>(
        &self,
        py: Python<'py>,
        inputs: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let names = self.names.bind(py);
        let table = self.config.bind(py).copy()?;
        if inputs.is_none() {
            return Ok(names.is_empty().then_some(table));
        }
        let Ok(supplied) = inputs.cast_exact::<PyDict>() else {
            return Ok(None);
        };
        if supplied.len() != names.len() {
            return Ok(None);
        }
        for (name, value) in supplied.iter() {
            if !names.contains(&name)? {
                return Ok(None);
            }
            table.set_item(name, value)?;
        }
        Ok(all_pass(&self.checks, supplied)?.then_some(table))
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.names)?;
        visit.call(&self.config)?;
        for (name, check) in &self.checks {
            visit.call(name)?;
            visit.call(check.object())?;
        }
        Ok(())
    }
}
