//! The audit log: JSON Lines, one record per execution, one per tool call and one per
//! approval decision.
//!
//! Each record is one `write` of a whole line to a file opened for appending, so a crash
//! loses at most the record being written, never an earlier one. Argument values are
//! recorded only when the config asks (`audit_arguments`).

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// Appends audit records; cheap to clone.
#[derive(Clone)]
pub struct AuditLog {
    file: Arc<Mutex<File>>,
    record_arguments: bool,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Hex SHA-256 of the code (or a call's arguments), so records identify it without
/// storing it.
fn code_hash(code: &str) -> String {
    Sha256::digest(code.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl AuditLog {
    /// Open (creating) the log for appending, in a folder (made if missing) that no other
    /// user controls: in one they could write in, a link put where the log goes would have
    /// this user append to a file of their choosing.
    pub fn open(path: &Path, record_arguments: bool) -> std::io::Result<AuditLog> {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        sandpy::files::output_folder(dir).map_err(std::io::Error::other)?;
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(AuditLog {
            file: Arc::new(Mutex::new(file)),
            record_arguments,
        })
    }

    fn append(&self, mut record: Value) {
        record["ts_ms"] = json!(now_ms());
        let mut line = record.to_string();
        line.push('\n');
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = file.write_all(line.as_bytes()) {
            tracing::error!("cannot append to the audit log: {e}");
        }
    }

    /// One finished execution, with the tenant that asked for it (`local` over stdio,
    /// `client-<n>` for an MCP session over HTTP, `tenant:<name>` for a configured token).
    pub fn execution(
        &self,
        execution_id: &str,
        tenant: &str,
        code: &str,
        limits: &sandpy::Limits,
        execution: &sandpy::Execution,
    ) {
        self.append(json!({
            "kind": "execution",
            "execution_id": execution_id,
            "tenant": tenant,
            "code_sha256": code_hash(code),
            "code_bytes": code.len(),
            "limits": {
                "timeout_ms": limits.timeout.as_millis() as u64,
                "memory_bytes": limits.memory_bytes,
                "output_bytes": limits.output_bytes,
                "tool_calls": limits.tool_calls,
                "tool_timeout_ms": limits.tool_timeout.as_millis() as u64,
                "disk_bytes": limits.disk_bytes,
                "output_files_bytes": limits.output_files_bytes,
            },
            "status": execution.status,
            "duration_ms": execution.duration_ms,
            "tool_calls": execution.tool_calls,
            "memory_peak_bytes": execution.memory_peak_bytes,
            "output_files": execution.files.iter().map(|f| json!({"name": f.name, "size": f.size})).collect::<Vec<_>>(),
            // Method, URL without its query, status, bytes, error: never a header.
            "requests": execution.requests,
        }));
    }

    /// One tool call the sandbox refused before it reached a server.
    pub fn refused_call(&self, execution_id: &str, tool: &str, reason: &str) {
        self.append(json!({
            "kind": "tool_call",
            "execution_id": execution_id,
            "tool": tool,
            "outcome": "refused",
            "reason": reason,
        }));
    }

    /// The decision on a call that needed approval: the tool, a hash of its arguments
    /// (their values too when configured), the decision and who made it.
    pub fn approval(
        &self,
        execution_id: &str,
        tool: &str,
        arguments: &Value,
        decision: &sandpy::tools::Decision,
    ) {
        let text = arguments.to_string();
        let mut record = json!({
            "kind": "approval",
            "execution_id": execution_id,
            "tool": tool,
            "arguments_sha256": code_hash(&text),
            "decision": if decision.approved { "approved" } else { "declined" },
            "by": decision.by,
        });
        if let Some(reason) = &decision.reason {
            record["reason"] = json!(reason);
        }
        if self.record_arguments {
            record["arguments"] = arguments.clone();
        }
        self.append(record);
    }

    /// One tool call the sandbox stopped waiting for (its `tool_timeout_ms`, or the run's
    /// time limit), after `waited_ms`.
    pub fn abandoned_call(&self, execution_id: &str, tool: &str, waited_ms: f64) {
        self.append(json!({
            "kind": "tool_call",
            "execution_id": execution_id,
            "tool": tool,
            "outcome": "abandoned",
            "duration_ms": waited_ms,
        }));
    }

    /// One tool call, with sizes (and argument values when configured).
    pub fn tool_call(
        &self,
        execution_id: &str,
        tool: &str,
        arguments: &Value,
        duration_ms: f64,
        outcome: &Result<Value, sandpy::tools::ToolError>,
    ) {
        let mut record = json!({
            "kind": "tool_call",
            "execution_id": execution_id,
            "tool": tool,
            "duration_ms": duration_ms,
            "outcome": if outcome.is_ok() { "ok" } else { "error" },
            "arguments_bytes": arguments.to_string().len(),
            "result_bytes": match outcome { Ok(v) => v.to_string().len(), Err(e) => e.message.len() },
        });
        if self.record_arguments {
            record["arguments"] = arguments.clone();
        }
        self.append(record);
    }
}
