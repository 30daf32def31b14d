//! Run untrusted Python in a WebAssembly sandbox: real CPython 3.14, a fresh instance for
//! every run, hard limits, and optional tools the Python can call.
//!
//! Two tiers, one run path: a run executes either in a fresh WebAssembly instance (the
//! default: real CPython 3.14 compiled to WebAssembly, isolated by wasmtime) or, for code
//! that needs native packages such as numpy, in a fresh process forked from a confined
//! zygote ([`Tier::Native`], Linux: namespaces, Landlock, seccomp; [`native`]). Both take
//! the same options and answer with the same [`Execution`].
//!
//! The crate root holds the types a run is made of:
//! - [`Sandbox`]: loads the runtime once per process; `run` executes code in a new instance.
//! - [`Config`]: the process-wide settings, among them the [`Guest`] component runs execute
//!   in. This crate embeds none (so that it compiles while the guest is made): the
//!   `sandpy-guest` crate has the built-in one, `sandpy_guest::GUEST`.
//! - [`Limits`]: time, memory, output, code size and tool-call caps of one run.
//! - [`RunOptions`]: a run's tools, files, tier, sinks, approver, cancellation.
//! - [`Execution`]: what the run printed and returned, and its [`Status`].
//!
//! A [`Policy`] (least privilege, checked before and enforced during a run) can narrow
//! what code may import and use, and bring its own limits; `Sandbox::validate` runs only
//! the check. Limits given by people (a config file, a policy, CLI flags, a request) take
//! one shape, [`LimitOverrides`], put over [`Limits`] in that order
//! ([`RunOptions::effective_limits`]).
//!
//! The rest is grouped by topic:
//! - [`sessions`]: a [`sessions::Session`] keeps one interpreter's state across runs (a run
//!   that keeps its instance); [`sessions::Sessions`] keeps them by owner and id.
//! - [`tools`]: what the Python may call ([`tools::ToolHost`]), the allowlist, tool search,
//!   and approval of calls ([`tools::Approver`]).
//! - [`settings`]: the `sandpy` section of a config file ([`settings::ConfigFile`]), read
//!   into [`settings::Settings`] that a front end resolves once and passes on.
//! - [`files`]: input files, mounts and the files a run leaves in `/output`.
//! - [`model_output`]: an [`Execution`] cut to what a model is shown.
//! - [`network`], [`tls`], [`native`], [`packages`]: a run's HTTP(S) access, the
//!   certificates it trusts, the native tier, and runtimes with more packages.
//!
//! ```no_run
//! # async fn demo() -> Result<(), sandpy::Error> {
//! let config = sandpy::Config {
//!     guest: Some(sandpy_guest::GUEST),
//!     ..sandpy::Config::default()
//! };
//! let sandbox = sandpy::Sandbox::new(config)?;
//! let execution = sandbox.run("print('hi')\n6 * 7", &sandpy::Limits::default()).await;
//! assert_eq!(execution.status, sandpy::Status::Ok);
//! assert_eq!(execution.stdout, "hi\n");
//! assert_eq!(execution.return_value, Some(serde_json::json!(42)));
//! # Ok(()) }
//! ```
//!
//! Tools: implement [`tools::ToolHost`] (the `sandpy-mcp` crate does, for MCP servers) and
//! pass it in [`RunOptions`]; the allowlist and limits are applied on the host.
//! [`tools::search`] ranks tools for a few words, [`tools::ToolSummary`] is a result's
//! compact form.
//!
//! Models: [`model_output::ModelOutput::bound`] cuts an [`Execution`] to what a model is
//! shown, marking every cut (`[... N more bytes]`) and listing it in
//! [`model_output::Bounded::truncated`].
//!
//! Files: every run gets a private scratch folder (`/tmp`, the working directory) and an
//! `/output` folder whose files come back in [`Execution::files`], both under quotas the
//! host enforces; [`RunOptions`] can add [`files::InputFile`]s and read-only
//! [`files::Mount`]s.
//!
//! Network: none by default. With a [`network::Network`] in [`RunOptions::network`] the
//! code reaches the hosts the operator allows over HTTP(S), made by the host, with secrets
//! it never sees.
//!
//! The WebAssembly boundary is the security boundary: the guest has no sockets,
//! processes, environment variables, host files beyond the folders above, or host memory
//! beyond its own linear memory.
#![deny(missing_docs)]

// Linux only, stated once: the native tier is confined by Linux namespaces, Landlock and
// seccomp, and only Linux is built and tested (CI's machine is Linux).
#[cfg(not(target_os = "linux"))]
compile_error!("sandpy runs on Linux only (see the README's platform note)");

mod access;
mod admission;
mod bindings;
mod compiled;
mod config;
mod error;
mod execution;
pub mod files;
mod guest_report;
mod host_paths;
mod limits;
pub mod model_output;
pub mod native;
pub mod network;
mod options;
mod output;
pub mod packages;
mod plan;
mod policy;
mod rich_output;
mod run;
mod sandbox;
pub mod sessions;
pub mod settings;
pub mod tls;
pub mod tools;
mod verdict;
mod wasm;

pub use compiled::CompiledModule;
pub use config::{Componentize, Config, Guest, Interruption, OnOverrun, Progress};
pub use error::{Cause, Error};
pub use execution::{ErrorInfo, Execution, Status};
pub use limits::{LimitError, LimitOverrides, Limits};
pub use options::{OutputSink, RunOptions, Stream, Tier, ToolCallSink};
pub use policy::{Policy, Violation};
pub use rich_output::{RichOutput, RichOutputKind, MAX_COUNT as MAX_RICH_OUTPUTS};
pub use sandbox::{GuestFailure, ModuleReport, Sandbox};
/// Stops a run when cancelled ([`RunOptions::cancel`]).
pub use tokio_util::sync::CancellationToken;
