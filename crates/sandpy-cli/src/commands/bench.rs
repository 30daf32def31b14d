//! `sandpy bench`: the benchmarks are the `sandpy-bench` program (crates/sandpy-bench),
//! kept out of this binary; this entry runs the one beside it with the same arguments,
//! telling it which `sandpy` to measure.

use crate::exit::{Hinted, Outcome};
use anyhow::Context;
use std::ffi::OsString;
use std::process::Command;

#[derive(clap::Args)]
#[command(disable_help_flag = true)]
pub(super) struct Args {
    /// The benchmark's arguments (`sandpy bench --help` lists them).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    args: Vec<OsString>,
}

/// Why `sandpy bench` could not start the benchmarks.
#[derive(Debug, thiserror::Error)]
#[error(
    "the benchmarks are the `sandpy-bench` program, and there is none at `{}`",
    path.display()
)]
struct NoBenchProgram {
    /// Where it was looked for: beside this binary.
    path: std::path::PathBuf,
}

/// What to do without the benchmarks' program.
const BUILD_IT: &str =
    "build it beside this binary: `cargo build --release -p sandpy-cli -p sandpy-bench`";

pub(super) fn run(args: Args) -> anyhow::Result<Outcome> {
    let sandpy = std::env::current_exe()?;
    let path = sandpy.with_file_name(format!("sandpy-bench{}", std::env::consts::EXE_SUFFIX));
    if !path.is_file() {
        return Err(Hinted::new(NoBenchProgram { path }, BUILD_IT).into());
    }
    let mut command = Command::new(&path);
    command.args(&args.args).env("SANDPY_BENCH_SANDPY", &sandpy);
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let error = command.exec();
        Err(error).with_context(|| format!("cannot run `{}`", path.display()))
    }
    #[cfg(not(unix))]
    {
        let status = command
            .status()
            .with_context(|| format!("cannot run `{}`", path.display()))?;
        std::process::exit(status.code().unwrap_or(1));
    }
}
