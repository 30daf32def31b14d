//! `sandpy serve`: the MCP server, over stdio (default) or streamable HTTP.
//!
//! It answers its clients at once: the upstream servers start in the background
//! ([`sandpy_mcp::Hub::launch`]). SIGTERM or SIGINT end it promptly whatever its clients
//! or stdin are doing: HTTP requests in progress get a few seconds to finish, runs still
//! going then are cancelled, every upstream's process group is killed, and the runtime is
//! not waited for (its stdin reader is a blocking read no one can interrupt).

use crate::exit::Outcome;
use anyhow::Context;
use std::net::SocketAddr;
use std::time::Duration;

/// How long the runtime's remaining tasks (runs being cancelled, the stdin reader) may
/// take to stop once the server is done.
const STOP_GRACE: Duration = Duration::from_millis(500);

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

/// SIGTERM or SIGINT (Ctrl-C). The handlers are installed when this is called, not when
/// it is first awaited, so a signal that comes while the server starts is not lost.
fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate()).ok();
        let int = signal(SignalKind::interrupt()).ok();
        async move {
            let wait = |s: Option<tokio::signal::unix::Signal>| async move {
                match s {
                    Some(mut s) => drop(s.recv().await),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = wait(term) => {},
                _ = wait(int) => {},
            }
        }
    }
    #[cfg(not(unix))]
    async {
        drop(tokio::signal::ctrl_c().await);
    }
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let (config, resolved) = args.settings.resolve_with_servers()?;
    let sandbox = super::resolved_sandbox(&resolved)?;
    let runtime = super::tokio_runtime()?;
    let served = runtime.block_on(async {
        let stop = shutdown_signal();
        let hub = sandpy_mcp::Hub::launch(&config);
        tokio::spawn(report_start(hub.clone(), resolved.settings.clone()));
        let server = sandpy_mcp::SandpyServer::new(sandbox, hub.clone(), &resolved)
            .context("cannot start the MCP server")?;
        let served = match args.http {
            None => tokio::select! {
                served = sandpy_mcp::serve_stdio(server) => served.context("MCP over stdio failed"),
                _ = stop => Ok(()),
            },
            Some(addr) => {
                let tenants = &resolved.settings.tenants;
                let listener = sandpy_mcp::HttpListener::bind(addr, args.token, tenants).await?;
                eprintln!(
                    "sandpy: serving MCP at http://{}/mcp",
                    listener.local_addr()?
                );
                listener
                    .serve(server, stop)
                    .await
                    .map_err(anyhow::Error::from)
            }
        };
        hub.shutdown().await;
        served
    });
    runtime.shutdown_timeout(STOP_GRACE);
    served?;
    Ok(Outcome::Success)
}

/// Once every upstream has started or failed, say on stderr which failed and which tool
/// patterns match nothing.
async fn report_start(hub: sandpy_mcp::Hub, settings: sandpy::Settings) {
    hub.wait_started(Duration::MAX).await;
    super::report_start(&hub, &settings);
}
