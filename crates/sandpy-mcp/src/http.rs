//! Serving MCP over streamable HTTP, with a bearer token.
//!
//! A token is required when the address is not loopback, and checked whenever one is set.
//! A client's `DELETE` of its session is answered 204 No Content (see
//! [`deleted_is_no_content`]). Connections are timed and capped ([`crate::connections`]),
//! MCP sessions counted per client and in all ([`crate::mcp_sessions`]), both within
//! [`HttpLimits`].

use crate::connections::{self, HttpLimits};
use crate::mcp_sessions::{self, CappedSessions};
use crate::server::SandpyServer;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
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

async fn require_bearer(
    State(expected): State<Arc<str>>,
    request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    if !presented.is_some_and(|token| same(token.as_bytes(), expected.as_bytes())) {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "missing or wrong bearer token\n",
        )
            .into_response();
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

/// The MCP endpoint at `/mcp` serving a clone of `server` to each session, behind the
/// bearer check when `token` is set, bodies read and sessions counted within `limits`;
/// and the token that ends its open streams on shutdown.
/// Beyond loopback any `Host` is accepted (the token guards it).
pub(crate) fn mcp_router<S>(
    server: S,
    token: Option<String>,
    loopback: bool,
    limits: &HttpLimits,
) -> (Router, CancellationToken)
where
    S: ServerHandler + Clone + Send + Sync + 'static,
{
    let mut config = StreamableHttpServerConfig::default();
    if !loopback {
        config = config.disable_allowed_hosts(); // reached by any name; the token guards it
    }
    let cancel = config.cancellation_token.clone();
    let body_limit = (limits.body_timeout, config.max_request_body_bytes);
    let sessions = Arc::new(CappedSessions::new(limits));
    let service: StreamableHttpService<S, CappedSessions> =
        StreamableHttpService::new(move || Ok(server.clone()), sessions.clone(), config);
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
    if let Some(token) = token {
        app = app.layer(middleware::from_fn_with_state(
            Arc::<str>::from(token),
            require_bearer,
        ));
    }
    (app, cancel)
}

/// A bound listener, so callers learn the port (`127.0.0.1:0`) before serving.
pub struct HttpListener {
    listener: tokio::net::TcpListener,
    token: Option<String>,
    limits: HttpLimits,
}

impl HttpListener {
    /// Bind `addr`; refuses a non-loopback address without a token, and an empty token.
    pub async fn bind(addr: SocketAddr, token: Option<String>) -> Result<HttpListener, HttpError> {
        if token.as_deref() == Some("") {
            return Err(HttpError::EmptyToken);
        }
        if token.is_none() && !addr.ip().is_loopback() {
            return Err(HttpError::TokenRequired(addr));
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| HttpError::Bind { addr, source })?;
        Ok(HttpListener {
            listener,
            token,
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
        let (app, cancel) = mcp_router(server, self.token, loopback, &self.limits);
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

    #[tokio::test]
    async fn an_empty_token_is_refused() {
        let bound = HttpListener::bind(([127, 0, 0, 1], 0).into(), Some(String::new())).await;
        assert!(matches!(bound, Err(HttpError::EmptyToken)));
    }
}
