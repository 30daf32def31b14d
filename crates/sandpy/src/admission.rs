//! Backpressure: at most N runs execute at once, at most M wait, and the rest are turned
//! away at once with `busy` instead of piling up. Waiting is first come, first served.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub(crate) struct Admission {
    running: Arc<Semaphore>,
    max_running: usize,
    waiting: AtomicUsize,
    max_waiting: usize,
}

/// Why a run was not admitted.
pub(crate) enum Busy {
    /// The queue was full.
    QueueFull(usize),
    /// No slot freed up within the run's own timeout.
    WaitedTooLong(Duration),
}

impl Admission {
    pub(crate) fn new(max_running: usize, max_waiting: usize) -> Admission {
        let max_running = max_running.max(1);
        Admission {
            running: Arc::new(Semaphore::new(max_running)),
            max_running,
            waiting: AtomicUsize::new(0),
            max_waiting,
        }
    }

    /// Whether the run holding a slot is the only one: no other executes or waits. The
    /// `set_aside` slots are held by no run (an instance being reset holds its run's).
    pub(crate) fn alone(&self, set_aside: usize) -> bool {
        self.running.available_permits() + 1 + set_aside == self.max_running
            && self.waiting.load(Ordering::SeqCst) == 0
    }

    /// A slot to run in: at once, after waiting in line (at most `patience`), or refused.
    pub(crate) async fn enter(&self, patience: Duration) -> Result<OwnedSemaphorePermit, Busy> {
        if let Ok(permit) = self.running.clone().try_acquire_owned() {
            return Ok(permit);
        }
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.max_waiting {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(Busy::QueueFull(self.max_waiting));
        }
        let acquired = tokio::time::timeout(patience, self.running.clone().acquire_owned()).await;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        match acquired {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) | Err(_) => Err(Busy::WaitedTooLong(patience)),
        }
    }
}

impl Busy {
    pub(crate) fn message(&self) -> String {
        match self {
            Busy::QueueFull(max) => format!("sandpy is busy: every run slot is taken and {max} runs are already waiting; retry later"),
            Busy::WaitedTooLong(waited) => {
                format!("sandpy is busy: no run slot freed up within the run's {} ms timeout; retry later", waited.as_millis())
            }
        }
    }
}
