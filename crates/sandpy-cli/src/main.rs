//! `sandpy`: run untrusted Python in a WebAssembly sandbox, from the shell or as an MCP
//! server. Each command is one file in `commands/`; exit codes live in `exit.rs`.

mod commands;
mod exit;
mod log;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // A native-tier zygote is this binary started with a marker argument.
    sandpy::native::main_if_requested();
    let cli = commands::Cli::parse();
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("SANDPY_LOG").unwrap_or_else(|_| "warn".into());
    let log = tracing_subscriber::fmt::layer()
        .with_writer(|| log::Stderr)
        .with_filter(filter);
    // Traces by OTLP when the environment names an endpoint: sandpy's own spans.
    let (telemetry, traces) = match sandpy_mcp::Telemetry::from_env() {
        Ok(Some((telemetry, layer))) => (Some(telemetry), Some(layer)),
        Ok(None) => (None, None),
        Err(e) => return exit::finish(Err(e.into())),
    };
    tracing_subscriber::registry().with(log).with(traces).init();
    let code = exit::finish(commands::dispatch(cli));
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    code
}
