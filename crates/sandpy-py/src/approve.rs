//! `approve=`: a Python callable `(tool, arguments) -> bool` (or a coroutine function)
//! that decides on each tool call needing approval (the config's `sandpy.approve`, a
//! policy's `approve`, the run's `require_approval`). It runs where host tools run (see
//! `tools.rs`): a sync one on the Sandbox's thread pool, a coroutine function on the
//! caller's event loop for `run_async`, else on the Sandbox's loop; the run's deadline
//! bounds the wait, and a decision the run stops waiting for is cancelled. A falsy answer
//! or an exception refuses the call (the code gets a `ToolError` naming the exception); a
//! `KeyboardInterrupt` or `SystemExit` stops the run and is the host program's.

use crate::convert::type_name;
use crate::invocation::Arguments;
use crate::tools::{Answer, Completion, HostCall, RunStop};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use sandpy::tools::{ApprovalFuture, ApprovalRequest, Approver, Decision};
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// The approver for `approve` (None when it is None): run as the run's host tools run
/// (through `stop`'s calls), on
/// `caller_loop` (`run_async`) for a coroutine function; an interrupt stops `stop`'s run.
fn approver(
    approve: Option<&Bound<'_, PyAny>>,
    caller_loop: Option<Py<PyAny>>,
    stop: &Arc<RunStop>,
) -> PyResult<Option<Arc<dyn Approver>>> {
    let Some(function) = approve.filter(|a| !a.is_none()) else {
        return Ok(None);
    };
    if !function.is_callable() {
        return Err(PyTypeError::new_err(format!(
            "approve must be a callable (tool, arguments) -> bool, not {}",
            type_name(function)
        )));
    }
    let is_async = function
        .py()
        .import("inspect")?
        .call_method1("iscoroutinefunction", (function,))?
        .is_truthy()?;
    let function = Arc::new(function.clone().unbind());
    let calls = stop.calls.clone();
    let caller_loop = caller_loop.map(Arc::new);
    let stop = stop.clone();
    Ok(Some(Arc::new(
        move |request: ApprovalRequest| -> ApprovalFuture {
            let tool = request.tool.clone();
            let (sender, receiver) = tokio::sync::oneshot::channel();
            let pending = Python::attach(|py| {
                let tool = Value::String(request.tool.clone());
                let arguments = Arguments::positional(&[&tool, &request.arguments]);
                let call = HostCall {
                    calls: &calls,
                    caller_loop: caller_loop.as_deref(),
                    function: function.clone(),
                    is_async,
                    completion: Completion {
                        sender: Mutex::new(Some(sender)),
                        tool: "the approve function".into(),
                        // The hook is the host's own: its refusals say why.
                        error_messages: true,
                        stop: stop.clone(),
                        answer: Answer::Truthy,
                    },
                };
                call.start(py, arguments)
            });
            Box::pin(async move {
                let answer = match pending {
                    Ok(pending) => {
                        let answer = receiver
                            .await
                            .unwrap_or_else(|_| Err("it ended without an answer".into()));
                        pending.answered();
                        answer
                    }
                    Err(error) => Err(error),
                };
                match answer {
                    Ok(Value::Bool(true)) => Decision::approve("callback"),
                    Ok(_) => Decision::decline("callback", None),
                    Err(why) => Decision::decline(
                        "callback",
                        Some(format!(
                            "the approve function raised {why}, so the call to {tool} was refused"
                        )),
                    ),
                }
            })
        },
    )))
}

/// Give `options` the approver `approve` and add the patterns of `require_approval` (each
/// checked). `stop` is the run's (see [`approver`]); `py` is
/// given for a run awaited on the caller's event loop (`run_async`).
pub(crate) fn apply(
    options: &mut sandpy::RunOptions,
    approve: Option<&Bound<'_, PyAny>>,
    require_approval: Option<Vec<String>>,
    stop: &Arc<RunStop>,
    on_loop: Option<Python<'_>>,
) -> PyResult<()> {
    for pattern in require_approval.iter().flatten() {
        sandpy::tools::validate_tool_pattern(pattern).map_err(|e| {
            pyo3::exceptions::PyValueError::new_err(format!("require_approval: {e}"))
        })?;
    }
    options
        .approve
        .extend(require_approval.into_iter().flatten());
    let caller_loop = match (approve, on_loop) {
        (Some(_), Some(py)) => Some(
            py.import("asyncio")?
                .call_method0("get_running_loop")?
                .unbind(),
        ),
        _ => None,
    };
    options.approver = approver(approve, caller_loop, stop)?;
    Ok(())
}
