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
//! The files runs leave are kept as resources of the MCP session that ran them
//! ([`resources`]): `resources/list` and `resources/read` answer from its own only.
//!
//! [`handler`] is the MCP handler: the tool list ([`tool_list`]), the resources, and each
//! call checked ([`arguments`]), given its [`caller`] and routed. What one call may set
//! about its run is a [`run_request`]; [`drain`] and [`probes`] are what the HTTP layer
//! asks of the server when it stops and when it is probed.
//!
//! Python errors and limits are tool results with `isError: true` (the model reads them);
//! only malformed requests are protocol errors (`invalid_params`): arguments are parsed
//! into the tool's parameter struct before it runs, so the error names the field at fault
//! (the first one serde meets).
//!
//! Every call is made by a tenant ([`caller::Caller`]), who owns the `run_python` sessions it
//! makes: the process over stdio; over HTTP, the claim of the client's OAuth access token
//! (`sandpy.auth`), or its bearer token when the config names it in `sandpy.tenants`, else
//! the client's MCP session (each MCP session gets its
//! own handler, [`SandpyServer::connection`], whose sessions close when it ends).

mod approval;
mod arguments;
mod caller;
mod discovery;
mod drain;
mod handler;
mod leftovers;
mod probes;
mod progress;
mod resources;
mod run;
mod run_request;
pub(crate) mod saves;
mod sessions;
mod shares;
mod tool_list;

use crate::audit::AuditLog;
use crate::client::Hub;
use arguments::Check;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::ErrorData;
use sandpy::model_output::ModelOutput;
use sandpy::sessions::{Sessions, Tenant, TenantQuota};
use sandpy::settings::Resolved;
use sandpy::{RunOptions, Sandbox};
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What the server shares across sessions, and what its tools are methods of.
pub(crate) struct ServerState {
    sandbox: Sandbox,
    hub: Hub,
    /// What every run starts from: the config's limits and mounts, the policy in force.
    run: RunOptions,
    /// How much of a run's result the model is shown.
    model_output: ModelOutput,
    sessions: Sessions,
    /// The files runs left, kept for their MCP session to read as resources.
    resources: resources::ResourceStore,
    /// Each tenant's share of the run slots and the queue (over HTTP).
    shares: shares::RunShares,
    session_dir: Option<PathBuf>,
    /// The config's tenants known by their tokens, by name.
    token_tenants: HashMap<Arc<str>, Tenant>,
    audit: Option<AuditLog>,
    executions: AtomicU64,
    /// Connections so far, to name each one's tenant.
    connections: AtomicU64,
    /// Whether a request may choose its tier (`sandpy.native.per_run`).
    tier_per_run: bool,
    /// Where code runs, for `run_python`'s description ([`tool_list::runs_on`]).
    runs_on: String,
    /// Set when the server drains ([`SandpyServer::drain`]): new runs are answered `busy`.
    draining: std::sync::atomic::AtomicBool,
    /// Upstream servers that must be up for `/readyz` (`sandpy.ready_requires`).
    ready_requires: Vec<String>,
    /// Every tool, from the three routers.
    tools: ToolRouter<ServerState>,
    /// Each tool's argument check: parsing into its parameter struct.
    checks: HashMap<&'static str, Check>,
}

impl ServerState {
    /// Every tool the server lists (the three routers) and each one's argument check.
    fn tools_and_checks() -> (ToolRouter<ServerState>, HashMap<&'static str, Check>) {
        let tools = ServerState::run_tools()
            + ServerState::discovery_tools()
            + ServerState::session_tools();
        let checks = run::CHECKS
            .into_iter()
            .chain(discovery::CHECKS)
            .chain(sessions::CHECKS)
            .collect();
        (tools, checks)
    }
}

/// Each tenant's share of the run slots and the queue the settings give the sandbox.
fn run_shares(settings: &sandpy::settings::Settings) -> shares::RunShares {
    let slots = settings.max_concurrent_runs.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get)
    });
    let queued = settings
        .max_queued_runs
        .unwrap_or(sandpy::Config::default().max_queued_runs);
    shares::RunShares::new(
        slots,
        queued,
        settings.max_tenant_runs,
        settings.max_tenant_queued_runs,
    )
}

/// Who a handler serves: the process (stdio), or one MCP session over HTTP, whose
/// sessions are closed when its handler goes.
struct Client {
    state: Arc<ServerState>,
    tenant: Tenant,
    /// Whether the tenant's sessions end with the handler (an MCP session's).
    closes_sessions: bool,
    /// Its number among the server's connections ([`STDIO_CONNECTION`] for the process's
    /// own): the resources of its runs are kept under it, and go with it.
    connection: u64,
}

/// The connection number of the process's own handler (stdio).
const STDIO_CONNECTION: u64 = u64::MAX;

impl Drop for Client {
    fn drop(&mut self) {
        let forgotten = self.state.resources.forget_connection(self.connection);
        if forgotten > 0 {
            tracing::debug!("{}: let go of {forgotten} runs' files", self.tenant.id);
        }
        if self.closes_sessions {
            let closed = self.state.sessions.close_tenant(&self.tenant.id);
            if closed > 0 {
                tracing::debug!("{}: closed {closed} sessions", self.tenant.id);
            }
        }
    }
}

/// One MCP session's handler (they all share one `ServerState`).
#[derive(Clone)]
pub struct SandpyServer {
    state: Arc<ServerState>,
    client: Arc<Client>,
}

/// A protocol error (`invalid_params`): the request itself is malformed.
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
        let (tools, checks) = ServerState::tools_and_checks();
        let token_tenants = settings
            .tenants
            .iter()
            .map(|t| {
                let tenant = Tenant::new(format!("tenant:{}", t.name), t.quota);
                (Arc::<str>::from(t.name.as_str()), tenant)
            })
            .collect();
        let state = Arc::new(ServerState {
            sandbox,
            hub,
            run: resolved.run_options(),
            tier_per_run: settings.native.as_ref().is_some_and(|n| n.per_run),
            runs_on: tool_list::runs_on(settings),
            model_output: settings.model_output.clone(),
            sessions,
            resources: resources::ResourceStore::new(settings.resources),
            shares: run_shares(settings),
            session_dir: settings.session_dir.clone(),
            token_tenants,
            audit,
            executions: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            draining: std::sync::atomic::AtomicBool::new(false),
            ready_requires: settings.ready_requires.clone(),
            tools,
            checks,
        });
        let client = Arc::new(Client {
            state: state.clone(),
            tenant: Tenant::new("local", TenantQuota::UNLIMITED),
            closes_sessions: false,
            connection: STDIO_CONNECTION,
        });
        Ok(SandpyServer { state, client })
    }

    /// A handler for one more MCP session (over HTTP): a tenant of its own, named
    /// `client-<n>`, with the per-tenant quota; its sessions close when it is dropped.
    /// A request whose bearer token names a configured tenant is that tenant's instead.
    pub fn connection(&self) -> SandpyServer {
        let state = self.state.clone();
        let n = state.connections.fetch_add(1, Ordering::Relaxed);
        let quota = state.sessions.limits().per_tenant;
        let client = Arc::new(Client {
            state: state.clone(),
            tenant: Tenant::new(format!("client-{n}"), quota),
            closes_sessions: true,
            connection: n,
        });
        SandpyServer { state, client }
    }

    /// The hub, e.g. to shut it down.
    pub fn hub(&self) -> &Hub {
        &self.state.hub
    }
}
