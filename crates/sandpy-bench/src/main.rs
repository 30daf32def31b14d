//! `sandpy-bench`: see the library's documentation.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // The native part's zygote is this binary started with a marker argument.
    sandpy::native::main_if_requested();
    match sandpy_bench::run(sandpy_bench::Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}
