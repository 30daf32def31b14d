//! Approval of tool calls: the tools whose calls wait for a yes (`sandpy.approve` in a
//! config, a policy's `approve`, [`RunOptions::approve`](crate::RunOptions::approve)), and
//! the [`Approver`] who gives it: a person asked through the MCP client (elicitation), on
//! the terminal (`sandpy run --approve`), or a function of the embedding program.
//!
//! In code mode one program may call `delete_file` fifty times; a call that needs approval
//! waits for its decision (the wait counts against the run's time limit), and a call
//! nobody approved never reaches its tool: the code gets a `ToolError` naming the tool.

use crate::tools::ToolPatternError;
use globset::{GlobSet, GlobSetBuilder};
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// One tool call waiting for approval: what the approver is shown.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRequest {
    /// The tool the code calls, `mcp__<server>__<tool>` for MCP tools.
    pub tool: String,
    /// The arguments it passes (a JSON object that passed the size limit).
    pub arguments: Value,
}

impl ApprovalRequest {
    /// The arguments as a person reads them, in at most `max` bytes: one line per argument,
    /// its name in full and its value as compact JSON, each long value cut on its own and
    /// marked `[... N more bytes]`, so that padding in one argument can never push another
    /// out of sight. Characters that hide or reorder text (controls, bidirectional
    /// overrides, zero-width and tag characters) are shown as `\u{..}` escapes.
    ///
    /// Arguments whose names alone do not fit in `max` (each with a few bytes of its value)
    /// cannot be shown: such a call must be refused, not asked about.
    pub fn shown_arguments(&self, max: usize) -> Result<String, Unshowable> {
        let entries: Vec<(Option<String>, String)> = match &self.arguments {
            Value::Object(map) => map
                .iter()
                .map(|(name, value)| (Some(visible(&Value::from(name.as_str()))), visible(value)))
                .collect(),
            other => vec![(None, visible(other))],
        };
        // Each line's fixed part: indent, the name, `: ` and the newline.
        let fixed: usize = entries
            .iter()
            .map(|(name, _)| name.as_ref().map_or(0, |n| n.len() + 2) + 3)
            .sum();
        let least = entries.len() * SHOWN_VALUE_AT_LEAST;
        if fixed + least > max {
            return Err(Unshowable {
                arguments: entries.len(),
                bytes: fixed + least,
                max,
            });
        }
        // Short values are shown whole; what they leave is shared by the longer ones.
        let mut budgets = vec![0; entries.len()];
        let mut order: Vec<usize> = (0..entries.len()).collect();
        order.sort_by_key(|&i| entries[i].1.len());
        let mut left = max - fixed;
        for (done, &i) in order.iter().enumerate() {
            let share = left / (entries.len() - done);
            budgets[i] = entries[i].1.len().min(share);
            left -= budgets[i];
        }
        let mut text = String::new();
        for ((name, value), budget) in entries.iter().zip(budgets) {
            text.push_str("  ");
            if let Some(name) = name {
                text.push_str(name);
                text.push_str(": ");
            }
            text.push_str(&cut(value, budget));
            text.push('\n');
        }
        Ok(text)
    }
}

/// The bytes of a value shown at least, whatever the number of arguments.
const SHOWN_VALUE_AT_LEAST: usize = 40;

/// A call's arguments could not be put before a person in full enough to decide on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("its {arguments} arguments need {bytes} bytes to show each name with the start of its value, more than the {max} a prompt holds")]
pub struct Unshowable {
    /// How many arguments the call has.
    pub arguments: usize,
    /// The bytes their names and the shortest views of their values need.
    pub bytes: usize,
    /// The most a prompt shows.
    pub max: usize,
}

/// `value` as compact JSON with every character that could hide or reorder what a person
/// reads escaped (JSON escapes only the ASCII controls).
fn visible(value: &Value) -> String {
    let json = serde_json::to_string(value).unwrap_or_default();
    let mut shown = String::with_capacity(json.len());
    for c in json.chars() {
        if hides_text(c) {
            shown.push_str(&format!("\\u{{{:04x}}}", u32::from(c)));
        } else {
            shown.push(c);
        }
    }
    shown
}

/// Controls, bidirectional marks and overrides, zero-width characters, invisible
/// operators and tags: characters that change what a person sees of the text around them.
fn hides_text(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00ad}' | '\u{034f}' | '\u{061c}' | '\u{115f}' | '\u{1160}' | '\u{17b4}' | '\u{17b5}'
            | '\u{180b}'..='\u{180f}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}' | '\u{3164}' | '\u{fe00}'..='\u{fe0f}' | '\u{feff}'
            | '\u{ffa0}' | '\u{fff9}'..='\u{fffb}' | '\u{e0000}'..='\u{e0fff}')
}

/// `text` cut to `budget` bytes at a character boundary, marked when cut.
fn cut(text: &str, budget: usize) -> String {
    if text.len() <= budget {
        return text.to_string();
    }
    let mut end = budget;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{} [... {} more bytes]", &text[..end], text.len() - end)
}

/// An approver's answer to one [`ApprovalRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether the call may go ahead.
    pub approved: bool,
    /// Who or what decided, for the audit log: `elicitation`, `terminal`, `callback`, or
    /// `sandpy` when nobody could be asked.
    pub by: String,
    /// Why the call was refused: the message the code gets in its `ToolError` (a default
    /// naming the tool when `None`).
    pub reason: Option<String>,
}

impl Decision {
    /// The call may go ahead; `by` says who decided.
    pub fn approve(by: impl Into<String>) -> Decision {
        Decision {
            approved: true,
            by: by.into(),
            reason: None,
        }
    }

    /// The call is refused; `by` says who decided, `reason` what the code is told.
    pub fn decline(by: impl Into<String>, reason: Option<String>) -> Decision {
        Decision {
            approved: false,
            by: by.into(),
            reason,
        }
    }

    /// The refusal of a call to `tool` whose arguments cannot be put before a person
    /// ([`ApprovalRequest::shown_arguments`]): refused by sandpy, never asked about.
    pub fn unshown(tool: &str, why: &Unshowable) -> Decision {
        Decision::decline(
            "sandpy",
            Some(format!(
                "{tool} needs approval and its arguments cannot be shown to be approved ({why}), so the call was refused"
            )),
        )
    }

    /// What the code is told when the call to `tool` was refused.
    pub fn refusal(&self, tool: &str) -> String {
        self.reason
            .clone()
            .unwrap_or_else(|| format!("the user declined {tool}"))
    }
}

/// The future an [`Approver`] returns for one request.
pub type ApprovalFuture = Pin<Box<dyn Future<Output = Decision> + Send + 'static>>;

/// Who decides whether a tool call that needs approval goes ahead. Asked once per call, in
/// call order; the call (and the code awaiting it) waits meanwhile, within the run's time
/// limit. Any `Fn(ApprovalRequest) -> ApprovalFuture` is an approver.
pub trait Approver: Send + Sync + 'static {
    /// Decide on one call.
    fn approve(&self, request: ApprovalRequest) -> ApprovalFuture;
}

impl<F> Approver for F
where
    F: Fn(ApprovalRequest) -> ApprovalFuture + Send + Sync + 'static,
{
    fn approve(&self, request: ApprovalRequest) -> ApprovalFuture {
        self(request)
    }
}

/// The approval rules of one run: which tools need it and who is asked.
#[derive(Clone, Default)]
pub(crate) struct Approval {
    /// The tools whose calls need approval; `None` when no pattern was given.
    needed: Option<GlobSet>,
    approver: Option<Arc<dyn Approver>>,
}

impl Approval {
    /// Calls of tools matching any of `patterns` need `approver`'s yes (every such call is
    /// refused when there is no approver).
    pub(crate) fn new(
        patterns: &[&String],
        approver: Option<Arc<dyn Approver>>,
    ) -> Result<Approval, ToolPatternError> {
        if patterns.is_empty() {
            return Ok(Approval::default());
        }
        let mut builder = GlobSetBuilder::new();
        for pattern in patterns {
            builder.add(crate::tools::glob(pattern)?);
        }
        let set = builder.build().map_err(|e| ToolPatternError {
            pattern: patterns
                .iter()
                .map(|p| p.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            reason: e.to_string(),
        })?;
        Ok(Approval {
            needed: Some(set),
            approver,
        })
    }

    /// Whether a call of `tool` needs approval.
    pub(crate) fn needed(&self, tool: &str) -> bool {
        self.needed.as_ref().is_some_and(|set| set.is_match(tool))
    }

    /// The decision on one call of `tool` that needs approval.
    pub(crate) async fn decide(&self, tool: &str, arguments: &Value) -> Decision {
        match &self.approver {
            Some(approver) => {
                let request = ApprovalRequest {
                    tool: tool.to_string(),
                    arguments: arguments.clone(),
                };
                approver.approve(request).await
            }
            None => Decision::decline(
                "sandpy",
                Some(format!(
                    "{tool} needs approval (sandpy.approve) and nobody can be asked here, so the call was refused"
                )),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn calls_needing_approval_are_refused_when_nobody_can_be_asked() {
        let patterns = ["mcp__fs__write_*".to_string()];
        let approval = Approval::new(&patterns.iter().collect::<Vec<_>>(), None).unwrap();
        assert!(approval.needed("mcp__fs__write_file"));
        assert!(!approval.needed("mcp__fs__read_file"));
        let decision = approval
            .decide("mcp__fs__write_file", &serde_json::json!({}))
            .await;
        assert!(!decision.approved);
        assert_eq!(decision.by, "sandpy");
        assert!(decision
            .refusal("mcp__fs__write_file")
            .contains("needs approval"));
        assert!(!Approval::default().needed("anything"));
        assert_eq!(
            Decision::decline("callback", None).refusal("t"),
            "the user declined t"
        );
    }

    fn shown(arguments: Value, max: usize) -> Result<String, Unshowable> {
        let request = ApprovalRequest {
            tool: "mcp__ev__get-sum".into(),
            arguments,
        };
        request.shown_arguments(max)
    }

    #[test]
    fn approval_prompt_padding_in_one_argument_never_hides_another() {
        // The attack: a key that sorts first, padded past the prompt's size.
        let padded = serde_json::json!({"_note": format!("harmless {}", " ".repeat(2100)), "a": 1000000, "b": 2});
        let text = shown(padded, 2000).expect("shown");
        assert!(text.contains("  \"a\": 1000000\n"), "{text}");
        assert!(text.contains("  \"b\": 2\n"), "{text}");
        assert!(text.contains("\"_note\": \"harmless "), "{text}");
        assert!(text.contains("more bytes]"), "{text}");
        assert!(text.len() <= 2000 + 40, "{}", text.len());
        // Two long values share the room; both are shown in part, both marked.
        let two = serde_json::json!({"x": "x".repeat(5000), "y": "y".repeat(5000)});
        let text = shown(two, 2000).expect("shown");
        assert_eq!(text.matches("more bytes]").count(), 2, "{text}");
        assert!(text.contains("\"y\": \"yyyy"), "{text}");
    }

    #[test]
    fn approval_prompt_escapes_what_hides_or_reorders_text() {
        let text = shown(
            serde_json::json!({"path": "/tmp/\u{202e}txt.exe", "n\u{200b}": "\u{7}"}),
            2000,
        )
        .expect("shown");
        assert!(
            text.contains("\\u{202e}") && text.contains("\\u{200b}"),
            "{text}"
        );
        assert!(
            !text.contains('\u{202e}') && !text.contains('\u{200b}'),
            "{text}"
        );
    }

    #[test]
    fn approval_prompt_refuses_arguments_whose_names_do_not_fit() {
        let many: serde_json::Map<String, Value> = (0..300)
            .map(|i| (format!("argument_{i:04}"), Value::from(i)))
            .collect();
        let error = shown(Value::Object(many), 2000).expect_err("unshowable");
        assert_eq!(error.arguments, 300);
        assert!(error.to_string().contains("300 arguments"), "{error}");
        let long_name = serde_json::json!({"k".repeat(3000): 1});
        assert!(shown(long_name, 2000).is_err());
    }
}
