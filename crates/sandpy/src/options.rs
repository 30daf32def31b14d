//! [`RunOptions`]: everything about one run besides the code.

use crate::files::{InputFile, Mount};
use crate::tools::Approver;
use crate::tools::ToolHost;
use crate::{LimitOverrides, Limits, Policy};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Everything about one run besides the code. Defaults: [`Limits::default`], no limit
/// overrides, empty stdin, no tools, every tool of the tool host allowed, no policy,
/// tracebacks naming `<sandbox>`, no input files, no mounts, no output sink, no tool
/// needing approval, no approver, no cancellation, no network.
///
/// The run's limits are `limits`, then the policy's own limits over them, then
/// `limit_overrides` over those ([`RunOptions::effective_limits`]).
#[derive(Clone, Default)]
pub struct RunOptions {
    /// The base limits (e.g. a config file's).
    pub limits: Limits,
    /// This run's own limits (e.g. CLI flags), put over the policy's.
    pub limit_overrides: LimitOverrides,
    /// Bytes the program reads from stdin; empty when `None`.
    pub stdin: Option<Vec<u8>>,
    /// Where tool calls go; `None` means the program has no tools.
    pub tools: Option<Arc<dyn ToolHost>>,
    /// Exact tool names or globs the program may use; `None` allows every tool.
    pub allowed_tools: Option<Vec<String>>,
    /// File name shown in tracebacks.
    pub filename: Option<String>,
    /// Checked before the code runs and enforced while it runs; its limits apply (see
    /// above) and its `allowed_tools` narrow `allowed_tools`.
    pub policy: Option<Policy>,
    /// Files written into the scratch folder (`/tmp`) before the code runs.
    pub files: Vec<InputFile>,
    /// Host folders the code may read. A session keeps the mounts of its first run.
    pub mounts: Vec<Mount>,
    /// Where the code runs: the WebAssembly tier (the default) or the native tier. The
    /// operator's choice (config, CLI flag); front ends never let the code choose it.
    pub tier: Tier,
    /// Called with what the program writes to stdout or stderr as it writes it, in
    /// order, from the thread that serves the run (keep it quick: the program waits).
    /// It gets only what the output cap lets through; the [`Execution`](crate::Execution)
    /// still carries all of it at the end.
    pub on_output: Option<OutputSink>,
    /// Called with the tool's name as each tool call leaves the sandbox (after the
    /// allowlist and approval), e.g. to show a person what the program is doing.
    pub on_tool_call: Option<ToolCallSink>,
    /// Tools (exact names or globs) whose calls wait for `approver`'s yes; a policy's
    /// `approve` adds to them. Refused when there is no approver.
    pub approve: Vec<String>,
    /// Who decides on calls that need approval (see [`crate::tools::Approver`]).
    pub approver: Option<Arc<dyn Approver>>,
    /// Cancelling it stops the run at once: status `cancelled`, with the output and
    /// files it made so far; tool calls still out are abandoned.
    pub cancel: Option<CancellationToken>,
    /// The hosts the code may reach over HTTP(S), and the secrets it may use there; `None`
    /// (the default) means no network. A policy's `network_allow` narrows it.
    pub network: Option<crate::network::Network>,
}

/// Where a run's tool calls are announced (see [`RunOptions::on_tool_call`]).
pub type ToolCallSink = Arc<dyn Fn(&str) + Send + Sync>;

/// Where a run's output goes as it is written (see [`RunOptions::on_output`]).
pub type OutputSink = Arc<dyn Fn(Stream, &[u8]) + Send + Sync>;

/// One of a run's two output streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// What the program prints.
    Stdout,
    /// Errors and tracebacks.
    Stderr,
}

/// Where a run executes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// CPython 3.14 in a fresh WebAssembly instance: the hard boundary, the default.
    #[default]
    Wasm,
    /// The machine's CPython with compiled packages, confined by the kernel
    /// (Linux only; see [`crate::native`]).
    Native,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("limits", &self.limits)
            .field("limit_overrides", &self.limit_overrides)
            .field("stdin_bytes", &self.stdin.as_ref().map(Vec::len))
            .field("tools", &self.tools.is_some())
            .field("allowed_tools", &self.allowed_tools)
            .field("filename", &self.filename)
            .field("policy", &self.policy.as_ref().map(|p| &p.name))
            .field(
                "files",
                &self.files.iter().map(|f| &f.path).collect::<Vec<_>>(),
            )
            .field("mounts", &self.mounts)
            .field("tier", &self.tier)
            .field("on_output", &self.on_output.is_some())
            .field("on_tool_call", &self.on_tool_call.is_some())
            .field("approve", &self.approve)
            .field("approver", &self.approver.is_some())
            .field("cancel", &self.cancel.is_some())
            .field("network", &self.network)
            .finish()
    }
}

impl RunOptions {
    /// Options with these limits and every other default.
    pub fn with_limits(limits: Limits) -> Self {
        RunOptions {
            limits,
            ..RunOptions::default()
        }
    }

    /// The limits the run gets: `limits`, the policy's over them, `limit_overrides` over
    /// those.
    pub fn effective_limits(&self) -> Limits {
        let base = match &self.policy {
            Some(policy) => policy.limits(&self.limits),
            None => self.limits.clone(),
        };
        self.limit_overrides.apply(&base)
    }
}
