//! Finished instances dropped off the run's thread, after the run answered.
//!
//! Dropping a fresh run's instance is about a fifth of the run's work: the pool scans the
//! slot's page tables for the pages the run dirtied (the `PAGEMAP_SCAN` ioctl) and copies
//! the snapshot back over them, and the run's folders are checked before they are kept.
//! None of it decides the run's result, so a run that is alone (no other executes or
//! waits) while a core is spare (`spare_core`) leaves it to this thread and answers at
//! once. The slot and the folders go back to the pool only once reset, so no run sees
//! another's memory or files.
//!
//! An instance is handed over with its run's admission slot, released once it is reset:
//! runs and instances in disposal together never hold more pool slots than runs may
//! execute at once. It is handed over only when the thread is idle (a rendezvous), so
//! nothing piles up when the thread is slow.

use super::helper_thread::HelperThread;
use super::Guest;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::TrySendError;
use std::sync::{Arc, OnceLock};
use tokio::sync::OwnedSemaphorePermit;

/// A thread that drops finished instances, started by the first one handed to it (`None`
/// inside when it could not start: runs then drop their own). Dropped, it waits for the
/// instance in disposal: its folder is removed before the sandbox's.
pub(crate) struct Disposal {
    thread: OnceLock<Option<HelperThread<Finished>>>,
    /// Admission slots held by the thread (0 or 1): runs that are alone but for an
    /// instance in disposal count as alone ([`Disposal::holding`]).
    holding: Arc<AtomicUsize>,
}

/// An instance and the admission slot its run held.
type Finished = (Guest, OwnedSemaphorePermit);

impl Disposal {
    /// No thread yet.
    pub(crate) fn new() -> Disposal {
        Disposal {
            thread: OnceLock::new(),
            holding: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// How many admission slots the thread holds now (0 or 1): a slot it holds is not
    /// another run's, which would share the cores.
    pub(crate) fn holding(&self) -> usize {
        self.holding.load(Ordering::SeqCst)
    }

    /// Drop `guest`, then release its run's admission `slot`: on the disposal thread if it
    /// is idle, else here.
    pub(crate) fn dispose(&self, guest: Guest, slot: OwnedSemaphorePermit) {
        let finished = (guest, slot);
        let Some(thread) = self.thread.get_or_init(|| start(self.holding.clone())) else {
            return release(finished);
        };
        // Counted before the send: the thread may release it before `try_send` returns.
        self.holding.fetch_add(1, Ordering::SeqCst);
        match thread.try_send(finished) {
            Ok(()) => {}
            Err(TrySendError::Full(finished) | TrySendError::Disconnected(finished)) => {
                self.holding.fetch_sub(1, Ordering::SeqCst);
                release(finished)
            }
        }
    }
}

fn start(holding: Arc<AtomicUsize>) -> Option<HelperThread<Finished>> {
    // Capacity 0: a send succeeds only while the thread waits for one.
    HelperThread::start("sandpy-disposal", 0, move |receiver| {
        for finished in receiver {
            super::spare_core::helper_work(|| release(finished));
            holding.fetch_sub(1, Ordering::SeqCst);
        }
    })
    .inspect_err(|e| {
        tracing::warn!("cannot start the instance disposal thread; runs drop their own: {e}")
    })
    .ok()
}

/// The instance reset and its slot back in the pool first, then the run's admission slot.
fn release((guest, slot): Finished) {
    drop(guest);
    drop(slot);
}
