//! Process-wide settings of a [`Sandbox`](crate::Sandbox).

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Called with a human-readable message before slow steps.
pub type Progress = Arc<dyn Fn(&str) + Send + Sync>;

/// How a run that outlives its time limit is stopped (see [`Config::interruption`]).
#[derive(Clone, Default)]
pub enum Interruption {
    /// Checks compiled into the guest's code (wasmtime's epoch interruption; on x86-64
    /// Linux each is one load of a page made inaccessible when an epoch ends, see
    /// `vendor/README.md`) let the host stop any run and go on. What a library, a server
    /// or a batch needs.
    #[default]
    Checks,
    /// No checks in the compiled code: CPU-bound code runs a few percent faster (about a
    /// fifth where the checks are comparisons, not x86-64 Linux), but a
    /// busy run cannot be stopped inside the process. When a run is still going 20 ms
    /// after its time limit, this function gets its `timeout` [`Execution`](crate::Execution)
    /// (what it printed so far; its memory peak and tool calls are not known outside it,
    /// so they are 0) and must end the process; if it returns, the process aborts. For a
    /// process that makes one run (the CLI's `sandpy run`). The compiled code is cached
    /// apart from the checked one.
    EndProcess(OnOverrun),
}

/// Reports a run that outlived its time limit under [`Interruption::EndProcess`], then
/// ends the process.
pub type OnOverrun = Arc<dyn Fn(crate::Execution) + Send + Sync>;

impl Interruption {
    /// True for [`Interruption::Checks`].
    pub fn has_checks(&self) -> bool {
        matches!(self, Interruption::Checks)
    }
}

/// A guest component: the WebAssembly component CPython runs in, and what `sandpy build`
/// ([`crate::packages::build_runtime`]) needs to make others like it. The `sandpy-guest`
/// crate holds the built-in one (`sandpy_guest::GUEST`); this crate embeds none, so that it
/// compiles while that one is made. Given in [`Config::guest`].
#[derive(Clone, Copy)]
pub struct Guest {
    /// The component's bytes.
    pub component: &'static [u8],
    /// Its SHA-256, in hex: names its compiled form in the cache and in session snapshots.
    pub sha256: &'static str,
    /// The C stack it was built with (linear memory CPython recurses in); each run's
    /// WebAssembly stack is sized from it. Runtimes `sandpy build` makes have it too.
    pub c_stack_bytes: usize,
    /// Its sources by path relative to `guest/`, for `sandpy build` to make a component
    /// with more packages on a machine without sandpy's repository.
    pub sources: &'static [(&'static str, &'static [u8])],
    /// Makes a component the way this one was made: the sources written to the first
    /// folder and the packages in the second, pre-initialised into the file named third.
    pub componentize: Componentize,
}

/// [`Guest::componentize`]: `(sources, site, output)`.
pub type Componentize = fn(&Path, &Path, &Path) -> Result<(), crate::Cause>;

impl std::fmt::Debug for Guest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guest")
            .field("component_bytes", &self.component.len())
            .field("sha256", &self.sha256)
            .field("c_stack_bytes", &self.c_stack_bytes)
            .field("sources", &self.sources.len())
            .finish()
    }
}

/// How to set up the runtime. Defaults: the compiled-code cache lives in
/// `$SANDPY_CACHE_DIR`, else the user's cache folder (`~/.cache/sandpy` on Linux); no
/// progress messages; a pool of 256 reusable instance slots; as many runs at once as the
/// machine has cores, and up to 256 more waiting in line (then `busy`).
#[derive(Clone)]
pub struct Config {
    /// Where the compiled runtime (`.cwasm`) is cached.
    pub cache_dir: Option<PathBuf>,
    /// Called with a human-readable message before slow steps (compiling the runtime).
    pub progress: Option<Progress>,
    /// Instance slots of wasmtime's pooling allocator for fresh runs (also the most runs
    /// executing at once). Sessions never use it. `None` allocates each instance afresh
    /// (about half the runs per second on a single core, far fewer on several).
    pub pooled_instances: Option<u32>,
    /// Runs executing at once; `None` means the number of cores.
    pub max_concurrent_runs: Option<usize>,
    /// Runs waiting for a slot; one more ends at once with status `busy`.
    pub max_queued_runs: usize,
    /// Where each run's scratch and output folders are made (and removed); `None`
    /// means `$SANDPY_SCRATCH_DIR`, else `sandpy` in the system's temporary folder.
    pub scratch_dir: Option<PathBuf>,
    /// The guest component that WebAssembly runs execute in: where the runtime is chosen.
    /// Front ends give the built-in one, `sandpy_guest::GUEST`; without one, setting up a
    /// [`Sandbox`](crate::Sandbox) or building a runtime fails with [`Error::NoGuest`](crate::Error::NoGuest).
    pub guest: Option<Guest>,
    /// A runtime component built by `sandpy build` from [`Config::guest`] (e.g. with extra
    /// packages, and its C stack) to run instead of it; `None` means `$SANDPY_RUNTIME`,
    /// else the guest itself.
    pub runtime: Option<PathBuf>,
    /// How a run past its time limit is stopped: [`Interruption::Checks`] (the default)
    /// or, for a process that makes one run, by ending the process.
    pub interruption: Interruption,
    /// The native tier's Python and packages, for runs that ask for it
    /// ([`crate::Tier::Native`]); `None` means the defaults of
    /// [`NativeConfig`](crate::native::NativeConfig).
    pub native: Option<crate::native::NativeConfig>,
    /// For a process that exits after its run (the CLI's one-shot commands): each fresh
    /// run's instance (its memory, WASI state and folders) is kept, not torn down, until
    /// the `Sandbox` is dropped, or goes with the process after
    /// [`Sandbox::release_at_exit`](crate::Sandbox::release_at_exit). Tearing it down took
    /// about 3% of a one-shot `sandpy run` (docs/dev/performance.md). Memory grows with every
    /// run: not for a process that makes many.
    pub leave_instances_to_exit: bool,
    /// Load the WebAssembly runtime at the first WebAssembly run, not in
    /// [`Sandbox::new`](crate::Sandbox::new): a process that runs only the native tier
    /// (`sandpy run --tier native`) then never loads, or on a cold cache compiles, it.
    /// A runtime that cannot be loaded is then that run's `internal_error`.
    pub runtime_on_first_use: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cache_dir: None,
            progress: None,
            pooled_instances: Some(256),
            max_concurrent_runs: None,
            max_queued_runs: 256,
            scratch_dir: None,
            guest: None,
            runtime: None,
            interruption: Interruption::Checks,
            native: None,
            leave_instances_to_exit: false,
            runtime_on_first_use: false,
        }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("cache_dir", &self.cache_dir)
            .field("progress", &self.progress.is_some())
            .field("pooled_instances", &self.pooled_instances)
            .field("max_concurrent_runs", &self.max_concurrent_runs)
            .field("max_queued_runs", &self.max_queued_runs)
            .field("scratch_dir", &self.scratch_dir)
            .field("guest", &self.guest)
            .field("runtime", &self.runtime)
            .field("interruption_checks", &self.interruption.has_checks())
            .field("leave_instances_to_exit", &self.leave_instances_to_exit)
            .field("runtime_on_first_use", &self.runtime_on_first_use)
            .finish()
    }
}

impl Config {
    /// The cache folder in use.
    pub fn resolved_cache_dir(&self) -> PathBuf {
        if let Some(dir) = &self.cache_dir {
            return dir.clone();
        }
        if let Some(dir) = std::env::var_os("SANDPY_CACHE_DIR") {
            return PathBuf::from(dir);
        }
        match dirs::cache_dir() {
            Some(dir) => dir.join("sandpy"),
            // No home: a folder of this user's own, never one that another user could
            // have made first (it holds native code this process loads).
            None => std::env::temp_dir()
                .join(format!("sandpy-cache-{}", nix::unistd::geteuid().as_raw())),
        }
    }

    /// [`Config::guest`], or [`Error::NoGuest`](crate::Error::NoGuest).
    pub(crate) fn required_guest(&self) -> Result<&Guest, crate::Error> {
        self.guest.as_ref().ok_or(crate::Error::NoGuest)
    }

    /// The runtime component file in use, if not the guest itself.
    pub fn resolved_runtime(&self) -> Option<PathBuf> {
        self.runtime
            .clone()
            .or_else(|| std::env::var_os("SANDPY_RUNTIME").map(PathBuf::from))
    }

    /// The folder that holds the runs' scratch folders.
    pub fn resolved_scratch_dir(&self) -> PathBuf {
        if let Some(dir) = &self.scratch_dir {
            return dir.clone();
        }
        match std::env::var_os("SANDPY_SCRATCH_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => crate::host_paths::default_scratch_base(),
        }
    }

    /// Runs executing at once, never more than the instance pool holds.
    pub(crate) fn concurrency(&self) -> usize {
        // Asked only when needed: it reads the cgroup's CPU quota from /sys each time.
        let wanted = self
            .max_concurrent_runs
            .unwrap_or_else(|| {
                std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(2)
            })
            .max(1);
        match self.pooled_instances {
            Some(slots) => wanted.min(slots as usize),
            None => wanted,
        }
    }

    pub(crate) fn report_progress(&self, message: &str) {
        if let Some(progress) = &self.progress {
            progress(message);
        }
    }
}
