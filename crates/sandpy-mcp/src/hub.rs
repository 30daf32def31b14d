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

use crate::audit::AuditLog;
use crate::config::{Config, ServerSpec};
use crate::schema::ArgumentSchema;
use crate::tls;
use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ContentBlock,
    Implementation, JsonObject,
};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{Peer, RoleClient, ServiceError, ServiceExt};
use sandpy::{Allowlist, ToolError, ToolFuture, ToolHost, ToolInfo};
use serde_json::Value;
use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

type Client = RunningService<RoleClient, ClientConfig>;

/// How long a server may take to start and list its tools (npx may download it first).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);

/// One upstream server and its live connection.
struct Upstream {
    name: String,
    spec: ServerSpec,
    client: tokio::sync::Mutex<Option<Client>>,
    status: RwLock<String>,
}

struct Route {
    upstream: Arc<Upstream>,
    tool: String,
    schema: Arc<ArgumentSchema>,
}

#[derive(Default)]
struct Catalog {
    tools: Vec<ToolInfo>,
    routes: HashMap<String, Route>,
}

struct Inner {
    upstreams: Vec<Arc<Upstream>>,
    catalog: RwLock<Catalog>,
    allowlist: Allowlist,
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
async fn connect(name: &str, spec: &ServerSpec) -> Result<Client, String> {
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
            let (transport, _) = TokioChildProcess::builder(wrap)
                .stderr(Stdio::null())
                .spawn()
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
            let config =
                StreamableHttpClientTransportConfig::with_uri(url.clone()).custom_headers(custom);
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
/// it is JSON), else the raw content blocks; an error result becomes the error text.
fn result_value(result: CallToolResult) -> Result<Value, String> {
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(ContentBlock::as_text)
        .map(|t| t.text.as_str())
        .collect();
    if result.is_error == Some(true) {
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
        let client = tokio::time::timeout(STARTUP_TIMEOUT, connect(&self.name, &self.spec))
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
                    client: tokio::sync::Mutex::new(None),
                    status: RwLock::new("starting".into()),
                })
            })
            .collect();
        let hub = Hub(Arc::new(Inner {
            upstreams,
            catalog: RwLock::new(Catalog::default()),
            allowlist,
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
            tokio::time::timeout(STARTUP_TIMEOUT, peer.list_all_tools())
                .await
                .map_err(|_| "listing tools timed out".to_string())?
                .map_err(|e| upstream.spec.hide(&format!("listing tools failed: {e}")))
        }
        .await;
        let mut catalog = self.0.catalog.write().unwrap_or_else(|e| e.into_inner());
        let prefix = format!("mcp__{}__", upstream.name);
        catalog.tools.retain(|t| !t.name.starts_with(&prefix));
        catalog.routes.retain(|name, _| !name.starts_with(&prefix));
        match listed {
            Ok(tools) => {
                upstream.set_status(format!("ready ({} tools)", tools.len()));
                for tool in tools {
                    let full = format!("{prefix}{}", tool.name);
                    let schema = Value::Object(JsonObject::clone(&tool.input_schema));
                    catalog.routes.insert(
                        full.clone(),
                        Route {
                            upstream: upstream.clone(),
                            tool: tool.name.to_string(),
                            schema: Arc::new(ArgumentSchema::compile(&full, &schema)),
                        },
                    );
                    let description = tool.description.as_deref().unwrap_or_default().to_string();
                    catalog.tools.push(ToolInfo {
                        name: full,
                        description,
                        input_schema: schema,
                    });
                }
                catalog.tools.sort_by(|a, b| a.name.cmp(&b.name));
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
        let (upstream, tool, schema) = {
            let catalog = self.0.catalog.read().unwrap_or_else(|e| e.into_inner());
            match catalog.routes.get(&name) {
                Some(route) => (
                    route.upstream.clone(),
                    route.tool.clone(),
                    route.schema.clone(),
                ),
                None => return Err(format!("unknown tool {name:?}")),
            }
        };
        schema.check(&name, &arguments)?;
        let Value::Object(arguments) = arguments else {
            return Err(format!("arguments of {name} must be an object"));
        };
        let (peer, reconnected) = upstream.peer().await?;
        if reconnected {
            self.refresh(upstream.clone()).await;
        }
        let request = CallToolRequestParams::new(tool).with_arguments(arguments);
        match peer.call_tool(request).await {
            Ok(result) => result_value(result),
            Err(error) if is_connection_error(&error) => {
                upstream.forget().await;
                let why = upstream
                    .explain(&error)
                    .unwrap_or_else(|| error.to_string());
                let why = upstream.spec.hide(&why);
                upstream.set_status(format!("crashed ({why}); restarts on the next call"));
                Err(format!("server {} failed during the call ({why}); it will be restarted on the next call", upstream.name))
            }
            // The tool's own answer: passed on as the tool gave it.
            Err(ServiceError::McpError(error)) => Err(error.message.to_string()),
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
            .iter()
            .filter(|t| self.0.allowlist.allows(&t.name))
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
