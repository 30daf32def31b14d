//! The upstream hub: an MCP client for every configured server, exposed to the sandbox as
//! one [`ToolHost`] whose tools are named `mcp__<server>__<tool>`.
//!
//! A stdio server that died is restarted on the next call of one of its tools; arguments
//! are checked against the tool's `inputSchema` first; the config's allowlist hides and
//! refuses tools for every run. The sandbox times each call (`tool_timeout_ms`, cut to
//! what the run has left), so the hub does not.
//!
//! Every message about a server (its status, the errors its calls raise, the log) shows
//! values the config took from the environment as their `${VAR}` text
//! ([`ServerSpec::hide`]): they may be tokens.
//!
//! What an upstream sends is bounded before the hub holds it: a stdio server's messages are
//! read through [`BoundedChild`] (an answer over the limit becomes an error for its call),
//! an HTTP server's through rmcp's body limits, both at twice `max_tool_result_bytes` plus
//! 64 KiB (room for structured content and its text copy); a result or error text over
//! `max_tool_result_bytes` is refused as it arrives. A tool list is read for at most
//! [`MAX_PAGES`] pages, [`MAX_TOOLS`] tools and [`MAX_LISTED_BYTES`]; a tool with a bad name
//! ([`names`]) or schema ([`schema::vet`]) is skipped with a logged reason that
//! `explain_missing` repeats, and the rest of the server's tools stay. The catalog is a map
//! by name, so a call or a schema lookup costs the same with 10 tools or 10,000, and a
//! tool's validator is made on its first call.

use crate::audit::AuditLog;
use crate::bounded::{BoundedChild, Refusal};
use crate::config::{Config, ServerSpec};
use crate::names;
use crate::schema::{self, ArgumentSchema};
use crate::tls;
use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ContentBlock,
    Implementation, JsonObject, PaginatedRequestParams, Tool,
};
use rmcp::service::{ClientCacheConfig, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{Peer, RoleClient, ServiceError, ServiceExt};
use sandpy::{Allowlist, ToolError, ToolFuture, ToolHost, ToolInfo};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

type Client = RunningService<RoleClient, ClientConfig>;

/// How long a server may take to start and list its tools (npx may download it first).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);

/// The most `tools/list` pages read from one server (a server may always say there are more).
pub const MAX_PAGES: usize = 100;

/// The most tools kept of one server.
pub const MAX_TOOLS: usize = 20_000;

/// The most bytes of tool names, descriptions and schemas kept of one server.
pub const MAX_LISTED_BYTES: usize = 64 << 20;

/// The longest tool description kept; a longer one is cut, the cut marked.
const MAX_DESCRIPTION_BYTES: usize = 64 * 1024;

/// How many skipped tools of one server the hub remembers (with their reasons).
const MAX_SKIPPED: usize = 100;

/// The largest upstream message for results of `result_bytes`: a result and its text copy,
/// plus the envelope.
fn message_limit(result_bytes: usize) -> usize {
    result_bytes.saturating_mul(2).saturating_add(64 * 1024)
}

/// One upstream server and its live connection.
struct Upstream {
    name: String,
    spec: ServerSpec,
    /// The largest message read from the server ([`message_limit`]).
    message_limit: usize,
    client: tokio::sync::Mutex<Option<Client>>,
    status: RwLock<String>,
}

/// One listed tool: what the guest sees of it, where its calls go, and its argument
/// validator once its first call made it.
struct Entry {
    info: ToolInfo,
    upstream: Arc<Upstream>,
    tool: String,
    schema: OnceLock<ArgumentSchema>,
}

#[derive(Default)]
struct Catalog {
    /// By full name, so in the order `list_tools` gives.
    tools: BTreeMap<String, Arc<Entry>>,
    /// Tools a server listed and the hub skipped: full name -> (server, why).
    skipped: HashMap<String, (String, String)>,
}

struct Inner {
    upstreams: Vec<Arc<Upstream>>,
    catalog: RwLock<Catalog>,
    allowlist: Allowlist,
    /// `max_tool_result_bytes` of the config: results and error texts above it are refused
    /// as they arrive.
    result_bytes: usize,
}

/// The hub; cheap to clone, and a [`ToolHost`] for the sandbox.
#[derive(Clone)]
pub struct Hub(Arc<Inner>);

/// What the hub knows of one server, for descriptions and `sandpy serve` logs.
#[derive(Debug, Clone)]
pub struct ServerStatus {
    /// Name from the config.
    pub name: String,
    /// `ready (N tools)`, or why it is unavailable.
    pub status: String,
}

fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("sandpy", env!("CARGO_PKG_VERSION")),
    )
}

/// Start or reach the server. Error texts may hold expanded values: callers hide them.
async fn connect(name: &str, spec: &ServerSpec, limit: usize) -> Result<Client, String> {
    match spec {
        ServerSpec::Stdio {
            command,
            args,
            env,
            cwd,
            ..
        } => {
            let mut wrap = CommandWrap::with_new(command, |c| {
                c.args(args).envs(env);
                if let Some(cwd) = cwd {
                    c.current_dir(cwd);
                }
            });
            // Its own process group, killed whole on drop: `npx` and the server it starts.
            wrap.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
            let transport = BoundedChild::spawn(wrap, name, limit)
                .map_err(|e| format!("cannot start `{command}`: {e}"))?;
            client_config()
                .serve(transport)
                .await
                .map_err(|e| format!("MCP handshake failed: {e}"))
        }
        ServerSpec::Http {
            url,
            headers,
            ca_file,
            ..
        } => {
            // The config checked the headers; a spec built in code may still hold bad ones.
            let mut custom = HashMap::new();
            for (name, value) in headers {
                let name = axum::http::HeaderName::try_from(name.as_str())
                    .map_err(|_| format!("header {name:?}: not a valid HTTP header name"))?;
                let value = axum::http::HeaderValue::try_from(value.as_str())
                    .map_err(|_| format!("header {name}: not a valid HTTP header value"))?;
                custom.insert(name, value);
            }
            let client = tls::http_client(url.starts_with("https://"), ca_file.as_ref())?;
            let config = StreamableHttpClientTransportConfig::with_uri(url.clone())
                .custom_headers(custom)
                .max_json_response_size(limit)
                .max_sse_event_size(limit);
            let transport = StreamableHttpClientTransport::with_client(client, config);
            client_config().serve(transport).await.map_err(|e| {
                tls::explain(name, url, ca_file.as_ref(), &e)
                    .unwrap_or_else(|| format!("cannot connect to {url}: {e}"))
            })
        }
    }
}

fn is_connection_error(error: &ServiceError) -> bool {
    matches!(
        error,
        ServiceError::TransportClosed | ServiceError::TransportSend(_)
    )
}

/// The value Python sees: structured content, else the text content (decoded as JSON when
/// it is JSON), else the raw content blocks; an error result becomes the error text. A
/// value or error text over `limit` bytes is refused, naming `tool`, its size and the limit.
fn result_value(tool: &str, result: CallToolResult, limit: usize) -> Result<Value, String> {
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(ContentBlock::as_text)
        .map(|t| t.text.as_str())
        .collect();
    if result.is_error == Some(true) {
        let bytes = match &result.structured_content {
            Some(v) if texts.is_empty() => schema::json_len(v),
            _ => texts.iter().map(|t| t.len() + 1).sum(),
        };
        if bytes > limit {
            return Err(format!(
                "the error message of {tool} is {bytes} bytes, over the limit of {limit} bytes (max_tool_result_bytes)"
            ));
        }
        let message = if texts.is_empty() {
            result
                .structured_content
                .map(|v| v.to_string())
                .unwrap_or_else(|| "the tool reported an error".into())
        } else {
            texts.join("\n")
        };
        return Err(message);
    }
    let value = plain_value(result)?;
    if schema::holds_depth_marker(&value) {
        return Err(format!(
            "the result of {tool} is nested more than {} levels deep",
            crate::bounded::MAX_DEPTH
        ));
    }
    let bytes = schema::json_len(&value);
    if bytes > limit {
        return Err(format!(
            "the result of {tool} is {bytes} bytes, over the limit of {limit} bytes (max_tool_result_bytes)"
        ));
    }
    Ok(value)
}

fn plain_value(result: CallToolResult) -> Result<Value, String> {
    if let Some(structured) = result.structured_content {
        return Ok(structured);
    }
    let decode =
        |text: &str| serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()));
    let mut values: Vec<Value> = result
        .content
        .iter()
        .map(|block| match block.as_text() {
            Some(text) => decode(&text.text),
            None => serde_json::to_value(block).unwrap_or(Value::Null),
        })
        .collect();
    Ok(match values.len() {
        0 => Value::Null,
        1 => values.remove(0),
        _ => Value::Array(values),
    })
}

/// What one server listed, within the limits: the tools kept (name as listed, info with
/// a description cut to size), the ones skipped and why, and why listing stopped early.
struct Listed {
    kept: Vec<(String, ToolInfo)>,
    skipped: Vec<(String, String)>,
    skipped_count: usize,
    stopped: Option<String>,
}

/// A name as a log line shows it: quoted, at most 80 characters.
fn shown(name: &str) -> String {
    match name.char_indices().nth(80) {
        Some((end, _)) => format!("{:?}... ({} bytes)", &name[..end], name.len()),
        None => format!("{name:?}"),
    }
}

/// The tool as the hub keeps it, or why it is skipped.
fn vet_tool(tool: Tool) -> Result<(String, ToolInfo), String> {
    names::check(&tool.name)?;
    let schema = Value::Object(JsonObject::clone(&tool.input_schema));
    schema::vet(&schema)?;
    let mut description = tool.description.as_deref().unwrap_or_default().to_string();
    if description.len() > MAX_DESCRIPTION_BYTES {
        let mut end = MAX_DESCRIPTION_BYTES;
        while !description.is_char_boundary(end) {
            end -= 1;
        }
        let cut = description.len() - end;
        description.truncate(end);
        description += &format!("[... {cut} more bytes]");
    }
    let info = ToolInfo {
        name: String::new(),
        description,
        input_schema: schema,
    };
    Ok((tool.name.to_string(), info))
}

/// Read a server's `tools/list`, page by page, within [`MAX_PAGES`], [`MAX_TOOLS`] and
/// [`MAX_LISTED_BYTES`]; each tool is vetted as it comes ([`vet_tool`]).
async fn list_tools(peer: &Peer<RoleClient>, server: &str) -> Result<Listed, ServiceError> {
    let mut listed = Listed {
        kept: Vec::new(),
        skipped: Vec::new(),
        skipped_count: 0,
        stopped: None,
    };
    // rmcp would keep a copy of every page a server marks cacheable (`ttlMs`): up to 512
    // pages of 16 MiB. The hub keeps what it vetted, and nothing else.
    peer.set_response_cache_config(ClientCacheConfig::disabled())
        .await;
    let mut bytes = 0usize;
    let mut cursor = None;
    'pages: for page in 1..=MAX_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor.take());
        let result = peer.list_tools(Some(params)).await?;
        for tool in result.tools {
            let name = tool.name.to_string();
            match vet_tool(tool) {
                Ok((name, info)) => {
                    let size =
                        name.len() + info.description.len() + schema::json_len(&info.input_schema);
                    if listed.kept.len() == MAX_TOOLS || bytes + size > MAX_LISTED_BYTES {
                        listed.stopped = Some(format!(
                            "listing stopped at {} tools: at most {MAX_TOOLS} tools and {MAX_LISTED_BYTES} bytes of them are kept",
                            listed.kept.len()
                        ));
                        break 'pages;
                    }
                    bytes += size;
                    listed.kept.push((name, info));
                }
                Err(why) => {
                    tracing::warn!("upstream {server}: tool {} skipped: {why}", shown(&name));
                    listed.skipped_count += 1;
                    if listed.skipped.len() < MAX_SKIPPED && name.len() <= 8192 {
                        listed.skipped.push((name, why));
                    }
                }
            }
        }
        match result.next_cursor {
            None => break,
            Some(_) if page == MAX_PAGES => {
                listed.stopped = Some(format!(
                    "listing stopped after {MAX_PAGES} pages, the server still listing more"
                ));
            }
            Some(next) => cursor = Some(next),
        }
    }
    if let Some(why) = &listed.stopped {
        tracing::warn!("upstream {server}: {why}");
    }
    for (attribute, tools) in names::collisions(listed.kept.iter().map(|(n, _)| n.as_str())) {
        tracing::warn!(
            "upstream {server}: tools {tools:?} all map to tools.{server}.{attribute}; none gets that attribute, call them by full name with call_mcp_tool"
        );
    }
    Ok(listed)
}

impl Upstream {
    fn set_status(&self, status: String) {
        *self.status.write().unwrap_or_else(|e| e.into_inner()) = status;
    }

    /// A live peer: the current connection, or a new one if there is none or it died.
    /// Returns whether it reconnected, so the caller can refresh the tool list.
    async fn peer(&self) -> Result<(Peer<RoleClient>, bool), String> {
        let mut slot = self.client.lock().await;
        if let Some(client) = slot.as_ref() {
            if !client.is_transport_closed() {
                return Ok((client.peer().clone(), false));
            }
        }
        if let Some(dead) = slot.take() {
            tracing::warn!("upstream {} died; restarting it", self.name);
            tokio::spawn(async move { drop(dead.cancel().await) });
        }
        let connecting = connect(&self.name, &self.spec, self.message_limit);
        let client = tokio::time::timeout(STARTUP_TIMEOUT, connecting)
            .await
            .map_err(|_| {
                format!(
                    "server {} did not start within {} s",
                    self.name,
                    STARTUP_TIMEOUT.as_secs()
                )
            })?
            .map_err(|e| self.spec.hide(&e))?;
        let peer = client.peer().clone();
        *slot = Some(client);
        Ok((peer, true))
    }

    /// What to do about `error`, when it is a TLS or HTTP authentication failure of an
    /// HTTP server (a certificate that changed, a token that was revoked). The text may hold
    /// expanded values: callers hide them.
    fn explain(&self, error: &(dyn std::error::Error + 'static)) -> Option<String> {
        match &self.spec {
            ServerSpec::Http { url, ca_file, .. } => {
                tls::explain(&self.name, url, ca_file.as_ref(), error)
            }
            ServerSpec::Stdio { .. } => None,
        }
    }

    /// Drop the connection after a transport error (even one whose transport still looks
    /// open), so that the next call starts the server afresh.
    async fn forget(&self) {
        if let Some(client) = self.client.lock().await.take() {
            tokio::spawn(async move { drop(client.cancel().await) });
        }
    }
}

impl Hub {
    /// Start (or connect to) every configured server at once and list their tools. A
    /// server that fails is reported in [`Hub::servers`] and retried on its next call.
    pub async fn start(config: &Config) -> Hub {
        let allowlist =
            Allowlist::new(config.settings.allowed_tools.as_deref()).unwrap_or_else(|e| {
                tracing::error!("{e}; allowing no tools");
                Allowlist::new(Some(&[])).unwrap_or_default()
            });
        let upstreams: Vec<Arc<Upstream>> = config
            .servers
            .iter()
            .map(|(name, spec)| {
                Arc::new(Upstream {
                    name: name.clone(),
                    spec: spec.clone(),
                    message_limit: message_limit(config.settings.limits.tool_result_bytes),
                    client: tokio::sync::Mutex::new(None),
                    status: RwLock::new("starting".into()),
                })
            })
            .collect();
        let hub = Hub(Arc::new(Inner {
            upstreams,
            catalog: RwLock::new(Catalog::default()),
            allowlist,
            result_bytes: config.settings.limits.tool_result_bytes,
        }));
        let starts = hub
            .0
            .upstreams
            .iter()
            .map(|upstream| hub.refresh(upstream.clone()));
        futures::future::join_all(starts).await;
        hub
    }

    /// (Re)connect one server if needed and replace its tools in the catalog.
    async fn refresh(&self, upstream: Arc<Upstream>) {
        let listed = async {
            let (peer, _) = upstream.peer().await?;
            tokio::time::timeout(STARTUP_TIMEOUT, list_tools(&peer, &upstream.name))
                .await
                .map_err(|_| "listing tools timed out".to_string())?
                .map_err(|e| upstream.spec.hide(&format!("listing tools failed: {e}")))
        }
        .await;
        let mut catalog = self.0.catalog.write().unwrap_or_else(|e| e.into_inner());
        catalog
            .tools
            .retain(|_, entry| entry.upstream.name != upstream.name);
        catalog
            .skipped
            .retain(|_, (server, _)| *server != upstream.name);
        match listed {
            Ok(listed) => {
                let mut status = format!("ready ({} tools", listed.kept.len());
                if listed.skipped_count > 0 {
                    status += &format!(
                        "; {} skipped for bad names or schemas",
                        listed.skipped_count
                    );
                }
                if let Some(why) = &listed.stopped {
                    status += &format!("; {why}");
                }
                status.push(')');
                upstream.set_status(status);
                let prefix = format!("mcp__{}__", upstream.name);
                for (name, why) in listed.skipped {
                    let server = upstream.name.clone();
                    catalog
                        .skipped
                        .insert(format!("{prefix}{name}"), (server, why));
                }
                for (tool, mut info) in listed.kept {
                    info.name = format!("{prefix}{tool}");
                    let entry = Entry {
                        info,
                        upstream: upstream.clone(),
                        tool,
                        schema: OnceLock::new(),
                    };
                    catalog
                        .tools
                        .insert(entry.info.name.clone(), Arc::new(entry));
                }
            }
            Err(reason) => {
                tracing::warn!("upstream {}: {reason}", upstream.name);
                upstream.set_status(format!("unavailable: {reason}"));
            }
        }
    }

    /// Every configured server and its state.
    pub fn servers(&self) -> Vec<ServerStatus> {
        self.0
            .upstreams
            .iter()
            .map(|u| ServerStatus {
                name: u.name.clone(),
                status: u.status.read().unwrap_or_else(|e| e.into_inner()).clone(),
            })
            .collect()
    }

    /// Stop every server the hub started (whole process groups) and close connections.
    pub async fn shutdown(&self) {
        let closing = self.0.upstreams.iter().map(|upstream| async move {
            if let Some(client) = upstream.client.lock().await.take() {
                let _ = tokio::time::timeout(Duration::from_secs(5), client.cancel()).await;
            }
        });
        futures::future::join_all(closing).await;
    }

    async fn call(&self, name: String, arguments: Value) -> Result<Value, String> {
        if !self.0.allowlist.allows(&name) {
            return Err(self.0.allowlist.refusal(&name));
        }
        let entry = {
            let catalog = self.0.catalog.read().unwrap_or_else(|e| e.into_inner());
            match catalog.tools.get(&name) {
                Some(entry) => entry.clone(),
                None => return Err(format!("unknown tool {name:?}")),
            }
        };
        let schema = &entry.info.input_schema;
        let schema = entry
            .schema
            .get_or_init(|| ArgumentSchema::compile(&name, schema));
        schema.check(&name, &arguments)?;
        let (upstream, tool) = (entry.upstream.clone(), entry.tool.clone());
        let Value::Object(arguments) = arguments else {
            return Err(format!("arguments of {name} must be an object"));
        };
        let (peer, reconnected) = upstream.peer().await?;
        if reconnected {
            self.refresh(upstream.clone()).await;
        }
        let request = CallToolRequestParams::new(tool).with_arguments(arguments);
        match peer.call_tool(request).await {
            Ok(result) => result_value(&name, result, self.0.result_bytes),
            Err(error) if is_connection_error(&error) => {
                upstream.forget().await;
                let why = upstream
                    .explain(&error)
                    .unwrap_or_else(|| error.to_string());
                let why = upstream.spec.hide(&why);
                upstream.set_status(format!("crashed ({why}); restarts on the next call"));
                Err(format!("server {} failed during the call ({why}); it will be restarted on the next call", upstream.name))
            }
            Err(ServiceError::McpError(error)) => {
                let limit = self.0.result_bytes;
                if let Some(refusal) = Refusal::from_data(error.data.as_ref()) {
                    let size = match refusal.exact {
                        true => format!("{} bytes, over", refusal.bytes),
                        false => "over".into(),
                    };
                    Err(format!(
                        "the answer of {name} is {size} the limit of {} bytes on a message from an upstream (twice max_tool_result_bytes, plus 64 KiB); nothing of it was kept",
                        refusal.limit
                    ))
                } else if error.message.len() > limit {
                    Err(format!(
                        "the error message of {name} is {} bytes, over the limit of {limit} bytes (max_tool_result_bytes)",
                        error.message.len()
                    ))
                } else {
                    // The tool's own answer: passed on as the tool gave it.
                    Err(error.message.to_string())
                }
            }
            Err(error) => Err(upstream.spec.hide(&format!("tool {name} failed: {error}"))),
        }
    }

    /// This hub as the tool host of one execution, recording each call in `audit`.
    pub fn for_execution(
        &self,
        execution_id: String,
        audit: Option<AuditLog>,
    ) -> Arc<dyn ToolHost> {
        match audit {
            None => Arc::new(self.clone()),
            Some(audit) => Arc::new(AuditedTools {
                hub: self.clone(),
                audit,
                execution_id: Arc::from(execution_id),
            }),
        }
    }
}

impl ToolHost for Hub {
    fn list_tools(&self) -> Vec<ToolInfo> {
        let catalog = self.0.catalog.read().unwrap_or_else(|e| e.into_inner());
        catalog
            .tools
            .values()
            .filter(|e| self.0.allowlist.allows(&e.info.name))
            .map(|e| e.info.clone())
            .collect()
    }

    fn tool(&self, name: &str) -> Option<ToolInfo> {
        if !self.0.allowlist.allows(name) {
            return None;
        }
        let catalog = self.0.catalog.read().unwrap_or_else(|e| e.into_inner());
        catalog.tools.get(name).map(|e| e.info.clone())
    }

    fn has_tool(&self, name: &str) -> bool {
        let catalog = self.0.catalog.read().unwrap_or_else(|e| e.into_inner());
        self.0.allowlist.allows(name) && catalog.tools.contains_key(name)
    }

    fn tool_names(&self) -> Vec<String> {
        let catalog = self.0.catalog.read().unwrap_or_else(|e| e.into_inner());
        catalog
            .tools
            .keys()
            .filter(|name| self.0.allowlist.allows(name))
            .cloned()
            .collect()
    }

    fn call_tool(&self, name: &str, arguments: Value) -> ToolFuture {
        let hub = self.clone();
        let name = name.to_string();
        Box::pin(async move { hub.call(name, arguments).await.map_err(ToolError::from) })
    }

    fn explain_missing(&self, name: &str) -> String {
        if !self.0.allowlist.allows(name) {
            return self.0.allowlist.refusal(name);
        }
        let skipped = {
            let catalog = self.0.catalog.read().unwrap_or_else(|e| e.into_inner());
            catalog.skipped.get(name).cloned()
        };
        if let Some((server, why)) = skipped {
            return format!(
                "tool {name:?} of server {server} was skipped when its tools were listed: {why}"
            );
        }
        let servers: Vec<String> = self
            .servers()
            .into_iter()
            .map(|s| format!("{} ({})", s.name, s.status))
            .collect();
        format!(
            "unknown tool {name:?}; servers: {}; use search_tools() to find one",
            servers.join(", ")
        )
    }
}

/// The hub plus an audit record per call.
struct AuditedTools {
    hub: Hub,
    audit: AuditLog,
    execution_id: Arc<str>,
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

    fn tool_names(&self) -> Vec<String> {
        self.hub.tool_names()
    }

    fn explain_missing(&self, name: &str) -> String {
        self.hub.explain_missing(name)
    }

    fn refused(&self, name: &str, reason: &str) {
        self.audit.refused_call(&self.execution_id, name, reason);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::env::VarError;
    use std::path::Path;

    const SECRET: &str = "sk-live-9f8e7d6c5b4a3210";

    #[tokio::test]
    async fn statuses_and_errors_show_the_config_text_not_values_from_the_environment() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port(); // closed again: connecting is refused
        let text = format!(
            r#"{{"mcpServers": {{
                "remote": {{"url": "http://127.0.0.1:{port}/mcp?key=${{SECRET}}",
                            "headers": {{"Authorization": "Bearer ${{SECRET}}"}}}},
                "local": {{"command": "/nonexistent/${{SECRET}}/server", "env": {{"T": "${{SECRET}}"}}}}}}}}"#
        );
        let lookup = |name: &str| match name {
            "SECRET" => Ok(SECRET.to_string()),
            _ => Err(VarError::NotPresent),
        };
        let config = Config::parse_with(&text, Path::new("t.json"), &lookup).expect("valid");
        let hub = Hub::start(&config).await;
        let statuses: HashMap<String, String> = hub
            .servers()
            .into_iter()
            .map(|s| (s.name, s.status))
            .collect();
        let remote = &statuses["remote"];
        assert!(
            remote.starts_with(&format!(
                "unavailable: cannot connect to http://127.0.0.1:{port}/mcp?key=${{SECRET}}: "
            )),
            "{remote}"
        );
        let local = &statuses["local"];
        assert!(
            local.starts_with("unavailable: cannot start `/nonexistent/${SECRET}/server`: "),
            "{local}"
        );
        let missing = hub.explain_missing("mcp__remote__search");
        assert!(
            missing.contains("remote (unavailable: cannot connect"),
            "{missing}"
        );
        let called = hub
            .call(
                "mcp__remote__search".into(),
                Value::Object(JsonObject::new()),
            )
            .await
            .expect_err("no such tool");
        for text in [remote, local, &missing, &called] {
            assert!(!text.contains(SECRET), "a secret in {text:?}");
        }
        hub.shutdown().await;
    }
}
