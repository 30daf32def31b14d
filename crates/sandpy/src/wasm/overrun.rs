//! Ending a run that outlived its time on code compiled without interruption checks
//! ([`Interruption::EndProcess`](crate::Interruption::EndProcess)): such a run cannot be
//! stopped inside the process, so a watchdog thread reports its `timeout` and the
//! configured function ends the process (the process's run folders removed first).

use crate::config::OnOverrun;
use crate::output::Capture;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long past its deadline a run may take to end by itself (a run waiting in a host
/// call, for a tool or a sleep, is stopped at its deadline by the run path's own timer).
const OVERRUN_GRACE: Duration = Duration::from_millis(20);

/// Watches one run; dropping it (the run ended) stands the watch down.
pub(crate) struct Watchdog {
    ended: Arc<(Mutex<bool>, Condvar)>,
}

impl Watchdog {
    /// Watch a run that started at `started` with the time limit `limit` and must end by
    /// `deadline`: at `deadline` + [`OVERRUN_GRACE`], `end` gets its `timeout` execution.
    /// An error when the thread cannot start (the run must not start either: nothing
    /// could stop it).
    pub(crate) fn start(
        started: Instant,
        deadline: Instant,
        limit: Duration,
        capture: Capture,
        end: OnOverrun,
        scratch_dir: PathBuf,
    ) -> std::io::Result<Watchdog> {
        let ended = Arc::new((Mutex::new(false), Condvar::new()));
        let watched = ended.clone();
        let fire_at = deadline + OVERRUN_GRACE;
        let spawned = std::thread::Builder::new()
            .name("sandpy-watchdog".into())
            .spawn(move || {
                let (lock, wake) = &*watched;
                let mut run_ended = lock.lock().unwrap_or_else(PoisonError::into_inner);
                while !*run_ended {
                    let now = Instant::now();
                    if now >= fire_at {
                        // Still holding the lock: the run's end waits for the process's.
                        let execution =
                            crate::verdict::overrun(capture.finish(), limit, started.elapsed());
                        // Exiting skips the sandbox's own clean-up of its run folders.
                        super::workspace::remove_own_folders(&scratch_dir);
                        end(execution);
                        std::process::abort();
                    }
                    run_ended = wake
                        .wait_timeout(run_ended, fire_at - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            });
        spawned?;
        Ok(Watchdog { ended })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let (lock, wake) = &*self.ended;
        *lock.lock().unwrap_or_else(PoisonError::into_inner) = true;
        wake.notify_one();
    }
}
