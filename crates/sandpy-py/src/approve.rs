//! `approve=`: a Python callable `(tool, arguments) -> bool` (or a coroutine function)
//! that decides on each tool call needing approval (the config's `sandpy.approve`, a
//! policy's `approve`, the run's `require_approval`). It is called as tool functions are
//! (see `tools.rs`): a sync one on the thread that drives the run, a coroutine function
//! on the caller's event loop for `run_async`, else on its own `asyncio.run`. A falsy
//! answer or an exception refuses the call (the code gets a `ToolError`).

use crate::convert::{json_to_py, type_name};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3_async_runtimes::TaskLocals;
use sandpy::tools::{ApprovalFuture, ApprovalRequest, Approver, Decision};
use std::sync::Arc;

/// The approver for `approve` (None when it is None); `locals` is the caller's event loop
/// (`run_async`), for a coroutine function.
pub(crate) fn approver(
    approve: Option<&Bound<'_, PyAny>>,
    locals: Option<TaskLocals>,
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
    Ok(Some(Arc::new(
        move |request: ApprovalRequest| -> ApprovalFuture {
            let function = function.clone();
            let locals = locals.clone();
            Box::pin(async move {
                let tool = request.tool.clone();
                let answer = match (is_async, locals) {
                    (false, _) => tokio::task::block_in_place(|| {
                        Python::attach(|py| {
                            let answer = function.bind(py).call1(arguments(py, &request)?)?;
                            answer.is_truthy()
                        })
                    }),
                    (true, Some(locals)) => {
                        let future = Python::attach(|py| {
                            let coroutine = function.bind(py).call1(arguments(py, &request)?)?;
                            pyo3_async_runtimes::into_future_with_locals(&locals, coroutine)
                        });
                        match future {
                            Ok(future) => match future.await {
                                Ok(value) => Python::attach(|py| value.bind(py).is_truthy()),
                                Err(e) => Err(e),
                            },
                            Err(e) => Err(e),
                        }
                    }
                    (true, None) => tokio::task::spawn_blocking(move || {
                        Python::attach(|py| {
                            let coroutine = function.bind(py).call1(arguments(py, &request)?)?;
                            let asyncio = py.import("asyncio")?;
                            asyncio.call_method1("run", (coroutine,))?.is_truthy()
                        })
                    })
                    .await
                    .unwrap_or_else(|e| {
                        Err(pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))
                    }),
                };
                match answer {
                    Ok(true) => Decision::approve("callback"),
                    Ok(false) => Decision::decline("callback", None),
                    Err(e) => {
                        let why = Python::attach(|py| {
                            let kind = e.get_type(py).name().map(|n| n.to_string());
                            format!("{}: {}", kind.unwrap_or_default(), e.value(py))
                        });
                        Decision::decline(
                            "callback",
                            Some(format!(
                            "the approve function raised {why}, so the call to {tool} was refused"
                        )),
                        )
                    }
                }
            })
        },
    )))
}

/// `(tool, arguments)` as the function gets them.
fn arguments<'py>(
    py: Python<'py>,
    request: &ApprovalRequest,
) -> PyResult<(String, Bound<'py, PyAny>)> {
    Ok((request.tool.clone(), json_to_py(py, &request.arguments)?))
}

/// Give `options` the approver `approve` and add the patterns of `require_approval` (each
/// checked). `py` is given for a run awaited on the caller's event loop (`run_async`).
pub(crate) fn apply(
    options: &mut sandpy::RunOptions,
    approve: Option<&Bound<'_, PyAny>>,
    require_approval: Option<Vec<String>>,
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
    let locals = match (approve, on_loop) {
        (Some(_), Some(py)) => pyo3_async_runtimes::tokio::get_current_locals(py).ok(),
        _ => None,
    };
    options.approver = approver(approve, locals)?;
    Ok(())
}
