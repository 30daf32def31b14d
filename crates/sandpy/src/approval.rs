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
    /// The arguments as a person reads them: indented JSON, cut to `max` bytes (at a
    /// character boundary) and marked `[... N more bytes]`.
    pub fn shown_arguments(&self, max: usize) -> String {
        let mut text = serde_json::to_string_pretty(&self.arguments).unwrap_or_default();
        if text.len() > max {
            let mut end = max;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            let more = text.len() - end;
            text.truncate(end);
            text.push_str(&format!("[... {more} more bytes]"));
        }
        text
    }
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
}
