//! The messages between the host, the zygote and a run.
//!
//! - host -> zygote (control socket, one datagram each): [`ZygoteSetup`] once, then one
//!   [`RunRequest`] per run with the run's descriptors attached ([`RunFds`]);
//!   zygote -> host: one [`ZygoteStatus`].
//! - zygote -> host (the run's report socket): one [`Report`] when the run ended without
//!   the host hanging up first, then EOF. host -> zygote on the same socket, for a session
//!   (a run that serves one task after another): each cell's time limit as it starts,
//!   which the zygote acknowledges with [`CELL_STARTED`] once the limit is in force, and
//!   [`BETWEEN_CELLS`] once the cell answered ([`cell_limit`], eight bytes each); the
//!   host's hang-up ends the run.
//! - run <-> host (the run's channel, one JSON line each): the task
//!   ([`task_line`]), then [`GuestMessage`]s from the run, each but the outcome
//!   answered with one line; a session's run then reads its next task.

use super::Layer;
use crate::bindings::{GuestOptions, Task};
use serde::{Deserialize, Serialize};
use std::os::fd::OwnedFd;
use std::path::PathBuf;

/// The zygote's start: which Python, what it imports, what its children may read.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ZygoteSetup {
    pub libpython: PathBuf,
    pub python_home: PathBuf,
    /// Folder of the guest's Python code (`sandpy_guest`, `sandpy_native`, the shims).
    pub guest_dir: PathBuf,
    pub site_dirs: Vec<PathBuf>,
    pub preimport: Vec<String>,
    /// Host paths the confined child sees, read-only, at the same place.
    pub readable: Vec<PathBuf>,
}

/// The zygote's answer to its setup.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ZygoteStatus {
    /// Ready for runs.
    Ready,
    /// It could not start, and why.
    Error(String),
}

/// One run's limits, for the zygote and the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RunRequest {
    pub timeout_ms: u64,
    /// The memory cap: address space the child may add to the zygote's.
    pub memory_bytes: u64,
    /// Size of the scratch folder `/tmp`.
    pub disk_bytes: u64,
    /// Size of `/output`.
    pub output_files_bytes: u64,
    /// Host folders the run reads at guest paths (checked by the host).
    #[serde(default)]
    pub mounts: Vec<(PathBuf, String)>,
    /// Layers switched off (test builds only).
    #[serde(default)]
    pub without: Vec<Layer>,
    /// A session: the run serves tasks until the host hangs up, each under its own time
    /// limit (`timeout_ms` is the first one's).
    #[serde(default)]
    pub session: bool,
}

/// The zygote's answer to a cell's limit: the limit is in force (a report, which
/// starts otherwise, or EOF instead: the process has ended).
pub(crate) const CELL_STARTED: u8 = 0x06;

/// What a session's report socket carries between cells instead of a time limit.
pub(crate) const BETWEEN_CELLS: u64 = u64::MAX;

/// The message that starts a session's cell with a limit of `ms` (or [`BETWEEN_CELLS`]).
pub(crate) fn cell_limit(ms: u64) -> [u8; 8] {
    ms.to_le_bytes()
}

/// The descriptors a run request carries, in this order.
pub(crate) struct RunFds {
    /// The child's end of the channel (fd 3 in the child).
    pub channel: OwnedFd,
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    /// The zygote's end of the report socket.
    pub report: OwnedFd,
}

impl RunFds {
    pub(super) const COUNT: usize = 5;

    pub(super) fn from_vec(fds: Vec<OwnedFd>) -> Option<RunFds> {
        let [channel, stdin, stdout, stderr, report]: [OwnedFd; RunFds::COUNT] =
            fds.try_into().ok()?;
        Some(RunFds {
            channel,
            stdin,
            stdout,
            stderr,
            report,
        })
    }
}

/// How the run ended, as the zygote saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Ended {
    /// It exited with this status.
    Exited(i32),
    /// A signal killed it.
    Signaled(i32),
    /// The zygote killed it at its deadline.
    TimedOut,
    /// The run could not be set up; nothing ran.
    Failed(String),
}

/// What the zygote reports once the run is gone (a run with an outcome sent its files).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Report {
    pub ended: Ended,
    /// The run's peak resident size (the zygote's pages it shares included), in bytes.
    pub max_rss_bytes: u64,
    /// The files under `/output` of a run the zygote ended at its deadline.
    #[serde(default)]
    pub files: Vec<ReportFile>,
}

/// A file of `/output`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ReportFile {
    /// Relative to `/output`, `/`-separated.
    pub name: String,
    #[serde(with = "crate::files::base64_bytes", rename = "content_base64")]
    pub content: Vec<u8>,
}

/// A message from the child on the channel.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum GuestMessage {
    CallTools(Vec<GuestToolCall>),
    ListTools,
    ToolNames,
    ToolSchema(String),
    SearchTools { query: String, limit: u32 },
    Fetch(crate::network::Request),
    Outcome(GuestOutcome),
}

#[derive(Debug, Deserialize)]
pub(crate) struct GuestToolCall {
    pub name: String,
    pub arguments: String,
}

/// The guest's outcome (`wit_world.imports.types.Outcome`, as `sandpy_native` writes it),
/// with the files it left under `/output` and its peak resident size.
#[derive(Debug, Deserialize)]
pub(crate) struct GuestOutcome {
    value: Option<GuestValue>,
    error: Option<GuestError>,
    violations: Vec<GuestViolationLine>,
    #[serde(default)]
    pub files: Vec<ReportFile>,
    #[serde(default)]
    pub max_rss_bytes: u64,
}

#[derive(Debug, Deserialize)]
enum GuestValue {
    Json(String),
    Repr(String),
}

#[derive(Debug, Deserialize)]
struct GuestError {
    type_name: String,
    message: String,
    traceback: String,
}

#[derive(Debug, Deserialize)]
struct GuestViolationLine {
    line: u32,
    column: u32,
    rule: String,
    message: String,
}

impl From<GuestOutcome> for crate::bindings::Outcome {
    fn from(outcome: GuestOutcome) -> Self {
        use crate::bindings::{GuestViolation, PythonError, Value};
        crate::bindings::Outcome {
            value: outcome.value.map(|value| match value {
                GuestValue::Json(text) => Value::Json(text),
                GuestValue::Repr(text) => Value::Repr(text),
            }),
            error: outcome.error.map(|e| PythonError {
                type_name: e.type_name,
                message: e.message,
                traceback: e.traceback,
            }),
            violations: outcome
                .violations
                .into_iter()
                .map(|v| GuestViolation {
                    line: v.line,
                    column: v.column,
                    rule: v.rule,
                    message: v.message,
                })
                .collect(),
        }
    }
}

/// The channel's first line: the task and its options, as `sandpy_native.run` reads them.
pub(crate) fn task_line(
    task: &Task,
    options: &GuestOptions,
    files: &[(String, Vec<u8>)],
) -> Vec<u8> {
    use base64::Engine;
    use serde_json::json;
    let task = match task {
        Task::Run(code) => json!({ "Run": code }),
        Task::Check(code) => json!({ "Check": code }),
        Task::ListModules => json!("ListModules"),
        Task::Call(call) => json!({ "Call": {
            "code": call.code, "function": call.function, "arguments": call.arguments,
        }}),
    };
    let policy = options.policy.as_ref().map(|p| {
        json!({
            "name": p.name,
            "allowed_modules": p.allowed_modules,
            "denied_modules": p.denied_modules,
            "denied_builtins": p.denied_builtins,
            "denied_attributes": p.denied_attributes,
        })
    });
    let files: Vec<serde_json::Value> = files
        .iter()
        .map(|(path, content)| {
            json!({
                "path": path,
                "content_base64": base64::engine::general_purpose::STANDARD.encode(content),
            })
        })
        .collect();
    let line = json!({
        "task": task,
        "files": files,
        "options": {
            "filename": options.filename,
            "policy": policy,
            "keep_globals": options.keep_globals,
            "environment": options.environment,
        },
    });
    let mut bytes = line.to_string().into_bytes();
    bytes.push(b'\n');
    bytes
}
