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

/// The longest `--args-file` line held in memory (one call's arguments): a longer line is
/// that line's `invalid_input`, read past without being held, and the batch goes on.
pub(super) const MAX_LINE_BYTES: usize = 64 << 20;

/// One line of `--args-file`, without its line ending: its bytes, or its length when it
/// was longer than [`MAX_LINE_BYTES`].
pub(super) struct Line(Result<Vec<u8>, u64>);

/// One line of `--args-file` as arguments; a line that is too long or not UTF-8 is that
/// line's error.
pub(super) fn parse_line(line: &Line) -> Result<Value, String> {
    let bytes = match &line.0 {
        Ok(bytes) => bytes,
        Err(length) => {
            return Err(format!(
                "the line is {length} bytes, over the {} MiB a line may have",
                MAX_LINE_BYTES >> 20
            ))
        }
    };
    let text = std::str::from_utf8(bytes).map_err(|e| {
        format!(
            "not UTF-8 text (invalid byte at offset {})",
            e.valid_up_to()
        )
    })?;
    parse_arguments(text)
}

/// The next line of `reader` (`None` at the end). A line that is not UTF-8 or too long
/// fails alone; the batch goes on.
pub(super) fn next_line(reader: &mut dyn BufRead) -> std::io::Result<Option<Line>> {
    next_line_within(reader, MAX_LINE_BYTES)
}

/// [`next_line`] with `max` bytes a line may have: past it, the rest of the line is read
/// and dropped as it comes, never held.
fn next_line_within(reader: &mut dyn BufRead, max: usize) -> std::io::Result<Option<Line>> {
    let mut line = Vec::new();
    let mut length = 0u64;
    let mut over = false;
    loop {
        let available = match reader.fill_buf() {
            Ok(available) => available,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            break;
        }
        let end = available.iter().position(|&b| b == b'\n');
        let chunk = &available[..end.map_or(available.len(), |i| i + 1)];
        length += chunk.len() as u64;
        // The line ending does not count against the bound.
        over = over || line.len() + chunk.len() > max + usize::from(end.is_some());
        if over {
            line = Vec::new();
        } else {
            line.extend_from_slice(chunk);
        }
        let consumed = chunk.len();
        reader.consume(consumed);
        if end.is_some() {
            break;
        }
    }
    if length == 0 {
        return Ok(None);
    }
    if over {
        return Ok(Some(Line(Err(length))));
    }
    if line.last() == Some(&b'\n') {
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
    }
    Ok(Some(Line(Ok(line))))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], max: usize) -> Vec<Result<Vec<u8>, u64>> {
        let mut reader = std::io::BufReader::with_capacity(4, input);
        std::iter::from_fn(|| next_line_within(&mut reader, max).expect("read"))
            .map(|line| line.0)
            .collect()
    }

    #[test]
    fn a_line_over_the_bound_is_its_length_and_the_next_line_is_read_whole() {
        let got = lines(b"[1]\r\n[1, 2, 3, 4]\n[2]\n12345678\n123456789", 8);
        assert_eq!(
            got,
            vec![
                Ok(b"[1]".to_vec()),
                Err(13),
                Ok(b"[2]".to_vec()),
                Ok(b"12345678".to_vec()),
                Err(9),
            ]
        );
    }

    #[test]
    fn a_long_line_is_that_lines_error() {
        let error = parse_line(&Line(Err(70 << 20))).expect_err("refused");
        assert!(error.contains("over the 64 MiB"), "{error}");
    }
}
