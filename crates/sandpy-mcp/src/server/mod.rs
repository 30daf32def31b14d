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
//! Python errors and limits are tool results with `isError: true` (the model reads them);
//! only malformed requests are protocol errors (`invalid_params`): arguments are parsed
//! into the tool's parameter struct before it runs, so the error names the field at fault
//! (the first one serde meets).
//!
//! Every call is made by a tenant ([`Caller`]), who owns the `run_python` sessions it
//! makes: the process over stdio; over HTTP, the claim of the client's OAuth access token
//! (`sandpy.auth`), or its bearer token when the config names it in `sandpy.tenants`, else
//! the client's MCP session (each MCP session gets its
//! own handler, [`SandpyServer::connection`], whose sessions close when it ends).

mod approval;
mod discovery;
mod leftovers;
mod progress;
mod resources;
mod run;
pub(crate) mod saves;
mod sessions;

use crate::audit::AuditLog;
use crate::client::Hub;
use crate::identity::{ClaimedTenant, TokenTenantName};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
    Implementation, ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{tool_handler, ErrorData, RoleServer, ServerHandler};
use sandpy::model_output::ModelOutput;
use sandpy::sessions::{Sessions, Tenant, TenantQuota};
use sandpy::settings::Resolved;
use sandpy::{LimitOverrides, RunOptions, Sandbox};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::HashMap;
use std::num::NonZeroU64;
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
    session_dir: Option<PathBuf>,
    /// The config's tenants known by their tokens, by name.
    token_tenants: HashMap<Arc<str>, Tenant>,
    audit: Option<AuditLog>,
    executions: AtomicU64,
    /// Connections so far, to name each one's tenant.
    connections: AtomicU64,
    /// Whether a request may choose its tier (`sandpy.native.per_run`).
    tier_per_run: bool,
    /// Where code runs, for `run_python`'s description ([`runs_on`]).
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

/// Parses a tool's arguments as its parameter struct would be; the message names the
/// field at fault.
type Check = fn(&Value) -> Result<(), String>;

/// `arguments` parse as a `T`; else where and why not, the place as a JSON pointer
/// (`at /files/0: missing field `path``).
fn parses_as<T: DeserializeOwned>(arguments: &Value) -> Result<(), String> {
    match serde_path_to_error::deserialize::<_, T>(arguments) {
        Ok(_) => Ok(()),
        Err(e) => {
            let mut at = String::new();
            for segment in e.path().iter() {
                use serde_path_to_error::Segment;
                at.push('/');
                match segment {
                    Segment::Seq { index } => at.push_str(&index.to_string()),
                    Segment::Map { key } => at.push_str(key),
                    Segment::Enum { variant } => at.push_str(variant),
                    Segment::Unknown => at.push('?'),
                }
            }
            let why = e.into_inner();
            Err(if at.is_empty() {
                why.to_string()
            } else {
                format!("at {at}: {why}")
            })
        }
    }
}

/// The tenant a tool call is made for, and where its saved sessions go; put in the
/// request's extensions by [`SandpyServer::call_tool`] for the tools to read.
#[derive(Clone)]
struct Caller {
    tenant: Tenant,
    saves: Saves,
    /// Whose the resources of its runs are: the tenant's, through this MCP session.
    owner: resources::Owner,
}

/// Where a tenant's saved sessions are.
#[derive(Clone)]
enum Saves {
    /// In the config's `save_dir` (which may not exist yet), in the tenant's own folder
    /// there if it has one.
    In {
        root: PathBuf,
        tenant: Option<String>,
    },
    /// Nowhere, for this reason.
    Off(&'static str),
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
    files: Vec<sandpy::files::InputFile>,
    /// The tier the request asked for, when the server lets requests choose.
    tier: Option<sandpy::Tier>,
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
        let checks = run::CHECKS
            .into_iter()
            .chain(discovery::CHECKS)
            .chain(sessions::CHECKS)
            .collect();
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
            runs_on: runs_on(settings),
            model_output: settings.model_output.clone(),
            sessions,
            resources: resources::ResourceStore::new(settings.resources),
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

    /// Stop taking new runs (each is answered `busy`, saying the server is shutting down),
    /// wait up to `grace` for the runs in flight to end, then save the sessions of the
    /// config's token tenants so that another replica can restore them
    /// ([`SandpyServer::save_sessions`]). Returns how many runs were still going.
    pub async fn drain(&self, grace: std::time::Duration) -> i64 {
        self.state.draining.store(true, Ordering::Relaxed);
        let deadline = tokio::time::Instant::now() + grace;
        let metrics = self.state.hub.metrics();
        while metrics.in_flight() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let left = metrics.in_flight();
        let saved = self.save_sessions().await;
        tracing::info!("drained: {left} runs still going, {saved} sessions saved");
        left
    }

    /// Save every session of the config's token tenants and of the OAuth tenants (those
    /// named by an access token's claim) under its own id, in the tenant's folder of
    /// `save_dir` (`restore_session` with `name` = the session's id brings it back, on any
    /// replica that shares the folder). Sessions whose id is not a plain name, or whose
    /// journal passed its cap, are skipped and logged. Returns how many were saved.
    pub async fn save_sessions(&self) -> usize {
        let state = &self.state;
        let Some(root) = &state.session_dir else {
            return 0;
        };
        let mut owners: Vec<(String, Tenant)> = (state.token_tenants.iter())
            .map(|(name, tenant)| (name.to_string(), tenant.clone()))
            .collect();
        let quota = state.sessions.limits().per_tenant;
        for (id, _) in state.sessions.open_by_tenant() {
            if let Some(claim) = id.strip_prefix("oauth:") {
                let folder = ClaimedTenant(Arc::from(claim)).folder();
                owners.push((folder, Tenant::new(id.clone(), quota)));
            }
        }
        let mut saved = 0;
        for (name, tenant) in &owners {
            for id in state.sessions.ids_of(&tenant.id) {
                let written = async {
                    if !sandpy::settings::is_plain_name(&id) {
                        return Err("its id is not a plain name".to_string());
                    }
                    let snapshot = state.sessions.of(tenant).snapshot(&id).await;
                    let snapshot = snapshot.map_err(|e| e.to_string())?;
                    let text = serde_json::to_string(&snapshot).map_err(|e| e.to_string())?;
                    let dir = crate::server::saves::SaveDir::open(root, Some(name));
                    let dir = dir.map_err(|e| e.to_string())?;
                    dir.write(&id, text.as_bytes()).map_err(|e| e.to_string())
                };
                match written.await {
                    Ok(path) => {
                        saved += 1;
                        tracing::info!("saved session {id} of {name} to {}", path.display());
                    }
                    Err(why) => tracing::warn!("session {id} of {name} not saved: {why}"),
                }
            }
        }
        saved
    }

    /// Who makes a call that came with `context`: the tenant its OAuth access token's
    /// claim names (`oauth:<claim>`, with the per-tenant quota, saving to a folder named
    /// by a hash of the claim), else the tenant its bearer token names, else this
    /// handler's own.
    fn caller(&self, context: &RequestContext<RoleServer>) -> Caller {
        let (tenant, saves) = self.tenant_of(context);
        let owner = resources::Owner {
            tenant: tenant.id.clone(),
            connection: self.client.connection,
        };
        Caller {
            tenant,
            saves,
            owner,
        }
    }

    /// The tenant of [`SandpyServer::caller`], and where its saved sessions go.
    fn tenant_of(&self, context: &RequestContext<RoleServer>) -> (Tenant, Saves) {
        let state = &self.state;
        let named = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<TokenTenantName>())
            .and_then(|name| Some((name, state.token_tenants.get(&name.0)?)));
        const NO_SAVES: &str = "saving sessions is off: set sandpy.sessions.save_dir in the config";
        const NO_OWNER: &str = "saving sessions over HTTP needs a tenant known by its bearer token \
             (sandpy.tenants in the config): a save outlives the MCP session, so it needs an owner that does too";
        let saves = |tenant: Option<&str>| match &state.session_dir {
            None => Saves::Off(NO_SAVES),
            Some(root) => Saves::In {
                root: root.clone(),
                tenant: tenant.map(str::to_string),
            },
        };
        let claimed = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<ClaimedTenant>());
        if let Some(claimed) = claimed {
            let quota = state.sessions.limits().per_tenant;
            let tenant = Tenant::new(claimed.id(), quota);
            return (tenant, saves(Some(&claimed.folder())));
        }
        match named {
            Some((name, tenant)) => (tenant.clone(), saves(Some(&name.0))),
            None if self.client.closes_sessions => {
                let saves = match state.session_dir {
                    None => Saves::Off(NO_SAVES),
                    Some(_) => Saves::Off(NO_OWNER),
                };
                (self.client.tenant.clone(), saves)
            }
            None => (self.client.tenant.clone(), saves(None)),
        }
    }

    /// The tools in [`LISTED`] order, `run_python`'s description completed with the
    /// upstream servers as they are now, and the run tools' `tier` argument only where the
    /// operator lets requests choose it (`sandpy.native.per_run`).
    fn tools(&self) -> Vec<Tool> {
        let rank = |tool: &Tool| {
            LISTED
                .iter()
                .position(|name| *name == tool.name)
                .unwrap_or(LISTED.len())
        };
        let mut tools = self.state.tools.list_all();
        tools.sort_by_key(rank); // stable: the unlisted stay sorted by name
        for tool in &mut tools {
            if !self.state.tier_per_run {
                run::without_tier(tool);
            }
            if tool.name == "run_python" {
                let guide = tool.description.as_deref().unwrap_or_default();
                let (runs_on, servers) = (&self.state.runs_on, self.state.servers_line());
                tool.description = Some(format!("{guide}\n{runs_on}\n{servers}").into());
            }
        }
        tools
    }
}

impl SandpyServer {
    /// The upstream servers `/readyz` requires (`sandpy.ready_requires`) that are not
    /// ready now.
    pub(crate) fn required_upstreams_down(&self) -> Vec<String> {
        let state = &self.state;
        if state.ready_requires.is_empty() {
            return Vec::new();
        }
        let servers = state.hub.servers();
        state
            .ready_requires
            .iter()
            .filter(|name| !servers.iter().any(|s| &&s.name == name && s.is_ready()))
            .cloned()
            .collect()
    }

    /// The text of a `/metrics` scrape: the counters so far, with the upstreams' health,
    /// the sessions per tenant and `mcp_sessions` (over HTTP) read now.
    pub(crate) fn metrics_text(&self, mcp_sessions: Option<usize>) -> String {
        let state = &self.state;
        let upstreams: Vec<(String, bool)> = state
            .hub
            .servers()
            .into_iter()
            .map(|s| {
                let ready = s.is_ready();
                (s.name, ready)
            })
            .collect();
        let sessions = state.sessions.open_by_tenant();
        state
            .hub
            .metrics()
            .scrape(&upstreams, &sessions, mcp_sessions)
    }
}

/// What `run_python`'s description says of where code runs: each tier a request can get,
/// its Python and packages, and the network. A model that knows `import pandas` fails in
/// the WebAssembly tier writes code that works the first time.
fn runs_on(settings: &sandpy::settings::Settings) -> String {
    let native = settings.native.as_ref();
    let wasm = "Python 3.14 in WebAssembly: the standard library and pure-Python packages \
                (no compiled packages such as numpy or pandas)";
    let native_line = |config: &sandpy::native::NativeConfig| {
        let version = config
            .venv
            .as_ref()
            .and_then(|venv| std::fs::read_to_string(venv.join("pyvenv.cfg")).ok())
            .and_then(|cfg| {
                cfg.lines().find_map(|line| {
                    let (key, value) = line.split_once('=')?;
                    matches!(key.trim(), "version" | "version_info")
                        .then(|| value.trim().to_string())
                })
            })
            .map_or("the host's CPython".to_string(), |v| format!("CPython {v}"));
        let packages = if config.packages.is_empty() {
            "its venv's packages".to_string()
        } else {
            config.packages.join(", ")
        };
        format!("{version} natively (confined) with {packages}")
    };
    let tiers = match (settings.tier, native) {
        (sandpy::Tier::Native, Some(config)) if config.per_run => format!(
            "Runs on {}; `tier: \"wasm\"` gives {wasm}.",
            native_line(config)
        ),
        (sandpy::Tier::Native, Some(config)) => format!("Runs on {}.", native_line(config)),
        (_, Some(config)) if config.per_run => format!(
            "Runs on {wasm}; `tier: \"native\"` gives {}.",
            native_line(config)
        ),
        _ => format!("Runs on {wasm}."),
    };
    let network = if settings.network.is_some() {
        "Network: HTTP(S) to the hosts the operator allows (urllib.request, http.client); no sockets."
    } else {
        "Network: none."
    };
    format!("{tiers} {network}")
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
            tier: request.tier.unwrap_or(self.run.tier),
            ..self.run.clone()
        }
    }
}

/// What `initialize` tells a client of the server's purpose.
const INSTRUCTIONS: &str =
    "Write one Python program that orchestrates many tools instead of calling them one by one: \
                            use run_python; find tools with search_tools.";

#[tool_handler(router = self.state.tools)]
impl ServerHandler for SandpyServer {
    /// Tools, and resources: the files this MCP session's runs left.
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("sandpy", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS.to_string())
    }

    /// The files this caller's runs left through this MCP session, all in one page.
    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        if let Some(cursor) = request.and_then(|r| r.cursor) {
            return Err(invalid(format!(
                "invalid cursor {cursor:?}: this server lists every resource in one page (no nextCursor)"
            )));
        }
        let owner = self.caller(&context).owner;
        let listed = self.state.resources.list(&owner);
        let listed = listed.iter().map(resources::Resource::listed).collect();
        let mut result = ListResourcesResult::with_all_items(listed);
        // Each run changes the list, and it is this client's own: never cached.
        if context
            .protocol_version()
            .is_some_and(|version| version >= ProtocolVersion::V_2026_07_28)
        {
            result = result.with_ttl_ms(0).with_cache_scope(CacheScope::Private);
        }
        Ok(result)
    }

    /// A file one of this caller's runs left through this MCP session; any other URI is
    /// `resource not found` (-32002, the URI in `data`), someone else's too.
    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let owner = self.caller(&context).owner;
        match self.state.resources.read(&owner, &request.uri) {
            Ok(resource) => Ok(ReadResourceResult::new(vec![resource.contents()]).into()),
            Err(not_found) => {
                let data = serde_json::json!({"uri": not_found.uri});
                Err(ErrorData::resource_not_found(
                    not_found.to_string(),
                    Some(data),
                ))
            }
        }
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // Every tool is in the one page: no cursor was ever handed out, so any is invalid
        // (the pagination page: an invalid cursor SHOULD get -32602).
        if let Some(cursor) = request.and_then(|r| r.cursor) {
            return Err(invalid(format!(
                "invalid cursor {cursor:?}: this server lists every tool in one page (no nextCursor)"
            )));
        }
        // Servers still starting: wait a little, so the description says how they are.
        self.state.hub.wait_started(STARTING_WAIT).await;
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    /// Check the arguments by parsing them as the tool's parameters, then call it for its
    /// caller. Arguments that do not fit are a tool error naming the field (`isError`, so
    /// that the model corrects its call); an unknown tool is a protocol error
    /// (`invalid_params`).
    async fn call_tool(
        &self,
        mut request: CallToolRequestParams,
        mut context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let state = self.state.as_ref();
        let name = request.name.as_ref();
        let route = state
            .tools
            .map
            .get(name)
            .ok_or_else(|| invalid(format!("unknown tool {name:?}")))?;
        if let Some(check) = state.checks.get(name) {
            let arguments = Value::Object(request.arguments.take().unwrap_or_default());
            if let Some(refused) = state.tier_refused(name, &arguments) {
                return Ok(CallToolResponse::from(refused));
            }
            if let Err(why) = check(&arguments) {
                let message = format!("arguments of {name} do not fit its inputSchema: {why}");
                return Ok(CallToolResponse::from(
                    state.refused_arguments(name, message),
                ));
            }
            if let Value::Object(arguments) = arguments {
                request.arguments = Some(arguments);
            }
        }
        if state.draining.load(Ordering::Relaxed) && run::CHECKS.iter().any(|(n, _)| *n == name) {
            let metrics = state.hub.metrics();
            metrics.run(
                state.run.tier,
                sandpy::Status::Busy,
                std::time::Duration::ZERO,
            );
            return Ok(CallToolResponse::from(state.refused_while_draining()));
        }
        let caller = self.caller(&context);
        context.extensions.insert(caller);
        (route.call)(ToolCallContext::new(state, request, context)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tool with arguments but no check would take malformed requests to the router,
    /// which answers them as `isError` results instead of protocol errors.
    #[test]
    fn every_tool_with_arguments_has_a_check_and_no_check_is_stray() {
        let tools = ServerState::run_tools()
            + ServerState::discovery_tools()
            + ServerState::session_tools();
        let checks: HashMap<&str, Check> = run::CHECKS
            .into_iter()
            .chain(discovery::CHECKS)
            .chain(sessions::CHECKS)
            .collect();
        let listed = tools.list_all();
        for tool in &listed {
            let has_arguments = tool
                .input_schema
                .get("properties")
                .and_then(Value::as_object)
                .is_some_and(|properties| !properties.is_empty());
            assert_eq!(
                checks.contains_key(tool.name.as_ref()),
                has_arguments,
                "{}",
                tool.name
            );
        }
        assert!(checks
            .keys()
            .all(|name| listed.iter().any(|tool| tool.name == *name)));
    }

    fn settings(sandpy: &str) -> sandpy::settings::Settings {
        let text = format!(r#"{{"sandpy": {sandpy}}}"#);
        let config = sandpy::settings::ConfigFile::parse(&text, std::path::Path::new("/c.json"))
            .expect("config");
        config.settings
    }

    #[test]
    fn run_python_says_which_python_and_packages_each_tier_has() {
        let wasm = runs_on(&settings("{}"));
        assert!(
            wasm.starts_with("Runs on Python 3.14 in WebAssembly"),
            "{wasm}"
        );
        assert!(
            wasm.contains("no compiled packages") && wasm.ends_with("Network: none."),
            "{wasm}"
        );
        let venv = tempfile::tempdir().expect("venv");
        std::fs::write(
            venv.path().join("pyvenv.cfg"),
            "home = /usr/bin\nversion = 3.12.3\n",
        )
        .expect("cfg");
        let native = format!(
            r#"{{"tier": "native", "native": {{"venv": {:?}, "packages": ["numpy", "pandas"], "per_run": true}}}}"#,
            venv.path()
        );
        let native = runs_on(&settings(&native));
        assert!(
            native.starts_with("Runs on CPython 3.12.3 natively (confined) with numpy, pandas; `tier: \"wasm\"` gives Python 3.14 in WebAssembly"),
            "{native}"
        );
    }
}
