//! Serving MCP over streamable HTTP, with bearer tokens.
//!
//! A token (checked in [`bearer`]) is required when the address is not loopback, and checked whenever one is set:
//! the single `--token` (which only lets a client in), or a token of a tenant the config
//! names (`sandpy.tenants`), which also says whose sessions the client's calls reach
//! (the request carries the tenant's name to the server, see [`crate::SandpyServer`]).
//! With `sandpy.auth`, the OAuth issuer's access tokens are taken too, each for the tenant
//! its claim names ([`oauth`]).
//! Each MCP session gets its own handler ([`SandpyServer::connection`]).
//! A client's `DELETE` of its session is answered 204 No Content (see
//! [`deleted_is_no_content`]). A request answered within a moment gets its answer as one
//! JSON body, so that clients keep their connection ([`whole_answers`]). A request whose
//! id is in flight in its MCP session is refused ([`in_flight`]); every route checks
//! `Host` ([`host`]).
//! Connections are timed and capped ([`crate::http::connections`]),
//! MCP sessions counted per client and in all ([`crate::http::mcp_sessions`]), both within
//! [`HttpLimits`].

mod bearer;
pub(crate) mod connections;
pub(crate) mod host;
mod in_flight;
pub(crate) mod mcp_sessions;
pub(crate) mod oauth;
pub(crate) mod origin;
pub(crate) mod parse_errors;
pub(crate) mod replay;
pub(crate) mod whole_answers;

use crate::server::SandpyServer;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bearer::require_bearer;
pub(crate) use bearer::Access;
use connections::HttpLimits;
use futures::StreamExt;
use mcp_sessions::CappedSessions;
use oauth::config::OAuthConfig;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::ServerHandler;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Why the HTTP server cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// Listening beyond loopback without a token would expose code execution.
    #[error("`{0}` is not a loopback address: set a bearer token (--token or SANDPY_TOKEN)")]
    TokenRequired(SocketAddr),
    /// An empty token would let in anyone who sends `Authorization: Bearer ` with nothing.
    #[error("the bearer token is empty: give a non-empty --token or SANDPY_TOKEN")]
    EmptyToken,
    /// The address could not be bound.
    #[error("cannot listen on `{addr}`: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The server failed while running.
    #[error("HTTP server failed: {0}")]
    Serve(std::io::Error),
    /// The HTTP client that fetches the OAuth issuer's keys could not be set up
    /// (`sandpy.auth`).
    #[error("OAuth (`sandpy.auth`): {0}")]
    OAuthClient(String),
}

/// rmcp answers a successful session `DELETE` with 202 Accepted, but the session is gone
/// by then, and the official MCP Python SDK takes anything but 200 or 204 as a failure and
/// warns "Session termination failed: 202" on every close. So: 204 No Content.
async fn deleted_is_no_content(request: Request, next: Next) -> Response {
    let delete = request.method() == Method::DELETE;
    let mut response = next.run(request).await;
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
        response.headers_mut().remove(header::CONTENT_LENGTH);
        response.headers_mut().remove(header::CONTENT_TYPE);
        *response.body_mut() = Body::empty();
    }
    response
}

/// A `/metrics` scrape's text, given the MCP sessions open.
pub(crate) type Scrape = Arc<dyn Fn(usize) -> String + Send + Sync>;

/// The required upstream servers (`sandpy.ready_requires`) that are not up now.
pub(crate) type Unready = Arc<dyn Fn() -> Vec<String> + Send + Sync>;

/// What the router serves besides `/mcp`: metrics, and the drain's state.
#[derive(Default)]
pub(crate) struct Extras {
    /// Cancelled when the server begins to drain: `/readyz` fails and new MCP sessions
    /// are answered 503 with `Retry-After`; sessions already open go on.
    pub draining: CancellationToken,
    /// `POST /mcp` responses not yet sent whole (the answers of calls, streamed): the
    /// drain waits for them before it ends the streams.
    pub answering: Arc<AtomicUsize>,
    /// `GET /metrics`, when given.
    pub scrape: Option<Scrape>,
    /// Whether `/metrics` is behind the bearer check (`sandpy.metrics_require_token`).
    pub metrics_need_token: bool,
    /// What `/readyz` asks besides the drain, when given.
    pub unready: Option<Unready>,
    /// The browser origins `/mcp` takes requests from (loopback ones are added on loopback).
    pub allowed_origins: Vec<String>,
    /// The `Host` values every route answers (loopback names are added on loopback).
    pub allowed_hosts: Vec<String>,
}

/// The MCP endpoint at `/mcp` serving a handler from `handler` to each session, behind the
/// bearer check when `access` has tokens, bodies read and sessions counted within
/// `limits`, with the probes and `extras`; and the token that ends its open streams on
/// shutdown. Every route checks `Host` ([`host`]).
pub(crate) fn mcp_router<S>(
    handler: impl Fn() -> S + Send + Sync + 'static,
    access: Access,
    loopback: bool,
    limits: &HttpLimits,
    extras: Extras,
) -> (Router, CancellationToken)
where
    S: ServerHandler + Send + Sync + 'static,
{
    // Every route's `Host` is checked outside, against the same names ([`host`]).
    let config = StreamableHttpServerConfig::default().disable_allowed_hosts();
    let cancel = config.cancellation_token.clone();
    let body_limit = (limits.body_timeout, config.max_request_body_bytes);
    let sessions = Arc::new(CappedSessions::new(limits));
    let service: StreamableHttpService<S, CappedSessions> =
        StreamableHttpService::new(move || Ok(handler()), sessions.clone(), config);
    let metrics = extras.scrape.map(|scrape| {
        let sessions = sessions.clone();
        Router::new().route(
            "/metrics",
            get(move || async move { metrics(scrape(sessions.count())) }),
        )
    });
    let mut app = Router::new()
        .nest_service("/mcp", service)
        .layer(middleware::from_fn(deleted_is_no_content))
        .layer(middleware::from_fn_with_state(
            Arc::new(in_flight::InFlight::default()),
            in_flight::refuse_duplicate_ids,
        ))
        .layer(middleware::from_fn(parse_errors::jsonrpc_parse_errors))
        .layer(middleware::from_fn_with_state(
            sessions,
            mcp_sessions::admit,
        ))
        .layer(middleware::from_fn_with_state(
            extras.draining.clone(),
            no_new_sessions_while_draining,
        ))
        .layer(middleware::from_fn_with_state(
            extras.answering.clone(),
            count_answers,
        ))
        // Outside the count: an answer sent whole ends the stream the count follows.
        .layer(middleware::from_fn(whole_answers::whole_answers))
        .layer(middleware::from_fn_with_state(
            body_limit,
            connections::read_body_in_time,
        ));
    let mut open_metrics = None;
    match metrics {
        Some(metrics) if extras.metrics_need_token => app = app.merge(metrics),
        metrics => open_metrics = metrics,
    }
    let resource_metadata = access.oauth.as_ref().map(|verifier| verifier.routes());
    if !access.is_open() {
        app = app.layer(middleware::from_fn_with_state(
            Arc::new(access),
            require_bearer,
        ));
    }
    // Outermost: a page in a browser is refused before anything else looks at its request.
    let origins = origin::Origins::new(&extras.allowed_origins, loopback);
    app = app.layer(middleware::from_fn_with_state(
        Arc::new(origins),
        origin::check_origin,
    ));
    // Probes for an orchestrator, outside the bearer check: they tell nothing but whether
    // the process answers and whether it takes new work.
    let probes = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(Readiness {
            stops: [extras.draining, cancel.clone()],
            unready: extras.unready,
        });
    let mut app = app.merge(probes);
    // Open too: a client reads it to learn where to get a token.
    if let Some(resource_metadata) = resource_metadata {
        app = app.merge(resource_metadata);
    }
    if let Some(metrics) = open_metrics {
        app = app.merge(metrics);
    }
    // Around every route, and any other path: a page whose name was rebound to this
    // address is refused first.
    let hosts = host::Hosts::new(&extras.allowed_hosts, loopback);
    let app =
        app.fallback(|| async { StatusCode::NOT_FOUND })
            .layer(middleware::from_fn_with_state(
                Arc::new(hosts),
                host::check_host,
            ));
    (app, cancel)
}

/// Counts a `POST /mcp` as answering until its response body has been sent or dropped:
/// the answer of a `tools/call` is a stream that ends after the result.
async fn count_answers(
    State(answering): State<Arc<AtomicUsize>>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    struct Answering(Arc<AtomicUsize>);
    impl Drop for Answering {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::Relaxed);
        }
    }
    answering.fetch_add(1, Ordering::Relaxed);
    let guard = Answering(answering);
    let response = next.run(request).await;
    response.map(|body| {
        let stream = body.into_data_stream().map(move |chunk| {
            let _held = &guard;
            chunk
        });
        Body::from_stream(stream)
    })
}

/// A scrape in the OpenMetrics text format (which Prometheus reads).
fn metrics(text: String) -> Response {
    let kind = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    ([(header::CONTENT_TYPE, kind)], text).into_response()
}

/// 503 with `Retry-After`: the server is shutting down.
fn shutting_down() -> Response {
    let mut response = (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// What `/readyz` looks at.
#[derive(Clone)]
struct Readiness {
    /// The drain and the shutdown.
    stops: [CancellationToken; 2],
    unready: Option<Unready>,
}

/// `/readyz`: 200 while the server takes new sessions (the runtime is loaded before it
/// listens) and its required upstream servers are up; 503 with `Retry-After` once it has
/// begun to drain or shut down, 503 naming the required servers that are down (only their
/// names: the probe is open).
async fn ready(State(readiness): State<Readiness>) -> Response {
    if readiness.stops.iter().any(CancellationToken::is_cancelled) {
        return shutting_down();
    }
    let down = readiness
        .unready
        .map(|unready| unready())
        .unwrap_or_default();
    if !down.is_empty() {
        let message = format!(
            "not ready: required upstream servers down: {}\n",
            down.join(", ")
        );
        return (StatusCode::SERVICE_UNAVAILABLE, message).into_response();
    }
    "ready\n".into_response()
}

/// While the server drains, a request that would open a new MCP session (one without an
/// `Mcp-Session-Id`) is answered 503 with `Retry-After`, so that the client goes to
/// another replica; sessions already open go on (their runs, answers to elicitations and
/// cancellations must reach the server; their new runs are answered `busy`).
async fn no_new_sessions_while_draining(
    State(draining): State<CancellationToken>,
    request: Request,
    next: Next,
) -> Response {
    if draining.is_cancelled() && !request.headers().contains_key("mcp-session-id") {
        return shutting_down();
    }
    next.run(request).await
}

/// A bound listener, so callers learn the port (`127.0.0.1:0`) before serving.
pub struct HttpListener {
    listener: tokio::net::TcpListener,
    access: Access,
    limits: HttpLimits,
    metrics_need_token: bool,
    metrics_tenant_names: bool,
    grace: std::time::Duration,
    allowed_origins: Vec<String>,
    allowed_hosts: Vec<String>,
}

/// How long the streams stay open after the last answer of a drain was written, for the
/// clients to read it.
const LINGER: std::time::Duration = std::time::Duration::from_secs(1);

/// How long the answers of runs that ended in a drain may take to be written.
const ANSWER_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// How long runs in flight may go on after a shutdown signal, by default.
pub(crate) const DEFAULT_DRAIN_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

impl HttpListener {
    /// Bind `addr` for clients with `token` or a token of one of `tenants` (from the
    /// config, already checked non-empty and distinct); refuses a non-loopback address
    /// without any token, and an empty `token`.
    pub async fn bind(
        addr: SocketAddr,
        token: Option<String>,
        tenants: &[sandpy::settings::TokenTenant],
    ) -> Result<HttpListener, HttpError> {
        HttpListener::bind_with_oauth(addr, token, tenants, None).await
    }

    /// [`HttpListener::bind`], also taking the access tokens of the OAuth issuer `oauth`
    /// names (`sandpy.auth`), each for the tenant its claim names; `oauth` counts as a
    /// token for a non-loopback address.
    pub async fn bind_with_oauth(
        addr: SocketAddr,
        token: Option<String>,
        tenants: &[sandpy::settings::TokenTenant],
        oauth: Option<OAuthConfig>,
    ) -> Result<HttpListener, HttpError> {
        if token.as_deref() == Some("") {
            return Err(HttpError::EmptyToken);
        }
        let oauth = match oauth {
            None => None,
            Some(config) => Some(Arc::new(
                oauth::Verifier::new(config).map_err(|e| HttpError::OAuthClient(e.to_string()))?,
            )),
        };
        let access = Access {
            token,
            tenants: tenants
                .iter()
                .map(|t| (t.token.clone(), Arc::from(t.name.as_str())))
                .collect(),
            oauth,
        };
        if access.is_open() && !addr.ip().is_loopback() {
            return Err(HttpError::TokenRequired(addr));
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| HttpError::Bind { addr, source })?;
        Ok(HttpListener {
            listener,
            access,
            limits: HttpLimits::default(),
            metrics_need_token: false,
            metrics_tenant_names: false,
            grace: DEFAULT_DRAIN_GRACE,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
        })
    }

    /// Take requests from these browser origins too (`sandpy.allowed_origins`); a
    /// request with another `Origin` gets 403 ([`origin`](crate::http::origin)).
    pub fn allowed_origins(mut self, origins: &[String]) -> HttpListener {
        self.allowed_origins = origins.to_vec();
        self
    }

    /// Put `GET /metrics` behind the bearer check too (it is open by default, like the
    /// probes).
    pub fn metrics_need_token(mut self, yes: bool) -> HttpListener {
        self.metrics_need_token = yes;
        self
    }

    /// Label `/metrics`' sessions by the tenants' names (`sandpy.metrics_tenant_names`)
    /// instead of keyed hashes of them; only where `/metrics` needs the token, so that
    /// no name is ever in an answer to a caller without one.
    pub fn metrics_tenant_names(mut self, yes: bool) -> HttpListener {
        self.metrics_tenant_names = yes;
        self
    }

    /// Answer these `Host` values too (`sandpy.allowed_hosts`, `host` or `host:port`), on
    /// every route; beyond loopback, setting any makes every other `Host` get 403
    /// ([`host`](crate::http::host)).
    pub fn allowed_hosts(mut self, hosts: &[String]) -> HttpListener {
        self.allowed_hosts = hosts.to_vec();
        self
    }

    /// Let runs in flight go on for `grace` after the shutdown signal (default
    /// `DEFAULT_DRAIN_GRACE`).
    pub fn drain_grace(mut self, grace: std::time::Duration) -> HttpListener {
        self.grace = grace;
        self
    }

    /// Serve within `limits` instead of [`HttpLimits::default`].
    pub fn with_limits(mut self, limits: HttpLimits) -> HttpListener {
        self.limits = limits;
        self
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve MCP at `/mcp` (with `/healthz`, `/readyz` and `/metrics`) until `shutdown`
    /// completes; then drain: `/readyz` fails, new MCP sessions get 503 and new runs
    /// `busy`, runs in flight get the drain grace to end, the token tenants' sessions are
    /// saved ([`SandpyServer::drain`]); then open streams end and requests still being
    /// answered get [`HttpLimits::drain`] to finish.
    pub async fn serve(
        self,
        server: SandpyServer,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), HttpError> {
        let loopback = self
            .listener
            .local_addr()
            .map(|a| a.ip().is_loopback())
            .unwrap_or(false);
        let scrape: Scrape = {
            let server = server.clone();
            let names = self.metrics_tenant_names && self.metrics_need_token;
            Arc::new(move |mcp_sessions| server.metrics_text(Some(mcp_sessions), names))
        };
        let unready: Unready = {
            let server = server.clone();
            Arc::new(move || server.required_upstreams_down())
        };
        let extras = Extras {
            draining: CancellationToken::new(),
            answering: Arc::new(AtomicUsize::new(0)),
            scrape: Some(scrape),
            metrics_need_token: self.metrics_need_token,
            unready: Some(unready),
            allowed_origins: self.allowed_origins,
            allowed_hosts: self.allowed_hosts,
        };
        let (draining, answering) = (extras.draining.clone(), extras.answering.clone());
        let handler = server.clone();
        let (app, cancel) = mcp_router(
            move || handler.connection(),
            self.access,
            loopback,
            &self.limits,
            extras,
        );
        let stop = cancel.clone();
        let grace = self.grace;
        tokio::spawn(async move {
            shutdown.await;
            draining.cancel();
            let deadline = tokio::time::Instant::now() + grace;
            server.drain(grace).await;
            // The answers of the runs that ended are still being written: at least
            // ANSWER_GRACE for them, whatever the drain's grace.
            let deadline = deadline.max(tokio::time::Instant::now() + ANSWER_GRACE);
            while answering.load(Ordering::Relaxed) > 0 && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            // An answer written is not yet read: ending a client's other streams (its
            // standing GET) at once can make it drop the answer it is reading.
            tokio::time::sleep(LINGER).await;
            stop.cancel();
        });
        connections::serve(self.listener, app, &self.limits, cancel)
            .await
            .map_err(HttpError::Serve)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn not_ready_once_draining_or_shutdown_began() {
        for which in 0..2 {
            let stops = [CancellationToken::new(), CancellationToken::new()];
            let readiness = |stops: &[CancellationToken; 2]| {
                State(Readiness {
                    stops: stops.clone(),
                    unready: None,
                })
            };
            assert_eq!(ready(readiness(&stops)).await.status(), StatusCode::OK);
            stops[which].cancel();
            let response = ready(readiness(&stops)).await;
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        }
    }

    #[tokio::test]
    async fn an_empty_token_is_refused() {
        let bound = HttpListener::bind(([127, 0, 0, 1], 0).into(), Some(String::new()), &[]).await;
        assert!(matches!(bound, Err(HttpError::EmptyToken)));
    }
}
