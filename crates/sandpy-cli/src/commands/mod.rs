//! The command line: one subcommand per file.

mod bench;
mod run;
mod warmup;

use crate::exit::Outcome;
use clap::{Parser, Subcommand};

/// Run untrusted Python (real CPython 3.14) in a WebAssembly sandbox.
#[derive(Parser)]
#[command(name = "sandpy", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a Python program in a fresh sandbox.
    Run(run::Args),
    /// Compile the Python runtime to native code now, so the first run is fast.
    Warmup(warmup::Args),
    /// Measure latency, throughput and CPU-bound speed against native python3.
    Bench(bench::Args),
}

pub fn dispatch(cli: Cli) -> anyhow::Result<Outcome> {
    match cli.command {
        Command::Run(args) => run::run(args),
        Command::Warmup(args) => warmup::run(args),
        Command::Bench(args) => bench::run(args),
    }
}

/// The sandbox, with a progress message on stderr when the runtime must be compiled.
pub fn sandbox() -> anyhow::Result<sandpy::Sandbox> {
    let config = sandpy::Config {
        progress: Some(std::sync::Arc::new(|message: &str| eprintln!("{message}"))),
        ..sandpy::Config::default()
    };
    Ok(sandpy::Sandbox::new(config)?)
}

/// A tokio runtime for one command.
pub fn tokio_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}
