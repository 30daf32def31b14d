//! Exit codes, decided in one place.

use sandpy::Status;
use std::process::ExitCode;

/// What a command ended with, before it becomes an exit code.
pub(crate) enum Outcome {
    /// The command did its job.
    Success,
    /// A run ended with this status (0 only for `ok`).
    Run(Status),
    /// `sandpy check` found violations.
    Violations,
}

/// The documented exit code of each run status.
pub(crate) fn status_code(status: Status) -> u8 {
    match status {
        Status::Ok => 0,
        Status::Error => 1,
        Status::Timeout => 3,
        Status::MemoryLimit => 4,
        Status::OutputLimit => 5,
        Status::StackOverflow => 6,
        Status::ToolCallLimit => 7,
        Status::InvalidInput => 8,
        Status::PolicyViolation => 9,
        Status::InternalError => 10,
        Status::Busy => 11,
        Status::SessionPoisoned => 12,
        Status::DiskLimit => 13,
        Status::Cancelled => 14,
        _ => 10,
    }
}

/// Exit code of a usage or setup error (`error:` printed on stderr); clap also uses 2.
pub(crate) const USAGE: u8 = 2;

/// Print an error the uv way (`error:`, one `Caused by:` per source) and pick the code.
pub(crate) fn finish(result: anyhow::Result<Outcome>) -> ExitCode {
    match result {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::Run(status)) => ExitCode::from(status_code(status)),
        Ok(Outcome::Violations) => ExitCode::from(1),
        Err(error) => {
            eprintln!("error: {error}");
            for cause in error.chain().skip(1) {
                eprintln!("  Caused by: {cause}");
            }
            ExitCode::from(USAGE)
        }
    }
}
