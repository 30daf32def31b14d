//! `sandpy serve`: the MCP server, over stdio (default) or streamable HTTP.

use crate::exit::Outcome;
use anyhow::Context;
use std::net::SocketAddr;

#[derive(clap::Args)]
pub struct Args {
    /// Serve streamable HTTP on this address (e.g. 127.0.0.1:8765) instead of stdio.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// Bearer token HTTP clients must send; required unless the address is loopback.
    #[arg(long, env = "SANDPY_TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[command(flatten)]
    settings: super::ConfigArgs,
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => return drop(ctrl_c.await),
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    drop(ctrl_c.await);
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let (config, resolved) = args.settings.resolve_with_servers()?;
    let sandbox = super::resolved_sandbox(&resolved)?;
    super::tokio_runtime()?.block_on(async {
        let hub = match super::start_hub(&config).await {
            Some(hub) => hub,
            None => sandpy_mcp::Hub::start(&config).await,
        };
        let server = sandpy_mcp::SandpyServer::new(sandbox, hub.clone(), &resolved)
            .context("cannot start the MCP server")?;
        let served = match args.http {
            None => tokio::select! {
                served = sandpy_mcp::serve_stdio(server) => served.context("MCP over stdio failed"),
                _ = shutdown_signal() => Ok(()),
            },
            Some(addr) => {
                let tenants = &resolved.settings.tenants;
                let listener = sandpy_mcp::HttpListener::bind(addr, args.token, tenants).await?;
                eprintln!(
                    "sandpy: serving MCP at http://{}/mcp",
                    listener.local_addr()?
                );
                listener
                    .serve(server, shutdown_signal())
                    .await
                    .map_err(anyhow::Error::from)
            }
        };
        hub.shutdown().await;
        served
    })?;
    Ok(Outcome::Success)
}
