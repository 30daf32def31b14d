//! The session tools: list, reset and close `run_python` sessions, save one under a name,
//! restore it later, fork it.
//!
//! A session the call names but the server does not hold is an `isError` result (the model
//! may have closed it); a save name that could leave the configured folder is a protocol
//! error, like any malformed argument.

use super::{invalid, structured, tool_error, RunRequest, ServerState};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router, ErrorData};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use std::path::PathBuf;

/// `reset_session`'s arguments.
#[derive(Deserialize, JsonSchema)]
struct ResetSession {
    /// the session to give a fresh interpreter
    session_id: String,
}

/// `close_session`'s arguments.
#[derive(Deserialize, JsonSchema)]
struct CloseSession {
    /// the session to close
    session_id: String,
}

/// `save_session`'s arguments.
#[derive(Deserialize, JsonSchema)]
struct SaveSession {
    /// the session to save
    session_id: String,
    /// what to save it as: letters, digits, `-`, `_` and `.` (at most 64, not starting with `.`)
    name: String,
}

/// `restore_session`'s arguments.
#[derive(Deserialize, JsonSchema)]
struct RestoreSession {
    /// the name it was saved as
    name: String,
    /// the new session to rebuild it in
    session_id: String,
}

/// `fork_session`'s arguments.
#[derive(Deserialize, JsonSchema)]
struct ForkSession {
    /// the session to copy
    session_id: String,
    /// the copy's id
    new_session_id: String,
}

/// The value, or the message as an `isError` result.
fn outcome(result: Result<Value, String>) -> CallToolResult {
    match result {
        Ok(value) => structured(value),
        Err(message) => tool_error(message),
    }
}

/// `{"session_id": …, done: true}`, or an `isError` result when there was no such session.
fn session_result(session: &str, found: bool, done: &str) -> CallToolResult {
    if found {
        structured(json!({"session_id": session, done: true}))
    } else {
        tool_error(format!("no session {session:?}"))
    }
}

#[tool_router(router = session_tools, vis = "pub(super)")]
impl ServerState {
    #[tool(description = "Live run_python sessions: id, runs, idle time, whether poisoned.")]
    async fn list_sessions(&self) -> CallToolResult {
        structured(json!({"sessions": self.sessions.list().await}))
    }

    #[tool(description = "Give a session a fresh interpreter (needed after a limit poisoned it).")]
    async fn reset_session(&self, Parameters(args): Parameters<ResetSession>) -> CallToolResult {
        let found = self.sessions.reset(&args.session_id).await;
        session_result(&args.session_id, found, "reset")
    }

    #[tool(description = "Close a session and free its memory.")]
    async fn close_session(&self, Parameters(args): Parameters<CloseSession>) -> CallToolResult {
        let found = self.sessions.close(&args.session_id);
        session_result(&args.session_id, found, "closed")
    }

    #[tool(
        description = "Save a session's journal (its runs and the answers its tool calls got) under a name, to restore later."
    )]
    async fn save_session(
        &self,
        Parameters(args): Parameters<SaveSession>,
    ) -> Result<CallToolResult, ErrorData> {
        let path = self.snapshot_path(&args.name)?;
        let session = args.session_id.as_str();
        let saved = async {
            let snapshot = self
                .sessions
                .snapshot(session)
                .await
                .map_err(|e| e.to_string())?;
            let text = serde_json::to_string(&snapshot).map_err(|e| e.to_string())?;
            std::fs::write(&path, &text)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            Ok::<_, String>(
                json!({"session_id": session, "saved": path.display().to_string(), "bytes": text.len(), "cells": snapshot.cells.len()}),
            )
        };
        Ok(outcome(saved.await))
    }

    #[tool(
        description = "Rebuild a saved session under a new session_id by replaying its runs (tools are not called again)."
    )]
    async fn restore_session(
        &self,
        Parameters(args): Parameters<RestoreSession>,
    ) -> Result<CallToolResult, ErrorData> {
        let path = self.snapshot_path(&args.name)?;
        let session = args.session_id.as_str();
        let options = self.options(self.next_execution_id(), RunRequest::default());
        let restored = async {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let snapshot: sandpy::SessionSnapshot =
                serde_json::from_str(&text).map_err(|e| format!("not a saved session: {e}"))?;
            self.sessions
                .restore(session, &snapshot, &options)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(
                json!({"session_id": session, "restored": true, "cells": snapshot.cells.len()}),
            )
        };
        Ok(outcome(restored.await))
    }

    #[tool(
        description = "Copy a session's state into a new session_id; the two then go their own ways."
    )]
    async fn fork_session(&self, Parameters(args): Parameters<ForkSession>) -> CallToolResult {
        let (from, to) = (args.session_id.as_str(), args.new_session_id.as_str());
        let options = self.options(self.next_execution_id(), RunRequest::default());
        let forked = self
            .sessions
            .fork(from, to, &options)
            .await
            .map(|()| json!({"session_id": to, "forked_from": from}))
            .map_err(|e| e.to_string());
        outcome(forked)
    }
}

impl ServerState {
    /// Where a saved session named `name` lives; names are plain, so they cannot leave
    /// the configured folder.
    fn snapshot_path(&self, name: &str) -> Result<PathBuf, ErrorData> {
        let dir = self.session_dir.as_ref().ok_or_else(|| {
            invalid("saving sessions is off: set sandpy.sessions.save_dir in the config")
        })?;
        let plain = !name.is_empty()
            && name.len() <= 64
            && !name.starts_with('.')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !plain {
            return Err(invalid("`name` may use letters, digits, `-`, `_` and `.` (at most 64, not starting with `.`)"));
        }
        std::fs::create_dir_all(dir).map_err(|e| {
            ErrorData::internal_error(format!("cannot create {}: {e}", dir.display()), None)
        })?;
        Ok(dir.join(format!("{name}.session.json")))
    }
}
