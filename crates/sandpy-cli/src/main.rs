//! `sandpy`: run untrusted Python in a WebAssembly sandbox, from the shell or as an MCP
//! server. Each command is one file in `commands/` (its router: `commands/mod.rs`); what
//! commands share is in `common/`, the warm runner in `warm/`; exit codes live in `exit.rs`.

mod commands;
mod common;
mod exit;
mod log;
mod warm;

use clap::Parser;
use std::process::ExitCode;

/// jemalloc instead of glibc's malloc: tokio's tasks and channels are 128-byte-aligned
/// blocks, which glibc serves on its slow path; served calls spawn several each
/// (docs/dev/performance.md, "jemalloc for the binaries").
#[cfg(unix)]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    // A native-tier zygote is this binary started with a marker argument.
    sandpy::native::main_if_requested();
    let cli = commands::Cli::parse();
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("SANDPY_LOG").unwrap_or_else(|_| "warn".into());
    // Colour only on a terminal, and never with NO_COLOR (https://no-color.org): a log
    // file or a collector reads the escape codes as text.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    // Traces by OTLP when the environment names an endpoint (sandpy's own spans). Without,
    // the log alone, as a subscriber whose level filter is global: the spans and events of
    // every crate below it (wasmtime-wasi instruments each WASI call) are then switched off
    // where they are written, not asked about at each call. Asking cost fresh runs p50
    // 1.16x and runs/s 0.92x (docs/dev/performance.md, "Traces off, traces on").
    let telemetry = match sandpy_mcp::Telemetry::from_env() {
        Ok(Some((telemetry, traces))) => {
            use tracing_subscriber::layer::SubscriberExt;
            use tracing_subscriber::util::SubscriberInitExt;
            use tracing_subscriber::Layer;
            let log = tracing_subscriber::fmt::layer()
                .with_writer(|| log::Stderr)
                .with_ansi(colour)
                .with_filter(filter);
            tracing_subscriber::registry().with(log).with(traces).init();
            Some(telemetry)
        }
        Ok(None) => {
            tracing_subscriber::fmt()
                .with_writer(|| log::Stderr)
                .with_ansi(colour)
                .with_env_filter(filter)
                .init();
            None
        }
        Err(e) => return exit::finish(Err(e.into())),
    };
    let code = exit::finish(commands::dispatch(cli));
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    code
}
