//! The session tools: list, reset and close `run_python` sessions, save one under a name,
//! restore it later, fork it; each over the caller's own sessions and saves only.
//!
//! A session the call names but the caller does not hold is an `isError` result (the model
//! may have closed it), the same whether another tenant has one by that id or not; a save
//! name that could leave the configured folder is a protocol error, like any malformed
//! argument.

use super::arguments::{parses_as, Check};
use super::caller::{Caller, Saves};
use super::run_request::RunRequest;
use super::saves::SaveDir;
use super::{invalid, structured, tool_error, ServerState};
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::{tool, tool_router, ErrorData};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

/// The argument checks of these tools (`list_sessions` has none).
pub(super) const CHECKS: [(&str, Check); 5] = [
    ("reset_session", parses_as::<ResetSession>),
    ("close_session", parses_as::<CloseSession>),
    ("save_session", parses_as::<SaveSession>),
    ("restore_session", parses_as::<RestoreSession>),
    ("fork_session", parses_as::<ForkSession>),
];

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
    async fn list_sessions(&self, Extension(caller): Extension<Caller>) -> CallToolResult {
        let sessions = self.sessions.of(&caller.tenant).list().await;
        structured(json!({"sessions": sessions}))
    }

    #[tool(description = "Give a session a fresh interpreter (needed after a limit poisoned it).")]
    async fn reset_session(
        &self,
        Parameters(args): Parameters<ResetSession>,
        Extension(caller): Extension<Caller>,
    ) -> CallToolResult {
        let found = self
            .sessions
            .of(&caller.tenant)
            .reset(&args.session_id)
            .await;
        session_result(&args.session_id, found, "reset")
    }

    #[tool(description = "Close a session and free its memory.")]
    async fn close_session(
        &self,
        Parameters(args): Parameters<CloseSession>,
        Extension(caller): Extension<Caller>,
    ) -> CallToolResult {
        let found = self.sessions.of(&caller.tenant).close(&args.session_id);
        session_result(&args.session_id, found, "closed")
    }

    #[tool(
        description = "Save a session's journal (its runs and the answers its tool calls got) under a name, to restore later."
    )]
    async fn save_session(
        &self,
        Parameters(args): Parameters<SaveSession>,
        Extension(caller): Extension<Caller>,
    ) -> Result<CallToolResult, ErrorData> {
        let dir = saves(&caller, &args.name)?;
        let session = args.session_id.as_str();
        let saved = async {
            let dir = dir.map_err(|e| e.shown(caller.remote))?;
            let snapshot = self
                .sessions
                .of(&caller.tenant)
                .snapshot(session)
                .await
                .map_err(|e| e.to_string())?;
            let text = serde_json::to_string(&snapshot).map_err(|e| e.to_string())?;
            let path = dir
                .write(&args.name, text.as_bytes())
                .map_err(|e| e.shown(caller.remote))?;
            // The file for the process's own client; a remote one gets the name it gave.
            let saved = if caller.remote {
                args.name.clone()
            } else {
                path.display().to_string()
            };
            Ok::<_, String>(
                json!({"session_id": session, "saved": saved, "bytes": text.len(), "cells": snapshot.cells.len()}),
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
        Extension(caller): Extension<Caller>,
    ) -> Result<CallToolResult, ErrorData> {
        let dir = saves(&caller, &args.name)?;
        let session = args.session_id.as_str();
        let options = self.options(self.next_execution_id(), RunRequest::default());
        let restored = async {
            let dir = dir.map_err(|e| e.shown(caller.remote))?;
            // A save is its journal as JSON (what the cap counts) and a few fields more.
            let max = self
                .sessions
                .limits()
                .journal_bytes
                .saturating_add(64 << 10);
            let text = dir
                .read(&args.name, max)
                .map_err(|e| e.shown(caller.remote))?;
            let mut snapshot: sandpy::sessions::SessionSnapshot =
                serde_json::from_str(&text).map_err(|e| format!("not a saved session: {e}"))?;
            // Its cells replay under their own limits: no more than a request may set.
            let server_limit = self.run.effective_limits().timeout;
            snapshot.bound_limits(u64::try_from(server_limit.as_millis()).unwrap_or(u64::MAX));
            self.sessions
                .of(&caller.tenant)
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
    async fn fork_session(
        &self,
        Parameters(args): Parameters<ForkSession>,
        Extension(caller): Extension<Caller>,
    ) -> CallToolResult {
        let (from, to) = (args.session_id.as_str(), args.new_session_id.as_str());
        let options = self.options(self.next_execution_id(), RunRequest::default());
        let forked = self
            .sessions
            .of(&caller.tenant)
            .fork(from, to, &options)
            .await
            .map(|()| json!({"session_id": to, "forked_from": from}))
            .map_err(|e| e.to_string());
        outcome(forked)
    }
}

/// The caller's save folder for a save named `name`: a protocol error when saving is off
/// or the name is not plain (so it cannot leave the folder); the folder's own failure (a
/// planted link, say) is the call's result.
fn saves(
    caller: &Caller,
    name: &str,
) -> Result<Result<SaveDir, super::saves::SaveError>, ErrorData> {
    let (root, tenant) = match &caller.saves {
        Saves::Off(why) => return Err(invalid(*why)),
        Saves::In { root, tenant } => (root, tenant.as_deref()),
    };
    if !sandpy::settings::is_plain_name(name) {
        return Err(invalid(
            "`name` may use letters, digits, `-`, `_` and `.` (at most 64, not starting with `.`)",
        ));
    }
    Ok(SaveDir::open(root, tenant))
}
