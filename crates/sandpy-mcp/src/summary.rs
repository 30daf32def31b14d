//! A readable text summary of a run, for models reading `run_python` results. It shows the
//! same bounded execution ([`sandpy::model_output::Bounded`]) the result's structured content carries,
//! so a text cut for the model is cut, and marked `[... N more bytes]`, in both.

use sandpy::model_output::Bounded;
use sandpy::Status;
use std::fmt::Write;

/// Status line, stdout, stderr, return value, output files and error, each only when
/// present. The error's message is shown unless stderr already holds its traceback.
pub fn summarize(bounded: &Bounded) -> String {
    let execution = &bounded.execution;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "status: {} ({:.1} ms, {} tool calls)",
        execution.status, execution.duration_ms, execution.tool_calls
    );
    for (name, text) in [("stdout", &execution.stdout), ("stderr", &execution.stderr)] {
        if !text.is_empty() {
            let _ = writeln!(out, "--- {name} ---\n{}", text.trim_end());
        }
    }
    if let Some(value) = bounded.return_value_text() {
        let _ = writeln!(out, "--- return value ---\n{value}");
    }
    for (i, output) in execution.outputs.iter().enumerate() {
        let kind = match output.kind {
            // The return value above says it already.
            sandpy::RichOutputKind::Result if output.data.is_empty() => continue,
            sandpy::RichOutputKind::Result => "result",
            _ => "display",
        };
        let formats: Vec<&str> = output.data.keys().map(String::as_str).collect();
        let _ = writeln!(
            out,
            "--- output {} ({kind}: {}) ---",
            i + 1,
            formats.join(", ")
        );
    }
    if execution.outputs_dropped > 0 {
        let _ = writeln!(
            out,
            "--- {} more outputs not kept (over the run's budget of {} outputs or its bytes) ---",
            execution.outputs_dropped,
            sandpy::MAX_RICH_OUTPUTS
        );
    }
    for file in &execution.files {
        let _ = writeln!(
            out,
            "--- file {}/{} ({}, {} bytes) ---",
            sandpy::files::OUTPUT_DIR,
            file.name,
            file.mime_type,
            file.size
        );
    }
    if let Some(error) = &execution.error {
        let traceback_shown = execution.status == Status::Error
            && error.traceback.is_some()
            && !bounded.truncated.contains_key("stderr");
        if !traceback_shown {
            let _ = writeln!(out, "--- {} ---\n{}", error.kind, error.message);
        }
    }
    out
}
