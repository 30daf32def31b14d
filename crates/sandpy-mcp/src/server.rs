//! sandpy as an MCP server: `run_python`, `call_python_function`, `search_tools` and
//! `get_tool_schema`, over stdio or streamable HTTP.
//!
//! Python errors and limits are tool results with `isError: true` (the model reads them);
//! only malformed requests are protocol errors.

use crate::audit::AuditLog;
use crate::hub::Hub;
use crate::summary::summarize;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use sandpy::{Execution, LimitOverrides, Resolved, RunOptions, Sandbox, Sessions, ToolHost};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What the server shares across sessions.
pub struct ServerState {
    sandbox: Sandbox,
    hub: Hub,
    /// What every run starts from: the config's limits and mounts, the policy in force.
    run: RunOptions,
    sessions: Sessions,
    session_dir: Option<std::path::PathBuf>,
    audit: Option<AuditLog>,
    executions: AtomicU64,
}

/// One MCP session's handler (they all share one [`ServerState`]).
#[derive(Clone)]
pub struct SandpyServer(Arc<ServerState>);

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

fn invalid(message: impl Into<String>) -> ErrorData {
    ErrorData::invalid_params(message.into(), None)
}

fn string_arg<'a>(args: &'a JsonObject, key: &str) -> Result<&'a str, ErrorData> {
    args.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("`{key}` is required and must be a string")))
}

fn strings_arg(args: &JsonObject, key: &str) -> Result<Option<Vec<String>>, ErrorData> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(String::from)
                    .ok_or_else(|| invalid(format!("`{key}` must be a list of strings")))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(_) => Err(invalid(format!("`{key}` must be a list of strings"))),
    }
}

/// The `files` argument: each with `text` or `content_base64`.
fn input_files(args: &JsonObject) -> Result<Vec<sandpy::InputFile>, ErrorData> {
    use base64::Engine;
    let Some(items) = args.get("files").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let items = items
        .as_array()
        .ok_or_else(|| invalid("`files` must be a list of {path, text | content_base64}"))?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let path = item
                .get("path")
                .and_then(Value::as_str)
                .ok_or_else(|| invalid(format!("`files[{i}].path` must be a string")))?;
            let content = match (
                item.get("text").and_then(Value::as_str),
                item.get("content_base64").and_then(Value::as_str),
            ) {
                (Some(text), None) => text.as_bytes().to_vec(),
                (None, Some(encoded)) => base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .map_err(|e| {
                        invalid(format!("`files[{i}].content_base64` is not base64: {e}"))
                    })?,
                _ => {
                    return Err(invalid(format!(
                        "`files[{i}]` needs exactly one of `text` and `content_base64`"
                    )))
                }
            };
            Ok(sandpy::InputFile {
                path: path.to_string(),
                content,
            })
        })
        .collect()
}

/// An output file as MCP content: images as images, other files as embedded resources
/// (text when UTF-8).
fn file_block(file: &sandpy::OutputFile) -> ContentBlock {
    use base64::Engine;
    let encoded = || base64::engine::general_purpose::STANDARD.encode(&file.content);
    let uri = format!("file://{}/{}", sandpy::OUTPUT_DIR, file.name);
    if file.mime_type.starts_with("image/") {
        ContentBlock::image(encoded(), file.mime_type.clone())
    } else if let Some(text) = file.text() {
        ContentBlock::resource(
            rmcp::model::ResourceContents::text(text, uri).with_mime_type(file.mime_type.clone()),
        )
    } else {
        ContentBlock::resource(
            rmcp::model::ResourceContents::blob(encoded(), uri)
                .with_mime_type(file.mime_type.clone()),
        )
    }
}

/// A successful result carrying `value` as structured content and as text.
fn structured(value: Value) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(value.to_string())]);
    result.structured_content = Some(value);
    result
}

fn outcome(result: Result<Value, String>) -> CallToolResult {
    match result {
        Ok(value) => structured(value),
        Err(message) => CallToolResult::error(vec![ContentBlock::text(message)]),
    }
}

fn session_result(session: &str, found: bool, done: &str) -> CallToolResult {
    if found {
        structured(json!({"session_id": session, done: true}))
    } else {
        CallToolResult::error(vec![ContentBlock::text(format!("no session {session:?}"))])
    }
}

/// The in-sandbox API, taught in the `run_python` description.
const API_GUIDE: &str = "Run Python 3.14 (full stdlib, no network) in a fresh sandbox. \
The value of the last expression is returned; print() output is captured.\n\
Files: the working directory is a private /tmp (pass `files` to put inputs there); files written \
under /output are returned with the result (images as images).\n\
Call MCP tools from the code (no imports needed):\n\
- `await call_mcp_tool(\"mcp__<server>__<tool>\", {...})` (or without await in plain sync code)\n\
- `tools.<server>.<tool>(**kwargs)` (names with - or . use _)\n\
- `discover_mcp_tools()`, `search_tools(query, limit=10)`, `get_tool_schema(name)`\n\
- `await asyncio.gather(...)` over calls runs them concurrently; failures raise `ToolError`.\n\
Results are the tool's structured content, else its text (JSON-decoded when it is JSON).\n\
Pass `session_id` to keep globals and imports between runs (like notebook cells).";

impl SandpyServer {
    /// A server over `sandbox` and `hub` with the settings and policy of `resolved`.
    /// Fails when the audit log cannot be opened.
    pub fn new(sandbox: Sandbox, hub: Hub, resolved: &Resolved) -> std::io::Result<SandpyServer> {
        let settings = &resolved.settings;
        let audit = match &settings.audit_log {
            Some(path) => Some(AuditLog::open(path, settings.audit_arguments)?),
            None => None,
        };
        let sessions = Sessions::new(&sandbox, settings.sessions.clone());
        let state = ServerState {
            sandbox,
            hub,
            run: resolved.run_options(),
            sessions,
            session_dir: settings.session_dir.clone(),
            audit,
            executions: AtomicU64::new(0),
        };
        Ok(SandpyServer(Arc::new(state)))
    }

    /// The hub, e.g. to shut it down.
    pub fn hub(&self) -> &Hub {
        &self.0.hub
    }

    fn run_python_description(&self) -> String {
        let servers: Vec<String> = self
            .0
            .hub
            .servers()
            .iter()
            .map(|s| format!("{} ({})", s.name, s.status))
            .collect();
        let servers = if servers.is_empty() {
            "none configured".to_string()
        } else {
            servers.join(", ")
        };
        format!("{API_GUIDE}\nAvailable servers: {servers}.")
    }

    fn tools(&self) -> Vec<Tool> {
        let code = json!({"type": "string", "description": "Python source"});
        let timeout = json!({"type": "integer", "minimum": 1, "description": "wall-clock limit in ms (at most the server's limit)"});
        let allowed = json!({"type": "array", "items": {"type": "string"}, "description": "tool names or globs this run may use (narrows the server's allowlist)"});
        let session = json!({"type": "string", "description": "run in this session: globals and imports persist between runs with the same id"});
        let files = json!({"type": "array", "description": "input files, put in /tmp (the working directory) before the code runs",
            "items": {"type": "object", "properties": {
                "path": {"type": "string", "description": "relative to /tmp, e.g. data.csv"},
                "text": {"type": "string", "description": "content as UTF-8 text"},
                "content_base64": {"type": "string", "description": "content as base64 (binary files)"}},
                "required": ["path"]}});
        let session_only = object(
            json!({"type": "object", "properties": {"session_id": {"type": "string"}}, "required": ["session_id"]}),
        );
        vec![
            Tool::new(
                "run_python",
                self.run_python_description(),
                object(json!({"type": "object", "properties": {"code": code, "timeout_ms": timeout, "allowed_tools": allowed, "session_id": session, "files": files}, "required": ["code"]})),
            ),
            Tool::new(
                "call_python_function",
                "Load Python code as a module in a fresh sandbox and call one of its functions with JSON arguments \
                 (a list for positional, an object for keyword arguments); returns the JSON result.",
                object(json!({"type": "object", "properties": {
                    "code": code, "function": {"type": "string"},
                    "arguments": {"type": ["array", "object"]}, "timeout_ms": timeout, "files": files}, "required": ["code", "function"]})),
            ),
            Tool::new(
                "search_tools",
                "Find upstream MCP tools callable from run_python, ranked by relevance of their names and descriptions.",
                object(json!({"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}}, "required": ["query"]})),
            ),
            Tool::new(
                "get_tool_schema",
                "The input JSON schema of one upstream tool (name as mcp__<server>__<tool>).",
                object(json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})),
            ),
            Tool::new("list_sessions", "Live run_python sessions: id, runs, idle time, whether poisoned.", object(json!({"type": "object", "properties": {}}))),
            Tool::new("reset_session", "Give a session a fresh interpreter (needed after a limit poisoned it).", session_only.clone()),
            Tool::new("close_session", "Close a session and free its memory.", session_only),
            Tool::new(
                "save_session",
                "Save a session's journal (its runs and the answers its tool calls got) under a name, to restore later.",
                object(json!({"type": "object", "properties": {"session_id": {"type": "string"}, "name": {"type": "string"}}, "required": ["session_id", "name"]})),
            ),
            Tool::new(
                "restore_session",
                "Rebuild a saved session under a new session_id by replaying its runs (tools are not called again).",
                object(json!({"type": "object", "properties": {"name": {"type": "string"}, "session_id": {"type": "string"}}, "required": ["name", "session_id"]})),
            ),
            Tool::new(
                "fork_session",
                "Copy a session's state into a new session_id; the two then go their own ways.",
                object(json!({"type": "object", "properties": {"session_id": {"type": "string"}, "new_session_id": {"type": "string"}}, "required": ["session_id", "new_session_id"]})),
            ),
        ]
    }

    /// Where a saved session named `name` lives; names are plain, so they cannot leave
    /// the configured folder.
    fn snapshot_path(&self, name: &str) -> Result<std::path::PathBuf, ErrorData> {
        let dir = self.0.session_dir.as_ref().ok_or_else(|| {
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

    fn options(&self, args: &JsonObject, execution_id: String) -> Result<RunOptions, ErrorData> {
        let mut limit_overrides = LimitOverrides::default();
        if let Some(ms) = args.get("timeout_ms").filter(|v| !v.is_null()) {
            let ms = ms
                .as_u64()
                .filter(|ms| *ms >= 1)
                .ok_or_else(|| invalid("`timeout_ms` must be a positive integer"))?;
            let server_limit = self.0.run.effective_limits().timeout.as_millis();
            limit_overrides.timeout_ms =
                Some(ms.min(u64::try_from(server_limit).unwrap_or(u64::MAX)));
        }
        Ok(RunOptions {
            limit_overrides,
            tools: Some(self.0.hub.for_execution(execution_id, self.0.audit.clone())),
            allowed_tools: strings_arg(args, "allowed_tools")?,
            files: input_files(args)?,
            ..self.0.run.clone()
        })
    }

    fn execution_result(
        &self,
        id: &str,
        code: &str,
        options: &RunOptions,
        execution: Execution,
    ) -> CallToolResult {
        if let Some(audit) = &self.0.audit {
            audit.execution(id, code, &options.effective_limits(), &execution);
        }
        let text = summarize(&execution);
        let ok = execution.is_ok();
        let structured = serde_json::to_value(&execution).unwrap_or(Value::Null);
        let mut content = vec![ContentBlock::text(text)];
        content.extend(execution.files.iter().map(file_block));
        let mut result = if ok {
            CallToolResult::success(content)
        } else {
            CallToolResult::error(content)
        };
        result.structured_content = Some(structured);
        result
    }

    async fn call(&self, name: &str, args: JsonObject) -> Result<CallToolResult, ErrorData> {
        let next_id = || {
            format!(
                "{}-{}",
                std::process::id(),
                self.0.executions.fetch_add(1, Ordering::Relaxed)
            )
        };
        match name {
            "run_python" => {
                let code = string_arg(&args, "code")?;
                let id = next_id();
                let options = self.options(&args, id.clone())?;
                let execution = match args.get("session_id").filter(|v| !v.is_null()) {
                    None => self.0.sandbox.run_with(code, &options).await,
                    Some(session) => {
                        let session = session
                            .as_str()
                            .ok_or_else(|| invalid("`session_id` must be a string"))?;
                        self.0.sessions.run(session, code, &options).await
                    }
                };
                Ok(self.execution_result(&id, code, &options, execution))
            }
            "list_sessions" => Ok(structured(
                json!({"sessions": self.0.sessions.list().await}),
            )),
            "reset_session" => {
                let session = string_arg(&args, "session_id")?;
                Ok(session_result(
                    session,
                    self.0.sessions.reset(session).await,
                    "reset",
                ))
            }
            "close_session" => {
                let session = string_arg(&args, "session_id")?;
                Ok(session_result(
                    session,
                    self.0.sessions.close(session),
                    "closed",
                ))
            }
            "save_session" => {
                let session = string_arg(&args, "session_id")?;
                let path = self.snapshot_path(string_arg(&args, "name")?)?;
                let saved = async {
                    let snapshot = self
                        .0
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
            "restore_session" => {
                let session = string_arg(&args, "session_id")?;
                let path = self.snapshot_path(string_arg(&args, "name")?)?;
                let options = self.options(&args, next_id())?;
                let restored = async {
                    let text = std::fs::read_to_string(&path)
                        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                    let snapshot: sandpy::SessionSnapshot = serde_json::from_str(&text)
                        .map_err(|e| format!("not a saved session: {e}"))?;
                    self.0
                        .sessions
                        .restore(session, &snapshot, &options)
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok::<_, String>(
                        json!({"session_id": session, "restored": true, "cells": snapshot.cells.len()}),
                    )
                };
                Ok(outcome(restored.await))
            }
            "fork_session" => {
                let from = string_arg(&args, "session_id")?;
                let to = string_arg(&args, "new_session_id")?;
                let options = self.options(&args, next_id())?;
                let forked = self
                    .0
                    .sessions
                    .fork(from, to, &options)
                    .await
                    .map(|()| json!({"session_id": to, "forked_from": from}))
                    .map_err(|e| e.to_string());
                Ok(outcome(forked))
            }
            "call_python_function" => {
                let code = string_arg(&args, "code")?;
                let function = string_arg(&args, "function")?;
                let arguments = args.get("arguments").cloned().unwrap_or(json!([]));
                let id = next_id();
                let options = self.options(&args, id.clone())?;
                let execution = self
                    .0
                    .sandbox
                    .call_function(code, function, &arguments, &options)
                    .await;
                Ok(self.execution_result(&id, code, &options, execution))
            }
            "search_tools" => {
                let query = string_arg(&args, "query")?;
                let limit = args.get("limit").and_then(Value::as_u64).unwrap_or(10) as usize;
                let tools = self.0.hub.list_tools();
                let found = sandpy::search_tools(&tools, query, limit);
                Ok(structured(json!({"tools": found})))
            }
            "get_tool_schema" => {
                let tool = string_arg(&args, "name")?;
                Ok(
                    match self.0.hub.list_tools().into_iter().find(|t| t.name == tool) {
                        Some(info) => structured(
                            json!({"name": info.name, "description": info.description, "inputSchema": info.input_schema}),
                        ),
                        None => CallToolResult::error(vec![ContentBlock::text(format!(
                            "no allowed tool named {tool:?}; use search_tools to find one"
                        ))]),
                    },
                )
            }
            other => Err(invalid(format!("unknown tool {other:?}"))),
        }
    }
}

impl ServerHandler for SandpyServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("sandpy", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Write one Python program that orchestrates many tools instead of calling them one by one: \
                 use run_python; find tools with search_tools.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        Ok(self.call(&request.name, args).await?.into())
    }
}
