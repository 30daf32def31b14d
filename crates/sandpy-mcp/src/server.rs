//! sandpy as an MCP server, over stdio or streamable HTTP.
//!
//! Every tool is one typed method: rmcp's `#[tool]` derives its input schema from its
//! parameter struct (serde + schemars), so the schema a client reads is the one its
//! arguments are parsed with. The tools are grouped by concern, each group a router:
//! - [`run`]: `run_python` and `call_python_function`;
//! - [`discovery`]: `search_tools` and `get_tool_schema`, over the hub's upstream tools;
//! - [`sessions`]: `list_sessions`, `reset_session`, `close_session`, `save_session`,
//!   `restore_session` and `fork_session`.
//!
//! Python errors and limits are tool results with `isError: true` (the model reads them);
//! only malformed requests are protocol errors (`invalid_params`): arguments are checked
//! against the tool's input schema before it runs, so the error names every field at fault.

mod discovery;
mod run;
mod sessions;

use crate::audit::AuditLog;
use crate::hub::Hub;
use crate::schema::ArgumentSchema;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{tool_handler, ErrorData, RoleServer, ServerHandler};
use sandpy::{LimitOverrides, ModelOutput, Resolved, RunOptions, Sandbox, Sessions};
use serde_json::Value;
use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What the server shares across sessions, and what its tools are methods of.
pub struct ServerState {
    sandbox: Sandbox,
    hub: Hub,
    /// What every run starts from: the config's limits and mounts, the policy in force.
    run: RunOptions,
    /// How much of a run's result the model is shown.
    model_output: ModelOutput,
    sessions: Sessions,
    session_dir: Option<std::path::PathBuf>,
    audit: Option<AuditLog>,
    executions: AtomicU64,
    /// Every tool, from the three routers.
    tools: ToolRouter<ServerState>,
    /// Each tool's input schema, compiled to check arguments before the call.
    schemas: HashMap<String, ArgumentSchema>,
}

/// One MCP session's handler (they all share one [`ServerState`]).
#[derive(Clone)]
pub struct SandpyServer(Arc<ServerState>);

/// The order tools are listed in: running code first, then finding upstream tools, then
/// sessions. A tool missing here is listed after these, by name.
const LISTED: [&str; 10] = [
    "run_python",
    "call_python_function",
    "search_tools",
    "get_tool_schema",
    "list_sessions",
    "reset_session",
    "close_session",
    "save_session",
    "restore_session",
    "fork_session",
];

/// How long `tools/list` waits for upstream servers still starting before it answers
/// with their status as it is (`starting`): well under a client's request timeout.
const STARTING_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

fn invalid(message: impl Into<String>) -> ErrorData {
    ErrorData::invalid_params(message.into(), None)
}

/// A successful result carrying `value` as structured content and as text.
fn structured(value: Value) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(value.to_string())]);
    result.structured_content = Some(value);
    result
}

/// A failed tool call the model reads (`isError: true`), not a protocol error.
fn tool_error(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

/// What one call may set about its run; the server's settings bound each.
#[derive(Default)]
struct RunRequest {
    /// Wall-clock limit in ms, at most the server's.
    timeout_ms: Option<NonZeroU64>,
    /// Narrows the server's allowlist.
    allowed_tools: Option<Vec<String>>,
    /// Put in the run's `/tmp` before the code starts.
    files: Vec<sandpy::InputFile>,
}

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
        let tools = ServerState::run_tools()
            + ServerState::discovery_tools()
            + ServerState::session_tools();
        let schemas = tools
            .list_all()
            .into_iter()
            .map(|tool| {
                let schema = Value::Object(tool.input_schema.as_ref().clone());
                let compiled = ArgumentSchema::compile(&tool.name, &schema);
                (tool.name.into_owned(), compiled)
            })
            .collect();
        let state = ServerState {
            sandbox,
            hub,
            run: resolved.run_options(),
            model_output: settings.model_output.clone(),
            sessions,
            session_dir: settings.session_dir.clone(),
            audit,
            executions: AtomicU64::new(0),
            tools,
            schemas,
        };
        Ok(SandpyServer(Arc::new(state)))
    }

    /// The hub, e.g. to shut it down.
    pub fn hub(&self) -> &Hub {
        &self.0.hub
    }

    /// The tools in [`LISTED`] order, `run_python`'s description completed with the
    /// upstream servers as they are now.
    fn tools(&self) -> Vec<Tool> {
        let rank = |tool: &Tool| {
            LISTED
                .iter()
                .position(|name| *name == tool.name)
                .unwrap_or(LISTED.len())
        };
        let mut tools = self.0.tools.list_all();
        tools.sort_by_key(rank); // stable: the unlisted stay sorted by name
        for tool in &mut tools {
            if tool.name == "run_python" {
                let guide = tool.description.as_deref().unwrap_or_default();
                tool.description = Some(format!("{guide}\n{}", self.0.servers_line()).into());
            }
        }
        tools
    }
}

impl ServerState {
    /// `Available servers: …` for `run_python`'s description: each upstream server and
    /// its status.
    fn servers_line(&self) -> String {
        let servers: Vec<String> = self
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
        format!("Available servers: {servers}.")
    }

    /// An id for the next run, unique within this server's life.
    fn next_execution_id(&self) -> String {
        let n = self.executions.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", std::process::id())
    }

    /// A run's options: the server's limits, policy, mounts and tools, as narrowed by
    /// `request` (its timeout at most the server's).
    fn options(&self, execution_id: String, request: RunRequest) -> RunOptions {
        let server_limit = self.run.effective_limits().timeout;
        let timeout_ms = request.timeout_ms.map(|ms| {
            let limit = u64::try_from(server_limit.as_millis()).unwrap_or(u64::MAX);
            ms.get().min(limit)
        });
        RunOptions {
            limit_overrides: LimitOverrides {
                timeout_ms,
                ..LimitOverrides::default()
            },
            tools: Some(self.hub.for_execution(execution_id, self.audit.clone())),
            allowed_tools: request.allowed_tools,
            files: request.files,
            ..self.run.clone()
        }
    }
}

#[tool_handler(
    router = self.0.tools,
    name = "sandpy",
    instructions = "Write one Python program that orchestrates many tools instead of calling them one by one: \
                    use run_python; find tools with search_tools."
)]
impl ServerHandler for SandpyServer {
    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // Servers still starting: wait a little, so the description says how they are.
        self.0.hub.wait_started(STARTING_WAIT).await;
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    /// Check the arguments against the tool's schema, then call it. Unlike the router's
    /// own `call`, which turns arguments that do not parse into an `isError` result, a
    /// malformed request stays a protocol error (`invalid_params`).
    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let state = self.0.as_ref();
        let name = request.name.as_ref();
        let route = state
            .tools
            .map
            .get(name)
            .ok_or_else(|| invalid(format!("unknown tool {name:?}")))?;
        if let Some(schema) = state.schemas.get(name) {
            let arguments = Value::Object(request.arguments.take().unwrap_or_default());
            schema.check(name, &arguments).map_err(invalid)?;
            if let Value::Object(arguments) = arguments {
                request.arguments = Some(arguments);
            }
        }
        (route.call)(ToolCallContext::new(state, request, context)).await
    }
}
