//! `sandpy-bench`: see the library's documentation.

use clap::Parser;
use std::process::ExitCode;

/// jemalloc instead of glibc's malloc: tokio's tasks and channels are 128-byte-aligned
/// blocks, which glibc serves on its slow path; served calls spawn several each
/// (docs/dev/performance.md, "jemalloc for the binaries").
#[cfg(unix)]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    // The native part's zygote is this binary started with a marker argument.
    sandpy::native::main_if_requested();
    // The log as `sandpy` sets it up (`SANDPY_LOG`, default `warn`, a global level filter),
    // so that what the library's and wasmtime's instrumentation costs is what it costs there.
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("SANDPY_LOG").unwrap_or_else(|_| "warn".into());
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .init();
    match sandpy_bench::run(sandpy_bench::Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}
