//! Instances made ahead for the next fresh runs or new sessions, off the runs' path.
//!
//! Instantiating the guest (its ten linked core modules, their imports and the ~5,700
//! functions they put in the shared table) was a third or more of a lone fresh
//! `print('hello')` in the pool (docs/dev/performance.md, "Instances made ahead"). After a
//! run that was alone answered (no other executes or waits) while a core was spare
//! (`spare_core`), this thread makes instances until `depth` wait (fresh runs: one per run
//! that may execute at once, at most [`MAX_DEPTH`]; sessions: one), and the next runs of
//! the same [`InstanceShape`] take them instead of instantiating. Made after an answer,
//! one at a time, never inside a run's time. Sessions have their own, on their engine
//! without the pool: made after a session's first run (the one that made its instance),
//! taken by the next sessions' first runs.
//!
//! An instance made ahead is a fresh instance like any other: made from the snapshot (in a
//! pool slot that was reset when its last instance was dropped, or in memory of its own),
//! with folders handed out only once checked empty. It holds no run's settings: the taking
//! run puts its own tools, output cap and time into its store before the guest is first
//! called, and what is fixed when an instance is made (memory cap, disk quotas, stdin,
//! mounts) is its [`InstanceShape`], which must match. Each one waiting holds one pool
//! slot beyond the runs' (fresh runs' are made only when the pool has `depth` more slots
//! than runs may execute at once) and one run folder; what that costs is in
//! docs/dev/performance.md, "Instances made ahead".

use super::guest::{Guest, InstanceFor};
use super::helper_thread::HelperThread;
use super::runtime::Runtime;
use super::workspace::RunFolders;
use crate::access::Access;
use crate::plan::Deadline;
use crate::{Limits, RunOptions};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// The most instances made ahead that wait for fresh runs, whatever the runs at once:
/// each holds a pool slot and its pages (see the module's doc).
pub(crate) const MAX_DEPTH: usize = 4;

/// What an instance is made with that a run cannot change afterwards: its memory cap
/// and disk quotas. Runs with stdin or mounts have none (their instance is their own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InstanceShape {
    memory_bytes: usize,
    disk_bytes: u64,
    output_files_bytes: u64,
}

impl InstanceShape {
    /// The shape of an instance with `memory_cap` for a run with `options` under
    /// `limits`; `None` when the run brings stdin or mounts.
    pub(crate) fn of(
        options: &RunOptions,
        limits: &Limits,
        memory_cap: usize,
    ) -> Option<InstanceShape> {
        (options.stdin.is_none() && options.mounts.is_empty()).then_some(InstanceShape {
            memory_bytes: memory_cap,
            disk_bytes: limits.disk_bytes,
            output_files_bytes: limits.output_files_bytes,
        })
    }

    /// Limits with this shape (the rest is the taking run's, set when it takes the
    /// instance).
    fn limits(self) -> Limits {
        Limits {
            memory_bytes: self.memory_bytes,
            disk_bytes: self.disk_bytes,
            output_files_bytes: self.output_files_bytes,
            ..Limits::default()
        }
    }
}

/// Instances made ahead (at most `depth`, all of one shape) and the thread that makes
/// them, started by the first request. One per engine: fresh runs' (pooled) and
/// sessions' (not pooled).
pub(crate) struct MadeAhead {
    /// The thread's name.
    name: &'static str,
    folders: Arc<RunFolders>,
    ready: Arc<Ready>,
    thread: OnceLock<Option<HelperThread<Request>>>,
    taken: AtomicU64,
}

/// The instances made ahead and waiting for a run: at most `depth`, all of one shape.
struct Ready {
    depth: usize,
    waiting: Mutex<Vec<(InstanceShape, Guest)>>,
}

impl Ready {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(InstanceShape, Guest)>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many of `shape` wait.
    fn count(&self, shape: InstanceShape) -> usize {
        let waiting = self.lock();
        match waiting.first() {
            Some((made_for, _)) if *made_for == shape => waiting.len(),
            _ => 0,
        }
    }

    /// Keep `guest` of `shape`, unless `depth` wait already. Those of another shape are
    /// dropped (their runs' settings changed), after the lock is released, as is one
    /// not kept.
    fn keep(&self, shape: InstanceShape, guest: Guest) {
        let mut dropped = Vec::new();
        {
            let mut waiting = self.lock();
            if waiting
                .first()
                .is_some_and(|(made_for, _)| *made_for != shape)
            {
                dropped = std::mem::take(&mut *waiting);
            }
            if waiting.len() < self.depth {
                waiting.push((shape, guest));
            } else {
                dropped.push((shape, guest));
            }
        }
        drop(dropped);
    }
}

/// What the thread needs to make instances ahead: the runtime and the shape.
struct Request {
    runtime: Arc<Runtime>,
    shape: InstanceShape,
}

impl MadeAhead {
    /// None made yet; up to `depth` are made (at least one), taking their folders from
    /// `folders`, on a thread called `name`.
    pub(crate) fn new(name: &'static str, folders: Arc<RunFolders>, depth: usize) -> MadeAhead {
        MadeAhead {
            name,
            folders,
            ready: Arc::new(Ready {
                depth: depth.max(1),
                waiting: Mutex::new(Vec::new()),
            }),
            thread: OnceLock::new(),
            taken: AtomicU64::new(0),
        }
    }

    /// An instance made ahead, when they have `shape`. Those of another shape are dropped
    /// here (a run's settings changed: their slots go back to the pool before the run
    /// makes its own).
    pub(crate) fn take(&self, shape: InstanceShape) -> Option<Guest> {
        let mut waiting = self.ready.lock();
        match waiting.last() {
            Some((made_for, _)) if *made_for == shape => {
                let (_, guest) = waiting.pop()?;
                drop(waiting);
                self.taken.fetch_add(1, Ordering::Relaxed);
                Some(guest)
            }
            Some(_) => {
                let other = std::mem::take(&mut *waiting);
                drop(waiting);
                drop(other);
                None
            }
            None => None,
        }
    }

    /// Have instances of `shape` made on the thread until `depth` wait (next, when it is
    /// making some).
    pub(crate) fn request(&self, runtime: &Arc<Runtime>, shape: InstanceShape) {
        let Some(thread) = self
            .thread
            .get_or_init(|| start(self.name, self.folders.clone(), self.ready.clone()))
        else {
            return;
        };
        let request = Request {
            runtime: runtime.clone(),
            shape,
        };
        // Dropped when one is already waiting to be served.
        let _ = thread.try_send(request);
    }

    /// How many runs took an instance made ahead.
    pub(crate) fn taken(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }

    /// How many instances made ahead wait now (never more than the depth it was made with).
    pub(crate) fn waiting(&self) -> usize {
        self.ready.lock().len()
    }
}

/// The thread `name` that makes instances into `ready`, with folders from `folders`.
fn start(
    name: &'static str,
    folders: Arc<RunFolders>,
    ready: Arc<Ready>,
) -> Option<HelperThread<Request>> {
    // Room for one request: the first is sent before the thread waits for it, and one made
    // while the thread is busy is the next to serve, not lost.
    HelperThread::start(name, 1, move |receiver| {
        // Instantiation is async (epoch ticks yield); this thread's own executor.
        let executor = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(executor) => executor,
            Err(e) => {
                tracing::warn!(
                    "cannot start the thread that makes instances ahead's executor: {e}"
                );
                return;
            }
        };
        for Request { runtime, shape } in receiver {
            // One at a time, counted again after each: runs take them meanwhile.
            while ready.count(shape) < ready.depth {
                match super::spare_core::helper_work(|| make(&executor, &folders, &runtime, shape))
                {
                    Some(guest) => ready.keep(shape, guest),
                    None => break,
                }
            }
        }
    })
    .inspect_err(|e| {
        tracing::warn!(
            "cannot start the thread that makes instances ahead; runs make their own: {e}"
        )
    })
    .ok()
}

/// An instance of `shape`, instantiated; `None` when it cannot be made now (the pool may
/// be out of slots: the next run makes its own).
fn make(
    executor: &tokio::runtime::Runtime,
    folders: &Arc<RunFolders>,
    runtime: &Runtime,
    shape: InstanceShape,
) -> Option<Guest> {
    let limits = shape.limits();
    // Tool access that grants nothing: the taking run puts in its own.
    let deadline = Deadline::starting_now(limits.timeout);
    let no_tools = match Access::for_run(&RunOptions::default(), &limits, deadline) {
        Ok(no_tools) => no_tools,
        Err(refused) => {
            tracing::debug!("no spare instance: {}", refused.message());
            return None;
        }
    };
    let options = RunOptions::default();
    let made = Guest::new(
        runtime,
        folders,
        &limits,
        &options,
        InstanceFor::Ahead,
        no_tools,
    );
    let mut guest = match made {
        Ok(guest) => guest,
        Err(refused) => {
            tracing::debug!("no spare instance: {}", refused.message());
            return None;
        }
    };
    if let Err(e) = executor.block_on(guest.instantiate(runtime)) {
        tracing::debug!("no spare instance: {e:#}");
        return None;
    }
    Some(guest)
}

impl Drop for MadeAhead {
    /// Stop the thread, then drop the spares: their folders go back before the sandbox's
    /// folders are removed.
    fn drop(&mut self) {
        drop(self.thread.take());
        drop(std::mem::take(&mut *self.ready.lock()));
    }
}
