//! The `Sandbox` class and what every run of one Sandbox shares (its settings, its
//! upstream servers, the options of a run): used by the class's methods (`sandbox.rs`) and
//! by sessions (`session.rs`), which neither then imports the other for.

use crate::convert::RunArgs;
use crate::runtime;
use crate::tools::HostTools;
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
    runs: AtomicU64,
}

impl Shared {
    /// What the runs of a Sandbox with these settings and upstream servers share.
    pub(crate) fn new(
        sandbox: sandpy::Sandbox,
        resolved: sandpy::settings::Resolved,
        hub: Option<sandpy_mcp::Hub>,
        audit: Option<sandpy_mcp::AuditLog>,
    ) -> Shared {
        Shared {
            sandbox,
            resolved,
            hub,
            audit,
            runs: AtomicU64::new(0),
        }
    }

    /// [`Shared::options`] for a run awaited on the caller's asyncio loop: its async host
    /// tools run on that loop.
    pub(crate) fn coroutine_options(
        &self,
        py: Python<'_>,
        args: RunArgs,
        tools: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<RunOptions> {
        runtime()?;
        let locals = match tools {
            Some(_) => pyo3_async_runtimes::tokio::get_current_locals(py).ok(),
            None => None,
        };
        self.options(args, tools, locals)
    }

    /// The options of one run: the config's, then `args` over them. The tools are the
    /// host functions in `tools` (if any) and the config's upstream servers; `locals` is
    /// the caller's event loop (`run_async`), for coroutine host functions.
    pub(crate) fn options(
        &self,
        args: RunArgs,
        tools: Option<&Bound<'_, PyAny>>,
        locals: Option<pyo3_async_runtimes::TaskLocals>,
    ) -> PyResult<RunOptions> {
        let mut options = self.resolved.run_options();
        options.limit_overrides = args.overrides;
        options.stdin = args.stdin;
        options.files = args.files;
        options.allowed_tools = args.allowed_tools;
        if args.policy.is_some() {
            options.policy = args.policy;
        }
        let upstream = self.hub.as_ref().map(|hub| {
            let n = self.runs.fetch_add(1, Ordering::Relaxed);
            hub.for_execution(format!("python-{n}"), self.audit.clone())
        });
        options.tools = match HostTools::parse(tools, upstream.clone(), locals)? {
            Some(host) => Some(Arc::new(host) as Arc<dyn sandpy::tools::ToolHost>),
            None => upstream,
        };
        Ok(options)
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let (Some(hub), Ok(rt)) = (self.hub.take(), runtime()) {
            rt.spawn(async move { hub.shutdown().await });
        }
    }
}
