//! The hub as one execution's tool host, with a record in the audit log for every call:
//! answered, refused, decided on, or abandoned when the sandbox stopped waiting.

use super::Hub;
use crate::audit::AuditLog;
use sandpy::tools::{PrepareFuture, ToolError, ToolFuture, ToolHost, ToolInfo};
use serde_json::Value;
use std::sync::Arc;
use std::time::Instant;

/// The hub plus an audit record per call.
pub(super) struct AuditedTools {
    pub(super) hub: Hub,
    pub(super) audit: AuditLog,
    pub(super) execution_id: Arc<str>,
}

impl ToolHost for AuditedTools {
    fn list_tools(&self) -> Vec<ToolInfo> {
        self.hub.list_tools()
    }

    fn tool(&self, name: &str) -> Option<ToolInfo> {
        self.hub.tool(name)
    }

    fn has_tool(&self, name: &str) -> bool {
        self.hub.has_tool(name)
    }

    fn output_schema(&self, name: &str) -> Option<Value> {
        self.hub.output_schema(name)
    }

    fn tool_names(&self) -> Vec<String> {
        self.hub.tool_names()
    }

    fn explain_missing(&self, name: &str) -> String {
        self.hub.explain_missing(name)
    }

    fn prepare(&self, missing: &[String]) -> PrepareFuture {
        self.hub.prepare(missing)
    }

    fn refused(&self, name: &str, reason: &str) {
        self.audit.refused_call(&self.execution_id, name, reason);
    }

    fn decided(&self, name: &str, arguments: &Value, decision: &sandpy::tools::Decision) {
        self.audit
            .approval(&self.execution_id, name, arguments, decision);
    }

    fn call_tool(&self, name: &str, arguments: Value) -> ToolFuture {
        let (hub, audit, id, name) = (
            self.hub.clone(),
            self.audit.clone(),
            self.execution_id.clone(),
            name.to_string(),
        );
        Box::pin(async move {
            let mut unanswered = Unanswered {
                audit: audit.clone(),
                execution_id: id.clone(),
                tool: name.clone(),
                started: Instant::now(),
                answered: false,
            };
            let outcome = hub
                .call(name.clone(), arguments.clone())
                .await
                .map_err(ToolError::from);
            unanswered.answered = true;
            audit.tool_call(
                &id,
                &name,
                &arguments,
                unanswered.started.elapsed().as_secs_f64() * 1e3,
                &outcome,
            );
            outcome
        })
    }
}

/// A call in progress, as the audit log sees it: dropped before its answer came (the
/// sandbox stopped waiting: the call's `tool_timeout_ms` or the run's time limit ended
/// it), it is recorded as abandoned.
struct Unanswered {
    audit: AuditLog,
    execution_id: Arc<str>,
    tool: String,
    started: Instant,
    answered: bool,
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        if !self.answered {
            let waited_ms = self.started.elapsed().as_secs_f64() * 1e3;
            self.audit
                .abandoned_call(&self.execution_id, &self.tool, waited_ms);
        }
    }
}
