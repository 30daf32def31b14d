//! The WebAssembly tier: CPython compiled to a WebAssembly component, a fresh wasmtime
//! instance per run (or one kept by a session). The boundary is the component's imports:
//! WASI with no network, the run's folders under host-enforced quotas, and the tool
//! imports, which forward to the shared [`ToolAccess`](crate::access::ToolAccess).
//!
//! - `runtime`: the engine, the compiled component (cached `.cwasm`), the epoch ticker.
//! - `guest`: one run's instance and store, called under its limits, and its verdict.
//! - `host`: the store's state (WASI context, memory limiter, quotas, tools).
//! - `workspace`, `quota`, `disk`: the run's folders, their quotas, and the filesystem
//!   functions shadowed to charge them.
//! - `overrun`: the watchdog that ends a process whose code has no interruption checks.
//! - `disposal`: finished instances dropped (their memory reset) off the run's thread.
//! - `made_ahead`: the next runs' instances made ahead, off the runs' threads.
//! - `helper_thread`: the named, channel-fed thread each of those two runs on.
//! - `spare_core`: whether a core is spare for those two threads' work.

mod disk;
mod disposal;
mod guest;
mod helper_thread;
mod host;
mod made_ahead;
mod overrun;
mod quota;
mod runtime;
mod spare_core;
mod workspace;

pub(crate) use disposal::Disposal;
pub(crate) use guest::{Guest, InstanceFor, SessionInstance};
pub(crate) use made_ahead::{InstanceShape, MadeAhead, MAX_DEPTH};
pub(crate) use runtime::Runtime;
pub(crate) use spare_core::SpareCore;
pub(crate) use workspace::{remove_own_folders, sweep_stale, RunFolders};
