//! `Execution` and the values it holds, as Python sees them: read-only attributes with the
//! names of the CLI's `--json` fields, converted when read.

use crate::convert::json_to_py;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// The result of one run: what the program printed and returned, and how it ended.
///
/// Attributes have the names and meanings of the fields of `sandpy run --json`; a run
/// that failed is still an `Execution` (see `status` and `error`), never an exception.
#[pyclass(frozen, module = "sandpy", name = "Execution")]
pub struct PyExecution {
    pub inner: sandpy::Execution,
}

impl From<sandpy::Execution> for PyExecution {
    fn from(inner: sandpy::Execution) -> Self {
        PyExecution { inner }
    }
}

#[pymethods]
impl PyExecution {
    /// How the run ended: `"ok"`, `"error"` (a Python exception), or a limit or refusal
    /// (`"timeout"`, `"memory_limit"`, `"output_limit"`, `"policy_violation"`, ...).
    #[getter]
    fn status(&self) -> &'static str {
        self.inner.status.as_str()
    }

    /// True when the program ran to completion (`status == "ok"`).
    #[getter]
    fn ok(&self) -> bool {
        self.inner.is_ok()
    }

    /// What the program wrote to stdout.
    #[getter]
    fn stdout(&self) -> &str {
        &self.inner.stdout
    }

    /// What the program wrote to stderr (with the traceback of an uncaught exception).
    #[getter]
    fn stderr(&self) -> &str {
        &self.inner.stderr
    }

    /// The value of the final expression (or the called function's result) as JSON
    /// types, its `repr()` string when it is not JSON-able (see `return_value_is_repr`),
    /// or None.
    #[getter]
    fn return_value<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match &self.inner.return_value {
            Some(value) => json_to_py(py, value),
            None => Ok(py.None().into_bound(py)),
        }
    }

    /// True when `return_value` is the value's `repr()` rather than the value.
    #[getter]
    fn return_value_is_repr(&self) -> bool {
        self.inner.return_value_is_repr
    }

    /// Why the run did not end `ok` (None when it did).
    #[getter]
    fn error(&self) -> Option<PyErrorInfo> {
        self.inner.error.clone().map(|inner| PyErrorInfo { inner })
    }

    /// True when stdout/stderr were cut at the output cap.
    #[getter]
    fn output_truncated(&self) -> bool {
        self.inner.output_truncated
    }

    /// Wall time of the run, instantiation included, in milliseconds.
    #[getter]
    fn duration_ms(&self) -> f64 {
        self.inner.duration_ms
    }

    /// Largest size the guest's memory reached, in bytes.
    #[getter]
    fn memory_peak_bytes(&self) -> u64 {
        self.inner.memory_peak_bytes
    }

    /// Tool calls the program made.
    #[getter]
    fn tool_calls(&self) -> u64 {
        self.inner.tool_calls
    }

    /// Policy violations, when `status` is `"policy_violation"`.
    #[getter]
    fn violations(&self) -> Vec<PyViolation> {
        self.inner
            .violations
            .iter()
            .cloned()
            .map(|inner| PyViolation { inner })
            .collect()
    }

    /// Files the program left under `/output`, whatever the status.
    #[getter]
    fn files(&self) -> Vec<PyOutputFile> {
        self.inner
            .files
            .iter()
            .cloned()
            .map(|inner| PyOutputFile { inner })
            .collect()
    }

    /// HTTP requests the program made or tried (`sandpy.network`): dicts with `method`,
    /// `url` (no query), `status`, `bytes_out`, `bytes_in` and, when it failed, `error`.
    #[getter]
    fn requests<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let value = serde_json::to_value(&self.inner.requests)
            .map_err(|e| crate::sandbox_error(format!("cannot serialise the requests: {e}")))?;
        json_to_py(py, &value)
    }

    /// What a notebook would show, in order: dicts with `kind` (`"display"`: `display()`,
    /// `plt.show()`, a figure left open; `"result"`: the final value), `data` (mime type
    /// to text; `image/png` as base64) and, when some format was left out, `omitted`.
    #[getter]
    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let value = serde_json::to_value(&self.inner.outputs)
            .map_err(|e| crate::sandbox_error(format!("cannot serialise the outputs: {e}")))?;
        json_to_py(py, &value)
    }

    /// Rich outputs past the run's budget (100 outputs, and the `/output` quota's bytes),
    /// not kept.
    #[getter]
    fn outputs_dropped(&self) -> u64 {
        self.inner.outputs_dropped
    }

    /// The execution as the dict `sandpy run --json` prints (file contents in
    /// `content_base64`).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let value = serde_json::to_value(&self.inner)
            .map_err(|e| crate::sandbox_error(format!("cannot serialise the execution: {e}")))?;
        json_to_py(py, &value)
    }

    fn __repr__(&self) -> String {
        let e = &self.inner;
        let mut repr = format!(
            "Execution(status={:?}, duration_ms={:.2}",
            e.status.as_str(),
            e.duration_ms
        );
        if let Some(error) = &e.error {
            repr.push_str(&format!(", error={}: {:?}", error.kind, error.message));
        }
        repr.push(')');
        repr
    }
}

/// Why a run did not end `ok`: a Python exception in the sandbox, or the limit that
/// stopped it.
#[pyclass(frozen, module = "sandpy", name = "ErrorInfo")]
pub struct PyErrorInfo {
    inner: sandpy::ErrorInfo,
}

#[pymethods]
impl PyErrorInfo {
    /// The exception type (`"ValueError"`), or for a limit a name such as `"Timeout"`.
    #[getter(r#type)]
    fn kind(&self) -> &str {
        &self.inner.kind
    }

    /// The exception's message, or which limit was hit and its value.
    #[getter]
    fn message(&self) -> &str {
        &self.inner.message
    }

    /// The traceback as Python prints it (only the program's frames); None for limits.
    #[getter]
    fn traceback(&self) -> Option<&str> {
        self.inner.traceback.as_deref()
    }

    fn __repr__(&self) -> String {
        format!(
            "ErrorInfo(type={:?}, message={:?})",
            self.inner.kind, self.inner.message
        )
    }
}

/// One place where code breaks a policy.
#[pyclass(frozen, module = "sandpy", name = "Violation")]
pub struct PyViolation {
    pub inner: sandpy::Violation,
}

#[pymethods]
impl PyViolation {
    /// Line, from 1 (0 when refused while running at no known line).
    #[getter]
    fn line(&self) -> u32 {
        self.inner.line
    }

    /// Column, from 1.
    #[getter]
    fn column(&self) -> u32 {
        self.inner.column
    }

    /// The rule broken: `"import"`, `"builtin"`, `"attribute"` or `"syntax"`.
    #[getter]
    fn rule(&self) -> &str {
        &self.inner.rule
    }

    /// What is wrong.
    #[getter]
    fn message(&self) -> &str {
        &self.inner.message
    }

    fn __repr__(&self) -> String {
        format!(
            "Violation(line={}, column={}, rule={:?}, message={:?})",
            self.inner.line, self.inner.column, self.inner.rule, self.inner.message
        )
    }
}

/// A file the program left under `/output`.
#[pyclass(frozen, module = "sandpy", name = "OutputFile")]
pub struct PyOutputFile {
    inner: sandpy::files::OutputFile,
}

#[pymethods]
impl PyOutputFile {
    /// Path under `/output`.
    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }

    /// Size in bytes.
    #[getter]
    fn size(&self) -> u64 {
        self.inner.size
    }

    /// MIME type guessed from the name.
    #[getter]
    fn mime_type(&self) -> &str {
        &self.inner.mime_type
    }

    /// The bytes.
    #[getter]
    fn content<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.content)
    }

    /// The content as text when it is UTF-8, else None.
    #[getter]
    fn text(&self) -> Option<&str> {
        self.inner.text()
    }

    fn __repr__(&self) -> String {
        format!(
            "OutputFile(name={:?}, size={}, mime_type={:?})",
            self.inner.name, self.inner.size, self.inner.mime_type
        )
    }
}
