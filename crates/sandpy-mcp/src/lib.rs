//! sandpy's MCP front end: the sandbox calls the tools of configured MCP servers (the
//! [`Hub`]), and sandpy itself is an MCP server ([`SandpyServer`]) whose `run_python` tool
//! runs code in the sandbox.
//!
//! - [`ConfigFile`]: the `mcpServers` file agents already keep (with `${VAR}` expansion), plus
//!   sandpy's settings.
//! - [`Hub`]: MCP clients (rmcp) for every configured server, one `ToolHost` for sandpy.
//! - [`SandpyServer`]: the rmcp server handler; serve it over stdio or [`HttpListener`].
//!
//! Upstreams over `https://` use rustls with the `ring` provider, trusting the system's
//! root certificates and a server's own `ca_file` ([`CaFile`]). The hub's HTTP clients
//! carry their own TLS settings; but the crate turns on reqwest's `rustls-no-provider`, so a
//! reqwest 0.13 client built by other code in the same program (rmcp's
//! `StreamableHttpClientTransport::from_uri`, say) needs a process-wide provider first:
//! `rustls::crypto::ring::default_provider().install_default()`.
//!
//! Crate feature `test-server` adds the module `test_server`: a small MCP server with an `echo`
//! tool, over http or https on loopback with certificates made on the spot, for tests and
//! benchmarks.
#![deny(missing_docs)]

mod audit;
mod client;
mod config;
mod expand;
mod http;
mod identity;
mod metrics;
mod server;
mod summary;
mod telemetry;
#[cfg(feature = "test-server")]
pub mod test_server;

pub use audit::AuditLog;
pub use client::schema::ArgumentSchema;
pub use client::{Hub, ServerStatus};
pub use config::{ConfigFile, ServerSpec};
pub use expand::Expansions;
pub use http::connections::HttpLimits;
pub use http::oauth::config::OAuthConfig;
pub use http::replay::ReplayLimits;
pub use http::{HttpError, HttpListener};
pub use metrics::Metrics;
pub use sandpy::settings::{ConfigError, UnknownPolicy};
pub use sandpy::tls::{CaFile, CaFileError};
pub use server::SandpyServer;
pub use summary::summarize;
pub use telemetry::{Telemetry, TelemetryError};

/// Serve `server` over stdin/stdout until the client disconnects.
pub async fn serve_stdio(server: SandpyServer) -> std::io::Result<()> {
    use rmcp::ServiceExt;
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(std::io::Error::other)?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}
