//! Tools the guest may call: the [`ToolHost`] trait, the allowlist, and tool search.
//!
//! The allowlist is applied here, on the host: the guest only ever sees and reaches the
//! tools it allows, whatever its Python does.

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;

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
/// Calls of one batch run concurrently, so the future should not block a thread.
pub trait ToolHost: Send + Sync + 'static {
    /// Every tool this host offers (the allowlist filters it per run).
    fn list_tools(&self) -> Vec<ToolInfo>;
    /// Call one tool.
    fn call_tool(&self, name: &str, arguments: Value) -> ToolFuture;
    /// Why `name` is not among the listed tools (e.g. which rule hides it).
    fn explain_missing(&self, name: &str) -> String {
        format!("unknown tool {name:?}; use discover_mcp_tools() or search_tools() to find one")
    }
    /// A call the sandbox refused before it reached this host (allowlist, unknown tool,
    /// size, malformed arguments), e.g. to audit it. Does nothing by default.
    fn refused(&self, _name: &str, _reason: &str) {}
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

fn glob(pattern: &str) -> Result<Glob, ToolPatternError> {
    Glob::new(pattern).map_err(|e| ToolPatternError {
        pattern: pattern.to_string(),
        reason: e.kind().to_string(),
    })
}

/// Check one allowlist pattern (an exact name or a glob), as used in configs.
pub fn validate_tool_pattern(pattern: &str) -> Result<(), ToolPatternError> {
    glob(pattern).map(drop)
}

fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut prev_lower = false;
    for c in text.chars() {
        if !c.is_alphanumeric() {
            prev_lower = false;
            if !current.is_empty() {
                out.push(std::mem::take(&mut current));
            }
            continue;
        }
        if c.is_uppercase() && prev_lower && !current.is_empty() {
            out.push(std::mem::take(&mut current)); // camelCase boundary
        }
        prev_lower = c.is_lowercase();
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// Relevance of `tool` to the query terms: whole-word hits in the name weigh most, then
/// prefix hits in the name, then words of the description.
fn score(tool: &ToolInfo, query: &str, terms: &[String]) -> f64 {
    let name_words = words(&tool.name);
    let description_words = words(&tool.description);
    let mut total = 0.0;
    if !query.is_empty() && tool.name.to_lowercase().contains(&query.to_lowercase()) {
        total += 4.0;
    }
    for term in terms {
        if name_words.iter().any(|w| w == term) {
            total += 3.0;
        } else if name_words
            .iter()
            .any(|w| w.starts_with(term.as_str()) || term.starts_with(w.as_str()) && w.len() >= 3)
        {
            total += 1.5;
        }
        if description_words.iter().any(|w| w == term) {
            total += 1.0;
        } else if description_words
            .iter()
            .any(|w| w.starts_with(term.as_str()) && term.len() >= 3)
        {
            total += 0.5;
        }
    }
    total
}

/// The tools most relevant to `query`, best first; ties by name. Tools matching no term
/// are left out.
pub fn search<'a>(
    tools: impl IntoIterator<Item = &'a ToolInfo>,
    query: &str,
    limit: usize,
) -> Vec<&'a ToolInfo> {
    let terms = words(query);
    let mut scored: Vec<(f64, &ToolInfo)> = tools
        .into_iter()
        .map(|t| (score(t, query.trim(), &terms), t))
        .filter(|(s, _)| *s > 0.0)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.name.cmp(&b.1.name)));
    scored.into_iter().take(limit).map(|(_, t)| t).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, description: &str) -> ToolInfo {
        ToolInfo {
            name: name.into(),
            description: description.into(),
            input_schema: serde_json::json!({}),
        }
    }

    #[test]
    fn search_ranks_name_hits_over_description_hits() {
        let tools = [
            tool("mcp__fs__read_file", "Read a file"),
            tool("mcp__fs__write_file", "Write a file"),
            tool("mcp__mem__create_entities", "Store facts; can read later"),
        ];
        let found: Vec<&str> = search(&tools, "read", 10)
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        assert_eq!(found, ["mcp__fs__read_file", "mcp__mem__create_entities"]);
        assert!(search(&tools, "nothing-like-it", 10).is_empty());
        assert_eq!(search(&tools, "file", 1).len(), 1);
    }

    #[test]
    fn words_split_snake_kebab_and_camel_case() {
        assert_eq!(
            words("mcp__my-server__getTinyImage"),
            ["mcp", "my", "server", "get", "tiny", "image"]
        );
    }

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
