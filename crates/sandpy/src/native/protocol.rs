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
//! read as hostile input ([`GuestMessage`]: unknown fields refused, each line bounded by
//! the channel's message cap, the outcome's lists capped as they are parsed ([`Capped`]),
//! then the outcome checked by [`crate::guest_report`] as the WebAssembly tier's is) and
//! is never authority over what the host reports of the run:
//! the files under `/output` and the memory peak come from the zygote, which reads them
//! from the kernel.

use super::Layer;
use crate::bindings::{GuestOptions, Task};
use crate::guest_report;
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
/// the code's value, error, policy violations and rich outputs, nothing else. What the run
/// left under `/output` and its memory peak are not the run's to say: an outcome naming
/// them is refused (unknown fields). Its lists are capped while the line is parsed (one
/// entry past each cap is kept, so that the check knows there were more); the rest is
/// checked by [`crate::guest_report::check`], the same as the WebAssembly tier's outcome.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GuestOutcome {
    value: Option<GuestValue>,
    error: Option<GuestError>,
    violations: Capped<GuestViolationLine, { guest_report::MAX_VIOLATIONS + 1 }>,
    #[serde(default)]
    outputs: Capped<GuestRichOutputLine, { crate::rich_output::MAX_COUNT as usize }>,
    #[serde(default)]
    outputs_dropped: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GuestRichOutputLine {
    kind: GuestRichOutputKindLine,
    data: Capped<(String, String), { guest_report::MAX_MIME_TYPES + 1 }>,
    omitted: Capped<(String, String), { guest_report::MAX_MIME_TYPES + 1 }>,
}

/// A JSON list of which the first `N` entries are kept; the rest are parsed past (each
/// checked for JSON, none kept) and counted.
#[derive(Debug)]
pub(crate) struct Capped<T, const N: usize> {
    kept: Vec<T>,
    skipped: usize,
}

impl<T, const N: usize> Default for Capped<T, N> {
    fn default() -> Self {
        Capped {
            kept: Vec::new(),
            skipped: 0,
        }
    }
}

impl<'de, T: Deserialize<'de>, const N: usize> Deserialize<'de> for Capped<T, N> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit<T, const N: usize>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>, const N: usize> serde::de::Visitor<'de> for Visit<T, N> {
            type Value = Capped<T, N>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                write!(f, "a list")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut capped = Capped::default();
                while capped.kept.len() < N {
                    match seq.next_element()? {
                        Some(item) => capped.kept.push(item),
                        None => return Ok(capped),
                    }
                }
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    capped.skipped += 1;
                }
                Ok(capped)
            }
        }
        deserializer.deserialize_seq(Visit::<T, N>(std::marker::PhantomData))
    }
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

impl From<GuestOutcome> for crate::bindings::Outcome {
    fn from(outcome: GuestOutcome) -> Self {
        use crate::bindings::{
            GuestRichOutput, GuestRichOutputKind, GuestViolation, PythonError, Value,
        };
        let dropped = u32::try_from(outcome.outputs.skipped).unwrap_or(u32::MAX);
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
                .kept
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
                .kept
                .into_iter()
                .map(|o| GuestRichOutput {
                    kind: match o.kind {
                        GuestRichOutputKindLine::Display => GuestRichOutputKind::DisplayData,
                        GuestRichOutputKindLine::Result => GuestRichOutputKind::ExecuteResult,
                    },
                    data: o.data.kept,
                    omitted: o.omitted.kept,
                })
                .collect(),
            outputs_dropped: outcome.outputs_dropped.saturating_add(dropped),
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
    use crate::guest_report;

    fn outcome(json: &str) -> Result<GuestOutcome, String> {
        let line = guest_report::without_lone_surrogates(json.as_bytes());
        let message: GuestMessage = serde_json::from_slice(&line).map_err(|e| e.to_string())?;
        let GuestMessage::Outcome(outcome) = message else {
            return Err("not an outcome".into());
        };
        Ok(outcome)
    }

    #[test]
    fn an_outcome_is_only_the_codes_value_error_violations_and_outputs() {
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
        ] {
            let refused = outcome(json).err().unwrap_or_default();
            assert!(refused.contains(refusal), "{json}: {refused}");
        }
    }

    #[test]
    fn lists_are_capped_while_parsed_and_lone_surrogates_replaced() {
        let violation = r#"{"line": 1, "column": 0, "rule": "import", "message": "m"}"#;
        let many = vec![violation; 5_000].join(",");
        let output = r#"{"kind": "Display", "data": [["text/plain", "\udc80"]], "omitted": []}"#;
        let outputs = vec![output; 300].join(",");
        let json = format!(
            r#"{{"outcome": {{"value": {{"Repr": "\udc80"}}, "error": null, "violations": [{many}], "outputs": [{outputs}], "outputs_dropped": 2}}}}"#
        );
        let parsed = outcome(&json).unwrap();
        assert_eq!(
            parsed.violations.kept.len(),
            guest_report::MAX_VIOLATIONS + 1
        );
        assert_eq!(
            parsed.violations.skipped,
            5_000 - guest_report::MAX_VIOLATIONS - 1
        );
        let wit: crate::bindings::Outcome = parsed.into();
        assert_eq!(wit.outputs.len(), crate::rich_output::MAX_COUNT as usize);
        assert_eq!(wit.outputs_dropped, 2 + 200);
        assert_eq!(wit.outputs[0].data[0].1, "\u{fffd}");
        let report = guest_report::check(wit, &crate::Limits::default());
        assert_eq!(report.violations.len(), guest_report::MAX_VIOLATIONS);
        assert!(report.violations_cut);
    }
}
