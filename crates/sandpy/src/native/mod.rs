//! The native tier: real CPython with compiled packages (numpy, pandas, scikit-learn),
//! each run a fork of a zygote that imported them once, confined by the kernel instead
//! of by WebAssembly. Same [`Execution`](crate::Execution), statuses, limits, policies
//! and in-sandbox tool API as the WebAssembly tier, which stays the default; the
//! operator chooses this tier in the config, never the code.
//!
//! Processes: the host (this library) starts the zygote (`zygote`), a process of its own
//! that embeds the configured Python (`python`). Per run the zygote clones a process
//! straight into new namespaces (`child`), which builds the run's filesystem, confines
//! itself (`confine`, `seccomp`) and runs the code, while the zygote supervises it (time
//! limit, the host's hang-up); the next run's process is made ahead while a run runs
//! (`made_ahead`). The run's only way out is its channel to the host
//! (`protocol`, served by `serve`), and nothing it writes there is authority over what
//! the host reports: once it answered (and at its deadline) the zygote stops it and reads
//! its `/output` and peak size from the kernel (`left_output`). A session's run serves one
//! cell after another (`session::NativeSession`), stopped between cells; the zygote moves
//! its deadline and CPU limit and lets it go on as each cell starts.
//!
//! What it shares with the host is the kernel: see the security model in docs/guide/security.md.

mod child;
mod confine;
mod guest_files;
mod left_output;
mod made_ahead;
pub(crate) mod protocol;
mod python;
mod seccomp;
mod serve;
mod session;
mod supervised;
mod tier;
mod zygote;

/// What the zygote keeps for the runs it clones.
pub(crate) struct Zygote {
    pub api: python::CApi,
    pub setup: protocol::ZygoteSetup,
    pub filters: seccomp::Filters,
    pub vm_bytes: u64,
}

pub(crate) use serve::Inputs;
pub(crate) use session::NativeSession;
pub use tier::NativeTier;
pub use zygote::{main_if_requested, serve_as_zygote, ZYGOTE_ARG};

/// A confinement layer, named for the test builds that switch one off to show that its
/// own attack then gets through (honoured only by debug builds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    /// The run's own root: only the Python installation, packages, guest code and four
    /// devices (`null`, `zero`, `random`, `urandom`), read-only (off: the host's root,
    /// with a private `/tmp`).
    Root,
    /// Landlock: file access, TCP, signal and abstract-socket scoping.
    Landlock,
    /// The seccomp allow-list.
    Seccomp,
    /// The run's own pid namespace.
    PidNamespace,
    /// `setsid`: the run in its own session and process group.
    Setsid,
}

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The `sandpy.native` section of a config file: which Python and packages the native
/// tier runs. Defaults: `python3` from `PATH`, no venv, nothing pre-imported.
///
/// ```json
/// "native": { "venv": "native-venv", "packages": ["numpy==2.3.5", "pandas==2.3.3"],
///             "preimport": ["numpy", "pandas"] }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NativeConfig {
    /// The Python executable (3.10+, with a shared libpython). Default: the venv's
    /// `bin/python`, else `python3` from `PATH`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<PathBuf>,
    /// A virtual environment whose packages runs may import; `sandpy build --native`
    /// makes it from `packages`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub venv: Option<PathBuf>,
    /// Pip requirements that `sandpy build --native` installs into `venv`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub packages: Vec<String>,
    /// Modules the zygote imports once, so that every run starts with them loaded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub preimport: Vec<String>,
    /// Whether a request may choose its tier (`run_python`'s `tier`); otherwise every run
    /// takes the config's `tier`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub per_run: bool,
    /// The command started as the zygote (program, then arguments); empty: this
    /// process's own executable with [`ZYGOTE_ARG`] (its `main` must call
    /// [`main_if_requested`] first). A host that is itself a Python process starts the
    /// configured Python running [`serve_as_zygote`] through its extension module.
    #[serde(skip)]
    pub launcher: Vec<std::ffi::OsString>,
    /// Confinement layers switched off, for tests that show each layer stops its own
    /// attack. Honoured by debug builds only.
    #[serde(skip)]
    pub layers_off: Vec<Layer>,
    /// Every run in a process cloned once its code came, none made ahead: the benches'
    /// baseline, measured in the same run.
    #[serde(skip)]
    pub fresh_only: bool,
}

impl NativeConfig {
    /// The Python executable to run.
    pub fn python_executable(&self) -> PathBuf {
        if let Some(python) = &self.python {
            return python.clone();
        }
        if let Some(venv) = &self.venv {
            return venv.join("bin").join("python");
        }
        PathBuf::from("python3")
    }

    /// Make a relative `venv` (and a relative `python` path, not a bare name looked up
    /// on `PATH`) relative to `base`, the config file's folder.
    pub fn resolve_paths(&mut self, base: &Path) {
        if let Some(venv) = &mut self.venv {
            if venv.is_relative() {
                *venv = base.join(&*venv);
            }
        }
        if let Some(python) = &mut self.python {
            if python.is_relative() && python.components().count() > 1 {
                *python = base.join(&*python);
            }
        }
    }
}

/// The native tier could not start; says which part and why.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NativeError {
    /// The kernel lacks a feature the confinement needs; the tier never runs unconfined.
    #[error("the native tier needs a kernel feature this machine lacks: {0}")]
    Kernel(String),
    /// The configured Python cannot be used.
    #[error("cannot use `{}` for the native tier: {message}", .python.display())]
    Python {
        /// The executable.
        python: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The guest code could not be written to the cache.
    #[error("cannot write the native tier's guest code to `{}`", .path.display())]
    Guest {
        /// The folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The cache folder that holds the guest code is not one only this user (or root)
    /// controls.
    #[error("the native tier's guest code cannot be kept in the cache")]
    GuestFolder(#[source] crate::host_paths::FolderError),
    /// A folder of the Python installation or its packages is not one only this user
    /// (or root) controls.
    #[error("the native tier does not load this Python's code")]
    InstallFolder(#[source] crate::host_paths::FolderError),
    /// A folder the runs must read (the Python, the venv, the guest code) cannot be
    /// shown to them at its own path.
    #[error("the native tier cannot show `{}` to its runs: {reason}", .path.display())]
    Unshowable {
        /// The folder.
        path: PathBuf,
        /// Why, and what to do.
        reason: &'static str,
    },
    /// The zygote's program could not be started.
    #[error("cannot start the native tier's zygote `{}`", .launcher.display())]
    Launcher {
        /// The program.
        launcher: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The zygote started but did not become ready.
    #[error("the native tier's zygote did not start: {0}")]
    Start(String),
}
