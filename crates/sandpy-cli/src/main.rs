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
    tracing_subscriber::fmt()
        .with_writer(|| log::Stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SANDPY_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .init();
    exit::finish(commands::dispatch(cli))
}
