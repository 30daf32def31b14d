//! Serving MCP over streamable HTTP, with a bearer token.
//!
//! A token is required when the address is not loopback, and checked whenever one is set.

use crate::server::SandpyServer;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::net::SocketAddr;
use std::sync::Arc;

/// Why the HTTP server cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HttpError {
    /// Listening beyond loopback without a token would expose code execution.
    #[error("`{0}` is not a loopback address: set a bearer token (--token or SANDPY_TOKEN)")]
    TokenRequired(SocketAddr),
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

async fn require_bearer(
    State(expected): State<Arc<str>>,
    request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
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

/// A bound listener, so callers learn the port (`127.0.0.1:0`) before serving.
pub struct HttpListener {
    listener: tokio::net::TcpListener,
    token: Option<String>,
}

impl HttpListener {
    /// Bind `addr`; refuses a non-loopback address without a token.
    pub async fn bind(addr: SocketAddr, token: Option<String>) -> Result<HttpListener, HttpError> {
        if token.is_none() && !addr.ip().is_loopback() {
            return Err(HttpError::TokenRequired(addr));
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| HttpError::Bind { addr, source })?;
        Ok(HttpListener { listener, token })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve MCP at `/mcp` until `shutdown` completes.
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
        let mut config = StreamableHttpServerConfig::default();
        if !loopback {
            config = config.disable_allowed_hosts(); // reached by any name; the token guards it
        }
        let cancel = config.cancellation_token.clone();
        let service: StreamableHttpService<SandpyServer, LocalSessionManager> =
            StreamableHttpService::new(
                move || Ok(server.clone()),
                Arc::new(LocalSessionManager::default()),
                config,
            );
        let mut app = Router::new().nest_service("/mcp", service);
        if let Some(token) = self.token {
            app = app.layer(middleware::from_fn_with_state(
                Arc::<str>::from(token),
                require_bearer,
            ));
        }
        axum::serve(self.listener, app)
            .with_graceful_shutdown(async move {
                shutdown.await;
                cancel.cancel();
            })
            .await
            .map_err(HttpError::Serve)
    }
}
