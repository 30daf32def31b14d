//! What a model is shown of a run: each text cut to a budget, and every cut marked.
//!
//! An agent's client hands a tool result to a model, so a megabyte of stdout or a return
//! value of a few hundred kilobytes would flood its context, and an unmarked cut
//! (`...{"customer":"c593","t`) reads as if it were the whole value. [`ModelOutput::bound`]
//! cuts every long text of an [`Execution`] the same way, keeping its JSON shape: the
//! first `text_bytes` bytes, then `[... N more bytes]`, and lists what it cut in
//! [`Bounded::truncated`]. The MCP server sends the bounded execution as structured
//! content and summarises the same one as text, so the two never disagree.

pub use crate::output::TRUNCATION_MARKER;

use crate::execution::Execution;
use serde_json::Value;
use std::collections::BTreeMap;

/// How much of one run's result a model is shown (the `sandpy.model_output` section of a
/// config file). Default: 20,000 bytes per text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelOutput {
    /// The most bytes shown of each text: stdout, stderr, the return value's JSON, the
    /// error's type, message and traceback, and the policy violations' messages together.
    pub text_bytes: usize,
}

impl Default for ModelOutput {
    fn default() -> Self {
        ModelOutput { text_bytes: 20_000 }
    }
}

/// An execution cut to what a model is shown, and what was cut.
#[derive(Debug, Clone, PartialEq)]
pub struct Bounded {
    /// The execution, its long texts cut and marked, with the same fields and types as
    /// ever, except that a return value whose JSON is too long becomes a string: that
    /// JSON, cut and marked. Output files carry no content (`content_base64` is empty): a
    /// model is shown files apart (the MCP server sends them as their own content); nor do
    /// rich outputs' images, and the final value's bundle has no `text/plain` (it is
    /// `return_value`).
    pub execution: Execution,
    /// Every field cut, by its JSON path (`stdout`, `return_value`, `error.message`,
    /// `violations`, `files[0].content_base64`, ...), with its size before the cut: bytes
    /// for texts, entries for `violations`.
    pub truncated: BTreeMap<String, usize>,
}

impl Bounded {
    /// The execution as JSON (the shape of [`Execution`]), with a `truncated` object
    /// beside its fields when anything was cut.
    pub fn to_json(&self) -> Value {
        let mut value = serde_json::to_value(&self.execution).unwrap_or(Value::Null);
        if let (Value::Object(fields), false) = (&mut value, self.truncated.is_empty()) {
            let truncated = self
                .truncated
                .iter()
                .map(|(path, size)| (path.clone(), Value::from(*size)));
            fields.insert("truncated".into(), Value::Object(truncated.collect()));
        }
        value
    }

    /// The return value as a model reads it in text: a cut one or a `repr()` as it is,
    /// any other value as compact JSON.
    pub fn return_value_text(&self) -> Option<String> {
        let value = self.execution.return_value.as_ref()?;
        let is_text =
            self.execution.return_value_is_repr || self.truncated.contains_key("return_value");
        Some(return_value_text(value, is_text))
    }
}

/// `[... N more bytes]`: what follows a cut text, `N` being the bytes left out.
pub(crate) fn cut_marker(left_out: usize) -> String {
    format!("[... {left_out} more bytes]")
}

/// `text` cut to its first `max` bytes (fewer, to end on a character boundary) followed by
/// [`cut_marker`]; `None` when it fits.
pub(crate) fn cut_text(text: &str, max: usize) -> Option<String> {
    if text.len() <= max {
        return None;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut cut = String::with_capacity(end + 24);
    cut.push_str(&text[..end]);
    cut.push_str(&cut_marker(text.len() - end));
    Some(cut)
}

impl ModelOutput {
    /// `execution` as a model is shown it (see [`Bounded`]).
    pub fn bound(&self, execution: &Execution) -> Bounded {
        let max = self.text_bytes;
        let mut truncated = BTreeMap::new();
        let mut shown = execution.clone();
        let mut cut = |path: &str, text: &mut String| {
            if let Some(short) = cut_text(text, max) {
                truncated.insert(path.to_string(), text.len());
                *text = short;
            }
        };
        cut("stdout", &mut shown.stdout);
        cut("stderr", &mut shown.stderr);
        if let Some(error) = &mut shown.error {
            cut("error.type", &mut error.kind);
            cut("error.message", &mut error.message);
            if let Some(traceback) = &mut error.traceback {
                cut("error.traceback", traceback);
            }
        }
        // Violations share one budget: whole ones while their messages fit, and always
        // the first (its message cut if need be).
        let mut used = 0;
        let mut kept = 0;
        for (i, violation) in shown.violations.iter_mut().enumerate() {
            if i > 0 && used + violation.message.len() > max {
                break;
            }
            cut(&format!("violations[{i}].message"), &mut violation.message);
            used += violation.message.len();
            kept += 1;
        }
        if kept < shown.violations.len() {
            truncated.insert("violations".into(), shown.violations.len());
            shown.violations.truncate(kept);
        }
        if let Some(value) = &shown.return_value {
            let text = return_value_text(value, shown.return_value_is_repr);
            if let Some(short) = cut_text(&text, max) {
                truncated.insert("return_value".into(), text.len());
                shown.return_value = Some(Value::String(short));
            }
        }
        // Rich outputs: texts cut as any text; images carry no bytes here (a model is
        // shown them apart, as the MCP server's image content); the final value's
        // `text/plain` is `return_value`, not repeated.
        for (i, output) in shown.outputs.iter_mut().enumerate() {
            if output.kind == crate::RichOutputKind::Result {
                output.data.remove("text/plain");
            }
            for (mime, data) in output.data.iter_mut() {
                let path = format!("outputs[{i}].data.{mime}");
                if crate::RichOutput::is_binary(mime) {
                    if !data.is_empty() {
                        truncated.insert(path, data.len());
                        data.clear();
                    }
                } else if let Some(short) = cut_text(data, max) {
                    truncated.insert(path, data.len());
                    *data = short;
                }
            }
        }
        for (i, file) in shown.files.iter_mut().enumerate() {
            if !file.content.is_empty() {
                let encoded = file.content.len().div_ceil(3) * 4;
                truncated.insert(format!("files[{i}].content_base64"), encoded);
                file.content = Vec::new();
            }
        }
        Bounded {
            execution: shown,
            truncated,
        }
    }
}

/// A return value as a model reads it: text (a `repr()`, or JSON already cut) as it is,
/// anything else as compact JSON.
fn return_value_text(value: &Value, is_text: bool) -> String {
    match value {
        Value::String(text) if is_text => text.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::execution::{ErrorInfo, Status};
    use serde_json::json;

    fn execution() -> Execution {
        let mut e = Execution::refused(Status::Ok, String::new());
        e.error = None;
        e
    }

    #[test]
    fn a_text_is_cut_on_a_character_boundary_and_marked() {
        assert_eq!(cut_text("short", 5), None);
        assert_eq!(
            cut_text("abcdef", 4).as_deref(),
            Some("abcd[... 2 more bytes]")
        );
        // "é" is two bytes: a cut inside it keeps the byte before.
        assert_eq!(cut_text("aéb", 2).as_deref(), Some("a[... 3 more bytes]"));
    }

    #[test]
    fn every_long_text_is_cut_and_listed() {
        let mut e = execution();
        e.stdout = "o".repeat(30);
        e.stderr = "short".into();
        e.return_value = Some(json!({"customer": "c593", "total": 12}));
        e.error = Some(ErrorInfo {
            kind: "ValueError".into(),
            message: "m".repeat(11),
            traceback: Some("t".repeat(10)),
        });
        let bounded = ModelOutput { text_bytes: 10 }.bound(&e);
        let shown = &bounded.execution;
        assert_eq!(
            shown.stdout,
            format!("{}[... 20 more bytes]", "o".repeat(10))
        );
        assert_eq!(shown.stderr, "short");
        assert_eq!(
            shown.return_value,
            Some(json!(r#"{"customer[... 20 more bytes]"#))
        );
        let error = shown.error.as_ref().unwrap();
        assert_eq!(error.kind, "ValueError");
        assert_eq!(
            error.message,
            format!("{}[... 1 more bytes]", "m".repeat(10))
        );
        assert_eq!(error.traceback.as_deref(), Some("tttttttttt"));
        let listed: Vec<(&str, usize)> = bounded
            .truncated
            .iter()
            .map(|(k, v)| (k.as_str(), *v))
            .collect();
        assert_eq!(
            listed,
            [("error.message", 11), ("return_value", 30), ("stdout", 30)]
        );
        let json = bounded.to_json();
        assert_eq!(
            json["truncated"],
            json!({"error.message": 11, "return_value": 30, "stdout": 30})
        );
        assert_eq!(json["status"], "ok", "the Execution's own fields stay");
        assert_eq!(
            bounded.return_value_text().as_deref(),
            Some(r#"{"customer[... 20 more bytes]"#),
            "shown as the cut text, not as a JSON string"
        );
    }

    #[test]
    fn nothing_cut_means_no_truncated_key_and_the_same_execution() {
        let mut e = execution();
        e.stdout = "fits".into();
        e.return_value = Some(json!("a repr"));
        e.return_value_is_repr = true;
        let bounded = ModelOutput::default().bound(&e);
        assert_eq!(bounded.execution, e);
        assert!(bounded.to_json().get("truncated").is_none());
        assert_eq!(bounded.return_value_text().as_deref(), Some("a repr"));
        e.return_value = Some(json!("text"));
        e.return_value_is_repr = false;
        let bounded = ModelOutput::default().bound(&e);
        assert_eq!(bounded.return_value_text().as_deref(), Some(r#""text""#));
    }

    #[test]
    fn violations_share_one_budget_and_files_lose_their_bytes() {
        let mut e = execution();
        e.violations = (0..5)
            .map(|i| crate::Violation {
                line: i,
                column: 0,
                rule: "import".into(),
                message: "x".repeat(4),
            })
            .collect();
        e.files = vec![crate::files::OutputFile {
            name: "a.txt".into(),
            size: 4,
            mime_type: "text/plain".into(),
            content: b"abcd".to_vec(),
        }];
        let bounded = ModelOutput { text_bytes: 10 }.bound(&e);
        assert_eq!(bounded.execution.violations.len(), 2);
        assert_eq!(bounded.truncated["violations"], 5);
        assert!(bounded.execution.files[0].content.is_empty());
        assert_eq!(bounded.execution.files[0].size, 4);
        assert_eq!(bounded.truncated["files[0].content_base64"], 8);
    }
}
