//! sandpy's MCP front end: the sandbox calls the tools of configured MCP servers (the
//! [`Hub`]), and sandpy itself is an MCP server ([`SandpyServer`]) whose `run_python` tool
//! runs code in the sandbox.
//!
//! - [`Config`]: the `mcpServers` file agents already keep (with `${VAR}` expansion), plus
//!   sandpy's settings.
//! - [`Hub`]: MCP clients (rmcp) for every configured server, one `ToolHost` for sandpy.
//! - [`SandpyServer`]: the rmcp server handler; serve it over stdio or [`HttpListener`].
#![deny(missing_docs)]

mod audit;
mod config;
mod expand;
mod http;
mod hub;
mod schema;
mod server;
mod summary;

pub use audit::AuditLog;
pub use config::{Config, ServerSpec};
pub use expand::Expansions;
pub use http::{HttpError, HttpListener};
pub use hub::{Hub, ServerStatus};
pub use sandpy::{ConfigError, UnknownPolicy};
pub use server::SandpyServer;
pub use summary::summarize;

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
