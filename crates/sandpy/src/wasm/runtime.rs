//! The process-wide runtime: one wasmtime `Engine`, the compiled guest component (the
//! [`Config::guest`] or a runtime file, cached on disk as a `.cwasm`), and the epoch
//! ticker that makes timeouts preemptive.

use super::host::HostState;
use super::overrun::Watchdog;
use crate::bindings::SandboxPre;
use crate::output::Capture;
use crate::{Config, Error, Interruption};
use sha2::{Digest, Sha256};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Enabled, Engine, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig};

const WASMTIME_VERSION: &str = "48.0.8";

/// How often the epoch advances: the granularity of timeouts and of yields to tokio.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(10);

pub(crate) struct Runtime {
    pub engine: Engine,
    pub pre: SandboxPre<HostState>,
    /// The `.cwasm` this runtime was loaded from.
    pub cache_file: PathBuf,
    /// How its runs are stopped past their time (whether its code has epoch checks).
    pub interruption: Interruption,
    /// Where the runs' folders are (removed by a watchdog that ends the process).
    scratch_dir: PathBuf,
}

/// Largest linear memory a run may be given (the `Limits::memory_bytes` ceiling).
const MAX_MEMORY_BYTES: usize = (crate::Limits::MAX_MEMORY_MB as usize) << 20;

/// The engine for `config`'s runs of a component with a C stack of `c_stack_bytes`.
fn engine_config(config: &Config, c_stack_bytes: usize) -> wasmtime::Config {
    let mut engine = wasmtime::Config::new();
    engine.wasm_component_model(true);
    engine.epoch_interruption(config.interruption.has_checks());
    engine.cranelift_opt_level(OptLevel::Speed);
    // Unwind tables are only for outside unwinders (wasmtime's own backtraces and its
    // panic handling do not use them); registering one per function cost every process
    // time at load (see docs/dev/performance.md, "One-shot runs").
    engine.native_unwind_info(false);
    // CPython recurses in C for every level of recursion through a C function
    // (`functools.lru_cache`, `map`, `sorted` keys, ...), with ~2.5 KiB of WebAssembly
    // stack per level (wasmtime's default 512 KiB trapped after 200-500 levels). The
    // WebAssembly stack is sized so that CPython's own check of its C stack (linear
    // memory, `c_stack_bytes`) ends such recursion first, with a `RecursionError` the
    // program can catch, as natively. The fiber a run executes on holds the WebAssembly
    // stack and the host calls made from it.
    let wasm_stack = wasm_stack_bytes(c_stack_bytes);
    engine.max_wasm_stack(wasm_stack);
    engine.async_stack_size(wasm_stack + HOST_STACK_BYTES);
    if let Some(slots) = config.pooled_instances {
        // Reused slots: no mmap/munmap per run. Up to 8 MiB of the pages a run dirtied
        // are copied back from the image and stay resident (a `print('hello')` dirties
        // ~2 MiB), so the next run in the slot takes no copy-on-write faults, each of
        // which costs a cross-core TLB shootdown. As many idle slots keep theirs as runs
        // may execute at once (an instance in disposal counts as one: see `Disposal`):
        // enough for back-to-back runs, a bounded RSS when idle. This needs the vendored
        // wasmtime's complete page scan (vendor/README.md).
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(slots)
            .total_core_instances(slots * CORE_INSTANCES_PER_RUN)
            .max_core_instances_per_component(CORE_INSTANCES_PER_RUN)
            .total_memories(slots * MEMORIES_PER_RUN)
            .max_memories_per_component(MEMORIES_PER_RUN)
            .total_tables(slots * TABLES_PER_RUN)
            .max_tables_per_component(TABLES_PER_RUN)
            .table_elements(TABLE_ELEMENTS)
            .max_memory_size(MAX_MEMORY_BYTES)
            .max_core_instance_size(1 << 20)
            .linear_memory_keep_resident(8 << 20)
            .max_unused_warm_slots(u32::try_from(config.concurrency()).unwrap_or(u32::MAX))
            .table_keep_resident(1 << 20)
            .total_stacks(slots)
            .pagemap_scan(Enabled::Auto);
        engine.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    engine
}

/// The WebAssembly stack of one run: deeper than CPython's C stack lets C recursion go
/// (`lru_cache`, `map`, `sorted` keys, `json.dumps` and `pickle` of nested lists ended in
/// a `RecursionError` at 6x already; 8x leaves room for kinds not measured: see
/// docs/dev/performance.md, "A 4 MiB C stack"). Address space is reserved for it per run
/// slot; only the pages a run touches are memory.
fn wasm_stack_bytes(c_stack_bytes: usize) -> usize {
    c_stack_bytes.saturating_mul(8)
}

/// Room on a run's fiber above the WebAssembly stack for the host functions it calls.
const HOST_STACK_BYTES: usize = 1 << 20;

/// Per-run needs of the guest component, with room to spare (pooling allocator sizing).
const CORE_INSTANCES_PER_RUN: u32 = 32;
const MEMORIES_PER_RUN: u32 = 4;
const TABLES_PER_RUN: u32 = 8;
const TABLE_ELEMENTS: usize = 64 * 1024;

impl Runtime {
    /// Which component `config` names, without loading it: its guest's SHA-256, or
    /// `file-<hash>` of a runtime file's path, size and modification time. Either needs
    /// the guest ([`Error::NoGuest`]): a runtime file has its C stack.
    pub(crate) fn id_of(config: &Config) -> Result<String, Error> {
        let guest = config.required_guest()?;
        match config.resolved_runtime() {
            None => Ok(guest.sha256.to_string()),
            Some(path) => file_identity(&path),
        }
    }

    /// Load the component `config` names, whose identity ([`Runtime::id_of`]) is `id`:
    /// from the on-disk cache, or compiled now and cached.
    pub(crate) fn load(config: &Config, id: &str) -> Result<Runtime, Error> {
        let guest = config.required_guest()?;
        let engine = Engine::new(&engine_config(config, guest.c_stack_bytes))
            .map_err(|e| Error::Engine(Error::cause(e)))?;
        let source = config.resolved_runtime();
        let cache_file = cache_file(&engine, &config.resolved_cache_dir(), id);
        let component = load_component(&engine, config, &cache_file, source.as_deref())?;
        let mut linker: Linker<HostState> = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| Error::Link(Error::cause(e)))?;
        super::disk::add_to_linker(&mut linker).map_err(|e| Error::Link(Error::cause(e)))?;
        crate::bindings::Sandbox::add_to_linker::<HostState, HasSelf<HostState>>(
            &mut linker,
            |s| s,
        )
        .map_err(|e| Error::Link(Error::cause(e)))?;
        let pre = linker
            .instantiate_pre(&component)
            .map_err(|e| Error::Link(Error::cause(e)))?;
        let pre = SandboxPre::new(pre).map_err(|e| Error::Link(Error::cause(e)))?;
        if config.interruption.has_checks() {
            start_epoch_ticker(&engine);
        }
        Ok(Runtime {
            engine,
            pre,
            cache_file,
            interruption: config.interruption.clone(),
            scratch_dir: config.resolved_scratch_dir(),
        })
    }

    /// For code without interruption checks, a [`Watchdog`] that ends the process when
    /// the run (started at `started`, limit `limit`) is still going past `deadline`;
    /// `None` for checked code, which the run path stops itself.
    pub(crate) fn watch(
        &self,
        started: Instant,
        deadline: Instant,
        limit: Duration,
        capture: &Capture,
    ) -> std::io::Result<Option<Watchdog>> {
        match &self.interruption {
            Interruption::Checks => Ok(None),
            Interruption::EndProcess(end) => Watchdog::start(
                started,
                deadline,
                limit,
                capture.clone(),
                end.clone(),
                self.scratch_dir.clone(),
            )
            .map(Some),
        }
    }
}

/// Advances the engine's epoch every tick until the engine is dropped. On x86-64 Linux an
/// epoch ends by making the running stores' epoch pages inaccessible: the guest's next
/// check faults and yields (vendor/README.md, fix 3).
fn start_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("sandpy-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                keep_trap_handlers_first();
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .map(drop)
        .unwrap_or_else(|e| {
            tracing::error!("cannot start the epoch thread, timeouts will not preempt: {e}")
        });
}

/// Wasmtime's signal handlers back in front of any that a library installed after them
/// (Ray does in its processes): such a handler would take the guest's faults, which every
/// epoch now makes, for crashes. Called before each call into a guest and at every tick.
pub(crate) fn keep_trap_handlers_first() {
    #[cfg(target_arch = "x86_64")]
    wasmtime::unix::ensure_trap_handlers_first();
}

/// The cache file name: component hash, wasmtime version and everything of the engine's
/// configuration and host CPU that decides whether compiled code is compatible.
fn cache_file(engine: &Engine, dir: &Path, id: &str) -> PathBuf {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    let compat = hasher.finish();
    let short = if id.starts_with("file-") {
        id
    } else {
        &id[..id.len().min(16)]
    };
    dir.join(format!(
        "python-{short}-wasmtime{WASMTIME_VERSION}-{compat:016x}.cwasm"
    ))
}

/// A runtime file's identity for the cache: its path, size and modification time (cheap,
/// unlike hashing ~40 MB on every start; rebuilding the file in place changes it).
fn file_identity(path: &Path) -> Result<String, Error> {
    let runtime_error = |source| Error::Runtime {
        path: path.to_path_buf(),
        source,
    };
    // Its guest code runs with the run's tools and secrets: no other user may swap it.
    let canonical = crate::host_paths::input(path)?;
    let meta = std::fs::metadata(&canonical).map_err(runtime_error)?;
    if !meta.is_file() {
        let not_a_file = std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file");
        return Err(runtime_error(not_a_file));
    }
    let mut hasher = Sha256::new();
    hasher.update(canonical.as_os_str().as_encoded_bytes());
    hasher.update(meta.len().to_le_bytes());
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .unwrap_or_default();
    hasher.update(modified.as_nanos().to_le_bytes());
    Ok(format!("file-{}", hex(&hasher.finalize()[..8])))
}

fn load_component(
    engine: &Engine,
    config: &Config,
    path: &Path,
    source: Option<&Path>,
) -> Result<Component, Error> {
    let dir = path.parent().unwrap_or(Path::new("."));
    // What is in the cache is loaded as native code: only from a folder no one else writes.
    crate::host_paths::ensure(dir, crate::host_paths::Use::Trusted)?;
    // The file too: a regular file of ours or root's that no one else can write (a link
    // or an open file in its place is written again, not loaded).
    let trusted = crate::host_paths::trusted_file(path);
    if let Err(e) = &trusted {
        if path.exists() {
            tracing::warn!("cached runtime not loaded: {e}; rebuilding it");
        }
    }
    if trusted.is_ok() {
        // SAFETY: the file was written by `precompile_component` of an engine whose
        // compatibility hash is in its name; wasmtime also checks its header and refuses
        // files from another version or configuration.
        match unsafe { Component::deserialize_file(engine, path) } {
            Ok(component) => return Ok(component),
            Err(e) => tracing::warn!(
                "cached runtime `{}` did not load ({e:#}); rebuilding it",
                path.display()
            ),
        }
    }
    config.report_progress(
        "sandpy: compiling the Python runtime to native code (first run only, a few seconds)...",
    );
    let bytes = match source {
        None => std::borrow::Cow::Borrowed(config.required_guest()?.component),
        Some(file) => {
            std::borrow::Cow::Owned(std::fs::read(file).map_err(|source| Error::Runtime {
                path: file.to_path_buf(),
                source,
            })?)
        }
    };
    let compiled = engine
        .precompile_component(&bytes)
        .map_err(|e| Error::Compile(Error::cause(e)))?;
    match write_atomically(dir, path, &compiled) {
        Ok(()) => {
            prune_cache(dir, path);
            // SAFETY: as above; the file was just written from `precompile_component`.
            match unsafe { Component::deserialize_file(engine, path) } {
                Ok(component) => return Ok(component),
                Err(e) => {
                    tracing::warn!("fresh cache entry `{}` did not load: {e:#}", path.display())
                }
            }
        }
        Err(e) => tracing::warn!(
            "cannot cache the compiled runtime ({e}); it will be compiled again next time"
        ),
    }
    // SAFETY: `compiled` comes from `precompile_component` of this very engine.
    unsafe { Component::deserialize(engine, &compiled) }
        .map_err(|e| Error::Compile(Error::cause(e)))
}

/// Other builds kept beside the current one (other sandpy builds or runtime files on the
/// machine, each with up to two entries: code with and without interruption checks);
/// older ones are removed, since each entry is ~50 MB and is rebuilt if needed.
const OTHER_BUILDS_KEPT: usize = 3;

/// Remove the cache entries of all but the newest [`OTHER_BUILDS_KEPT`] builds other than
/// `current`'s. A build is an entry's name without its last part (the engine variant),
/// so the current build's other variant is kept.
fn prune_cache(dir: &Path, current: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let build_of = |p: &Path| -> Option<String> {
        let name = p.file_name()?.to_str()?;
        if !(name.starts_with("python-") && name.ends_with(".cwasm")) {
            return None;
        }
        Some(
            name.rsplit_once('-')
                .map_or(name, |(build, _)| build)
                .to_string(),
        )
    };
    let current_build = build_of(current);
    let mut builds: std::collections::HashMap<String, (std::time::SystemTime, Vec<PathBuf>)> =
        std::collections::HashMap::new();
    for path in entries.filter_map(|e| e.ok()).map(|e| e.path()) {
        let Some(build) = build_of(&path).filter(|b| Some(b) != current_build.as_ref()) else {
            continue;
        };
        let Ok(modified) = std::fs::metadata(&path).and_then(|m| m.modified()) else {
            continue;
        };
        let entry = builds
            .entry(build)
            .or_insert((std::time::SystemTime::UNIX_EPOCH, Vec::new()));
        entry.0 = entry.0.max(modified);
        entry.1.push(path);
    }
    let mut builds: Vec<_> = builds.into_values().collect();
    builds.sort_by_key(|build| std::cmp::Reverse(build.0));
    for stale in builds.into_iter().skip(OTHER_BUILDS_KEPT).flat_map(|b| b.1) {
        if let Err(e) = std::fs::remove_file(&stale) {
            tracing::debug!("cannot prune `{}`: {e}", stale.display());
        }
    }
}

fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let cache_error = |source| Error::Cache {
        path: path.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(cache_error)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        std::process::id(),
        hex(&Sha256::digest(bytes)[..4])
    ));
    std::fs::write(&tmp, bytes).map_err(cache_error)?;
    // Whatever the umask: a file others could write would not pass the check when loaded.
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .map_err(cache_error)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        cache_error(e)
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
