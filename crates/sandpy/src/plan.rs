//! A run's plan: what both tiers are handed to execute one admitted run, and the one
//! [`Deadline`] everything the run waits on ends by.

use crate::bindings::{GuestOptions, Task};
use crate::{Limits, RunOptions};
use std::time::{Duration, Instant};

/// What a tier executes: the task, the caller's options, what the guest is told, the
/// run's effective limits and its deadline.
pub(crate) struct Plan<'a> {
    pub task: &'a Task,
    pub options: &'a RunOptions,
    pub guest: GuestOptions,
    pub limits: &'a Limits,
    pub deadline: Deadline,
}

/// When a run's time ends. Made once, at admission (the run's clock starts there, so
/// setting up its instance and writing its input files count against it), then copied
/// to everything the run waits on: the guest call, input files, tool calls and HTTP
/// requests, in both tiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadline {
    started: Instant,
    ends: Instant,
}

impl Deadline {
    /// The deadline of a run that starts now under the time limit `limit`.
    pub(crate) fn starting_now(limit: Duration) -> Deadline {
        let started = Instant::now();
        Deadline {
            started,
            ends: later(started, limit),
        }
    }

    /// When the run's clock started.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// When the run's time ends.
    pub(crate) fn ends(&self) -> Instant {
        self.ends
    }

    /// [`Deadline::ends`] on tokio's clock, for `timeout_at` and `sleep_until`.
    pub(crate) fn tokio(&self) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.ends)
    }

    /// `grace` after the run's time ends: when a tier stops waiting for a report.
    pub(crate) fn after(&self, grace: Duration) -> Instant {
        later(self.ends, grace)
    }

    /// The time limit of a host call (a tool call, an HTTP request) starting now with its
    /// own `limit`: `limit` when it ends before the run does; `None` when the run's time
    /// ends first (the run then ends `timeout` naming what it waited for, rather than the
    /// call failing with no time left to handle it).
    pub(crate) fn call_timeout(&self, limit: Duration) -> Option<Duration> {
        (self.ends.saturating_duration_since(Instant::now()) > limit).then_some(limit)
    }
}

/// `at` + `by`, or a year after `at` when the sum is past what the clock holds (a time
/// limit of `Duration::MAX` means none).
fn later(at: Instant, by: Duration) -> Instant {
    const YEAR: Duration = Duration::from_secs(365 * 86_400);
    at.checked_add(by)
        .or_else(|| at.checked_add(YEAR))
        .unwrap_or(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_past_the_clock_ends_a_year_later_instead_of_overflowing() {
        let deadline = Deadline::starting_now(Duration::MAX);
        let left = deadline.ends() - deadline.started();
        assert_eq!(left, Duration::from_secs(365 * 86_400));
        assert_eq!(
            deadline.call_timeout(Duration::from_secs(5)),
            Some(Duration::from_secs(5))
        );
        assert!(deadline.after(Duration::MAX) >= deadline.ends());
    }

    #[test]
    fn a_call_that_would_outlast_the_run_gets_no_time_limit_of_its_own() {
        let deadline = Deadline::starting_now(Duration::from_millis(50));
        assert_eq!(deadline.call_timeout(Duration::from_secs(5)), None);
        assert_eq!(
            deadline.call_timeout(Duration::from_millis(1)),
            Some(Duration::from_millis(1))
        );
    }
}
