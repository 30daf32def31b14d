//! The result of one run: what the program printed and returned, and how it ended.

use serde::{Deserialize, Serialize};

/// How a run ended. Only `Ok` and `Error` are decided by the Python program; every other
/// status is decided by the host and outranks what the guest reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Status {
    /// The program finished (or called `sys.exit(0)`).
    Ok,
    /// A Python exception escaped the program (including `SyntaxError`), or the program
    /// broke the interpreter so that it aborted (`InterpreterCrash`).
    Error,
    /// The wall-clock limit was reached.
    Timeout,
    /// The linear-memory cap refused an allocation the program needed.
    MemoryLimit,
    /// stdout + stderr reached their cap; output is truncated with a marker.
    OutputLimit,
    /// The program made more tool calls than allowed.
    ToolCallLimit,
    /// A disk quota (`/tmp` or `/output`) or the open-file cap refused a write the
    /// program did not recover from (Python saw `OSError`).
    DiskLimit,
    /// The WebAssembly stack was exhausted (deep recursion in C code).
    StackOverflow,
    /// The code broke its policy: found by the check before running, or refused while
    /// running (see `violations`).
    PolicyViolation,
    /// The request was refused before running (e.g. code too large, bad arguments).
    InvalidInput,
    /// The session's earlier run hit a limit or trapped; reset or close the session.
    SessionPoisoned,
    /// Every run slot was taken and the queue was full (or no slot freed up in time):
    /// nothing ran; retry later.
    Busy,
    /// Whoever asked for the run cancelled it ([`RunOptions::cancel`](crate::RunOptions::cancel),
    /// an MCP client's `notifications/cancelled`): it was stopped at once, with the output
    /// and files it made so far.
    Cancelled,
    /// The sandbox itself failed; the program's behaviour is not to blame.
    InternalError,
}

impl Status {
    /// The snake_case name used in JSON and in the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::Timeout => "timeout",
            Status::MemoryLimit => "memory_limit",
            Status::OutputLimit => "output_limit",
            Status::ToolCallLimit => "tool_call_limit",
            Status::DiskLimit => "disk_limit",
            Status::StackOverflow => "stack_overflow",
            Status::PolicyViolation => "policy_violation",
            Status::InvalidInput => "invalid_input",
            Status::SessionPoisoned => "session_poisoned",
            Status::Busy => "busy",
            Status::Cancelled => "cancelled",
            Status::InternalError => "internal_error",
        }
    }
}

impl Status {
    /// The error type of a run the host ended or refused with this status: the status
    /// in CamelCase.
    pub fn error_type(self) -> &'static str {
        match self {
            Status::Ok => "Ok",
            Status::Error => "Error",
            Status::Timeout => "Timeout",
            Status::MemoryLimit => "MemoryLimit",
            Status::OutputLimit => "OutputLimit",
            Status::ToolCallLimit => "ToolCallLimit",
            Status::DiskLimit => "DiskLimit",
            Status::StackOverflow => "StackOverflow",
            Status::PolicyViolation => "PolicyViolation",
            Status::InvalidInput => "InvalidInput",
            Status::SessionPoisoned => "SessionPoisoned",
            Status::Busy => "Busy",
            Status::Cancelled => "Cancelled",
            Status::InternalError => "InternalError",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a run did not end `ok`: a Python exception, or the limit that stopped it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorInfo {
    /// Exception type (`ValueError`, `json.decoder.JSONDecodeError`), or for host-decided
    /// statuses a name such as `Timeout`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The exception's message, or what limit was hit and its value.
    pub message: String,
    /// The traceback as Python prints it, with only the user's frames; `None` for limits.
    pub traceback: Option<String>,
}

/// Everything a caller needs from one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Execution {
    /// How the run ended.
    pub status: Status,
    /// What the program wrote to stdout (lossy UTF-8).
    pub stdout: String,
    /// What the program wrote to stderr, including the traceback of an uncaught error.
    pub stderr: String,
    /// The value of the final expression (or the called function's result): JSON when it
    /// is JSON-able, else its `repr()` as a string (see `return_value_is_repr`).
    pub return_value: Option<serde_json::Value>,
    /// True when `return_value` is a `repr()` string rather than the value itself.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub return_value_is_repr: bool,
    /// Set unless `status` is `ok`.
    pub error: Option<ErrorInfo>,
    /// True when stdout/stderr were cut at the output cap.
    #[serde(default)]
    pub output_truncated: bool,
    /// Wall time of the run, instantiation included, in milliseconds.
    pub duration_ms: f64,
    /// Largest size the guest's linear memory reached, in bytes.
    pub memory_peak_bytes: u64,
    /// Tool calls the program made.
    #[serde(default)]
    pub tool_calls: u64,
    /// Policy violations, when `status` is `policy_violation`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub violations: Vec<crate::Violation>,
    /// Files the program left under `/output`, whatever the status.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<crate::files::OutputFile>,
    /// HTTP requests the program made or tried (see [`crate::network`]), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<crate::network::NetworkRequest>,
    /// What a notebook would show, in order: `display(obj)`, `plt.show()` and the figures
    /// left open (as PNG), then the final value's bundle (see [`crate::RichOutput`]).
    /// Printed text stays in `stdout` and `stderr`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<crate::RichOutput>,
    /// Rich outputs past the run's budget ([`crate::MAX_RICH_OUTPUTS`] outputs, and
    /// [`Limits::output_files_bytes`](crate::Limits::output_files_bytes) bytes together),
    /// not kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub outputs_dropped: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Execution {
    /// True when the program ran to completion.
    pub fn is_ok(&self) -> bool {
        self.status == Status::Ok
    }

    /// A run refused by the host before or instead of running: `status` with `message`
    /// under the error type named after it (`InvalidInput`, `Busy`, ...). Public so that
    /// front ends report what they refuse themselves (a program that is not UTF-8) in the
    /// same shape as what the sandbox refuses.
    pub fn refused(status: Status, message: String) -> Self {
        Execution {
            status,
            stdout: String::new(),
            stderr: String::new(),
            return_value: None,
            return_value_is_repr: false,
            error: Some(ErrorInfo {
                kind: status.error_type().into(),
                message,
                traceback: None,
            }),
            output_truncated: false,
            duration_ms: 0.0,
            memory_peak_bytes: 0,
            tool_calls: 0,
            violations: Vec::new(),
            files: Vec::new(),
            requests: Vec::new(),
            outputs: Vec::new(),
            outputs_dropped: 0,
        }
    }
}
