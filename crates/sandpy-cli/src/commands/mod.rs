//! The command line: the subcommands and their dispatch, each command in its own file.
//! What commands share is in `crate::common`; a command never uses another's parts.

mod bench;
mod build;
mod call;
mod check;
mod demo;
#[cfg(test)]
mod documented;
mod run;
mod serve;
mod warm_runner;
mod warmup;

use crate::exit::Outcome;
use clap::{Parser, Subcommand};

/// Run untrusted Python (real CPython 3.14) in a WebAssembly sandbox.
#[derive(Parser)]
#[command(name = "sandpy", version, about, propagate_version = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a Python program in a fresh sandbox.
    Run(run::Args),
    /// Be an MCP server (stdio, or streamable HTTP with --http) whose `run_python` tool
    /// runs code that can call the configured MCP servers' tools.
    Serve(serve::Args),
    /// Check a program against a policy without running it.
    Check(check::Args),
    /// Call a function of a Python file with JSON arguments (one call, or one per line of a file).
    Call(call::Args),
    /// Run a built-in example: Python that calls MCP tools of the reference `everything` server.
    Demo(demo::Args),
    /// Compile the Python runtime to native code now, so the first run is fast; with
    /// `--keep`, keep it loaded in a warm runner that later runs use.
    Warmup(warmup::Args),
    /// Measure latency, throughput and CPU-bound speed against native python3 (runs the
    /// `sandpy-bench` program beside this binary).
    Bench(bench::Args),
    /// Build a runtime with extra pure-Python packages from PyPI (or a folder to mount).
    Build(build::Args),
    /// The background runner `sandpy run --warm` starts (not for direct use).
    #[cfg(target_os = "linux")]
    #[command(hide = true)]
    WarmRunner(warm_runner::Args),
}

pub(crate) fn dispatch(cli: Cli) -> anyhow::Result<Outcome> {
    match cli.command {
        Command::Run(args) => run::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Check(args) => check::run(args),
        Command::Call(args) => call::run(args),
        Command::Warmup(args) => warmup::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Build(args) => build::run(args),
        #[cfg(target_os = "linux")]
        Command::WarmRunner(args) => warm_runner::run(args),
    }
}
