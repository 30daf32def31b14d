//! What the commands share, so that they lean on this shelf and never on each other:
//! argument groups (the settings, the limits, the files, the warm runner's flags), the
//! program a command was given, the sandboxes, run options and runtimes they build, the
//! upstream hub they start, and how they print a run.

/// `println!` that returns the write's error instead of panicking: a closed pipe
/// (`sandpy run script.py | head`) then ends the command quietly (`exit::finish`).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}
pub(crate) use outln;

mod config;
mod files;
mod hub;
mod limits;
mod print;
mod program;
mod sandbox;
mod warm;

pub(crate) use config::ConfigArgs;
pub(crate) use files::FileArgs;
pub(crate) use hub::{report_start, start_hub};
pub(crate) use limits::LimitArgs;
pub(crate) use print::{print_after_stream, print_and_exit, print_execution};
pub(crate) use program::{regular_file, Program};
pub(crate) use sandbox::{
    one_shot_runtime, one_shot_sandbox, release_at_exit, resolved_sandbox, run_options, sandbox,
    sandbox_with, tokio_runtime,
};
pub(crate) use warm::WarmArgs;
