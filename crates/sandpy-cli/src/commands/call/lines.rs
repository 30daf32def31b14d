//! The lines of a `sandpy call --args-file` batch, shared by its two ways of running
//! (`mod.rs` in this process, `workers.rs` in worker processes): reading and parsing an
//! input line, the result line of a run or of a line the host answers itself, and
//! printing the results in input order.

use sandpy::{Execution, Status};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, Write};

/// The result line of a line the host answers itself, without a run (a bad line, a lost
/// run): its `status` and an error of that status's type.
pub(super) fn line_error(line: usize, status: Status, message: &str) -> Value {
    json!({"line": line, "status": status, "error": {"type": status.error_type(), "message": message}})
}

/// One batch result line.
pub(super) fn line_result(line: usize, execution: &Execution) -> Value {
    let mut out =
        json!({"line": line, "status": execution.status, "duration_ms": execution.duration_ms});
    match &execution.error {
        None => out["result"] = execution.return_value.clone().unwrap_or(Value::Null),
        Some(error) => out["error"] = json!({"type": error.kind, "message": error.message}),
    }
    if !execution.files.is_empty() {
        out["files"] = serde_json::to_value(&execution.files).unwrap_or(Value::Null);
    }
    out
}

/// `--args` or one line's text as arguments: a JSON list (positional) or object (keywords).
pub(super) fn parse_arguments(text: &str) -> Result<Value, String> {
    match serde_json::from_str::<Value>(text) {
        Ok(value @ (Value::Array(_) | Value::Object(_))) => Ok(value),
        Ok(_) => Err("arguments must be a JSON list (positional) or object (keywords)".into()),
        Err(e) => Err(format!("not valid JSON: {e}")),
    }
}

/// One line of `--args-file` as arguments; a line that is not UTF-8 is that line's error.
pub(super) fn parse_line(bytes: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        format!(
            "not UTF-8 text (invalid byte at offset {})",
            e.valid_up_to()
        )
    })?;
    parse_arguments(text)
}

/// The next line of `reader` without its line ending (`None` at the end), as bytes: a
/// line that is not UTF-8 fails alone, the batch goes on.
pub(super) fn next_line(reader: &mut dyn BufRead) -> std::io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    if reader.read_until(b'\n', &mut line)? == 0 {
        return Ok(None);
    }
    if line.last() == Some(&b'\n') {
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
    }
    Ok(Some(line))
}

/// Prints results in input order as they arrive; tracks whether all were `ok`.
pub(super) struct InOrder {
    done: BTreeMap<usize, Value>,
    next: usize,
    pub(super) all_ok: bool,
}

impl InOrder {
    pub(super) fn new() -> InOrder {
        InOrder {
            done: BTreeMap::new(),
            next: 1,
            all_ok: true,
        }
    }

    pub(super) fn add(&mut self, number: usize, value: Value) -> std::io::Result<()> {
        self.done.insert(number, value);
        let mut stdout = std::io::stdout().lock();
        while let Some(value) = self.done.remove(&self.next) {
            self.all_ok &= value["status"] == "ok";
            writeln!(stdout, "{value}")?;
            self.next += 1;
        }
        stdout.flush()
    }

    /// Report every line up to `total` that got no answer as `internal_error`.
    pub(super) fn finish(&mut self, total: usize, why: &str) -> std::io::Result<()> {
        while self.next <= total {
            let number = self.next;
            self.add(number, line_error(number, Status::InternalError, why))?;
        }
        Ok(())
    }
}
