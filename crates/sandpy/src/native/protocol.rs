//! The messages between the host, the zygote and a run.
//!
//! - host -> zygote (control socket, one datagram each): [`ZygoteSetup`] once, then one
//!   [`RunRequest`] per run with the run's descriptors attached ([`RunFds`]);
//!   zygote -> host: one [`ZygoteStatus`].
//! - zygote -> host (the run's report socket): one [`Report`] when the run ended without
//!   the host hanging up first, then EOF. host -> zygote on the same socket
//!   ([`cell_limit`], eight bytes each): [`ANSWERED`] once the run sent its outcome, which
//!   the zygote answers with [`CELL_ENDED`] and a [`Collected`] frame ([`collected_frame`]):
//!   it stopped the process (`SIGSTOP`), read its `/output` and its peak size from the
//!   kernel; a one-shot run is then killed, a session's process stays stopped until its
//!   next cell. For a session (a run that serves one task after another): each later
//!   cell's time limit as it starts, which the zygote acknowledges with [`CELL_STARTED`]
//!   once the process runs again under that limit; the host's hang-up ends the run. A
//!   run made ahead ([`RunRequest::ahead`]) has no deadline until the host starts it the
//!   same way, with its first time limit.
//! - run <-> host (the run's channel, one JSON line each): the task
//!   ([`task_line`]), then [`GuestMessage`]s from the run, each but the outcome
//!   answered with one line; a session's run then reads its next task.
//!
//! Everything on the channel is written by the run, whose code may write to it: it is
//! read as hostile input ([`GuestMessage`]: unknown fields refused, lengths bounded by
//! [`GuestOutcome::check`]) and is never authority over what the host reports of the run:
//! the files under `/output` and the memory peak come from the zygote, which reads them
//! from the kernel.

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

/// One run's limits, for the zygote and the run. Two requests that are equal but for
/// [`RunRequest::ahead`] make processes of the same shape: a process made ahead is taken
/// only by a run whose request equals its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// Made ahead of its run: the process is confined and waits for its task with no
    /// deadline, until the host starts it with a time limit ([`cell_limit`], answered
    /// with [`CELL_STARTED`]) or hangs up.
    #[serde(default)]
    pub ahead: bool,
}

/// The zygote's answer to a cell's limit: the limit is in force (a report, which
/// starts otherwise, or EOF instead: the process has ended).
pub(crate) const CELL_STARTED: u8 = 0x06;

/// What the host sends on the report socket instead of a time limit once the run sent
/// its outcome: stop it and collect what it left.
pub(crate) const ANSWERED: u64 = u64::MAX;

/// The zygote's answer to [`ANSWERED`]: this byte, the frame's length (eight bytes, little
/// endian), then a [`Collected`] as JSON. A report (JSON, `{`) instead means that the run
/// ended before it could be collected.
pub(crate) const CELL_ENDED: u8 = 0x07;

/// The message that starts a session's cell with a limit of `ms` (or [`ANSWERED`]).
pub(crate) fn cell_limit(ms: u64) -> [u8; 8] {
    ms.to_le_bytes()
}

/// What the zygote took from a run that answered, while it was stopped.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Collected {
    /// Whether the whole process stopped (a session is kept only then).
    pub stopped: bool,
    /// The process's peak resident size (`VmHWM`), in bytes.
    pub max_rss_bytes: u64,
    /// The files under its `/output` (a session's `/output` is emptied after).
    pub files: Vec<ReportFile>,
}

/// [`CELL_ENDED`], the length and the JSON of `collected`.
pub(crate) fn collected_frame(collected: &Collected) -> Vec<u8> {
    let json = serde_json::to_vec(collected).unwrap_or_else(|_| b"{}".to_vec());
    let mut frame = Vec::with_capacity(json.len() + 9);
    frame.push(CELL_ENDED);
    frame.extend_from_slice(&(json.len() as u64).to_le_bytes());
    frame.extend_from_slice(&json);
    frame
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
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum GuestMessage {
    CallTools(Vec<GuestToolCall>),
    ListTools,
    ToolNames,
    ToolSchema(String),
    SearchTools {
        query: String,
        limit: u32,
    },
    Fetch(crate::network::Request),
    /// A batch of requests made at once (`fetch-many`).
    FetchMany(Vec<crate::network::Request>),
    Outcome(GuestOutcome),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GuestToolCall {
    pub name: String,
    pub arguments: String,
}

/// The guest's outcome (`wit_world.imports.types.Outcome`, as `sandpy_native` writes it):
/// the code's value, error and policy violations, nothing else. What the run left under
/// `/output` and its memory peak are not the run's to say: an outcome naming them is
/// refused (unknown fields).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GuestOutcome {
    value: Option<GuestValue>,
    error: Option<GuestError>,
    violations: Vec<GuestViolationLine>,
    /// Rich outputs: bounded by the host again (`rich_output::from_guest`), whatever the
    /// run says; the whole line is bounded by the channel's message cap first.
    #[serde(default)]
    outputs: Vec<GuestRichOutputLine>,
    #[serde(default)]
    outputs_dropped: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GuestRichOutputLine {
    kind: GuestRichOutputKindLine,
    data: Vec<(String, String)>,
    omitted: Vec<(String, String)>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
enum GuestRichOutputKindLine {
    Display,
    Result,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
enum GuestValue {
    Json(String),
    Repr(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GuestError {
    type_name: String,
    message: String,
    traceback: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GuestViolationLine {
    line: u32,
    column: u32,
    rule: String,
    message: String,
}

/// Longest exception type name (dotted) an outcome may carry.
const MAX_TYPE_NAME: usize = 256;
/// Most policy violations an outcome may carry.
const MAX_VIOLATIONS: usize = 1_000;
/// Longest rule name of a violation.
const MAX_RULE: usize = 64;
/// Longest message of a violation.
const MAX_VIOLATION_MESSAGE: usize = 4_096;

impl GuestOutcome {
    /// Why this outcome is not one the guest's runner writes, if it is not: each field
    /// bounded, the type a dotted name, each rule a plain name.
    pub(crate) fn check(&self) -> Result<(), String> {
        if let Some(error) = &self.error {
            let name = &error.type_name;
            let plain = |part: &str| {
                !part.is_empty() && part.chars().all(|c| c.is_alphanumeric() || c == '_')
            };
            if name.len() > MAX_TYPE_NAME || !name.split('.').all(plain) {
                return Err(format!(
                    "an error type must be a dotted name of at most {MAX_TYPE_NAME} bytes"
                ));
            }
        }
        if self.violations.len() > MAX_VIOLATIONS {
            return Err(format!("more than {MAX_VIOLATIONS} policy violations"));
        }
        for violation in &self.violations {
            let rule = &violation.rule;
            if rule.is_empty()
                || rule.len() > MAX_RULE
                || !rule
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(format!(
                    "a violation's rule must be a name of at most {MAX_RULE} bytes"
                ));
            }
            if violation.message.len() > MAX_VIOLATION_MESSAGE {
                return Err(format!(
                    "a violation's message is over {MAX_VIOLATION_MESSAGE} bytes"
                ));
            }
        }
        Ok(())
    }
}

impl From<GuestOutcome> for crate::bindings::Outcome {
    fn from(outcome: GuestOutcome) -> Self {
        use crate::bindings::{
            GuestRichOutput, GuestRichOutputKind, GuestViolation, PythonError, Value,
        };
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
            outputs: outcome
                .outputs
                .into_iter()
                .map(|o| GuestRichOutput {
                    kind: match o.kind {
                        GuestRichOutputKindLine::Display => GuestRichOutputKind::DisplayData,
                        GuestRichOutputKindLine::Result => GuestRichOutputKind::ExecuteResult,
                    },
                    data: o.data,
                    omitted: o.omitted,
                })
                .collect(),
            outputs_dropped: outcome.outputs_dropped,
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
        Task::Compile(code) => json!({ "Compile": code }),
        // The compiled module is the WebAssembly runtime's: a native run compiles its own.
        Task::Call(call) | Task::CallCompiled(crate::bindings::CompiledCall { call, .. }) => {
            json!({ "Call": {
                "code": call.code, "function": call.function, "arguments": call.arguments,
            }})
        }
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
            "rich_output_limits": {
                "count": options.rich_output_limits.count,
                "bytes": options.rich_output_limits.bytes,
            },
        },
    });
    let mut bytes = line.to_string().into_bytes();
    bytes.push(b'\n');
    bytes
}

#[cfg(test)]
mod tests {
    use super::{GuestMessage, GuestOutcome};

    fn outcome(json: &str) -> Result<GuestOutcome, String> {
        let message: GuestMessage = serde_json::from_str(json).map_err(|e| e.to_string())?;
        let GuestMessage::Outcome(outcome) = message else {
            return Err("not an outcome".into());
        };
        outcome.check().map(|()| outcome)
    }

    #[test]
    fn an_outcome_is_only_the_codes_value_error_and_violations() {
        let plain = r#"{"outcome": {"value": {"Json": "1"}, "error": null, "violations": []}}"#;
        assert!(outcome(plain).is_ok());
        let error = r#"{"outcome": {"value": null, "violations": [],
            "error": {"type_name": "numpy.linalg.LinAlgError", "message": "m", "traceback": ""}}}"#;
        assert!(outcome(error).is_ok());
        for (json, refusal) in [
            (
                r#"{"outcome": {"value": null, "error": null, "violations": [], "files": []}}"#,
                "unknown field `files`",
            ),
            (
                r#"{"outcome": {"value": null, "error": null, "violations": [], "max_rss_bytes": 1}}"#,
                "unknown field `max_rss_bytes`",
            ),
            (
                r#"{"outcome": {"value": {"Pickle": "x"}, "error": null, "violations": []}}"#,
                "unknown variant `Pickle`",
            ),
            (
                r#"{"outcome": {"value": null, "violations": [],
                    "error": {"type_name": "a..b", "message": "", "traceback": ""}}}"#,
                "an error type must be a dotted name",
            ),
            (
                r#"{"outcome": {"value": null, "error": null, "violations":
                    [{"line": 1, "column": 0, "rule": "no rule", "message": ""}]}}"#,
                "a violation's rule must be a name",
            ),
        ] {
            let refused = outcome(json).err().unwrap_or_default();
            assert!(refused.contains(refusal), "{json}: {refused}");
        }
    }
}
