//! The `Sandbox` class and what every run of one Sandbox shares (its settings, its
//! upstream servers, the options of a run): used by the class's methods (`sandbox.rs`) and
//! by sessions (`session.rs`), which neither then imports the other for.

use crate::convert::RunArgs;
use crate::runtime;
use crate::tools::{HostSettings, HostTools, RunStop};
use pyo3::prelude::*;
use sandpy::RunOptions;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Runs Python code in a WebAssembly sandbox, each run in a brand-new instance.
///
/// `config` is a path to the JSON config file the `sandpy` CLI reads (upstream
/// `mcpServers` and the `sandpy` section); None means no config: default limits, no
/// tools. `policy` is a policy name (`"strict"`, `"default"` or one the config defines) or
/// a policy dict, for every run. `mounts` maps guest paths to host folders the code may
/// read. A Sandbox is safe to share between threads; runs release the GIL.
#[pyclass(frozen, module = "sandpy", name = "Sandbox")]
pub struct PySandbox {
    pub(crate) shared: Arc<Shared>,
}

/// What every run of one Sandbox uses.
pub(crate) struct Shared {
    pub sandbox: sandpy::Sandbox,
    pub resolved: sandpy::settings::Resolved,
    hub: Option<sandpy_mcp::Hub>,
    audit: Option<sandpy_mcp::AuditLog>,
    /// Where host tools run, and what their failures tell the guest.
    host: HostSettings,
    runs: AtomicU64,
}

impl Shared {
    /// What the runs of a Sandbox with these settings and upstream servers share.
    pub(crate) fn new(
        sandbox: sandpy::Sandbox,
        resolved: sandpy::settings::Resolved,
        hub: Option<sandpy_mcp::Hub>,
        audit: Option<sandpy_mcp::AuditLog>,
        host: HostSettings,
    ) -> Shared {
        Shared {
            sandbox,
            resolved,
            hub,
            audit,
            host,
            runs: AtomicU64::new(0),
        }
    }

    /// What `run` and `run_async` (of a Sandbox or a session) start from: the run's
    /// options ([`Shared::options`], or [`Shared::coroutine_options`] when `on_loop` is the
    /// caller's running loop) with its output sink and its approval hook set.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run_options(
        &self,
        py: Python<'_>,
        args: RunArgs,
        tools: Option<&Bound<'_, PyAny>>,
        on_output: Option<&Bound<'_, PyAny>>,
        approve: Option<&Bound<'_, PyAny>>,
        require_approval: Option<Vec<String>>,
        on_loop: bool,
    ) -> PyResult<(RunOptions, Arc<RunStop>)> {
        let (mut options, stop) = self.call_options(py, args, tools, on_loop)?;
        options.on_output = crate::convert::output_sink(on_output)?;
        let on_loop = on_loop.then_some(py);
        crate::approve::apply(&mut options, approve, require_approval, &stop, on_loop)?;
        Ok((options, stop))
    }

    /// The options of a run without an output sink or approvals (a function call or a
    /// batch): [`Shared::coroutine_options`] when `on_loop`, else [`Shared::options`].
    pub(crate) fn call_options(
        &self,
        py: Python<'_>,
        args: RunArgs,
        tools: Option<&Bound<'_, PyAny>>,
        on_loop: bool,
    ) -> PyResult<(RunOptions, Arc<RunStop>)> {
        if on_loop {
            self.coroutine_options(py, args, tools)
        } else {
            self.options(py, args, tools, None)
        }
    }

    /// [`Shared::options`] for a run awaited on the caller's asyncio loop: its async host
    /// tools run on that loop.
    pub(crate) fn coroutine_options(
        &self,
        py: Python<'_>,
        args: RunArgs,
        tools: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(RunOptions, Arc<RunStop>)> {
        runtime()?;
        let caller_loop = match tools {
            Some(_) => Some(
                py.import("asyncio")?
                    .call_method0("get_running_loop")?
                    .unbind(),
            ),
            None => None,
        };
        self.options(py, args, tools, caller_loop)
    }

    /// The options of one run: the config's, then `args` over them, and how the host
    /// program stops the run (its cancellation, given as `RunOptions::cancel`). The tools
    /// are the host functions in `tools` (if any) and the config's upstream servers;
    /// `caller_loop` is the caller's event loop (`run_async`), for coroutine host
    /// functions. Warns when the run's policy hides every host function.
    pub(crate) fn options(
        &self,
        py: Python<'_>,
        args: RunArgs,
        tools: Option<&Bound<'_, PyAny>>,
        caller_loop: Option<Py<PyAny>>,
    ) -> PyResult<(RunOptions, Arc<RunStop>)> {
        let mut options = self.resolved.run_options();
        options.limit_overrides = args.overrides;
        options.stdin = args.stdin;
        options.files = args.files;
        options.allowed_tools = args.allowed_tools;
        if args.policy.is_some() {
            options.policy = args.policy;
        }
        let stop = Arc::new(self.host.run_stop(py)?);
        options.cancel = Some(stop.token.clone());
        let upstream = self.hub.as_ref().map(|hub| {
            let n = self.runs.fetch_add(1, Ordering::Relaxed);
            hub.for_execution(format!("python-{n}"), self.audit.clone())
        });
        let host = HostTools::parse(
            tools,
            upstream.clone(),
            &self.host,
            caller_loop,
            stop.clone(),
        )?;
        if let Some(host) = &host {
            warn_if_hidden(py, host, &options)?;
        }
        options.tools = match host {
            Some(host) => Some(Arc::new(host) as Arc<dyn sandpy::tools::ToolHost>),
            None => upstream,
        };
        Ok((options, stop))
    }
}

/// A `UserWarning` when the run's policy allows none of the host functions given: the
/// code cannot call them (a `strict` policy allows no tools), and the host program
/// should know rather than wonder why its tools are never called.
fn warn_if_hidden(py: Python<'_>, host: &HostTools, options: &RunOptions) -> PyResult<()> {
    let Some(policy) = &options.policy else {
        return Ok(());
    };
    let Some(patterns) = policy.allowed_tools.as_deref() else {
        return Ok(());
    };
    let Ok(allowlist) = sandpy::tools::Allowlist::new(Some(patterns)) else {
        return Ok(()); // the run refuses the pattern itself, naming it
    };
    if host.host_names().any(|name| allowlist.allows(name)) {
        return Ok(());
    }
    let message = format!(
        "the policy {:?} allows none of the host tools given (its allowed_tools: {patterns:?}): the code cannot call them",
        policy.name
    );
    let message = std::ffi::CString::new(message)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
    let category = py.get_type::<pyo3::exceptions::PyUserWarning>();
    PyErr::warn(py, category.as_any(), &message, 1)
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let (Some(hub), Ok(rt)) = (self.hub.take(), runtime()) {
            rt.spawn(async move { hub.shutdown().await });
        }
    }
}
