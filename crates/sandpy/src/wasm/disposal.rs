//! Finished instances dropped off the run's thread, after the run answered.
//!
//! Dropping a fresh run's instance is about a fifth of the run's work: the pool scans the
//! slot's page tables for the pages the run dirtied (the `PAGEMAP_SCAN` ioctl) and copies
//! the snapshot back over them, and the run's folders are checked before they are kept.
//! None of it decides the run's result, so a run that is alone (no other executes or
//! waits: a core is free) leaves it to this thread and answers at once. The slot and the
//! folders go back to the pool only once reset, so no run sees another's memory or files.
//!
//! An instance is handed over with its run's admission slot, released once it is reset:
//! runs and instances in disposal together never hold more pool slots than runs may
//! execute at once. It is handed over only when the thread is idle (a rendezvous), so
//! nothing piles up when the thread is slow.

use super::Guest;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::OnceLock;
use std::thread::JoinHandle;
use tokio::sync::OwnedSemaphorePermit;

/// A thread that drops finished instances, started by the first one handed to it (`None`
/// inside when it could not start: runs then drop their own).
pub(crate) struct Disposal {
    thread: OnceLock<Option<Thread>>,
}

/// An instance and the admission slot its run held.
type Finished = (Guest, OwnedSemaphorePermit);

struct Thread {
    sender: SyncSender<Finished>,
    handle: JoinHandle<()>,
}

impl Disposal {
    /// No thread yet.
    pub(crate) fn new() -> Disposal {
        Disposal {
            thread: OnceLock::new(),
        }
    }

    /// Drop `guest`, then release its run's admission `slot`: on the disposal thread if it
    /// is idle, else here.
    pub(crate) fn dispose(&self, guest: Guest, slot: OwnedSemaphorePermit) {
        let finished = (guest, slot);
        let Some(thread) = self.thread.get_or_init(Thread::start) else {
            return release(finished);
        };
        match thread.sender.try_send(finished) {
            Ok(()) => {}
            Err(TrySendError::Full(finished) | TrySendError::Disconnected(finished)) => {
                release(finished)
            }
        }
    }
}

impl Thread {
    fn start() -> Option<Thread> {
        // Capacity 0: a send succeeds only while the thread waits for one.
        let (sender, receiver) = sync_channel::<Finished>(0);
        let spawned = std::thread::Builder::new()
            .name("sandpy-disposal".into())
            .spawn(move || receiver.into_iter().for_each(release));
        match spawned {
            Ok(handle) => Some(Thread { sender, handle }),
            Err(e) => {
                tracing::warn!(
                    "cannot start the instance disposal thread; runs drop their own: {e}"
                );
                None
            }
        }
    }
}

/// The instance reset and its slot back in the pool first, then the run's admission slot.
fn release((guest, slot): Finished) {
    drop(guest);
    drop(slot);
}

impl Drop for Disposal {
    /// Wait for the instance in disposal: its folder is removed before the sandbox's.
    fn drop(&mut self) {
        if let Some(Thread { sender, handle }) = self.thread.take().flatten() {
            drop(sender);
            if handle.join().is_err() {
                tracing::warn!("the instance disposal thread panicked");
            }
        }
    }
}
