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
//!
//! [`BoundedChild`]: bounded::BoundedChild
//! [`ServerSpec::hide`]: crate::config::ServerSpec::hide
//! [`MAX_PAGES`]: catalog::MAX_PAGES
//! [`MAX_TOOLS`]: catalog::MAX_TOOLS
//! [`MAX_LISTED_BYTES`]: catalog::MAX_LISTED_BYTES
//! [`names`]: names
//! [`schema::vet`]: schema::vet

mod audited;
pub(crate) mod bounded;
mod catalog;
pub(crate) mod names;
mod results;
pub(crate) mod schema;
mod starts;
#[cfg(test)]
mod testing;
pub(crate) mod tls;
mod upstream;

use crate::audit::AuditLog;
use crate::config::ConfigFile;
use crate::metrics::Metrics;
use audited::AuditedTools;
use catalog::Catalog;
use rmcp::model::CallToolRequestParams;
use sandpy::tools::{Allowlist, PrepareFuture, ToolError, ToolFuture, ToolHost, ToolInfo};
use schema::ArgumentSchema;
use serde_json::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use upstream::{message_limit, Retry, Timing, Upstream};

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

impl ServerStatus {
    /// Whether its tools are listed (the status is `ready (...)`).
    pub fn is_ready(&self) -> bool {
        self.status.starts_with("ready")
    }
}

impl Hub {
    /// Start (or connect to) every configured server at once and list their tools. A
    /// server that fails is reported in [`Hub::servers`] and retried on its next use.
    pub async fn start(config: &ConfigFile) -> Hub {
        Hub::start_with(config, Timing::default()).await
    }

    async fn start_with(config: &ConfigFile, timing: Timing) -> Hub {
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
    pub fn launch(config: &ConfigFile) -> Hub {
        Hub::launch_with(config, Timing::default())
    }

    fn launch_with(config: &ConfigFile, timing: Timing) -> Hub {
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

    fn new(config: &ConfigFile, timing: Timing) -> Hub {
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

    fn output_schema(&self, name: &str) -> Option<Value> {
        if !self.0.allowlist.allows(name) {
            return None;
        }
        let catalog = self.0.catalog.read().unwrap_or_else(|e| e.into_inner());
        catalog.tools.get(name)?.output_schema.clone()
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
