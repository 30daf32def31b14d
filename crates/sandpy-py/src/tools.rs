//! Host tools: Python callables the sandboxed code calls like MCP tools, as the server
//! `host` (`tools.host.<name>(...)`, `call_mcp_tool("mcp__host__<name>", {...})`).
//!
//! Arguments and results cross as JSON (the arguments object becomes keyword arguments,
//! checked first against the function's JSON schema when it is given as `(fn, schema)`).
//!
//! Where they run (`sandpy/_host.py`): never on the thread that drives the run, so that
//! the run's deadline, `tool_timeout_ms` and cancellation hold whatever a tool does. A
//! sync function runs on the Sandbox's bounded pool of threads (`tool_threads`), so the
//! sync calls of one guest batch run concurrently up to that bound; a coroutine function
//! runs on the caller's event loop for `run_async`, else on the Sandbox's own loop (one
//! thread). Each call is a `concurrent.futures.Future` the run awaits ([`Pending`]); when
//! the run ends without its answer (deadline, cancel), the future is cancelled: a call
//! still waiting leaves the queue with its arguments at once and never starts, a coroutine
//! gets `CancelledError`, a sync function already running finishes on its thread and its
//! answer is dropped.
//!
//! A call is handed over as an [`Invocation`] (`invocation.rs`): the guest's JSON, made
//! into Python arguments only when a thread (or the loop) starts the call, so that what
//! waits is the JSON alone, counted ([`Arguments::weight`]) against the bounds of what may
//! wait, per run and per Sandbox (`_host.py`): a call past them fails at once, naming the
//! bound.
//!
//! What the guest learns of a failure ([`raised`]): a `sandpy.ToolError`'s message; of any
//! other exception only its type and the tool's name, unless the Sandbox passes messages
//! (`tool_error_messages=True`). A `KeyboardInterrupt` or `SystemExit` is the host
//! program's, not the guest's: it stops the run ([`RunStop`]) and is raised by the call
//! that ran it.

use crate::convert::{py_to_json, type_name};
use crate::invocation::{Arguments, Invocation};
use pyo3::exceptions::{PyKeyboardInterrupt, PySystemExit, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use sandpy::tools::{ToolError, ToolFuture, ToolHost, ToolInfo};
use sandpy::CancellationToken;
use sandpy_mcp::ArgumentSchema;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Host tools are the server `host`: `mcp__host__<name>`.
const PREFIX: &str = "mcp__host__";

/// One host function.
struct HostTool {
    /// Shared, so a call takes it without the GIL.
    function: Arc<Py<PyAny>>,
    is_async: bool,
    info: ToolInfo,
    /// Checks the arguments before the function is called, when a schema was given.
    schema: Option<ArgumentSchema>,
}

/// What every run of one Sandbox's host tools shares: where they run (a
/// `sandpy._host.HostCalls`: the thread pool, the event loop and the bounds of what waits
/// for them) and what failures tell the guest.
pub(crate) struct HostSettings {
    calls: Py<PyAny>,
    /// Pass any exception's message to the guest, not only a `sandpy.ToolError`'s.
    pub error_messages: bool,
}

impl HostSettings {
    /// `threads` threads at most for sync host tools (made as calls need them); `queue`
    /// calls at most waiting to start per run (four times that per Sandbox).
    pub(crate) fn new(
        py: Python<'_>,
        threads: usize,
        queue: usize,
        error_messages: bool,
    ) -> PyResult<Self> {
        let calls = py
            .import("sandpy._host")?
            .getattr("HostCalls")?
            .call1((threads, queue))?;
        Ok(HostSettings {
            calls: calls.unbind(),
            error_messages,
        })
    }

    /// What one run stops by, with its own share of the calls (a `sandpy._host.RunCalls`).
    pub(crate) fn run_stop(&self, py: Python<'_>) -> PyResult<RunStop> {
        Ok(RunStop {
            token: CancellationToken::new(),
            raised: Mutex::new(None),
            calls: Arc::new(self.calls.bind(py).call_method0("run")?.unbind()),
        })
    }
}

/// How the host program stops one run: its cancellation (given to the library as
/// `RunOptions::cancel`) and the `KeyboardInterrupt` or `SystemExit` a host tool raised,
/// which the call that started the run raises instead of returning; and where the run's
/// host calls go (its `sandpy._host.RunCalls`, which counts what of them waits), shared by
/// its tools and its approvals.
pub(crate) struct RunStop {
    pub token: CancellationToken,
    raised: Mutex<Option<PyErr>>,
    pub calls: Arc<Py<PyAny>>,
}

impl RunStop {
    /// Stop the run for `error` (the first one is kept).
    fn interrupt(&self, error: PyErr) {
        self.raised
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get_or_insert(error);
        self.token.cancel();
    }

    /// `value`, or the interrupt a host tool raised during the run.
    pub(crate) fn outcome<T>(&self, value: T) -> PyResult<T> {
        let raised = self
            .raised
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        match raised {
            Some(error) => Err(error),
            None => Ok(value),
        }
    }
}

/// The host functions of one run, and where the rest of its tool calls go (the config's
/// upstream servers).
pub(crate) struct HostTools {
    tools: BTreeMap<String, HostTool>,
    upstream: Option<Arc<dyn ToolHost>>,
    /// The run's `sandpy._host.RunCalls`.
    calls: Arc<Py<PyAny>>,
    /// The caller's event loop (`run_async`), for coroutine functions; None runs them on
    /// the Sandbox's own loop.
    caller_loop: Option<Arc<Py<PyAny>>>,
    error_messages: bool,
    stop: Arc<RunStop>,
}

impl HostTools {
    /// Check `tools` (a dict of name -> callable); None when it is None or empty.
    /// `caller_loop` is the caller's event loop (`run_async`); `stop` is the run's.
    pub(crate) fn parse(
        tools: Option<&Bound<'_, PyAny>>,
        upstream: Option<Arc<dyn ToolHost>>,
        settings: &HostSettings,
        caller_loop: Option<Py<PyAny>>,
        stop: Arc<RunStop>,
    ) -> PyResult<Option<HostTools>> {
        let Some(tools) = tools.filter(|t| !t.is_none()) else {
            return Ok(None);
        };
        let dict = tools.cast::<PyDict>().map_err(|_| {
            PyTypeError::new_err(format!(
                "tools must be a dict of name -> function, not {}",
                type_name(tools)
            ))
        })?;
        if dict.is_empty() {
            return Ok(None);
        }
        let inspect = tools.py().import("inspect")?;
        let mut parsed = BTreeMap::new();
        for (name, function) in dict.iter() {
            let name: String = name
                .cast::<PyString>()
                .map_err(|_| {
                    PyTypeError::new_err(format!(
                        "tools: names must be str, found {}",
                        type_name(&name)
                    ))
                })?
                .to_str()?
                .to_owned();
            if !(name.is_ascii()
                && !name.starts_with('_')
                && PyString::new(tools.py(), &name)
                    .call_method0("isidentifier")?
                    .is_truthy()?)
            {
                return Err(PyValueError::new_err(format!(
                    "tools: {name:?} is not a usable tool name (an ASCII identifier not starting with `_`, as in tools.host.{name})"
                )));
            }
            let (function, schema) = match function.cast::<PyTuple>() {
                Ok(pair) if pair.len() == 2 => {
                    let schema = pair.get_item(1)?;
                    if !schema.is_instance_of::<PyDict>() {
                        return Err(PyTypeError::new_err(format!(
                            "tools[{name:?}]: the schema of (function, schema) must be a dict, not {}",
                            type_name(&schema)
                        )));
                    }
                    let json = py_to_json(&schema, &format!("tools[{name:?}] schema"))?;
                    let checker = ArgumentSchema::strict(&json).map_err(|why| {
                        PyValueError::new_err(format!("tools[{name:?}]: the schema: {why}"))
                    })?;
                    (pair.get_item(0)?, Some((json, checker)))
                }
                _ => (function, None),
            };
            if !function.is_callable() {
                return Err(PyTypeError::new_err(format!(
                    "tools[{name:?}] must be callable, not {}",
                    type_name(&function)
                )));
            }
            let is_async = inspect
                .call_method1("iscoroutinefunction", (&function,))?
                .is_truthy()?;
            let description = inspect
                .call_method1("getdoc", (&function,))?
                .extract::<Option<String>>()
                .ok()
                .flatten()
                .unwrap_or_default();
            let (input_schema, schema) = match schema {
                Some((json, checker)) => (json, Some(checker)),
                None => (serde_json::json!({"type": "object"}), None),
            };
            let info = ToolInfo {
                name: format!("{PREFIX}{name}"),
                description,
                input_schema,
            };
            parsed.insert(
                info.name.clone(),
                HostTool {
                    function: Arc::new(function.unbind()),
                    is_async,
                    info,
                    schema,
                },
            );
        }
        Ok(Some(HostTools {
            tools: parsed,
            upstream,
            calls: stop.calls.clone(),
            caller_loop: caller_loop.map(Arc::new),
            error_messages: settings.error_messages,
            stop,
        }))
    }

    /// The `mcp__host__<name>` tools, for the check that a policy hides none of them.
    pub(crate) fn host_names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// Start one call of `tool` (a `concurrent.futures.Future` told to answer `sender`).
    fn start(
        &self,
        py: Python<'_>,
        tool: &HostTool,
        arguments: Value,
        sender: tokio::sync::oneshot::Sender<Result<Value, ToolError>>,
    ) -> Result<Pending, ToolError> {
        let call = HostCall {
            calls: &self.calls,
            caller_loop: self.caller_loop.as_deref(),
            function: tool.function.clone(),
            is_async: tool.is_async,
            completion: Completion {
                sender: Mutex::new(Some(sender)),
                tool: tool.info.name.clone(),
                error_messages: self.error_messages,
                stop: self.stop.clone(),
                answer: Answer::Json,
            },
        };
        call.start(py, Arguments::keywords(arguments))
    }
}

/// An exception of `tool` as the guest's `ToolError` message: a `sandpy.ToolError`'s
/// message; any other exception's type, and its message when `error_messages`. A
/// `KeyboardInterrupt` or `SystemExit` stops the run instead.
fn told(
    py: Python<'_>,
    error: PyErr,
    tool: &str,
    error_messages: bool,
    stop: &RunStop,
) -> ToolError {
    if error.is_instance_of::<PyKeyboardInterrupt>(py) || error.is_instance_of::<PySystemExit>(py) {
        let kind = kind(py, &error);
        stop.interrupt(error);
        return ToolError::from(format!("{tool} was stopped: the host program got {kind}"));
    }
    if error.is_instance_of::<crate::ToolError>(py) {
        return ToolError::from(error.value(py).to_string());
    }
    let kind = kind(py, &error);
    if error_messages {
        ToolError::from(format!("{kind}: {}", error.value(py)))
    } else {
        ToolError::from(format!("host tool {tool} raised {kind}"))
    }
}

/// The name of an exception's type.
fn kind(py: Python<'_>, error: &PyErr) -> String {
    error
        .get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".into())
}

/// One call of a host callable (a tool or an `approve` hook), started by
/// [`HostCall::start`]: a sync function on the Sandbox's pool, a coroutine function's
/// coroutine on the caller's loop or the Sandbox's.
pub(crate) struct HostCall<'a> {
    /// The run's `sandpy._host.RunCalls`.
    pub calls: &'a Py<PyAny>,
    pub caller_loop: Option<&'a Py<PyAny>>,
    pub function: Arc<Py<PyAny>>,
    pub is_async: bool,
    /// Told of the answer.
    pub completion: Completion,
}

impl HostCall<'_> {
    /// Hand the call over with its `arguments` (made into Python ones when it starts); the
    /// answer goes to the completion.
    pub(crate) fn start(self, py: Python<'_>, arguments: Arguments) -> Result<Pending, ToolError> {
        let calls = self.calls.bind(py);
        let weight = arguments.weight();
        let name = self.completion.tool.clone();
        let invocation = Invocation::new(self.function, arguments);
        let invocation = Py::new(py, invocation).map_err(|e| failed(py, e))?;
        let future = if self.is_async {
            let caller_loop = self.caller_loop.map(|l| l.bind(py));
            calls.call_method1("schedule", (name, invocation, weight, caller_loop))
        } else {
            calls.call_method1("call", (name, invocation, weight))
        }
        .map_err(|e| failed(py, e))?;
        let completion = Py::new(py, self.completion).map_err(|e| failed(py, e))?;
        future
            .call_method1("add_done_callback", (completion,))
            .map_err(|e| failed(py, e))?;
        Ok(Pending {
            future: Some(future.unbind()),
        })
    }
}

/// What a host call's answer becomes.
#[derive(Clone, Copy)]
pub(crate) enum Answer {
    /// A tool's result, as JSON.
    Json,
    /// An `approve` hook's decision: `true` or `false` (its truth).
    Truthy,
}

/// sandpy's own failure around a call (converting values, handing the call over), with
/// its message: it tells of the values, never of the host.
fn failed(py: Python<'_>, error: PyErr) -> ToolError {
    ToolError::from(format!("{}: {}", kind(py, &error), error.value(py)))
}

/// One call's `concurrent.futures.Future`, cancelled if the run stops waiting for it
/// (dropped before [`Pending::answered`]).
pub(crate) struct Pending {
    future: Option<Py<PyAny>>,
}

impl Pending {
    /// The call answered: nothing to cancel.
    pub(crate) fn answered(mut self) {
        self.future.take();
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(future) = self.future.take() {
            Python::attach(|py| {
                // A call still queued never starts; a coroutine gets `CancelledError`.
                let _ = future.bind(py).call_method0("cancel");
            });
        }
    }
}

/// The done-callback of one call's future: its answer, as JSON or the guest's error.
#[pyclass(frozen, module = "sandpy._sandpy")]
pub(crate) struct Completion {
    pub sender: Mutex<Option<tokio::sync::oneshot::Sender<Result<Value, ToolError>>>>,
    /// The tool's name, for messages.
    pub tool: String,
    /// Pass any exception's message (see [`told`]).
    pub error_messages: bool,
    pub stop: Arc<RunStop>,
    pub answer: Answer,
}

#[pymethods]
impl Completion {
    fn __call__(&self, future: &Bound<'_, PyAny>) {
        let sender = self
            .sender
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        // Nobody waits when the run ended first: the answer is dropped, not converted.
        if let Some(sender) = sender.filter(|s| !s.is_closed()) {
            let _ = sender.send(self.answer(future));
        }
    }
}

impl Completion {
    fn answer(&self, future: &Bound<'_, PyAny>) -> Result<Value, ToolError> {
        let py = future.py();
        let cancelled = future
            .call_method0("cancelled")
            .and_then(|c| c.is_truthy())
            .map_err(|e| failed(py, e))?;
        if cancelled {
            return Err(ToolError::from(format!(
                "the call of {} was cancelled",
                self.tool
            )));
        }
        let exception = future
            .call_method0("exception")
            .map_err(|e| failed(py, e))?;
        if !exception.is_none() {
            return Err(self.told(py, PyErr::from_value(exception)));
        }
        let result = future.call_method0("result").map_err(|e| failed(py, e))?;
        match self.answer {
            Answer::Json => result_json(&result),
            Answer::Truthy => Ok(Value::Bool(result.is_truthy().map_err(|e| failed(py, e))?)),
        }
    }

    /// What the guest gets for an exception the function raised (see [`told`]).
    fn told(&self, py: Python<'_>, error: PyErr) -> ToolError {
        told(py, error, &self.tool, self.error_messages, &self.stop)
    }
}

fn result_json(result: &Bound<'_, PyAny>) -> Result<Value, ToolError> {
    py_to_json(result, "the result").map_err(|e| failed(result.py(), e))
}

impl ToolHost for HostTools {
    fn list_tools(&self) -> Vec<ToolInfo> {
        let mut all: Vec<ToolInfo> = self.tools.values().map(|t| t.info.clone()).collect();
        if let Some(upstream) = &self.upstream {
            all.extend(upstream.list_tools());
        }
        all
    }

    fn tool(&self, name: &str) -> Option<ToolInfo> {
        match self.tools.get(name) {
            Some(tool) => Some(tool.info.clone()),
            None => self.upstream.as_ref().and_then(|u| u.tool(name)),
        }
    }

    fn has_tool(&self, name: &str) -> bool {
        self.tools.contains_key(name) || self.upstream.as_ref().is_some_and(|u| u.has_tool(name))
    }

    fn tool_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.tools.keys().cloned().collect();
        if let Some(upstream) = &self.upstream {
            names.extend(upstream.tool_names());
        }
        names
    }

    fn call_tool(&self, name: &str, arguments: Value) -> ToolFuture {
        let Some(tool) = self.tools.get(name) else {
            return match &self.upstream {
                Some(upstream) => upstream.call_tool(name, arguments),
                None => {
                    let message = format!("unknown tool {name:?}");
                    Box::pin(async move { Err(ToolError::from(message)) })
                }
            };
        };
        if let Some(schema) = &tool.schema {
            if let Err(why) = schema.check(name, &arguments) {
                return Box::pin(async move { Err(ToolError::from(why)) });
            }
        }
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let pending = Python::attach(|py| self.start(py, tool, arguments, sender));
        let name = name.to_string();
        Box::pin(async move {
            // Dropped here if the run stops waiting: the call is cancelled.
            let pending = pending?;
            let answer = receiver
                .await
                .unwrap_or_else(|_| Err(format!("{name} ended without an answer").into()));
            pending.answered();
            answer
        })
    }

    fn explain_missing(&self, name: &str) -> String {
        match &self.upstream {
            Some(upstream) if !name.starts_with(PREFIX) => upstream.explain_missing(name),
            _ => format!(
                "unknown tool {name:?}; the host tools are {}",
                self.tools
                    .keys()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    fn refused(&self, name: &str, reason: &str) {
        if let Some(upstream) = &self.upstream {
            upstream.refused(name, reason);
        }
    }

    fn decided(&self, name: &str, arguments: &Value, decision: &sandpy::tools::Decision) {
        if let Some(upstream) = &self.upstream {
            upstream.decided(name, arguments, decision);
        }
    }
}
