//! `InputTable`: a run's fresh value table from its inputs, when they are exactly right.
//!
//! Every run of a plan starts from its config and the inputs the caller passes, which must
//! be exactly the plan's required inputs, each passing its type checks (docs/contract.md,
//! "Run checks"). `fill` builds the table when they are; anything else (a mapping that is
//! not a dict, a missing or extra name, a failed check) gives `None`, and the plan's own
//! checks in `_plan.py` (`PreparedPlan._values`) say what is wrong. It decides nothing
//! those checks would not: it only spares a good run their Python frames.
//!
//! The caller's keys are user objects: their `__hash__` and `__eq__` run while they are
//! looked up, and may change the inputs dict, raise or lie
//! (docs/contract.md#hostile-bindings). So `fill` reads one snapshot of the dict, never
//! iterates the dict itself, and keys the table by the plan's own names, never by the
//! caller's key objects.

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFrozenSet, PyString};
use pyo3::{PyTraverseError, PyVisit};

use crate::check::{all_pass, Check};

#[pyclass(frozen, module = "sdax_hamilton._core", name = "InputTable")]
pub(crate) struct InputTable {
    /// Each required input's name, mapped to itself: a caller's key finds the plan's own
    /// `str` object here.
    names: Py<PyDict>,
    config: Py<PyDict>,
    /// The length of a good table: the config's keys and the names, together.
    size: usize,
    checks: Vec<(Py<PyString>, Check)>,
}

#[pymethods]
impl InputTable {
    /// `names`: the required inputs; `config`: what every table starts from; `checks`:
    /// `(name, check, is_class)` for every requirement on an input.
    #[new]
    fn py_new(
        py: Python<'_>,
        names: &Bound<'_, PyFrozenSet>,
        config: Py<PyDict>,
        checks: Vec<(Py<PyString>, Py<PyAny>, bool)>,
    ) -> PyResult<Self> {
        let table = PyDict::new(py);
        let mut size = config.bind(py).len();
        for name in names.try_iter()? {
            let name = name?;
            if !config.bind(py).contains(&name)? {
                size += 1;
            }
            table.set_item(&name, &name)?;
        }
        let checks = checks
            .into_iter()
            .map(|(name, check, is_class)| (name, Check::new((check, is_class))))
            .collect();
        Ok(InputTable {
            names: table.unbind(),
            config,
            size,
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
        let names = self.names.bind(py);
        let table = self.config.bind(py).copy()?;
        if inputs.is_none() {
            return Ok(names.is_empty().then_some(table));
        }
        let Ok(supplied) = inputs.cast_exact::<PyDict>() else {
            return Ok(None);
        };
        // Two lists taken together, with no Python code in between: what is read below.
        let (keys, values) = (supplied.keys(), supplied.values());
        if keys.len() != names.len() {
            return Ok(None);
        }
        let filled = (|| -> PyResult<bool> {
            for (key, value) in keys.iter().zip(values.iter()) {
                let Some(name) = names.get_item(&key)? else {
                    return Ok(false);
                };
                table.set_item(name, value)?;
            }
            // Every name set once: no key stood for another's name.
            Ok(table.len() == self.size && all_pass(&self.checks, &table)?)
        })();
        match filled {
            Ok(passed) => Ok(passed.then_some(table)),
            Err(e) if e.is_instance_of::<PyException>(py) => Ok(None),
            Err(e) => Err(e),
        }
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
