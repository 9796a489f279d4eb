//! `Graph` and `Plan`: node lists in, selections out.

use std::sync::Arc;

use pyo3::exceptions::{PyKeyError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyFrozenSet, PyString, PyTuple};

use sdax_core::{Graph, GraphError, NodeDef, Plan};

use crate::policy::{type_name, PyPolicy};

/// Names from a sequence/collection of `str`; a bare `str` is refused (it would iterate
/// as characters).
fn names_of(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<String>> {
    if obj.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a collection of names, not a string"
        )));
    }
    let mut out = Vec::new();
    for item in obj.try_iter()? {
        let item = item?;
        match item.cast::<PyString>() {
            Ok(s) => out.push(s.to_str()?.to_owned()),
            Err(_) => {
                return Err(PyTypeError::new_err(format!(
                    "{what} must contain str names, got {}",
                    type_name(&item)
                )))
            }
        }
    }
    Ok(out)
}

/// The selected names; a `str` that is not UTF-8 text (a lone surrogate) names no node, so
/// it is an unknown selected node like any other.
fn selected_names(obj: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if obj.is_instance_of::<PyString>() {
        return names_of(obj, "final_vars");
    }
    let mut out = Vec::new();
    for item in obj.try_iter()? {
        let item = item?;
        if let Ok(s) = item.cast::<PyString>() {
            match s.to_str() {
                Ok(text) => out.push(text.to_owned()),
                Err(_) => {
                    let shown = s.to_string_lossy().into_owned();
                    return Err(unknown_selected(&item, shown));
                }
            }
        } else {
            return Err(PyTypeError::new_err(format!(
                "final_vars must contain str names, got {}",
                type_name(&item)
            )));
        }
    }
    Ok(out)
}

/// `ValueError("Unknown selected node: 'x'")` carrying the name as given (attribute
/// `_sdax_unknown`), so the caller can suggest close matches among the Driver's nodes.
fn unknown_selected(name: &Bound<'_, PyAny>, shown: String) -> PyErr {
    let err = PyValueError::new_err(GraphError::UnknownSelected(shown).to_string());
    // Setting an attribute on a fresh ValueError cannot fail short of memory exhaustion;
    // the message alone is still the right error then.
    let _ = err.value(name.py()).setattr("_sdax_unknown", name);
    err
}

fn node_def(item: &Bound<'_, PyAny>, position: usize) -> PyResult<NodeDef> {
    let bad = |detail: &str| {
        PyTypeError::new_err(format!(
            "Graph node #{position} must be a tuple (name, inputs, borrows, policy, \
             release_policy): {detail}"
        ))
    };
    let Ok(t) = item.cast::<PyTuple>() else {
        return Err(bad(&format!("got {}", type_name(item))));
    };
    if t.len() != 5 {
        return Err(bad(&format!("got {} items", t.len())));
    }
    let name_obj = t.get_item(0)?;
    let Ok(name) = name_obj.cast::<PyString>() else {
        return Err(bad("name is not a str"));
    };
    let name = name.to_str()?.to_owned();
    let inputs = names_of(&t.get_item(1)?, &format!("inputs of node '{name}'"))?;
    let borrows = names_of(&t.get_item(2)?, &format!("borrows of node '{name}'"))?;
    let policy_obj = t.get_item(3)?;
    let Ok(policy) = policy_obj.cast::<PyPolicy>() else {
        return Err(PyTypeError::new_err(format!(
            "policy of node '{name}' must be a Policy, got {}",
            type_name(&policy_obj)
        )));
    };
    let release_obj = t.get_item(4)?;
    let release = if release_obj.is_none() {
        None
    } else {
        match release_obj.cast::<PyPolicy>() {
            Ok(p) => Some(p.get().core),
            Err(_) => {
                return Err(PyTypeError::new_err(format!(
                    "release policy of node '{name}' must be a Policy or None, got {}",
                    type_name(&release_obj)
                )))
            }
        }
    };
    Ok(NodeDef {
        name,
        inputs,
        borrows,
        policy: policy.get().core,
        release,
    })
}

/// All nodes of a Driver, compiled once.
#[pyclass(frozen, module = "sdax_hamilton._core", name = "Graph")]
pub(crate) struct PyGraph {
    core: Graph,
}

#[pymethods]
impl PyGraph {
    #[new]
    fn py_new(nodes: &Bound<'_, PyAny>) -> PyResult<Self> {
        let mut defs = Vec::new();
        for (i, item) in nodes.try_iter()?.enumerate() {
            defs.push(node_def(&item?, i)?);
        }
        let core = Graph::new(defs).map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(PyGraph { core })
    }

    fn __len__(&self) -> usize {
        self.core.len()
    }

    fn __contains__(&self, name: &Bound<'_, PyAny>) -> PyResult<bool> {
        // A str that is not UTF-8 text (a lone surrogate) names no node.
        match name.cast::<PyString>().map(|s| s.to_str()) {
            Ok(Ok(text)) => Ok(self.core.contains(text)),
            _ => Ok(false),
        }
    }

    fn __repr__(&self) -> String {
        format!("<Graph of {} nodes>", self.core.len())
    }

    #[pyo3(signature = (final_vars, replaced=None))]
    fn select(
        &self,
        py: Python<'_>,
        final_vars: &Bound<'_, PyAny>,
        replaced: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyPlan> {
        let finals = selected_names(final_vars)?;
        let replaced = match replaced {
            Some(r) => names_of(r, "replaced")?,
            None => Vec::new(),
        };
        let plan = self.core.select(&finals, &replaced).map_err(|e| match e {
            GraphError::UnknownSelected(name) => {
                unknown_selected(PyString::new(py, &name).as_any(), name)
            }
            other => PyValueError::new_err(other.to_string()),
        })?;
        PyPlan::new(py, plan)
    }
}

/// The selected, active part of a graph, in a topological order.
#[pyclass(frozen, module = "sdax_hamilton._core", name = "Plan")]
pub(crate) struct PyPlan {
    pub(crate) core: Arc<Plan>,
    nodes: Py<PyTuple>,
    reached: Py<PyFrozenSet>,
    external: Py<PyTuple>,
}

impl PyPlan {
    fn new(py: Python<'_>, plan: Plan) -> PyResult<Self> {
        let nodes = PyTuple::new(py, plan.names())?.unbind();
        let reached = PyFrozenSet::new(py, plan.reached())?.unbind();
        let external = PyTuple::new(py, plan.external())?.unbind();
        Ok(PyPlan {
            core: Arc::new(plan),
            nodes,
            reached,
            external,
        })
    }
}

#[pymethods]
impl PyPlan {
    #[getter]
    fn nodes(&self, py: Python<'_>) -> Py<PyTuple> {
        self.nodes.clone_ref(py)
    }

    #[getter]
    fn reached(&self, py: Python<'_>) -> Py<PyFrozenSet> {
        self.reached.clone_ref(py)
    }

    #[getter]
    fn external(&self, py: Python<'_>) -> Py<PyTuple> {
        self.external.clone_ref(py)
    }

    fn index(&self, name: &Bound<'_, PyAny>) -> PyResult<u32> {
        let found = match name.cast::<PyString>().map(|s| s.to_str()) {
            Ok(Ok(text)) => self.core.index(text),
            _ => None,
        };
        found.ok_or_else(|| PyKeyError::new_err(name.clone().unbind()))
    }

    fn shutdown_order(&self) -> Vec<Vec<String>> {
        self.core.shutdown_order()
    }

    fn shutdown_edges(&self) -> PyResult<Vec<(String, String)>> {
        let names = self.core.names();
        let name = |i: u32| {
            names
                .get(i as usize)
                .cloned()
                .ok_or_else(|| PyRuntimeError::new_err(format!("Plan.shutdown_edges: no node {i}")))
        };
        let mut edges = self
            .core
            .release_edges()
            .into_iter()
            .map(|(d, o)| Ok((name(d)?, name(o)?)))
            .collect::<PyResult<Vec<_>>>()?;
        edges.sort_unstable();
        Ok(edges)
    }

    fn __len__(&self) -> usize {
        self.core.len()
    }

    fn __repr__(&self) -> String {
        format!("<Plan of {} active nodes>", self.core.len())
    }
}
