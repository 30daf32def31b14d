//! The verdict of a call: what the guest said, a trap, or the clock, turned into the
//! run's [`Status`] and [`ErrorInfo`]. The host decides: a trap or a limit outranks
//! whatever the guest reported.

use crate::execution::{ErrorInfo, Execution, Status};
use crate::guest_report::{Report, ReportedValue};
use crate::output::Captured;
use crate::Limits;
use std::time::Duration;

/// How a call into the guest ended: it returned (its outcome checked by
/// [`crate::guest_report`] as soon as it was lifted), trapped, or was stopped.
pub(crate) type CallResult = Result<wasmtime::Result<Report>, Cutoff>;

/// Why the host stopped a call before it returned.
pub(crate) enum Cutoff {
    /// The run's time limit ended.
    Elapsed,
    /// The run was cancelled.
    Cancelled,
}

/// Why the host ended a run, or overruled the guest; each gives its status and message.
pub(crate) enum Stop {
    /// The wall-clock limit in force, and the tools whose answers the run was waiting for.
    Timeout {
        limit: Duration,
        waiting_for: Vec<String>,
    },
    /// The run was cancelled; the tools whose answers it was waiting for.
    Cancelled { waiting_for: Vec<String> },
    /// The memory cap, in bytes.
    Memory(usize),
    /// stdout + stderr reached the output cap.
    Output(usize),
    /// The return value is larger than the output cap.
    ReturnValue { size: usize, cap: usize },
    /// The tool-call cap.
    ToolCalls(usize),
    /// The WebAssembly stack ran out.
    StackOverflow,
    /// `sys.exit(code)` with a non-zero code.
    Exit(i32),
    /// The interpreter aborted (a trap that no limit explains).
    InterpreterCrash(String),
    /// Policy violations with no Python error to show: how many were kept, whether the
    /// guest reported more, and the first.
    Violations {
        count: usize,
        more: bool,
        line: u32,
        first: String,
    },
    /// The guest's JSON did not parse: a sandpy bug, not the program's.
    BadJson(String),
}

impl Stop {
    fn status(&self) -> Status {
        match self {
            Stop::Timeout { .. } => Status::Timeout,
            Stop::Cancelled { .. } => Status::Cancelled,
            Stop::Memory(_) => Status::MemoryLimit,
            Stop::Output(_) | Stop::ReturnValue { .. } => Status::OutputLimit,
            Stop::ToolCalls(_) => Status::ToolCallLimit,
            Stop::StackOverflow => Status::StackOverflow,
            Stop::Exit(_) | Stop::InterpreterCrash(_) => Status::Error,
            Stop::Violations { .. } => Status::PolicyViolation,
            Stop::BadJson(_) => Status::InternalError,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Stop::Exit(_) => "SystemExit",
            Stop::InterpreterCrash(_) => "InterpreterCrash",
            other => other.status().error_type(),
        }
    }

    fn message(&self) -> String {
        match self {
            Stop::Timeout { limit, waiting_for } => format!(
                "the run exceeded its wall-clock limit of {} ms{}",
                limit.as_millis(),
                waiting_phrase(waiting_for)
            ),
            Stop::Cancelled { waiting_for } => {
                format!("the run was cancelled{}", waiting_phrase(waiting_for))
            }
            Stop::Memory(cap) => format!("the run exceeded its memory limit of {cap} bytes"),
            Stop::Output(cap) => {
                format!("stdout + stderr exceeded the output limit of {cap} bytes")
            }
            Stop::ReturnValue { size, cap } => {
                format!("the return value is {size} bytes, over the output limit of {cap} bytes")
            }
            Stop::ToolCalls(cap) => format!("the run exceeded its limit of {cap} tool calls"),
            Stop::StackOverflow => {
                "the WebAssembly stack overflowed (recursion too deep in C code)".into()
            }
            Stop::Exit(code) => format!("the program exited with status {code}"),
            Stop::InterpreterCrash(cause) => {
                format!("the Python interpreter aborted: {cause}")
            }
            Stop::Violations {
                count,
                more,
                line,
                first,
            } => {
                let more = if *more { "more than " } else { "" };
                format!("{more}{count} violation(s); first at line {line}: {first}")
            }
            Stop::BadJson(why) => format!("the guest returned bad JSON: {why}"),
        }
    }

    pub(crate) fn verdict(self) -> (Status, Option<ErrorInfo>) {
        let error = ErrorInfo {
            kind: self.kind().into(),
            message: self.message(),
            traceback: None,
        };
        (self.status(), Some(error))
    }
}

/// How many distinct tools a timeout message names; more are counted.
const NAMED_TOOLS: usize = 3;

/// ` while waiting for mcp__a__x, mcp__b__y (2 calls)` for the tools of calls still out
/// (in call order, each once), or nothing.
fn waiting_phrase(tools: &[String]) -> String {
    let mut counted: Vec<(&str, usize)> = Vec::new();
    for tool in tools {
        match counted.iter_mut().find(|(name, _)| *name == tool.as_str()) {
            Some((_, count)) => *count += 1,
            None => counted.push((tool, 1)),
        }
    }
    if counted.is_empty() {
        return String::new();
    }
    let named: Vec<String> = counted
        .iter()
        .take(NAMED_TOOLS)
        .map(|(name, count)| match count {
            1 => name.to_string(),
            n => format!("{name} ({n} calls)"),
        })
        .collect();
    let mut phrase = format!(" while waiting for {}", named.join(", "));
    if counted.len() > NAMED_TOOLS {
        phrase.push_str(&format!(" and {} more tools", counted.len() - NAMED_TOOLS));
    }
    phrase
}

/// The `timeout` of a run ended with its process (no interruption checks, see
/// [`crate::Interruption::EndProcess`]): what it printed so far; its memory peak and tool
/// calls live in its store, out of reach while it runs, so they are 0.
pub(crate) fn overrun(captured: Captured, limit: Duration, duration: Duration) -> Execution {
    let (status, error) = Stop::Timeout {
        limit,
        waiting_for: Vec::new(),
    }
    .verdict();
    Execution {
        stdout: captured.stdout,
        stderr: captured.stderr,
        error,
        output_truncated: captured.truncated,
        duration_ms: duration.as_secs_f64() * 1e3,
        ..Execution::refused(status, String::new())
    }
}

/// An `ok` execution of what a run printed, its time and its counts; the verdict then
/// sets the status and error.
pub(crate) fn ran(
    captured: Captured,
    duration: Duration,
    memory_peak_bytes: u64,
    tool_calls: u64,
) -> Execution {
    Execution {
        status: Status::Ok,
        stdout: captured.stdout,
        stderr: captured.stderr,
        return_value: None,
        return_value_is_repr: false,
        error: None,
        output_truncated: captured.truncated,
        duration_ms: duration.as_secs_f64() * 1e3,
        memory_peak_bytes,
        tool_calls,
        violations: Vec::new(),
        files: Vec::new(),
        requests: Vec::new(),
        outputs: Vec::new(),
        outputs_dropped: 0,
    }
}

/// The verdict of an outcome the guest reported, checked ([`crate::guest_report`]).
/// `memory_refused`: the memory cap refused an allocation during the run; `disk_refusal`:
/// why a quota refused a write.
pub(crate) fn outcome_verdict(
    report: Report,
    memory_refused: bool,
    disk_refusal: Option<String>,
    limits: &Limits,
    memory_cap: usize,
    execution: &mut Execution,
) -> (Status, Option<ErrorInfo>) {
    execution.outputs = report.outputs;
    execution.outputs_dropped = report.outputs_dropped;
    if !report.violations.is_empty() {
        execution.violations = report.violations;
        if let Some(error) = report.error {
            return (Status::PolicyViolation, Some(error));
        }
        let first = &execution.violations[0];
        return Stop::Violations {
            count: execution.violations.len(),
            more: report.violations_cut,
            line: first.line,
            first: first.message.clone(),
        }
        .verdict();
    }
    if let Some(mut error) = report.error {
        // `MemoryError` or a subclass (numpy's `_ArrayMemoryError`).
        if memory_refused && error.kind.ends_with("MemoryError") {
            return Stop::Memory(memory_cap).verdict();
        }
        if let Some(refusal) = disk_refusal {
            // The program did not recover from a refused write; its traceback says where.
            error.message = format!("{refusal} ({}: {})", error.kind, error.message);
            error.kind = "DiskLimit".into();
            return (Status::DiskLimit, Some(error));
        }
        return (Status::Error, Some(error));
    }
    let (value, is_repr) = match report.value {
        None => return (Status::Ok, None),
        Some(ReportedValue::TooLong(size)) => {
            return Stop::ReturnValue {
                size,
                cap: limits.output_bytes,
            }
            .verdict()
        }
        Some(ReportedValue::BadJson(why)) => return Stop::BadJson(why).verdict(),
        Some(ReportedValue::Json(value)) => (value, false),
        Some(ReportedValue::Repr(text)) => (serde_json::Value::String(text), true),
    };
    execution.return_value_is_repr = is_repr;
    execution.return_value = Some(value);
    (Status::Ok, None)
}

/// How a native-tier run ended, as the host saw it (see `native::host`).
pub(crate) enum NativeEnd {
    /// The child sent its outcome, checked (it may still have died after).
    Outcome(Report),
    /// The run's time limit ended it (the supervisor or the host killed it).
    Timeout { waiting_for: Vec<String> },
    /// The run was cancelled and killed.
    Cancelled { waiting_for: Vec<String> },
    /// The output cap was reached and the run killed.
    Output,
    /// The program sent a channel message over the host's limit, in bytes.
    Message(usize),
    /// The program wrote something other than the guest code's messages on its channel
    /// (fd 3), and why it did not parse.
    Channel(String),
    /// The tool-call cap was reached and the run killed.
    ToolCalls,
    /// The child exited without an outcome.
    Exited(i32),
    /// A signal killed the child before it sent an outcome.
    Signaled(i32),
    /// sandpy failed (the run could not be set up or its report was lost).
    Internal(String),
}

/// The execution of a native-tier run: the same statuses and messages as the
/// WebAssembly tier's for the same events.
pub(crate) fn native(
    end: NativeEnd,
    captured: Captured,
    limits: &Limits,
    tool_calls: u64,
    memory_peak_bytes: u64,
    duration: Duration,
) -> Execution {
    let mut execution = ran(captured, duration, memory_peak_bytes, tool_calls);
    let (status, error) = match end {
        _ if execution.output_truncated => Stop::Output(limits.output_bytes).verdict(),
        NativeEnd::Output => Stop::Output(limits.output_bytes).verdict(),
        NativeEnd::Message(cap) => Stop::Output(cap).verdict(),
        NativeEnd::Channel(why) => (
            Status::Error,
            Some(ErrorInfo {
                kind: "ChannelError".into(),
                message: format!(
                    "the program wrote to the sandbox's channel (descriptor 3) what is not \
                     a message of the sandbox: {why}"
                ),
                traceback: None,
            }),
        ),
        NativeEnd::ToolCalls => Stop::ToolCalls(limits.tool_calls).verdict(),
        NativeEnd::Timeout { waiting_for } => Stop::Timeout {
            limit: limits.timeout,
            waiting_for,
        }
        .verdict(),
        NativeEnd::Cancelled { waiting_for } => Stop::Cancelled { waiting_for }.verdict(),
        NativeEnd::Outcome(outcome) => {
            // The address-space cap is the only way a fork of a healthy zygote runs out.
            let disk = outcome
                .error
                .as_ref()
                .filter(|e| e.kind == "OSError" && e.message.starts_with("[Errno 28]"))
                .map(|_| "the scratch or /output folder is full (its disk quota)".to_string());
            outcome_verdict(
                outcome,
                true,
                disk,
                limits,
                limits.memory_bytes,
                &mut execution,
            )
        }
        NativeEnd::Exited(0) => (Status::Ok, None),
        NativeEnd::Exited(code) => Stop::Exit(code).verdict(),
        NativeEnd::Signaled(signal) => {
            Stop::InterpreterCrash(format!("the process was killed by signal {signal}")).verdict()
        }
        NativeEnd::Internal(why) => (
            Status::InternalError,
            Some(ErrorInfo {
                kind: "InternalError".into(),
                message: why,
                traceback: None,
            }),
        ),
    };
    execution.status = status;
    execution.error = error;
    execution
}

/// A run refused by the host before its code ran: the status and why.
pub(crate) struct Refusal {
    status: Status,
    message: String,
}

impl Refusal {
    pub(crate) fn new(status: Status, message: String) -> Refusal {
        Refusal { status, message }
    }

    /// Why it was refused.
    pub(crate) fn message(&self) -> &str {
        &self.message
    }
}

impl From<Refusal> for Execution {
    fn from(refused: Refusal) -> Execution {
        Execution::refused(refused.status, refused.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_timeout_names_the_tools_it_waited_for() {
        let stop = |tools: &[&str]| {
            Stop::Timeout {
                limit: Duration::from_millis(500),
                waiting_for: names(tools),
            }
            .message()
        };
        assert_eq!(stop(&[]), "the run exceeded its wall-clock limit of 500 ms");
        assert_eq!(
            stop(&["mcp__x__slow"]),
            "the run exceeded its wall-clock limit of 500 ms while waiting for mcp__x__slow"
        );
        assert_eq!(
            stop(&["mcp__x__a", "mcp__x__b", "mcp__x__a"]),
            "the run exceeded its wall-clock limit of 500 ms while waiting for mcp__x__a (2 calls), mcp__x__b"
        );
        assert_eq!(
            stop(&["a", "b", "c", "d", "e"]),
            "the run exceeded its wall-clock limit of 500 ms while waiting for a, b, c and 2 more tools"
        );
    }
}
