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
use std::sync::{Mutex, PoisonError};
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
    /// The cores this process may use (its cgroup's quota, if it has one).
    cores: f64,
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
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        SpareCore {
            cores: cores as f64,
            last: Mutex::new(None),
        }
    }

    /// Whether the process left at least half a core unused since the last sample (the
    /// last verdict, within a [`WINDOW`] of it; yes after a [`STALE`] one). Where the
    /// process's CPU time cannot be read, a core counts as spare, as it did before this
    /// check.
    pub(crate) fn now(&self) -> bool {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let at = Instant::now();
        if let Some(sample) = last.as_ref().filter(|s| at - s.at < WINDOW) {
            return sample.spare;
        }
        let Some(process) = cpu_time(ClockId::CLOCK_PROCESS_CPUTIME_ID) else {
            return true;
        };
        let helpers = helpers_cpu();
        let fresh = last.as_ref().filter(|s| at - s.at < STALE);
        let spare = fresh.is_none_or(|before| {
            let others = process
                .saturating_sub(before.process)
                .saturating_sub(helpers.saturating_sub(before.helpers));
            spare(self.cores, others, at - before.at)
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

    /// Held by each test that works as the helpers do or measures: the helpers' tally is
    /// the process's, so another test's helper work would count in its windows.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
        ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner)
    }

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
        let _alone = one_at_a_time();
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

    /// `spare_core`'s verdict while every core is busy (for 200 ms, in jobs of a
    /// millisecond, as the helpers' are: a job is counted when it ends), done `as_helpers`
    /// or not; asked every 50 ms (under [`STALE`]), as lone runs under load ask.
    fn verdict_while_busy(spare_core: &SpareCore, as_helpers: bool) -> bool {
        let spinners: Vec<_> = (0..spare_core.cores as usize)
            .map(|_| {
                std::thread::spawn(move || {
                    for _ in 0..200 {
                        let job = || spin(Duration::from_millis(1));
                        if as_helpers {
                            helper_work(job)
                        } else {
                            job()
                        }
                    }
                })
            })
            .collect();
        let every = Duration::from_millis(50);
        std::thread::sleep(every);
        spare_core.now();
        std::thread::sleep(every);
        let during = spare_core.now();
        spinners
            .into_iter()
            .for_each(|s| s.join().expect("the spinner"));
        during
    }

    #[test]
    fn a_process_that_keeps_every_core_busy_has_none_spare() {
        let _alone = one_at_a_time();
        let spare_core = SpareCore::new();
        assert!(spare_core.now(), "the first asker gets a spare core");
        assert!(
            !verdict_while_busy(&spare_core, false),
            "all cores were busy, yet one counted as spare"
        );
        spare_core.now();
        assert!(
            verdict_while_busy(&spare_core, true),
            "the helpers' own work left no core spare"
        );
    }

    #[test]
    fn after_a_stale_sample_a_core_is_spare_until_a_window_says_otherwise() {
        let _alone = one_at_a_time();
        let spare_core = SpareCore::new();
        spare_core.now();
        let spinners: Vec<_> = (0..spare_core.cores as usize)
            .map(|_| std::thread::spawn(|| spin(STALE * 3)))
            .collect();
        std::thread::sleep(STALE + WINDOW);
        let stale = spare_core.now();
        std::thread::sleep(WINDOW * 3);
        let fresh = spare_core.now();
        spinners
            .into_iter()
            .for_each(|s| s.join().expect("the spinner"));
        assert!(stale, "a verdict from a stale sample");
        assert!(!fresh, "every core was busy over the last window");
    }
}
