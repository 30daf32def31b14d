//! Host tools: Python callables the sandboxed code calls like MCP tools, as the server
//! `host` (`tools.host.<name>(...)`, `call_mcp_tool("mcp__host__<name>", {...})`).
//!
//! Arguments and results cross as JSON (the arguments object becomes keyword arguments,
//! checked first against the function's JSON schema when it is given as `(fn, schema)`);
//! an exception in the function reaches the guest as `ToolError` with its type and
//! message. A sync function runs on the thread that drives the run, with the GIL (no
//! hand-off to another thread: that took two cross-thread wake-ups, most of a round trip),
//! so the sync calls of one guest batch run one after another; a coroutine function runs
//! on the caller's event loop for `run_async`, and on its own `asyncio.run` on a blocking
//! thread for a synchronous run, so the calls of one batch (`asyncio.gather` in the guest)
//! run concurrently.

use crate::convert::{json_to_py, py_to_json, type_name};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use pyo3_async_runtimes::TaskLocals;
use sandpy::tools::{ToolError, ToolFuture, ToolHost, ToolInfo};
use sandpy_mcp::ArgumentSchema;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

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

/// The host functions of one run, and where the rest of its tool calls go (the config's
/// upstream servers).
pub(crate) struct HostTools {
    tools: BTreeMap<String, HostTool>,
    upstream: Option<Arc<dyn ToolHost>>,
    /// The caller's event loop, for coroutine functions (`run_async`); None runs each
    /// coroutine with `asyncio.run` on a blocking thread.
    locals: Option<TaskLocals>,
}

impl HostTools {
    /// Check `tools` (a dict of name -> callable); None when it is None or empty.
    pub(crate) fn parse(
        tools: Option<&Bound<'_, PyAny>>,
        upstream: Option<Arc<dyn ToolHost>>,
        locals: Option<TaskLocals>,
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
            locals,
        }))
    }
}

/// Call `function(**arguments)`; the result as JSON, or the exception as a tool error.
fn call_sync(function: &Py<PyAny>, arguments: &Value) -> Result<Value, ToolError> {
    Python::attach(|py| {
        let kwargs = kwargs(py, arguments)?;
        let result = function
            .bind(py)
            .call((), Some(&kwargs))
            .map_err(|e| raised(py, e))?;
        result_json(&result)
    })
}

fn kwargs<'py>(py: Python<'py>, arguments: &Value) -> Result<Bound<'py, PyDict>, ToolError> {
    let value = json_to_py(py, arguments).map_err(|e| raised(py, e))?;
    value
        .cast_into::<PyDict>()
        .map_err(|_| ToolError::from("the arguments must be a JSON object"))
}

fn result_json(result: &Bound<'_, PyAny>) -> Result<Value, ToolError> {
    py_to_json(result, "the result").map_err(|e| raised(result.py(), e))
}

/// A Python exception as the guest's `ToolError` message: `Type: message`.
fn raised(py: Python<'_>, error: PyErr) -> ToolError {
    let kind = error
        .get_type(py)
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "Exception".into());
    ToolError::from(format!("{kind}: {}", error.value(py)))
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
        let function = tool.function.clone();
        match (tool.is_async, &self.locals) {
            // `block_in_place`: on a worker thread (`run_async`, `call_batch`) the runtime
            // moves its other tasks away first; under a synchronous run's `block_on` it
            // just calls.
            (false, _) => {
                Box::pin(
                    async move { tokio::task::block_in_place(|| call_sync(&function, &arguments)) },
                )
            }
            (true, Some(locals)) => {
                let locals = locals.clone();
                Box::pin(async move {
                    let future = Python::attach(|py| {
                        let kwargs = kwargs(py, &arguments)?;
                        let coroutine = function
                            .bind(py)
                            .call((), Some(&kwargs))
                            .map_err(|e| raised(py, e))?;
                        pyo3_async_runtimes::into_future_with_locals(&locals, coroutine)
                            .map_err(|e| raised(py, e))
                    })?;
                    let result = future.await;
                    Python::attach(|py| match result {
                        Ok(value) => result_json(value.bind(py)),
                        Err(e) => Err(raised(py, e)),
                    })
                })
            }
            (true, None) => Box::pin(async move {
                tokio::task::spawn_blocking(move || {
                    Python::attach(|py| {
                        let kwargs = kwargs(py, &arguments)?;
                        let coroutine = function
                            .bind(py)
                            .call((), Some(&kwargs))
                            .map_err(|e| raised(py, e))?;
                        let result = py
                            .import("asyncio")
                            .and_then(|asyncio| asyncio.call_method1("run", (coroutine,)))
                            .map_err(|e| raised(py, e))?;
                        result_json(&result)
                    })
                })
                .await
                .unwrap_or_else(|e| Err(ToolError::from(format!("the host tool failed: {e}"))))
            }),
        }
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
