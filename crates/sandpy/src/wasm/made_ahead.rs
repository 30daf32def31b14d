//! An instance made ahead for the next fresh run or new session, off the run's path.
//!
//! Instantiating the guest (its ten linked core modules, their imports and the ~5,700
//! functions they put in the shared table) was a third or more of a lone fresh
//! `print('hello')` in the pool (docs/dev/performance.md, "Instances made ahead"). After
//! a run that was alone answered (no other executes or waits: a core is free, the same
//! condition under which its instance goes to [`Disposal`](super::Disposal)), this
//! thread makes the next run's instance, and the next run of the same [`InstanceShape`] takes it
//! instead of instantiating. Made after the answer, not during the run: a run never
//! shares the machine with it. Sessions have their own, on their engine without the
//! pool: made after a session's first run (the one that made its instance), taken by
//! the next session's first run.
//!
//! An instance made ahead is a fresh instance like any other: made from the snapshot (in a pool slot
//! that was reset when its last instance was dropped, or in memory of its own), with
//! folders handed out only once checked empty. It holds no run's settings: the taking
//! run puts its own tools, output cap and time into its store before the guest is first
//! called, and what is fixed when an instance is made (memory cap, disk quotas, stdin,
//! mounts) is its [`InstanceShape`], which must match. The one made ahead for fresh runs holds one pool slot
//! beyond the runs' (made only when the pool has one more slot than runs may execute at
//! once); each holds one run folder.

use super::guest::{Guest, InstanceFor};
use super::helper_thread::HelperThread;
use super::runtime::Runtime;
use super::workspace::RunFolders;
use crate::access::Access;
use crate::plan::Deadline;
use crate::{Limits, RunOptions};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

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

/// The instance made ahead (at most one) and the thread that makes it, started by the
/// first request. One per engine: fresh runs' (pooled) and sessions' (not pooled).
pub(crate) struct MadeAhead {
    /// The thread's name.
    name: &'static str,
    folders: Arc<RunFolders>,
    ready: Arc<Mutex<Option<(InstanceShape, Guest)>>>,
    thread: OnceLock<Option<HelperThread<Request>>>,
    taken: AtomicU64,
}

/// What the thread needs to make an instance ahead: the runtime and the shape.
struct Request {
    runtime: Arc<Runtime>,
    shape: InstanceShape,
}

impl MadeAhead {
    /// None made yet; made_ahead take their folders from `folders`, on a thread called `name`.
    pub(crate) fn new(name: &'static str, folders: Arc<RunFolders>) -> MadeAhead {
        MadeAhead {
            name,
            folders,
            ready: Arc::new(Mutex::new(None)),
            thread: OnceLock::new(),
            taken: AtomicU64::new(0),
        }
    }

    /// The instance made ahead, when it has `shape`. One of another shape is dropped here (a run's
    /// settings changed: its slot goes back to the pool before the run makes its own).
    pub(crate) fn take(&self, shape: InstanceShape) -> Option<Guest> {
        let (made_for, guest) = self.lock().take()?;
        if made_for != shape {
            drop(guest);
            return None;
        }
        self.taken.fetch_add(1, Ordering::Relaxed);
        Some(guest)
    }

    /// Have an instance of `shape` made on the thread (next, when it is making one).
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

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(InstanceShape, Guest)>> {
        self.ready.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The thread `name` that makes made_ahead into `ready`, with folders from `folders`.
fn start(
    name: &'static str,
    folders: Arc<RunFolders>,
    ready: Arc<Mutex<Option<(InstanceShape, Guest)>>>,
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
        for request in receiver {
            make(&executor, &folders, &ready, request);
        }
    })
    .inspect_err(|e| {
        tracing::warn!(
            "cannot start the thread that makes instances ahead; runs make their own: {e}"
        )
    })
    .ok()
}

/// Make an instance of the request's shape and keep it, unless one of that shape is ready.
fn make(
    executor: &tokio::runtime::Runtime,
    folders: &Arc<RunFolders>,
    ready: &Mutex<Option<(InstanceShape, Guest)>>,
    Request { runtime, shape }: Request,
) {
    let lock = || ready.lock().unwrap_or_else(PoisonError::into_inner);
    if lock()
        .as_ref()
        .is_some_and(|(made_for, _)| *made_for == shape)
    {
        return;
    }
    let limits = shape.limits();
    // Tool access that grants nothing: the taking run puts in its own.
    let deadline = Deadline::starting_now(limits.timeout);
    let no_tools = match Access::for_run(&RunOptions::default(), &limits, deadline) {
        Ok(no_tools) => no_tools,
        Err(refused) => {
            tracing::debug!("no spare instance: {}", refused.message());
            return;
        }
    };
    let options = RunOptions::default();
    let made = Guest::new(
        &runtime,
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
            return;
        }
    };
    if let Err(e) = executor.block_on(guest.instantiate(&runtime)) {
        // The pool may be out of slots while every run executes: the next run makes its own.
        tracing::debug!("no spare instance: {e:#}");
        return;
    }
    let replaced = lock().replace((shape, guest));
    drop(replaced);
}

impl Drop for MadeAhead {
    /// Stop the thread, then drop the spare: its folder goes back before the sandbox's
    /// folders are removed.
    fn drop(&mut self) {
        drop(self.thread.take());
        drop(self.lock().take());
    }
}
