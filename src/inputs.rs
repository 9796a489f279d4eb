//! `InputTable`: a run's fresh value table from its inputs, when they are exactly right.
//!
//! Every run of a plan starts from its config and the inputs the caller passes, which must
//! be exactly the plan's required inputs, each passing its type checks (docs/contract.md,
//! "Run checks"). `fill` builds the table when they are; anything else (a mapping that is
//! not a dict, a missing or extra name, a failed check) gives `None`, and the plan's own
//! checks in `_plan.py` (`PreparedPlan._values`) say what is wrong. It decides nothing
//! those checks would not: it only spares a good run their Python frames.
//!
//! The caller's keys are user objects: their `__eq__` may run while a name is looked up,
//! and may change the inputs dict, raise or lie (docs/contract.md#hostile-bindings). So
//! `fill` never iterates the dict: it looks up each of the plan's names, and keys the
//! table by those names, never by the caller's key objects.

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFrozenSet, PyString};
use pyo3::{PyTraverseError, PyVisit};

use crate::check::{all_pass, Check};
use crate::seq::items;

#[pyclass(frozen, module = "sdax_hamilton._core", name = "InputTable")]
pub(crate) struct InputTable {
    /// The required inputs' names, sorted: the caller's dict is read by looking each up.
    names: Vec<Py<PyString>>,
    config: Py<PyDict>,
    checks: Vec<(Py<PyString>, Check)>,
}

#[pymethods]
impl InputTable {
    /// `names`: the required inputs; `config`: what every table starts from; `checks`:
    /// `(name, check, is_class)` for every requirement on an input.
    #[new]
    fn py_new(
        names: &Bound<'_, PyFrozenSet>,
        config: Py<PyDict>,
        checks: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        let checks: Vec<(Py<PyString>, Py<PyAny>, bool)> = items(checks, "checks")?;
        // Sorted: a table's order does not depend on how the set iterates.
        let mut keyed = Vec::with_capacity(names.len());
        for name in names.try_iter()? {
            let name = name?.cast_into::<PyString>()?;
            keyed.push((name.to_str()?.to_owned(), name.unbind()));
        }
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        let checks = checks
            .into_iter()
            .map(|(name, check, is_class)| (name, Check::new((check, is_class))))
            .collect();
        Ok(InputTable {
            names: keyed.into_iter().map(|(_, name)| name).collect(),
            config,
            checks,
        })
    }

    /// A new `{**config, **inputs}`, or `None` when `inputs` (a dict, or `None` for no
    /// inputs) is not exactly the required inputs, each passing its checks. An `Exception`
    /// from a key's own code gives `None` too (the plan's checks then report it); anything
    /// else it raises (`KeyboardInterrupt`, `SystemExit`) propagates, as does a check's.
    fn fill<'py>(
        &self,
        py: Python<'py>,
        inputs: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let table = self.config.bind(py).copy()?;
        if inputs.is_none() {
            return Ok(self.names.is_empty().then_some(table));
        }
        let Ok(supplied) = inputs.cast_exact::<PyDict>() else {
            return Ok(None);
        };
        if supplied.len() != self.names.len() {
            return Ok(None);
        }
        // Each name looked up, never the dict iterated: a key's own code may change it.
        let filled = (|| -> PyResult<bool> {
            for name in &self.names {
                let name = name.bind(py);
                let Some(value) = supplied.get_item(name)? else {
                    return Ok(false);
                };
                table.set_item(name, value)?;
            }
            // As many keys as names still: none besides them.
            Ok(supplied.len() == self.names.len() && all_pass(&self.checks, &table)?)
        })();
        match filled {
            Ok(passed) => Ok(passed.then_some(table)),
            Err(e) if e.is_instance_of::<PyException>(py) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        for name in &self.names {
            visit.call(name)?;
        }
        visit.call(&self.config)?;
        for (name, check) in &self.checks {
            visit.call(name)?;
            visit.call(check.object())?;
        }
        Ok(())
    }
}
