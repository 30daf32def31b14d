//! `sandpy serve`: the MCP server, over stdio (default) or streamable HTTP.
//!
//! It answers its clients at once: the upstream servers start in the background
//! ([`sandpy_mcp::Hub::launch`]). Over stdio, SIGTERM or SIGINT end it promptly whatever
//! its client or stdin are doing. Over HTTP the first signal drains: `/readyz` fails, new
//! MCP sessions get 503 and new runs `busy`, runs in flight get `sandpy.drain_grace_ms`
//! (default 30 s) to end, the token tenants' sessions are saved to `save_dir`; then open
//! streams end, requests still being answered get a few seconds, runs still going are
//! cancelled. A second signal exits at once. Every upstream's process group is killed, and
//! the runtime is not waited for (its stdin reader is a blocking read no one can
//! interrupt).

use crate::common;
use crate::exit::Outcome;
use anyhow::Context;
use std::net::SocketAddr;
use std::time::Duration;

/// How long the runtime's remaining tasks (runs being cancelled, the stdin reader) may
/// take to stop once the server is done.
const STOP_GRACE: Duration = Duration::from_millis(500);

#[derive(clap::Args)]
pub(super) struct Args {
    /// Serve streamable HTTP on this address (e.g. 127.0.0.1:8765) instead of stdio.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
    /// Bearer token HTTP clients must send; required unless the address is loopback.
    #[arg(long, env = "SANDPY_TOKEN", hide_env_values = true)]
    token: Option<String>,
    #[command(flatten)]
    settings: common::ConfigArgs,
}

/// SIGTERM and SIGINT (Ctrl-C). The handlers are installed when this is made, not when
/// first awaited, so a signal that comes while the server starts is not lost.
struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn install() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Signals {
                term: signal(SignalKind::terminate()).ok(),
                int: signal(SignalKind::interrupt()).ok(),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// The next SIGTERM or SIGINT.
    async fn next(&mut self) {
        #[cfg(unix)]
        {
            async fn one(signal: &mut Option<tokio::signal::unix::Signal>) {
                match signal {
                    Some(signal) => drop(signal.recv().await),
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                () = one(&mut self.term) => {},
                () = one(&mut self.int) => {},
            }
        }
        #[cfg(not(unix))]
        drop(tokio::signal::ctrl_c().await);
    }

    /// Done at the first signal; a second one ends the process at once (after at most a
    /// second to stop `hub`'s upstreams), without waiting for runs.
    async fn first_then_exit_on_second(mut self, hub: sandpy_mcp::Hub) {
        self.next().await;
        tokio::spawn(async move {
            self.next().await;
            eprintln!("sandpy: a second signal: exiting now, without waiting for runs");
            let _ = tokio::time::timeout(Duration::from_secs(1), hub.shutdown()).await;
            std::process::exit(130);
        });
    }
}

pub(super) fn run(args: Args) -> anyhow::Result<Outcome> {
    let (config, resolved) = args.settings.resolve_with_servers()?;
    let sandbox = common::resolved_sandbox(&resolved)?;
    let runtime = common::tokio_runtime()?;
    let served = runtime.block_on(async {
        let signals = Signals::install();
        let hub = sandpy_mcp::Hub::launch(&config);
        let stop = signals.first_then_exit_on_second(hub.clone());
        tokio::spawn(report_start(hub.clone(), resolved.settings.clone()));
        let server = sandpy_mcp::SandpyServer::new(sandbox, hub.clone(), &resolved)
            .context("cannot start the MCP server")?;
        let served = match args.http {
            None => tokio::select! {
                served = sandpy_mcp::serve_stdio(server) => match served {
                    // The client went away while answers were being written: rmcp's error
                    // does not carry the write's io::Error, so ask stdout itself.
                    Err(_) if crate::exit::stdout_closed() => {
                        Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe).into())
                    }
                    served => served.context("MCP over stdio failed"),
                },
                _ = stop => Ok(()),
            },
            Some(addr) => {
                let tenants = &resolved.settings.tenants;
                let settings = &resolved.settings;
                let auth = config.auth.clone();
                let mut listener =
                    sandpy_mcp::HttpListener::bind_with_oauth(addr, args.token, tenants, auth)
                        .await?
                        .metrics_need_token(settings.metrics_require_token)
                        .metrics_tenant_names(settings.metrics_tenant_names)
                        .allowed_origins(&settings.allowed_origins)
                        .allowed_hosts(&settings.allowed_hosts);
                if let Some(grace) = settings.drain_grace {
                    listener = listener.drain_grace(grace);
                }
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
async fn report_start(hub: sandpy_mcp::Hub, settings: sandpy::settings::Settings) {
    hub.wait_started(Duration::MAX).await;
    common::report_start(&hub, &settings);
}
