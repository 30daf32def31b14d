//! Serving MCP over streamable HTTP, with bearer tokens.
//!
//! A token is required when the address is not loopback, and checked whenever one is set:
//! the single `--token` (which only lets a client in), or a token of a tenant the config
//! names (`sandpy.tenants`), which also says whose sessions the client's calls reach
//! (the request carries the tenant's name to the server, see [`crate::SandpyServer`]).
//! Each MCP session gets its own handler ([`SandpyServer::connection`]).
//! A client's `DELETE` of its session is answered 204 No Content (see
//! [`deleted_is_no_content`]). Connections are timed and capped ([`crate::connections`]),
//! MCP sessions counted per client and in all ([`crate::mcp_sessions`]), both within
//! [`HttpLimits`].

use crate::connections::{self, HttpLimits};
use crate::mcp_sessions::{self, CappedSessions, CheckedBearer};
use crate::server::{SandpyServer, TokenTenantName};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::ServerHandler;
use std::net::SocketAddr;
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
}

/// Equal-time comparison, so the token cannot be guessed byte by byte from timings.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token of an `Authorization` header value `Bearer <token>`; the scheme's case does
/// not matter (RFC 9110, section 11.1), so `bearer` and `BEARER` are accepted too.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start_matches(' '))
}

/// The tokens that let a client in: the single one, and the tenants' (each with the
/// tenant's name).
#[derive(Default)]
pub(crate) struct Access {
    token: Option<String>,
    tenants: Vec<(String, Arc<str>)>,
}

impl Access {
    /// Only `token`, if any.
    pub(crate) fn token(token: Option<String>) -> Access {
        Access {
            token,
            tenants: Vec::new(),
        }
    }

    fn is_open(&self) -> bool {
        self.token.is_none() && self.tenants.is_empty()
    }

    /// Whom `presented` lets in: `Some(None)` for the single token, `Some(Some(name))` for
    /// a tenant's. Every token is compared, in equal time, whichever matches.
    fn admit(&self, presented: &str) -> Option<Option<Arc<str>>> {
        let presented = presented.as_bytes();
        let mut found = None;
        if let Some(token) = &self.token {
            if same(presented, token.as_bytes()) {
                found = Some(None);
            }
        }
        for (token, name) in &self.tenants {
            if same(presented, token.as_bytes()) {
                found = Some(Some(name.clone()));
            }
        }
        found
    }
}

/// Let in a request with a known bearer token; one with a tenant's token carries the
/// tenant's name on ([`TokenTenantName`]).
async fn require_bearer(
    State(access): State<Arc<Access>>,
    mut request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    let admitted = presented.and_then(|token| access.admit(token));
    let Some(tenant) = admitted else {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "missing or wrong bearer token\n",
        )
            .into_response();
    };
    request.extensions_mut().insert(CheckedBearer);
    if let Some(name) = tenant {
        request.extensions_mut().insert(TokenTenantName(name));
    }
    next.run(request).await
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

/// The MCP endpoint at `/mcp` serving a handler from `handler` to each session, behind the
/// bearer check when `access` has tokens, bodies read and sessions counted within
/// `limits`; and the token that ends its open streams on shutdown. Beyond loopback any
/// `Host` is accepted (the token guards it).
pub(crate) fn mcp_router<S>(
    handler: impl Fn() -> S + Send + Sync + 'static,
    access: Access,
    loopback: bool,
    limits: &HttpLimits,
) -> (Router, CancellationToken)
where
    S: ServerHandler + Send + Sync + 'static,
{
    let mut config = StreamableHttpServerConfig::default();
    if !loopback {
        config = config.disable_allowed_hosts(); // reached by any name; the token guards it
    }
    let cancel = config.cancellation_token.clone();
    let body_limit = (limits.body_timeout, config.max_request_body_bytes);
    let sessions = Arc::new(CappedSessions::new(limits));
    let service: StreamableHttpService<S, CappedSessions> =
        StreamableHttpService::new(move || Ok(handler()), sessions.clone(), config);
    let mut app = Router::new()
        .nest_service("/mcp", service)
        .layer(middleware::from_fn(deleted_is_no_content))
        .layer(middleware::from_fn_with_state(
            sessions,
            mcp_sessions::admit,
        ))
        .layer(middleware::from_fn_with_state(
            body_limit,
            connections::read_body_in_time,
        ));
    if !access.is_open() {
        app = app.layer(middleware::from_fn_with_state(
            Arc::new(access),
            require_bearer,
        ));
    }
    // Probes for an orchestrator, outside the bearer check: they tell nothing but whether
    // the process answers and whether it takes new work.
    let probes = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(cancel.clone());
    (app.merge(probes), cancel)
}

/// `/readyz`: 200 while the server takes new sessions (the runtime is loaded before it
/// listens); 503 with `Retry-After` once it has begun to shut down.
async fn ready(State(shutdown): State<CancellationToken>) -> Response {
    if shutdown.is_cancelled() {
        let mut response = (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return response;
    }
    "ready\n".into_response()
}

/// A bound listener, so callers learn the port (`127.0.0.1:0`) before serving.
pub struct HttpListener {
    listener: tokio::net::TcpListener,
    access: Access,
    limits: HttpLimits,
}

impl HttpListener {
    /// Bind `addr` for clients with `token` or a token of one of `tenants` (from the
    /// config, already checked non-empty and distinct); refuses a non-loopback address
    /// without any token, and an empty `token`.
    pub async fn bind(
        addr: SocketAddr,
        token: Option<String>,
        tenants: &[sandpy::TokenTenant],
    ) -> Result<HttpListener, HttpError> {
        if token.as_deref() == Some("") {
            return Err(HttpError::EmptyToken);
        }
        let access = Access {
            token,
            tenants: tenants
                .iter()
                .map(|t| (t.token.clone(), Arc::from(t.name.as_str())))
                .collect(),
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
        })
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

    /// Serve MCP at `/mcp` until `shutdown` completes; then requests still being answered
    /// get [`HttpLimits::drain`] to finish.
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
        let (app, cancel) = mcp_router(
            move || server.connection(),
            self.access,
            loopback,
            &self.limits,
        );
        let stop = cancel.clone();
        tokio::spawn(async move {
            shutdown.await;
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
    async fn not_ready_once_shutdown_began() {
        let shutdown = CancellationToken::new();
        assert_eq!(
            ready(State(shutdown.clone())).await.status(),
            StatusCode::OK
        );
        shutdown.cancel();
        let response = ready(State(shutdown)).await;
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for value in [
            "Bearer s3cret",
            "bearer s3cret",
            "BEARER s3cret",
            "bEaReR  s3cret",
        ] {
            assert_eq!(bearer_token(value), Some("s3cret"), "{value:?}");
        }
        for value in ["s3cret", "Basic s3cret", "Bearers3cret", "Token s3cret", ""] {
            assert_eq!(bearer_token(value), None, "{value:?}");
        }
    }

    #[test]
    fn every_token_is_checked_and_a_tenants_names_it() {
        let access = Access {
            token: Some("single".into()),
            tenants: vec![("ta".into(), "a".into()), ("tb".into(), "b".into())],
        };
        assert_eq!(access.admit("single"), Some(None));
        assert_eq!(access.admit("tb"), Some(Some("b".into())));
        for wrong in ["", "t", "tab", "Single", "ta "] {
            assert_eq!(access.admit(wrong), None, "{wrong:?}");
        }
    }

    #[tokio::test]
    async fn an_empty_token_is_refused() {
        let bound = HttpListener::bind(([127, 0, 0, 1], 0).into(), Some(String::new()), &[]).await;
        assert!(matches!(bound, Err(HttpError::EmptyToken)));
    }
}
