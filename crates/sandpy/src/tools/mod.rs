//! Tools the guest may call: the [`ToolHost`] trait, the allowlist, tool search
//! ([`search`]), tools as Python signatures ([`signature`]), and the approval of calls a
//! person must allow ([`Approver`]).
//!
//! The allowlist is applied here, on the host: the guest only ever sees and reaches the
//! tools it allows, whatever its Python does.

pub(crate) mod approval;
pub(crate) mod search;
pub mod signature;

pub use approval::{ApprovalFuture, ApprovalRequest, Approver, Decision, Unshowable};
pub use search::{search, ToolSummary};

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;

/// One tool call as a session journal keeps it: replaying a session answers the call
/// from here instead of calling the tool again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedCall {
    /// The tool called.
    pub name: String,
    /// What the guest got: the result as JSON, or the error message.
    pub result: Result<String, ToolError>,
}

/// A tool the guest can discover and call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolInfo {
    /// Full name, `mcp__<server>__<tool>` for MCP tools.
    pub name: String,
    /// What the tool does, as its server describes it.
    #[serde(default)]
    pub description: String,
    /// JSON schema of the arguments object.
    #[serde(rename = "inputSchema")]
    pub input_schema: Value,
}

/// The future a [`ToolHost`] returns for one call.
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<Value, ToolError>> + Send + 'static>>;

/// What [`ToolHost::prepare`] returns: done when the host has done what it could.
pub type PrepareFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A tool's own failure: the guest sees it raised as `ToolError` with this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("{message}")]
#[serde(transparent)]
pub struct ToolError {
    /// What the tool (or the host on its behalf) said went wrong.
    pub message: String,
}

impl From<String> for ToolError {
    fn from(message: String) -> Self {
        ToolError { message }
    }
}

impl From<&str> for ToolError {
    fn from(message: &str) -> Self {
        message.to_string().into()
    }
}

/// Where the guest's tool calls go (the MCP hub in `sandpy-mcp`, or your own functions).
///
/// `call_tool` gets arguments that passed the allowlist and size limits; it returns the
/// result as JSON, or the tool's own error message (raised in Python as `ToolError`).
///
/// Time limits: the sandbox awaits each call's future under the call's `tool_timeout_ms`
/// and the run's deadline, and drops it when either ends (a dropped future is the call
/// cancelled: the run ends at its deadline naming the tools it was waiting for, and its
/// run slot is free again). That only works while the future yields: calls of one batch
/// run concurrently on the thread that drives the run, so neither `call_tool` nor its
/// future may block a thread. Blocking work goes on a thread of its own (e.g.
/// `tokio::task::spawn_blocking`, or a bounded pool, as the Python package runs its
/// synchronous host tools), whose answer the future awaits: at the deadline the run
/// ends, and the thread finishes on its own with nobody waiting for its answer.
pub trait ToolHost: Send + Sync + 'static {
    /// Every tool this host offers (the allowlist filters it per run).
    fn list_tools(&self) -> Vec<ToolInfo>;
    /// The tool called `name`, for `get_tool_schema`. The default searches
    /// [`ToolHost::list_tools`]; a host with many tools should answer from an index.
    fn tool(&self, name: &str) -> Option<ToolInfo> {
        self.list_tools().into_iter().find(|t| t.name == name)
    }
    /// Whether this host offers `name`: asked before every call, so a host with many tools
    /// should answer from an index (the default lists every tool).
    fn has_tool(&self, name: &str) -> bool {
        self.tool(name).is_some()
    }
    /// The names of every tool, in [`ToolHost::list_tools`] order, for the guest's
    /// `tools.<server>.<tool>` namespace. The default lists every tool.
    fn tool_names(&self) -> Vec<String> {
        self.list_tools().into_iter().map(|t| t.name).collect()
    }
    /// The JSON schema of `name`'s results (MCP's `outputSchema`), when it declares one:
    /// the return type of its signature ([`signature`]). `None` by default (`Any`).
    fn output_schema(&self, _name: &str) -> Option<Value> {
        None
    }
    /// Call one tool.
    fn call_tool(&self, name: &str, arguments: Value) -> ToolFuture;
    /// Why `name` is not among the listed tools (e.g. which rule hides it).
    fn explain_missing(&self, name: &str) -> String {
        format!("unknown tool {name:?}; use discover_mcp_tools() or search_tools() to find one")
    }
    /// Called before a batch of calls that names tools not listed (`missing`), and before
    /// the guest lists, searches or reads the schema of tools (`missing` empty): a host
    /// whose tools come and go (the MCP hub retries a server that failed to start) can
    /// make them available; the sandbox then lists the tools again. The call's time
    /// limits bound the wait. Does nothing by default.
    fn prepare(&self, _missing: &[String]) -> PrepareFuture {
        Box::pin(async {})
    }
    /// A call the sandbox refused before it reached this host (allowlist, unknown tool,
    /// size, malformed arguments), e.g. to audit it. Does nothing by default.
    fn refused(&self, _name: &str, _reason: &str) {}
    /// The decision on a call that needed approval (see [`crate::tools::Approver`]), made before
    /// the call reached this host, e.g. to audit it. Does nothing by default.
    fn decided(&self, _name: &str, _arguments: &Value, _decision: &crate::tools::Decision) {}
}

/// Which tools may be used: all, or those matching every layer of exact names or globs
/// (`mcp__fs__*`); each layer (config, policy, run) can only narrow the ones before.
#[derive(Debug, Clone, Default)]
pub struct Allowlist {
    layers: Vec<(Vec<String>, GlobSet)>,
}

impl Allowlist {
    /// `None` allows every tool; otherwise a tool must match one of `patterns`.
    pub fn new(patterns: Option<&[String]>) -> Result<Self, ToolPatternError> {
        Allowlist::default().narrow(patterns)
    }

    /// This allowlist, further limited to `patterns` (no change for `None`).
    pub fn narrow(mut self, patterns: Option<&[String]>) -> Result<Self, ToolPatternError> {
        let Some(patterns) = patterns else {
            return Ok(self);
        };
        let mut builder = GlobSetBuilder::new();
        for pattern in patterns {
            builder.add(glob(pattern)?);
        }
        let set = builder.build().map_err(|e| ToolPatternError {
            pattern: patterns.join(", "),
            reason: e.to_string(),
        })?;
        self.layers.push((patterns.to_vec(), set));
        Ok(self)
    }

    /// Whether `name` may be used.
    pub fn allows(&self, name: &str) -> bool {
        self.layers.iter().all(|(_, set)| set.is_match(name))
    }

    /// Why `name` is refused, naming the rules.
    pub fn refusal(&self, name: &str) -> String {
        match self.layers.iter().find(|(_, set)| !set.is_match(name)) {
            Some((patterns, _)) => format!(
                "tool {name:?} is not allowed: it matches none of the allowed_tools patterns {patterns:?}"
            ),
            None => format!("tool {name:?} is not allowed"),
        }
    }
}

/// A tool pattern (an exact name or a glob) that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid tool pattern {pattern:?}: {reason}")]
pub struct ToolPatternError {
    /// The pattern as given.
    pub pattern: String,
    /// What is wrong with it.
    pub reason: String,
}

pub(crate) fn glob(pattern: &str) -> Result<Glob, ToolPatternError> {
    Glob::new(pattern).map_err(|e| ToolPatternError {
        pattern: pattern.to_string(),
        reason: e.kind().to_string(),
    })
}

/// Check one allowlist pattern (an exact name or a glob), as used in configs.
pub fn validate_tool_pattern(pattern: &str) -> Result<(), ToolPatternError> {
    glob(pattern).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowlist_names_the_rules_that_refused() {
        let list = Allowlist::new(Some(&[
            "mcp__fs__*".to_string(),
            "mcp__mem__read".to_string(),
        ]))
        .unwrap();
        assert!(list.allows("mcp__fs__write_file"));
        assert!(list.allows("mcp__mem__read"));
        assert!(!list.allows("mcp__mem__write"));
        assert!(list.refusal("mcp__mem__write").contains("mcp__fs__*"));
        assert!(Allowlist::new(Some(&["[".to_string()])).is_err());
        assert!(Allowlist::new(None).unwrap().allows("anything"));
        let narrowed = list.narrow(Some(&["mcp__fs__read*".to_string()])).unwrap();
        assert!(narrowed.allows("mcp__fs__read_file") && !narrowed.allows("mcp__fs__write_file"));
        assert!(narrowed
            .refusal("mcp__fs__write_file")
            .contains("mcp__fs__read*"));
        assert!(!Allowlist::new(Some(&[])).unwrap().allows("x"));
    }
}
