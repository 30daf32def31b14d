//! Run untrusted Python in a WebAssembly sandbox: real CPython 3.14, a fresh instance for
//! every run, hard limits, and optional tools the Python can call.
//!
//! Three types carry the API:
//! - [`Sandbox`]: loads the runtime once per process; `run` executes code in a new instance.
//! - [`Limits`]: time, memory, output, code size and tool-call caps of one run.
//! - [`Execution`]: what the run printed and returned, and its [`Status`].
//!
//! A [`Policy`] (least privilege, checked before and enforced during a run) can narrow
//! what code may import and use, and bring its own limits; `Sandbox::validate` runs only
//! the check. A [`Session`] keeps one interpreter's state across runs (it is a run that
//! keeps its instance); [`Sessions`] keeps them by owner ([`Tenant`]) and id.
//!
//! Limits given by people (a config file, a policy, CLI flags, a request) take one shape,
//! [`LimitOverrides`], put over [`Limits`] in that order ([`RunOptions::effective_limits`]).
//! [`ConfigFile`] reads the `sandpy` section of a config file into [`Settings`], which a
//! front end resolves once ([`Settings::resolve`]) and passes on.
//!
//! ```no_run
//! # async fn demo() -> Result<(), sandpy::Error> {
//! let sandbox = sandpy::Sandbox::new(sandpy::Config::default())?;
//! let execution = sandbox.run("print('hi')\n6 * 7", &sandpy::Limits::default()).await;
//! assert_eq!(execution.status, sandpy::Status::Ok);
//! assert_eq!(execution.stdout, "hi\n");
//! assert_eq!(execution.return_value, Some(serde_json::json!(42)));
//! # Ok(()) }
//! ```
//!
//! Tools: implement [`ToolHost`] (the `sandpy-mcp` crate does, for MCP servers) and pass
//! it in [`RunOptions`]; the allowlist and limits are applied on the host.
//! [`search_tools`] ranks tools for a few words, [`ToolSummary`] is a result's compact form.
//!
//! Models: [`ModelOutput::bound`] cuts an [`Execution`] to what a model is shown, marking
//! every cut (`[... N more bytes]`) and listing it in [`Bounded::truncated`].
//!
//! Files: every run gets a private scratch folder (`/tmp`, the working directory) and an
//! `/output` folder whose files come back in [`Execution::files`], both under quotas the
//! host enforces; [`RunOptions`] can add [`InputFile`]s and read-only [`Mount`]s.
//!
//! Network: none by default. With a [`network::Network`] in [`RunOptions::network`] the
//! code reaches the hosts the operator allows over HTTP(S), made by the host, with secrets
//! it never sees.
//!
//! The WebAssembly boundary is the security boundary: the guest has no sockets,
//! processes, environment variables, host files beyond the folders above, or host memory
//! beyond its own linear memory.
#![deny(missing_docs)]

mod admission;
mod approval;
mod bindings;
mod config;
mod error;
mod execution;
mod files;
mod limits;
mod model_output;
pub mod native;
pub mod network;
mod options;
mod output;
pub mod packages;
mod policy;
mod run;
mod sandbox;
mod search;
mod session;
mod sessions;
mod settings;
pub mod tls;
mod tool_access;
mod tools;
mod verdict;
#[cfg(target_os = "linux")]
mod wasm;

pub use approval::{ApprovalFuture, ApprovalRequest, Approver, Decision};
pub use config::{Config, Interruption, OnOverrun, Progress};
pub use error::{Cause, Error};
pub use execution::{ErrorInfo, Execution, Status};
pub use files::{InputFile, Mount, MountError, OutputFile, OUTPUT_DIR, SCRATCH_DIR};
pub use limits::{LimitError, LimitOverrides, Limits};
pub use model_output::{Bounded, ModelOutput};
pub use options::{OutputSink, RunOptions, Stream, Tier, ToolCallSink};
pub use output::TRUNCATION_MARKER;
pub use policy::{Policy, Violation};
pub use sandbox::{GuestFailure, ModuleReport, Sandbox};
pub use search::{search as search_tools, ToolSummary};
pub use session::{Cell, Session, SessionError, SessionSnapshot};
pub use sessions::{
    SessionCap, SessionInfo, SessionLimits, Sessions, Tenant, TenantQuota, TenantSessions,
};
pub use settings::{
    is_plain_name, ConfigError, ConfigFile, Resolved, Settings, TokenTenant, UnknownPolicy,
};
/// Stops a run when cancelled ([`RunOptions::cancel`]).
pub use tokio_util::sync::CancellationToken;
pub use tool_access::RecordedCall;
pub use tools::{
    validate_tool_pattern, Allowlist, PrepareFuture, ToolError, ToolFuture, ToolHost, ToolInfo,
    ToolPatternError,
};
