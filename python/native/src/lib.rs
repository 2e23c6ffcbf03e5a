//! `bnconf._native`: the harness library bound for Python (pyo3, abi3). Suites generated in
//! memory (each case's `case.json` and its inputs as the bytes `bnconf export` writes), a
//! kernel's outputs judged from bytes (`bnconf::testing::in_memory`: the verdicts, ratios and
//! report of `bnconf check DIR`), and single cases drawn as the `default` suite draws them
//! (the hypothesis strategy); the normalization family likewise (`open_family_suite`,
//! `FamilyCase`, `family_classes`, `draw_family_case`: `bnconf::testing::in_memory_family`).
//! Arrays cross as `(name, npy type string, shape, bytes)`; the Python package
//! (`bnconf/_inproc.py`) turns them into numpy arrays.

use bnconf::error::ConfError;
use bnconf::suite::family::FamilySuiteCase;
use bnconf::suite::SuiteCase;
use bnconf::testing::in_memory::{self, Array, Given, InMemorySuite};
use bnconf::testing::in_memory_family::{self, InMemoryFamilySuite};
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::collections::BTreeMap;

/// An array for Python: name, npy type string, shape, bytes.
type PyArray<'py> = (String, String, Vec<usize>, Bound<'py, PyBytes>);

fn value_error(e: ConfError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

fn inputs<'py>(py: Python<'py>, c: &SuiteCase) -> Vec<PyArray<'py>> {
    in_memory::inputs_of(c)
        .into_iter()
        .map(|(n, a)| (n, a.descr, a.shape, PyBytes::new(py, &a.bytes)))
        .collect()
}

/// What the kernel gave: `kind` is "outputs" (with `outputs`), "unsupported" or "error"
/// (with `message`).
fn given(kind: &str, message: &str, outputs: Vec<PyArray<'_>>) -> PyResult<Given> {
    Ok(match kind {
        "unsupported" => Given::Unsupported(message.to_string()),
        "error" => Given::Error(message.to_string()),
        "outputs" => Given::Outputs(
            outputs
                .into_iter()
                .map(|(name, descr, shape, bytes)| {
                    let bytes = bytes.as_bytes().to_vec();
                    (
                        name,
                        Array {
                            descr,
                            shape,
                            bytes,
                        },
                    )
                })
                .collect::<BTreeMap<_, _>>(),
        ),
        other => {
            return Err(PyValueError::new_err(format!(
                "kind: {other:?} is not outputs, unsupported or error"
            )))
        }
    })
}

/// One case: its `case.json` (`json()`), its inputs (`inputs()`), and `judge(...)`.
#[pyclass(module = "bnconf._native", frozen)]
struct Case {
    case: SuiteCase,
}

#[pymethods]
impl Case {
    /// `case.json` as `bnconf export` writes it (a JSON string).
    fn json(&self) -> String {
        self.case.protocol_json().to_string()
    }

    /// The inputs: a list of `(name, npy type string, shape, bytes)`.
    fn inputs<'py>(&self, py: Python<'py>) -> Vec<PyArray<'py>> {
        inputs(py, &self.case)
    }

    /// Judge what a kernel gave for this case: the case's record of a `--report` document
    /// (a JSON string).
    #[pyo3(signature = (kind, message, outputs))]
    fn judge(&self, kind: &str, message: &str, outputs: Vec<PyArray<'_>>) -> PyResult<String> {
        let g = given(kind, message, outputs)?;
        let (_, v) = in_memory::judge_case(&self.case, &g).map_err(value_error)?;
        Ok(v.to_string())
    }
}

/// A suite selection in memory: `len()`, `case(i)`, `judge(i, ...)`, `report(...)`.
#[pyclass(module = "bnconf._native")]
struct Suite {
    inner: InMemorySuite,
}

#[pymethods]
impl Suite {
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Case `i` (suite order).
    fn case(&self, i: usize) -> PyResult<Case> {
        if i >= self.inner.len() {
            return Err(PyIndexError::new_err(format!(
                "case {i} of a suite of {}",
                self.inner.len()
            )));
        }
        Ok(Case {
            case: self.inner.case(i).clone(),
        })
    }

    /// Judge what the kernel gave for case `i`; returns its verdict ("pass", "fail",
    /// "unsupported", "malformed").
    #[pyo3(signature = (i, kind, message, outputs))]
    fn judge(
        &mut self,
        i: usize,
        kind: &str,
        message: &str,
        outputs: Vec<PyArray<'_>>,
    ) -> PyResult<String> {
        if i >= self.inner.len() {
            return Err(PyIndexError::new_err(format!(
                "case {i} of a suite of {}",
                self.inner.len()
            )));
        }
        let g = given(kind, message, outputs)?;
        Ok(self.inner.judge(i, &g).verdict.name().to_lowercase())
    }

    /// `(report JSON, printed report, ok)` as `bnconf check DIR --report FILE.json` gives them.
    #[pyo3(signature = (require_all = false, max_details = 20))]
    fn report(&self, require_all: bool, max_details: usize) -> (String, String, bool) {
        let r = self.inner.report(require_all, max_details);
        (r.json.to_string(), r.text, r.ok)
    }
}

/// The cases a selection selects, generated and prepared (`seed`: the suites' default when
/// None). ValueError names the field of a bad name.
#[pyfunction]
#[pyo3(signature = (suite, dtype, seed = None, ops = Vec::new(), layouts = Vec::new()))]
fn open_suite(
    suite: &str,
    dtype: &str,
    seed: Option<u64>,
    ops: Vec<String>,
    layouts: Vec<String>,
) -> PyResult<Suite> {
    let sel = in_memory::selection(suite, dtype, seed, &ops, &layouts).map_err(value_error)?;
    let inner = InMemorySuite::new(&sel).map_err(value_error)?;
    Ok(Suite { inner })
}

/// The data classes of the default suite's cases of `op` and `layout` in `dtype`, simplest first.
#[pyfunction]
fn classes(op: &str, layout: &str, dtype: &str) -> PyResult<Vec<String>> {
    in_memory::classes(op, layout, dtype).map_err(value_error)
}

/// One case as the default suite draws it (`in_memory::draw_case`), or None; `names` are
/// the op, layout, dtype and class.
#[pyfunction]
fn draw_case(
    names: (String, String, String, String),
    seed: u64,
    channels: usize,
) -> PyResult<Option<Case>> {
    let (op, layout, dtype, class) = names;
    let c =
        in_memory::draw_case(&op, &layout, &dtype, &class, seed, channels).map_err(value_error)?;
    Ok(c.map(|case| Case { case }))
}

fn family_inputs<'py>(py: Python<'py>, c: &FamilySuiteCase) -> Vec<PyArray<'py>> {
    in_memory_family::inputs_of(c)
        .into_iter()
        .map(|(n, a)| (n, a.descr, a.shape, PyBytes::new(py, &a.bytes)))
        .collect()
}

/// One case of the normalization family: its `case.json` (`json()`), its inputs (`inputs()`),
/// and `judge(...)`.
#[pyclass(module = "bnconf._native", frozen)]
struct FamilyCase {
    case: FamilySuiteCase,
}

#[pymethods]
impl FamilyCase {
    /// `case.json` as `bnconf export --family` writes it (a JSON string).
    fn json(&self) -> String {
        in_memory_family::case_json(&self.case).to_string()
    }

    /// The inputs: a list of `(name, npy type string, shape, bytes)`.
    fn inputs<'py>(&self, py: Python<'py>) -> Vec<PyArray<'py>> {
        family_inputs(py, &self.case)
    }

    /// Judge what a kernel gave for this case: the case's record of a `--report` document
    /// (a JSON string, with `not_given`).
    #[pyo3(signature = (kind, message, outputs))]
    fn judge(&self, kind: &str, message: &str, outputs: Vec<PyArray<'_>>) -> PyResult<String> {
        let g = given(kind, message, outputs)?;
        let (_, v) = in_memory_family::judge_case(&self.case, &g).map_err(value_error)?;
        Ok(v.to_string())
    }
}

/// A family selection in memory: `len()`, `case(i)`, `judge(i, ...)`, `report(...)`.
#[pyclass(module = "bnconf._native")]
struct FamilySuite {
    inner: InMemoryFamilySuite,
}

#[pymethods]
impl FamilySuite {
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Case `i` (suite order).
    fn case(&self, i: usize) -> PyResult<FamilyCase> {
        if i >= self.inner.len() {
            return Err(PyIndexError::new_err(format!(
                "case {i} of a suite of {}",
                self.inner.len()
            )));
        }
        Ok(FamilyCase {
            case: self.inner.case(i).clone(),
        })
    }

    /// Judge what the kernel gave for case `i`; returns its verdict ("pass", "fail",
    /// "unsupported", "malformed").
    #[pyo3(signature = (i, kind, message, outputs))]
    fn judge(
        &mut self,
        i: usize,
        kind: &str,
        message: &str,
        outputs: Vec<PyArray<'_>>,
    ) -> PyResult<String> {
        if i >= self.inner.len() {
            return Err(PyIndexError::new_err(format!(
                "case {i} of a suite of {}",
                self.inner.len()
            )));
        }
        let g = given(kind, message, outputs)?;
        let r = self.inner.judge(i, &g).map_err(value_error)?;
        Ok(r.verdict.name().to_lowercase())
    }

    /// `(report JSON, printed report, ok)` as `bnconf check DIR --report FILE.json` gives them
    /// for a family export.
    #[pyo3(signature = (require_all = false, max_details = 20))]
    fn report(&self, require_all: bool, max_details: usize) -> PyResult<(String, String, bool)> {
        let r = self
            .inner
            .report(require_all, max_details)
            .map_err(value_error)?;
        Ok((r.json.to_string(), r.text, r.ok))
    }
}

/// The cases a family selection selects (`family`: layer_norm, rms_norm, group_norm or all;
/// `seed`: the suites' default when None). ValueError names the flag of a bad name.
#[pyfunction]
#[pyo3(signature = (family, suite, dtype, seed = None, ops = Vec::new(), layouts = Vec::new()))]
fn open_family_suite(
    family: &str,
    suite: &str,
    dtype: &str,
    seed: Option<u64>,
    ops: Vec<String>,
    layouts: Vec<String>,
) -> PyResult<FamilySuite> {
    let sel = in_memory_family::family_selection(family, suite, dtype, seed, &ops, &layouts)
        .map_err(value_error)?;
    let inner = InMemoryFamilySuite::new(sel).map_err(value_error)?;
    Ok(FamilySuite { inner })
}

/// The default family suite's data classes drawn for `op` in `dtype`: `(index, name,
/// layout)`, simplest first.
#[pyfunction]
fn family_classes(op: &str, dtype: &str) -> PyResult<Vec<(usize, String, String)>> {
    in_memory_family::family_classes(op, dtype).map_err(value_error)
}

/// One family case drawn as the default family suite draws class `class` (an index of
/// `family_classes`) of `op` with `seed`, or None.
#[pyfunction]
fn draw_family_case(
    op: &str,
    dtype: &str,
    class: usize,
    seed: u64,
) -> PyResult<Option<FamilyCase>> {
    let c = in_memory_family::draw_family_case(op, dtype, class, seed).map_err(value_error)?;
    Ok(c.map(|case| FamilyCase { case }))
}

/// The harness library's version (the workspace's).
#[pyfunction]
fn version() -> String {
    bnconf::formats::golden::provenance()["version"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Case>()?;
    m.add_class::<Suite>()?;
    m.add_function(wrap_pyfunction!(open_suite, m)?)?;
    m.add_function(wrap_pyfunction!(classes, m)?)?;
    m.add_function(wrap_pyfunction!(draw_case, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    m.add_class::<FamilyCase>()?;
    m.add_class::<FamilySuite>()?;
    m.add_function(wrap_pyfunction!(open_family_suite, m)?)?;
    m.add_function(wrap_pyfunction!(family_classes, m)?)?;
    m.add_function(wrap_pyfunction!(draw_family_case, m)?)?;
    Ok(())
}
