//! The upstream hub: an MCP client for every configured server, exposed to the sandbox as
//! one [`ToolHost`] whose tools are named `mcp__<server>__<tool>`.
//!
//! A stdio server that died is restarted on the next call of one of its tools; arguments
//! are checked against the tool's `inputSchema` first; the config's allowlist hides and
//! refuses tools for every run. The sandbox times each call (`tool_timeout_ms`, cut to
//! what the run has left), so the hub does not.
//!
//! Lifecycle:
//! - A stdio server runs in its own process group, and the whole group is killed when the
//!   hub lets go of it (the server exited or crashed, it is restarted, the hub shuts down),
//!   so that nothing it started (`npx`'s server, a script's background job) outlives it.
//! - A server that failed to start (or whose restart failed) is retried on its next use: a
//!   call naming one of its tools waits for the retry ([`ToolHost::prepare`]); listing or
//!   searching tools starts one in the background. Retries back off (1 s, doubling, at
//!   most 60 s) so a dead server is not started on every call.
//! - The MCP handshake has a time limit: 15 s, well under an MCP client's own request
//!   timeout; only a stdio server's first start gets 60 s, because `npx`/`uvx` may
//!   download the package before the server can answer (the hub cannot tell a download
//!   from a server that never answers, so the first start is the generous one, and later
//!   starts have the package cached). [`Hub::launch`] starts the servers in the
//!   background, so that a front end can answer its own clients meanwhile.
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
use crate::metrics::Metrics;
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
use sandpy::{Allowlist, PrepareFuture, ToolError, ToolFuture, ToolHost, ToolInfo};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

type Client = RunningService<RoleClient, ClientConfig>;

/// How long a server may take to list its tools.
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

/// The hub's time limits for starting servers (see the module doc); tests shorten them.
#[derive(Debug, Clone, Copy)]
struct Timing {
    /// A stdio server's first start, which may download it (`npx -y`).
    first_start: Duration,
    /// Every other start: an HTTP server, a restart, a retry.
    handshake: Duration,
    /// The wait before the first retry of a failed server; doubled after each failure.
    backoff: Duration,
    /// The longest wait between retries.
    max_backoff: Duration,
    /// How long a stopping server may take to exit on its own before its group is killed.
    stop_grace: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            first_start: Duration::from_secs(60),
            handshake: Duration::from_secs(15),
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            stop_grace: Duration::from_secs(2),
        }
    }
}

/// An upstream's process group (its id is the server's pid), killed whole (`SIGKILL`)
/// when dropped: the server and everything it started, even after the server itself
/// exited. Linux does not give a process-group id to a new process while any process of
/// that group is alive, so the signal reaches only what this server started.
struct ProcessGroupKill(Option<u32>);

impl Drop for ProcessGroupKill {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(pgid) = self.0.and_then(|id| libc::pid_t::try_from(id).ok()) {
            // SAFETY: killpg has no memory effects; a group that is gone gives ESRCH.
            unsafe { libc::killpg(pgid, libc::SIGKILL) };
        }
    }
}

/// A live connection and, for a stdio server, its process group.
struct Connection {
    client: Client,
    group: ProcessGroupKill,
}

impl Connection {
    /// Close the connection (a stdio server gets `grace` to exit after its stdin closes),
    /// then kill whatever is left of its process group.
    async fn stop(self, grace: Duration) {
        let Connection { client, group } = self;
        let _ = tokio::time::timeout(grace, client.cancel()).await;
        drop(group);
    }
}

/// When a failed server may be tried again.
#[derive(Debug, Default)]
struct Retry {
    /// Failed starts in a row.
    failures: u32,
    /// Not before this instant; `None` when the last start succeeded.
    next: Option<Instant>,
}

/// One upstream server and its live connection.
struct Upstream {
    name: String,
    spec: ServerSpec,
    /// The largest message read from the server ([`message_limit`]).
    message_limit: usize,
    client: tokio::sync::Mutex<Option<Connection>>,
    status: RwLock<String>,
    timing: Timing,
    /// Whether a start ever succeeded: only a stdio server's first start gets
    /// [`Timing::first_start`].
    connected_once: AtomicBool,
    /// Held while the server is being started or retried, so other users wait for it.
    retry: tokio::sync::Mutex<Retry>,
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
    /// How many servers finished their first start (ready or not).
    started: tokio::sync::watch::Sender<usize>,
    /// Set by [`Hub::shutdown`]: no more starts.
    closing: AtomicBool,
    /// What the server's `/metrics` tells; the hub records its tool calls there.
    metrics: Arc<Metrics>,
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
async fn connect(
    name: &str,
    spec: &ServerSpec,
    message_limit: usize,
    handshake: Duration,
) -> Result<Connection, String> {
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
            let transport = BoundedChild::spawn(wrap, name, message_limit)
                .map_err(|e| format!("cannot start `{command}`: {e}"))?;
            // Made before the handshake, so a server that never answers is killed whole.
            let group = ProcessGroupKill(transport.id());
            let client = tokio::time::timeout(handshake, client_config().serve(transport))
                .await
                .map_err(|_| handshake_timeout(handshake))?
                .map_err(|e| format!("MCP handshake failed: {e}"))?;
            Ok(Connection { client, group })
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
                .max_json_response_size(message_limit)
                .max_sse_event_size(message_limit);
            let transport = StreamableHttpClientTransport::with_client(client, config);
            let client = tokio::time::timeout(handshake, client_config().serve(transport))
                .await
                .map_err(|_| handshake_timeout(handshake))?
                .map_err(|e| {
                    tls::explain(name, url, ca_file.as_ref(), &e)
                        .unwrap_or_else(|| format!("cannot connect to {url}: {e}"))
                })?;
            Ok(Connection {
                client,
                group: ProcessGroupKill(None),
            })
        }
    }
}

fn handshake_timeout(limit: Duration) -> String {
    format!(
        "no answer to the MCP handshake within {} s",
        limit.as_secs_f64()
    )
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

impl Retry {
    /// After a start: forget the failures, or wait longer before the next try.
    fn record(&mut self, ready: bool, timing: &Timing) {
        if ready {
            *self = Retry::default();
            return;
        }
        let wait = timing
            .backoff
            .saturating_mul(1u32 << self.failures.min(16))
            .min(timing.max_backoff);
        self.failures = self.failures.saturating_add(1);
        self.next = Some(Instant::now() + wait);
    }
}

impl Upstream {
    fn set_status(&self, status: String) {
        *self.status.write().unwrap_or_else(|e| e.into_inner()) = status;
    }

    /// A live peer: the current connection, or a new one if there is none or it died.
    /// Returns whether it reconnected, so the caller can refresh the tool list.
    async fn peer(&self) -> Result<(Peer<RoleClient>, bool), String> {
        let mut slot = self.client.lock().await;
        if let Some(live) = slot.as_ref() {
            if !live.client.is_transport_closed() {
                return Ok((live.client.peer().clone(), false));
            }
        }
        if let Some(dead) = slot.take() {
            tracing::warn!("upstream {} died; restarting it", self.name);
            tokio::spawn(dead.stop(self.timing.stop_grace));
        }
        let first_stdio = matches!(self.spec, ServerSpec::Stdio { .. })
            && !self.connected_once.load(Ordering::Relaxed);
        let limit = match first_stdio {
            true => self.timing.first_start,
            false => self.timing.handshake,
        };
        let live = connect(&self.name, &self.spec, self.message_limit, limit)
            .await
            .map_err(|e| self.spec.hide(&e))?;
        self.connected_once.store(true, Ordering::Relaxed);
        let peer = live.client.peer().clone();
        *slot = Some(live);
        Ok((peer, true))
    }

    /// Whether its tools are listed.
    fn is_ready(&self) -> bool {
        self.status
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .starts_with("ready")
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
        if let Some(live) = self.client.lock().await.take() {
            tokio::spawn(live.stop(self.timing.stop_grace));
        }
    }
}

impl Hub {
    /// Start (or connect to) every configured server at once and list their tools. A
    /// server that fails is reported in [`Hub::servers`] and retried on its next use.
    pub async fn start(config: &Config) -> Hub {
        Hub::start_with(config, Timing::default()).await
    }

    async fn start_with(config: &Config, timing: Timing) -> Hub {
        let hub = Hub::new(config, timing);
        let starts = hub
            .0
            .upstreams
            .iter()
            .map(|u| hub.clone().first_start(u.clone()));
        futures::future::join_all(starts).await;
        hub
    }

    /// [`Hub::start`] in the background: returns at once, each server `starting` until it
    /// is ready or has failed ([`Hub::wait_started`] waits for them). Needs a tokio runtime.
    pub fn launch(config: &Config) -> Hub {
        Hub::launch_with(config, Timing::default())
    }

    fn launch_with(config: &Config, timing: Timing) -> Hub {
        let hub = Hub::new(config, timing);
        for upstream in &hub.0.upstreams {
            tokio::spawn(hub.clone().first_start(upstream.clone()));
        }
        hub
    }

    /// Those of `patterns` (tool names or globs, as in `sandpy.approve`) that match none
    /// of the tools the servers listed: likely mistakes, for the front end to report once
    /// the servers have started.
    pub fn matching_none<'a>(&self, patterns: &'a [String]) -> Vec<&'a str> {
        let catalog = self.0.catalog.read().unwrap_or_else(|e| e.into_inner());
        patterns
            .iter()
            .filter(|pattern| {
                let Ok(one) = Allowlist::new(Some(std::slice::from_ref(*pattern))) else {
                    return false;
                };
                !catalog.tools.keys().any(|name| one.allows(name))
            })
            .map(String::as_str)
            .collect()
    }

    /// Wait at most `limit` for every server's first start to end (ready or failed);
    /// returns whether they all have.
    pub async fn wait_started(&self, limit: Duration) -> bool {
        let total = self.0.upstreams.len();
        let mut started = self.0.started.subscribe();
        tokio::time::timeout(limit, started.wait_for(|n| *n >= total))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    async fn first_start(self, upstream: Arc<Upstream>) {
        let mut retry = upstream.retry.lock().await;
        self.refresh(upstream.clone()).await;
        retry.record(upstream.is_ready(), &upstream.timing);
        drop(retry);
        self.0.started.send_modify(|n| *n += 1);
    }

    /// Start `upstream` again if it is not ready and its backoff allows; a retry already
    /// under way is waited for instead.
    async fn retry(&self, upstream: Arc<Upstream>) {
        let mut retry = upstream.retry.lock().await;
        let waiting = retry.next.is_some_and(|next| Instant::now() < next);
        if upstream.is_ready() || waiting || self.0.closing.load(Ordering::Relaxed) {
            return;
        }
        tracing::info!("upstream {}: retrying its start", upstream.name);
        self.refresh(upstream.clone()).await;
        retry.record(upstream.is_ready(), &upstream.timing);
    }

    /// The servers not ready whose retry is due or under way (the one `name` belongs
    /// to, or all).
    fn due(&self, name: Option<&str>) -> Vec<Arc<Upstream>> {
        if self.0.closing.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let now = Instant::now();
        self.0
            .upstreams
            .iter()
            .filter(|u| name.is_none_or(|name| name.starts_with(&format!("mcp__{}__", u.name))))
            .filter(|u| !u.is_ready())
            .filter(|u| match u.retry.try_lock() {
                Ok(retry) => retry.next.is_none_or(|next| now >= next),
                Err(_) => true, // under way: waited for
            })
            .cloned()
            .collect()
    }

    /// Retry the due servers in the background (a listing cannot wait for them).
    fn retry_in_background(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // A start under way needs no second task.
        let due = self
            .due(None)
            .into_iter()
            .filter(|u| u.retry.try_lock().is_ok());
        for upstream in due {
            let hub = self.clone();
            runtime.spawn(async move { hub.retry(upstream).await });
        }
    }

    fn new(config: &Config, timing: Timing) -> Hub {
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
                    timing,
                    connected_once: AtomicBool::new(false),
                    retry: tokio::sync::Mutex::new(Retry::default()),
                })
            })
            .collect();
        Hub(Arc::new(Inner {
            upstreams,
            catalog: RwLock::new(Catalog::default()),
            allowlist,
            result_bytes: config.settings.limits.tool_result_bytes,
            started: tokio::sync::watch::Sender::new(0),
            closing: AtomicBool::new(false),
            metrics: Arc::new(Metrics::new()),
        }))
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

    /// Stop every server the hub started and close connections: each stdio server gets
    /// a moment to exit once its stdin closes, then its whole process group is killed. A
    /// server still starting is killed when its start is dropped (with the runtime, or
    /// the last clone of the hub).
    pub async fn shutdown(&self) {
        self.0.closing.store(true, Ordering::Relaxed);
        let closing = self.0.upstreams.iter().map(|upstream| async move {
            let grace = upstream.timing.stop_grace;
            if let Ok(mut slot) = tokio::time::timeout(grace, upstream.client.lock()).await {
                if let Some(live) = slot.take() {
                    live.stop(grace).await;
                }
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
        let mut request = CallToolRequestParams::new(tool.clone()).with_arguments(arguments);
        // The run's trace goes on to the upstream in `_meta` (SEP-414), when traces are on.
        let trace = crate::telemetry::current();
        if !trace.is_empty() {
            let mut meta = rmcp::model::RequestMetaObject::new();
            for (key, value) in trace {
                meta.0 .0.insert(key, Value::String(value));
            }
            request.meta = Some(meta);
        }
        let started = Instant::now();
        let outcome = self
            .outcome(&name, &upstream, peer.call_tool(request).await)
            .await;
        let elapsed = started.elapsed();
        let metrics = &self.0.metrics;
        metrics.tool_call(&upstream.name, &tool, outcome.is_ok(), elapsed);
        outcome
    }

    /// A tool call's answer as the guest gets it: its value, or why not.
    async fn outcome(
        &self,
        name: &str,
        upstream: &Arc<Upstream>,
        answer: Result<CallToolResult, ServiceError>,
    ) -> Result<Value, String> {
        match answer {
            Ok(result) => result_value(name, result, self.0.result_bytes),
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

    /// The metrics of the server this hub serves; the hub records its tool calls there.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.0.metrics
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
        self.retry_in_background();
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

    /// Retry the servers of `missing` tools (all servers, before a listing) that are due,
    /// and wait for them and for starts under way. The retry runs on its own task: a
    /// caller that stops waiting does not cut it short.
    fn prepare(&self, missing: &[String]) -> PrepareFuture {
        let due = match missing {
            [] => self.due(None),
            names => names.iter().flat_map(|name| self.due(Some(name))).collect(),
        };
        let retries: Vec<_> = due
            .into_iter()
            .map(|upstream| {
                let hub = self.clone();
                tokio::spawn(async move { hub.retry(upstream).await })
            })
            .collect();
        Box::pin(async move {
            futures::future::join_all(retries).await;
        })
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

    fn prepare(&self, missing: &[String]) -> PrepareFuture {
        self.hub.prepare(missing)
    }

    fn refused(&self, name: &str, reason: &str) {
        self.audit.refused_call(&self.execution_id, name, reason);
    }

    fn decided(&self, name: &str, arguments: &Value, decision: &sandpy::Decision) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::env::VarError;
    use std::path::Path;

    const SECRET: &str = "sk-live-9f8e7d6c5b4a3210";

    /// A hub config with one server, `fake`: `tests/fake_upstream.py` with `args`.
    fn fake(args: &[&str]) -> Config {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_upstream.py");
        let args: Vec<&str> = std::iter::once(script)
            .chain(args.iter().copied())
            .collect();
        let text =
            serde_json::json!({"mcpServers": {"fake": {"command": "python3", "args": args}}});
        Config::parse(&text.to_string(), Path::new("t.json")).expect("valid")
    }

    fn quick() -> Timing {
        Timing {
            first_start: Duration::from_secs(10),
            handshake: Duration::from_secs(10),
            backoff: Duration::from_millis(300),
            max_backoff: Duration::from_secs(10),
            stop_grace: Duration::from_millis(500),
        }
    }

    /// The pid a fake server wrote to `path` (waiting for it a little).
    fn read_pid(path: &Path) -> i32 {
        for _ in 0..100 {
            if let Some(pid) = std::fs::read_to_string(path)
                .ok()
                .and_then(|t| t.parse().ok())
            {
                return pid;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no pid in {}", path.display());
    }

    /// Whether `pid` runs (a zombie waiting for its reaper does not).
    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(") ")
                    .map(|(_, rest)| !rest.starts_with('Z'))
            })
            .unwrap_or(false)
    }

    async fn dies_within(pid: i32, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while Instant::now() < until {
            if !alive(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    fn status(hub: &Hub) -> String {
        hub.servers()[0].status.clone()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_upstreams_background_child_dies_with_it_on_crash_restart_and_shutdown() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pids = dir.path().join("grandchild");
        let pids_arg = pids.to_str().expect("utf-8");
        let hub = Hub::start_with(&fake(&["--grandchild", pids_arg]), quick()).await;
        assert!(status(&hub).starts_with("ready"), "{}", status(&hub));
        let first = read_pid(&pids);
        assert!(alive(first));

        let crashed = hub
            .call("mcp__fake__crash".into(), serde_json::json!({}))
            .await
            .expect_err("the server exits");
        assert!(crashed.contains("failed during the call"), "{crashed}");
        assert!(
            dies_within(first, Duration::from_secs(10)).await,
            "the crashed server's child {first} outlived it"
        );

        std::fs::remove_file(&pids).expect("pid file");
        let answer = hub
            .call("mcp__fake__ping".into(), serde_json::json!({}))
            .await;
        assert_eq!(
            answer,
            Ok(Value::from("pong")),
            "restarted on the next call"
        );
        let second = read_pid(&pids);
        assert!(alive(second));

        hub.shutdown().await;
        assert!(
            dies_within(second, Duration::from_secs(10)).await,
            "the server's child {second} outlived the hub's shutdown"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_that_never_answers_the_handshake_is_given_up_on_and_killed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pids = dir.path().join("server");
        let args = ["--silent", "--pidfile", pids.to_str().expect("utf-8")];
        let timing = Timing {
            first_start: Duration::from_millis(500),
            ..quick()
        };
        let hub = Hub::launch_with(&fake(&args), timing);
        assert_eq!(status(&hub), "starting", "launch does not wait");
        assert!(!hub.wait_started(Duration::from_millis(1)).await);
        assert!(hub.wait_started(Duration::from_secs(30)).await);
        assert_eq!(
            status(&hub),
            "unavailable: no answer to the MCP handshake within 0.5 s"
        );
        let server = read_pid(&pids);
        assert!(
            dies_within(server, Duration::from_secs(10)).await,
            "the silent server {server} was left running"
        );
        hub.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_that_failed_to_start_is_retried_on_use_with_backoff() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (need, starts) = (dir.path().join("need"), dir.path().join("starts"));
        let args = [
            "--need",
            need.to_str().expect("utf-8"),
            "--starts",
            starts.to_str().expect("utf-8"),
        ];
        let count = || {
            std::fs::read_to_string(&starts)
                .map(|t| t.lines().count())
                .unwrap_or(0)
        };
        let hub = Hub::start_with(&fake(&args), quick()).await;
        assert!(status(&hub).starts_with("unavailable"), "{}", status(&hub));
        assert_eq!(count(), 1);
        let missing = ["mcp__fake__ping".to_string()];

        hub.prepare(&missing).await;
        assert_eq!(count(), 1, "retried within its backoff");
        tokio::time::sleep(Duration::from_millis(400)).await;
        hub.prepare(&missing).await;
        assert_eq!(count(), 2, "not retried on use once due");
        assert!(status(&hub).starts_with("unavailable"));

        std::fs::write(&need, "").expect("need");
        hub.prepare(&missing).await;
        assert_eq!(count(), 2, "the second wait is longer (600 ms)");
        tokio::time::sleep(Duration::from_millis(700)).await;
        let listed = hub.list_tools(); // a listing retries in the background
        assert!(listed.is_empty());
        hub.prepare(&[]).await; // and a listing that can wait, waits for it
        assert_eq!(count(), 3);
        assert!(status(&hub).starts_with("ready"), "{}", status(&hub));
        let answer = hub
            .call("mcp__fake__ping".into(), serde_json::json!({}))
            .await;
        assert_eq!(answer, Ok(Value::from("pong")));
        hub.shutdown().await;
    }

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
