//! A readable text summary of an `Execution`, for models reading `run_python` results.

use sandpy::{Execution, Status};
use std::fmt::Write;

/// Longest stdout/stderr excerpt put in the text summary (the structured content has all).
const EXCERPT: usize = 20_000;

fn excerpt(text: &str) -> &str {
    if text.len() <= EXCERPT {
        return text;
    }
    let mut end = EXCERPT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Status line, stdout, stderr, return value and error, each only when present.
pub fn summarize(execution: &Execution) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "status: {} ({:.1} ms, {} tool calls)",
        execution.status, execution.duration_ms, execution.tool_calls
    );
    for (name, text) in [("stdout", &execution.stdout), ("stderr", &execution.stderr)] {
        if !text.is_empty() {
            let cut = excerpt(text);
            let _ = writeln!(out, "--- {name} ---\n{}", cut.trim_end());
            if cut.len() < text.len() {
                let _ = writeln!(
                    out,
                    "[{} more bytes in structured content]",
                    text.len() - cut.len()
                );
            }
        }
    }
    if let Some(value) = &execution.return_value {
        let shown = match value {
            serde_json::Value::String(s) if execution.return_value_is_repr => s.clone(),
            other => other.to_string(),
        };
        let _ = writeln!(out, "--- return value ---\n{}", excerpt(&shown));
    }
    for file in &execution.files {
        let _ = writeln!(
            out,
            "--- file {}/{} ({}, {} bytes) ---",
            sandpy::OUTPUT_DIR,
            file.name,
            file.mime_type,
            file.size
        );
    }
    if let Some(error) = &execution.error {
        if execution.status != Status::Error || error.traceback.is_none() {
            let _ = writeln!(out, "--- {} ---\n{}", error.kind, error.message);
        }
    }
    out
}
