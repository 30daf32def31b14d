//! `Session`: one interpreter that keeps its state between runs (`sandpy::sessions::Session`), with
//! save (a JSON journal as bytes), restore and fork.

use crate::convert::RunArgs;
use crate::execution::PyExecution;
use crate::shared::{PySandbox, Shared};
use crate::{answer, on_loop, wait, wait_run, SessionError};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use std::sync::{Arc, Mutex};

/// One interpreter whose globals, imports and files stay between runs.
///
/// Made by `Sandbox.session()` or `Session.restore(sandbox, data)`; `save()` gives bytes to
/// restore it later (its runs are replayed), `fork()` a second session with the same state.
/// Use it as a context manager, or call `close()`, to free its instance. A run that hits a
/// limit poisons the session (status `"session_poisoned"` afterwards).
#[pyclass(frozen, module = "sandpy", name = "Session")]
pub struct PySession {
    shared: Arc<Shared>,
    session: Mutex<Option<Arc<sandpy::sessions::Session>>>,
}

impl PySession {
    pub(crate) fn new(shared: Arc<Shared>, session: sandpy::sessions::Session) -> PySession {
        PySession {
            shared,
            session: Mutex::new(Some(Arc::new(session))),
        }
    }

    fn open(&self) -> PyResult<Arc<sandpy::sessions::Session>> {
        self.session
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
            .ok_or_else(|| PyValueError::new_err("the session is closed"))
    }
}

#[pymethods]
impl PySession {
    /// Run `code` in the session's namespace (its last expression is `return_value`).
    /// `files` are added to the session's `/tmp`; the memory limit is the session's;
    /// `tools` are host tools as for `Sandbox.run` (a restore answers their calls from the
    /// journal).
    #[pyo3(
        signature = (code, *, timeout_ms=None, files=None, tools=None, allowed_tools=None, policy=None, on_output=None, approve=None, require_approval=None, _on_loop=false),
        text_signature = "(self, code, *, timeout_ms=None, files=None, tools=None, allowed_tools=None, policy=None, on_output=None, approve=None, require_approval=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn run<'py>(
        &self,
        py: Python<'py>,
        code: String,
        timeout_ms: Option<&Bound<'_, PyAny>>,
        files: Option<&Bound<'_, PyAny>>,
        tools: Option<&Bound<'_, PyAny>>,
        allowed_tools: Option<Vec<String>>,
        policy: Option<&Bound<'_, PyAny>>,
        on_output: Option<&Bound<'_, PyAny>>,
        approve: Option<&Bound<'_, PyAny>>,
        require_approval: Option<Vec<String>>,
        _on_loop: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let session = self.open()?;
        let args = RunArgs::parse(
            &self.shared.resolved.settings,
            timeout_ms,
            None,
            None,
            files,
            allowed_tools,
            policy,
        )?;
        let (options, stop) = self.shared.run_options(
            py,
            args,
            tools,
            on_output,
            approve,
            require_approval,
            _on_loop,
        )?;
        let run = async move { PyExecution::from(session.run(&code, &options).await) };
        answer(py, run, stop, _on_loop)
    }

    /// `run` as a coroutine on the running asyncio loop (runs of one session still go one
    /// at a time, in call order).
    #[pyo3(
        signature = (code, **kwargs),
        text_signature = "(self, code, *, timeout_ms=None, files=None, tools=None, allowed_tools=None, policy=None, on_output=None, approve=None, require_approval=None)"
    )]
    fn run_async<'py>(
        slf: &Bound<'py, Self>,
        code: String,
        kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let args = PyTuple::new(slf.py(), [code])?;
        on_loop(slf.as_any(), "run", args, kwargs)
    }

    /// The session's journal as bytes (JSON), for `Session.restore`. Raises
    /// `SessionError` when the journal passed its cap.
    fn save<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let session = self.open()?;
        let snapshot = wait(py, async move { session.snapshot().await })?
            .map_err(|e| SessionError::new_err(e.to_string()))?;
        let bytes = serde_json::to_vec(&snapshot)
            .map_err(|e| SessionError::new_err(format!("cannot serialise the session: {e}")))?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// A new session in `sandbox` rebuilt from `data` (from `save()`) by replaying its
    /// runs. Raises `ValueError` for data that is not a saved session and `SessionError`
    /// when the replay fails (another runtime, or a run that ends differently).
    ///
    /// Give the `tools` the saved runs used: their calls are answered from the journal,
    /// not made again, but the code must find the same tools. Each run is replayed under
    /// the limits it was given (its `timeout_ms`). Ctrl-C stops the replay and raises
    /// `KeyboardInterrupt`.
    #[staticmethod]
    #[pyo3(signature = (sandbox, data, *, tools=None))]
    fn restore(
        py: Python<'_>,
        sandbox: &PySandbox,
        data: &[u8],
        tools: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PySession> {
        let snapshot: sandpy::sessions::SessionSnapshot = serde_json::from_slice(data)
            .map_err(|e| PyValueError::new_err(format!("not a saved sandpy session: {e}")))?;
        let shared = sandbox.shared.clone();
        let (options, stop) = shared.options(py, RunArgs::default(), tools, None)?;
        let limits = shared.resolved.settings.sessions.clone();
        let sandbox = shared.sandbox.clone();
        let replay = async move {
            sandpy::sessions::Session::restore(&sandbox, &snapshot, &limits, &options).await
        };
        let session =
            wait_run(py, replay, &stop)?.map_err(|e| SessionError::new_err(e.to_string()))?;
        Ok(PySession::new(shared, session))
    }

    /// A second, independent session with this one's state (its runs are replayed, each
    /// under its own limits: give the `tools` they used, as for `restore`). Ctrl-C stops
    /// the replay and raises `KeyboardInterrupt`.
    #[pyo3(signature = (*, tools=None))]
    fn fork(&self, py: Python<'_>, tools: Option<&Bound<'_, PyAny>>) -> PyResult<PySession> {
        let session = self.open()?;
        let (options, stop) = self.shared.options(py, RunArgs::default(), tools, None)?;
        let forked = wait_run(py, async move { session.fork(&options).await }, &stop)?
            .map_err(|e| SessionError::new_err(e.to_string()))?;
        Ok(PySession::new(self.shared.clone(), forked))
    }

    /// Forget all state: the next run starts from a fresh interpreter.
    fn reset(&self, py: Python<'_>) -> PyResult<()> {
        let session = self.open()?;
        wait(py, async move { session.reset().await })
    }

    /// Free the session's instance; later calls raise `ValueError`. Closing twice is fine.
    fn close(&self) {
        self.session
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
    }

    /// True once `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.session
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .is_none()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close();
        false
    }
}
