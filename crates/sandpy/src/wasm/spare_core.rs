//! Whether a core is spare for the work runs leave to helper threads.
//!
//! A run that is alone leaves its instance's reset to the disposal thread and has the next
//! instances made ahead (`disposal`, `made_ahead`): on a core that nothing else wants, that
//! work is off every run's path. Alone in the admission queue is not the same as a spare
//! core, though. Served over HTTP, a run is often alone while both cores are busy with the
//! requests around the runs (16 rmcp clients on two cores: a quarter of the runs were
//! alone), and the hand-over then costs more than it saves: the helpers' work competes with
//! the requests, on another core's caches, with a wake-up each. So the hand-over also needs
//! the process to have left at least half a core unused over the last window, not counting
//! the helpers' own work (every sandbox's: [`helper_work`]). Measured in
//! docs/dev/performance.md, "A spare core for the helpers".

use nix::time::{clock_gettime, ClockId};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// How long a verdict stands before the process's CPU time is read again (a read is one
/// system call; runs alone under load ask for one every few hundred microseconds).
const WINDOW: Duration = Duration::from_millis(10);

/// How old a sample may be for the time since to say how busy the cores are now: after a
/// longer span (no lone run asked), the span's average says little of the last moments,
/// and a core counts as spare until the next window says otherwise.
const STALE: Duration = Duration::from_millis(100);

/// The share of a core that must have been left unused for it to count as spare.
const SPARE_SHARE: f64 = 0.5;

/// The process's use of the cores, sampled at most once a [`WINDOW`].
pub(crate) struct SpareCore {
    /// The cores this process may use (its cgroup's quota, if it has one), read when the
    /// first sample is judged: a process that never hands work over (a one-shot `sandpy
    /// run`) reads nothing at start.
    cores: OnceLock<f64>,
    last: Mutex<Option<Sample>>,
}

/// CPU time (ns) the helper threads of every sandbox in the process spent on their work:
/// the process's CPU time less this is what left no core spare.
static HELPERS_CPU: AtomicU64 = AtomicU64::new(0);

/// The process's and the helpers' CPU time at one moment, and the verdict then.
struct Sample {
    at: Instant,
    process: Duration,
    helpers: Duration,
    spare: bool,
}

/// Do a helper thread's `work` on this thread, its CPU time counted as the helpers'.
pub(crate) fn helper_work<T>(work: impl FnOnce() -> T) -> T {
    let before = cpu_time(ClockId::CLOCK_THREAD_CPUTIME_ID);
    let done = work();
    if let (Some(before), Some(after)) = (before, cpu_time(ClockId::CLOCK_THREAD_CPUTIME_ID)) {
        let nanos = u64::try_from(after.saturating_sub(before).as_nanos()).unwrap_or(u64::MAX);
        HELPERS_CPU.fetch_add(nanos, Ordering::Relaxed);
    }
    done
}

/// All the helpers' CPU time so far.
fn helpers_cpu() -> Duration {
    Duration::from_nanos(HELPERS_CPU.load(Ordering::Relaxed))
}

impl SpareCore {
    /// Nothing sampled yet: the first asker gets a spare core.
    pub(crate) fn new() -> SpareCore {
        SpareCore {
            cores: OnceLock::new(),
            last: Mutex::new(None),
        }
    }

    /// The cores this process may use.
    fn cores(&self) -> f64 {
        *self
            .cores
            .get_or_init(|| std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64))
    }

    /// Whether the process left at least half a core unused since the last sample (the
    /// last verdict, within a [`WINDOW`] of it; yes after a [`STALE`] one). Where the
    /// process's CPU time cannot be read, a core counts as spare, as it did before this
    /// check.
    pub(crate) fn now(&self) -> bool {
        self.verdict(Instant::now(), || {
            Some((cpu_time(ClockId::CLOCK_PROCESS_CPUTIME_ID)?, helpers_cpu()))
        })
    }

    /// [`SpareCore::now`] at `at`, with `read` giving the process's and the helpers' CPU
    /// time then (asked only when a new sample is taken).
    fn verdict(&self, at: Instant, read: impl FnOnce() -> Option<(Duration, Duration)>) -> bool {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sample) = last.as_ref().filter(|s| at - s.at < WINDOW) {
            return sample.spare;
        }
        let Some((process, helpers)) = read() else {
            return true;
        };
        let fresh = last.as_ref().filter(|s| at - s.at < STALE);
        let spare = fresh.is_none_or(|before| {
            let others = process
                .saturating_sub(before.process)
                .saturating_sub(helpers.saturating_sub(before.helpers));
            spare(self.cores(), others, at - before.at)
        });
        *last = Some(Sample {
            at,
            process,
            helpers,
            spare,
        });
        spare
    }
}

/// Whether `busy` CPU time over `wall` left at least [`SPARE_SHARE`] of one of `cores`
/// cores unused.
fn spare(cores: f64, busy: Duration, wall: Duration) -> bool {
    let used = busy.as_secs_f64() / wall.as_secs_f64().max(f64::MIN_POSITIVE);
    cores - used >= SPARE_SHARE
}

/// The CPU time `clock` has counted: this process's or this thread's, to the nanosecond
/// (`getrusage` leaves out what a running thread used since its last tick, ~4 ms).
fn cpu_time(clock: ClockId) -> Option<Duration> {
    let time = clock_gettime(clock).ok()?;
    let seconds = u64::try_from(time.tv_sec()).ok()?;
    let nanos = u32::try_from(time.tv_nsec()).ok()?;
    Some(Duration::new(seconds, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_a_core_left_unused_is_spare_and_less_is_not() {
        let second = Duration::from_secs(1);
        assert!(spare(2.0, Duration::from_millis(1_000), second));
        assert!(spare(2.0, Duration::from_millis(1_500), second));
        assert!(!spare(2.0, Duration::from_millis(1_600), second));
        assert!(!spare(1.0, Duration::from_millis(600), second));
        assert!(spare(1.0, Duration::ZERO, second));
        // No time passed: nothing was used.
        assert!(spare(2.0, Duration::ZERO, Duration::ZERO));
    }

    #[test]
    fn a_helpers_work_is_counted() {
        // Other tests' helper work may be added meanwhile: a lower bound holds.
        let before = helpers_cpu();
        helper_work(|| spin(Duration::from_millis(30)));
        let counted = helpers_cpu() - before;
        assert!(counted >= Duration::from_millis(30), "{counted:?}");
    }

    /// Keep this thread busy for `cpu` of its own CPU time (not wall time: a loaded machine
    /// stretches the wall time, not the work).
    fn spin(cpu: Duration) {
        let started = cpu_time(ClockId::CLOCK_THREAD_CPUTIME_ID).expect("this thread's CPU time");
        while cpu_time(ClockId::CLOCK_THREAD_CPUTIME_ID).expect("again") - started < cpu {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn the_process_clock_counts_every_threads_work() {
        let before = cpu_time(ClockId::CLOCK_PROCESS_CPUTIME_ID).expect("the process's CPU time");
        std::thread::spawn(|| spin(Duration::from_millis(30)))
            .join()
            .expect("the spinner");
        let after = cpu_time(ClockId::CLOCK_PROCESS_CPUTIME_ID).expect("again");
        assert!(
            after - before >= Duration::from_millis(30),
            "{:?}",
            after - before
        );
    }

    /// A sandbox's measure on a machine of two cores, nothing sampled yet.
    fn two_cores() -> SpareCore {
        SpareCore {
            cores: OnceLock::from(2.0),
            last: Mutex::new(None),
        }
    }

    /// A verdict at `ms` after `start`, the process and the helpers having used
    /// `process_ms` and `helpers_ms` of CPU time by then.
    fn at(
        spare_core: &SpareCore,
        start: Instant,
        ms: u64,
        process_ms: u64,
        helpers_ms: u64,
    ) -> bool {
        let read = (
            Duration::from_millis(process_ms),
            Duration::from_millis(helpers_ms),
        );
        spare_core.verdict(start + Duration::from_millis(ms), || Some(read))
    }

    #[test]
    fn every_core_busy_leaves_none_spare_and_the_helpers_work_does_not_count() {
        let spare_core = two_cores();
        let start = Instant::now();
        assert!(
            at(&spare_core, start, 0, 0, 0),
            "the first asker gets a spare core"
        );
        // 20 ms of two cores' work in 20 ms.
        assert!(!at(&spare_core, start, 20, 40, 0));
        // Within a window of that sample: its verdict, no new reading.
        assert!(!spare_core.verdict(start + Duration::from_millis(25), || unreachable!()));
        // The same work again, 18 ms of it the helpers': 0.9 of a core left.
        assert!(at(&spare_core, start, 40, 80, 18));
        // One core's work: one left.
        assert!(at(&spare_core, start, 60, 100, 18));
        // 1.6 cores' work: 0.4 left, less than half a core.
        assert!(!at(&spare_core, start, 80, 132, 18));
    }

    #[test]
    fn a_stale_sample_leaves_a_core_spare_until_a_window_says_otherwise() {
        let spare_core = two_cores();
        let start = Instant::now();
        at(&spare_core, start, 0, 0, 0);
        // Every core busy for the 200 ms since: too long ago to say how busy they are now.
        assert!(at(&spare_core, start, 200, 400, 0));
        // The next window says it.
        assert!(!at(&spare_core, start, 220, 440, 0));
    }

    #[test]
    fn a_process_clock_that_cannot_be_read_leaves_a_core_spare() {
        let spare_core = two_cores();
        assert!(spare_core.verdict(Instant::now(), || None));
    }
}
