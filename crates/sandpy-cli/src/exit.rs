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

/// Exit code when whoever reads stdout closed it (`sandpy run script.py | head`): the
/// command ends quietly with 128 + SIGPIPE, the status the shell shows for other Unix
/// tools stopped by a closed pipe.
pub(crate) const CLOSED_PIPE: u8 = 141;

/// Print an error the uv way (`error:`, one `Caused by:` per source) and pick the code.
pub(crate) fn finish(result: anyhow::Result<Outcome>) -> ExitCode {
    match result {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::Run(status)) => ExitCode::from(status_code(status)),
        Ok(Outcome::Violations) => ExitCode::from(1),
        Err(error) if closed_pipe(&error) => ExitCode::from(CLOSED_PIPE),
        Err(error) => {
            eprintln!("error: {error}");
            for cause in error.chain().skip(1) {
                eprintln!("  Caused by: {cause}");
            }
            if let Some(hint) = hint(&error) {
                eprintln!("hint: {hint}");
            }
            ExitCode::from(USAGE)
        }
    }
}

/// Whether `error` is a write to a pipe whose reader is gone.
pub(crate) fn closed_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Whether whoever read this process's stdout has closed it (a pipe's reader gone: `poll`
/// reports an error on the writing end).
pub(crate) fn stdout_closed() -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let stdout = std::io::stdout();
    let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::POLLOUT)];
    poll(&mut fds, PollTimeout::ZERO).is_ok_and(|_| {
        fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLERR | PollFlags::POLLHUP))
    })
}

/// An error with what a person can do about it: printed as the error, then its `hint:`
/// line. For the commands whose own errors have a hint; the library's get theirs here.
#[derive(Debug)]
pub(crate) struct Hinted {
    /// The error, shown as it is (its sources are the `Caused by:` lines).
    error: Box<dyn std::error::Error + Send + Sync + 'static>,
    /// What to do about it.
    hint: &'static str,
}

impl Hinted {
    /// `error`, with `hint` after it.
    pub(crate) fn new(
        error: impl std::error::Error + Send + Sync + 'static,
        hint: &'static str,
    ) -> Hinted {
        Hinted {
            error: Box::new(error),
            hint,
        }
    }
}

impl std::fmt::Display for Hinted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for Hinted {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

/// What to do about an error, where sandpy can tell more than the error says.
fn hint(error: &anyhow::Error) -> Option<String> {
    if let Some(hinted) = error.downcast_ref::<Hinted>() {
        return Some(hinted.hint.into());
    }
    match error
        .chain()
        .find_map(|e| e.downcast_ref::<sandpy::settings::ConfigError>())?
    {
        sandpy::settings::ConfigError::Read { source, .. }
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            Some(
                "a relative path is read from the working folder; without --config, sandpy \
                 reads $SANDPY_CONFIG, else ./.mcp.json, else runs on its defaults"
                    .into(),
            )
        }
        sandpy::settings::ConfigError::Invalid { message, .. } => {
            closest_field(message).map(|field| format!("did you mean `{field}`?"))
        }
        _ => None,
    }
}

/// For serde's "unknown field `x`, expected one of `a`, `b`": the expected field closest
/// to `x`, when one is close (at most a third of its letters differ).
fn closest_field(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("unknown field `")?;
    let (unknown, rest) = rest.split_once('`')?;
    let expected = rest.split_once("expected one of ")?.1;
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|field| (distance(unknown, field), field))
        .filter(|&(d, field)| d * 3 <= field.len().max(unknown.len()))
        .min_by_key(|&(d, _)| d)
        .map(|(_, field)| field)
}

/// Edit distance (insertions, deletions, substitutions) between two names.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut last = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let next = (row[j] + 1)
                .min(row[j + 1] + 1)
                .min(last + usize::from(ca != cb));
            last = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_close_unknown_field_gets_a_hint_and_a_far_one_none() {
        let message = "unknown field `timeout`, expected one of `timeout_ms`, `memory_mb`";
        assert_eq!(closest_field(message), Some("timeout_ms"));
        let far = "unknown field `colour`, expected one of `timeout_ms`, `memory_mb`";
        assert_eq!(closest_field(far), None);
        assert_eq!(closest_field("missing field `x`"), None);
        assert_eq!(distance("kitten", "sitting"), 3);
    }

    /// A command's hinted error reads as the error it holds, with the same causes, and
    /// its hint is the one printed.
    #[test]
    fn a_hinted_error_shows_its_error_then_its_hint() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot read `x.json`")]
        struct Unread(#[source] std::io::Error);
        let cause = std::io::Error::other("the cause");
        let error = anyhow::Error::from(Hinted::new(Unread(cause), "do this"));
        let shown: Vec<String> = error.chain().map(ToString::to_string).collect();
        assert_eq!(shown, ["cannot read `x.json`", "the cause"]);
        assert_eq!(hint(&error).as_deref(), Some("do this"));
        assert_eq!(hint(&anyhow::anyhow!("plain")), None);
    }

    /// The statuses table of docs/guide/cli.md lists every status (as serde names them
    /// when refusing an unknown one), each with the exit code `status_code` gives it.
    #[test]
    fn the_documented_exit_codes_are_the_ones_used() {
        let refused = serde_json::from_str::<Status>("\"zz\"")
            .expect_err("an unknown status")
            .to_string();
        let (_, expected) = refused.split_once("expected").expect("a list of statuses");
        let mut statuses: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        let guide = include_str!("../../../docs/guide/cli.md");
        let mut documented = Vec::new();
        for line in guide.lines() {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let [_, name, _, code, _] = cells[..] else {
                continue;
            };
            let Some(name) = name.strip_prefix('`').and_then(|n| n.strip_suffix('`')) else {
                continue;
            };
            let Ok(status) = serde_json::from_value::<Status>(name.into()) else {
                continue;
            };
            assert_eq!(code, status_code(status).to_string(), "{name}");
            documented.push(name);
        }
        statuses.sort();
        documented.sort();
        assert_eq!(
            documented, statuses,
            "docs/guide/cli.md, Results and exit codes"
        );
    }
}
