//! Third-party pure-Python packages: installed from PyPI into a folder (to mount at
//! `/packages`), or bundled into a new runtime component whose snapshot has them
//! imported (`sandpy build`, made from the sources of the [`Config::guest`] with its
//! [`Guest::componentize`](crate::Guest::componentize)). Packages with compiled extensions
//! are refused by name, except those known to fall back to pure Python without them.

use crate::{Config, Error};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Installing packages or building a runtime with them failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PackageError {
    /// The package list was empty.
    #[error("no packages given")]
    NoPackages,
    /// A build tool (python, pip, componentize-py) could not be started.
    #[error("{tool}: cannot start it")]
    Start {
        /// The tool and what it was for.
        tool: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A build tool ran and failed; `output` is what it said.
    #[error("{tool} failed:\n{output}")]
    Failed {
        /// The tool and what it was for.
        tool: String,
        /// Its error output, with a hint where one is known.
        output: String,
    },
    /// Some packages need compiled code, which cannot run in the sandbox.
    #[error(
        "compiled extension modules cannot run in the sandbox; only pure-Python packages \
         can be added. Refused: {}", .refused.join("; ")
    )]
    Compiled {
        /// Each refused distribution with its version and extension files.
        refused: Vec<String>,
    },
    /// A file or folder of the build could not be made, written or read.
    #[error("`{path}`")]
    File {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The [`PackageError::File`] error for `path`.
fn file_error(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| {
        PackageError::File {
            path: path.to_path_buf(),
            source,
        }
        .into()
    }
}

/// The guest's Python version: wheels are chosen for it, not for the build machine.
const GUEST_PYTHON: &str = "3.14";

include!("../curated.rs");

/// Distributions whose compiled extensions are optional speedups with a pure-Python
/// fallback: the extensions are removed instead of refusing the package.
const PURE_FALLBACK: &[&str] = &["pyyaml", "markupsafe", "charset-normalizer"];

/// What was installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageSet {
    /// Installed distributions (requested ones and their dependencies) with versions.
    pub distributions: Vec<(String, String)>,
    /// Top-level names to import.
    pub import_names: Vec<String>,
    /// Compiled speedups removed from pure-fallback packages.
    pub removed_extensions: Vec<String>,
}

/// Install `packages` (pip requirement specifiers) and their dependencies into `target`
/// for the guest's Python; fails naming every package that needs compiled code.
pub fn install(packages: &[String], target: &Path, config: &Config) -> Result<PackageSet, Error> {
    if packages.is_empty() {
        return Err(PackageError::NoPackages.into());
    }
    let venv = toolchain(config)?;
    config.report_progress(&format!(
        "sandpy: installing {} for Python {GUEST_PYTHON}...",
        packages.join(" ")
    ));
    let mut pip = Command::new(venv.join("bin/pip"));
    pip.args(GUEST_WHEEL_ARGS)
        .arg("--target")
        .arg(target)
        .args(packages);
    let output = pip.output().map_err(|source| PackageError::Start {
        tool: "pip".into(),
        source,
    })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let hint = if stderr.contains("No matching distribution") {
            "\n  (no wheel for Python 3.14: the package may not exist, or may only ship source that needs compiling)"
        } else {
            ""
        };
        return Err(PackageError::Failed {
            tool: format!("pip install {}", packages.join(" ")),
            output: format!("{}{hint}", stderr.trim()),
        }
        .into());
    }
    inspect(target)
}

/// Build a runtime component at `output` from the [`Config::guest`] with `packages`
/// imported in its snapshot (pass [`CURATED`] among them to keep the built-in runtime's
/// packages).
pub fn build_runtime(
    packages: &[String],
    output: &Path,
    config: &Config,
) -> Result<PackageSet, Error> {
    let guest = config.required_guest()?;
    let temp = std::env::temp_dir();
    let work = tempfile::tempdir().map_err(file_error(&temp))?;
    let (sources, site) = (work.path().join("guest"), work.path().join("site"));
    let set = install(packages, &site, config)?;
    for (relative, bytes) in guest.sources {
        let path = sources.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(file_error(parent))?;
        }
        std::fs::write(&path, bytes).map_err(file_error(&path))?;
    }
    let listing = format!("PACKAGES = {:?}\n", set.import_names);
    let listing_file = sources.join("sandpy_packages.py");
    std::fs::write(&listing_file, listing).map_err(file_error(&listing_file))?;
    let output = std::path::absolute(output).map_err(file_error(output))?;
    config.report_progress(
        "sandpy: building the runtime (pre-initialising CPython with the packages, ~1 minute)...",
    );
    (guest.componentize)(&sources, &site, &output).map_err(|error| {
        let first: &dyn std::error::Error = &*error;
        let chain: Vec<String> = std::iter::successors(Some(first), |e| e.source())
            .map(|e| e.to_string())
            .collect();
        PackageError::Failed {
            tool: "componentize-py (a package may fail to import at build time)".into(),
            output: chain.join(": "),
        }
    })?;
    Ok(set)
}

/// What the toolchain venv's marker file holds once the venv is made (an older sandpy's
/// venv, with componentize-py from PyPI in it, holds something else and is made again).
const TOOLCHAIN: &str = "pip";

/// The venv with pip (for the guest's wheels), made once in the cache folder. Processes
/// that need it at once take turns (a file lock): one makes it, the others then find it
/// made.
fn toolchain(config: &Config) -> Result<PathBuf, Error> {
    use crate::host_paths::{ensure, trusted_file, trusted_tree, Use};
    let cache = config.resolved_cache_dir();
    // What runs from here runs as this user: the cache, the venv and everything in it must
    // be this user's (or root's), never trusted by the marker's name alone.
    ensure(&cache, Use::Trusted)?;
    let venv = cache.join("toolchain");
    let marker = venv.join(".sandpy-toolchain");
    let ready = || {
        trusted_tree(&venv).is_ok()
            && [
                marker.clone(),
                venv.join("bin/python"),
                venv.join("bin/pip"),
            ]
            .iter()
            .all(|file| trusted_file(file).is_ok())
            && std::fs::read_to_string(&marker).ok().as_deref() == Some(TOOLCHAIN)
    };
    if ready() {
        return Ok(venv);
    }
    let lock_path = cache.join("toolchain.lock");
    let lock = std::fs::File::create(&lock_path).map_err(file_error(&lock_path))?;
    lock.lock().map_err(file_error(&lock_path))?; // released when `lock` is dropped
    if ready() {
        return Ok(venv);
    }
    // Whatever is under the name (half made, or not this user's) is put aside, not reused.
    if std::fs::symlink_metadata(&venv).is_ok() {
        let aside = tempfile::Builder::new()
            .prefix(".toolchain-stale-")
            .tempdir_in(&cache)
            .map_err(file_error(&cache))?
            .keep();
        std::fs::rename(&venv, aside.join("toolchain")).map_err(file_error(&venv))?;
        let _ = std::fs::remove_dir_all(&aside);
    }
    config.report_progress(&format!(
        "sandpy: setting up pip in {} (once)...",
        venv.display()
    ));
    let python = std::env::var("SANDPY_PYTHON").unwrap_or_else(|_| "python3".into());
    let step = |command: &mut Command, what: &str| -> Result<(), Error> {
        let output = command.output().map_err(|source| PackageError::Start {
            tool: what.to_string(),
            source,
        })?;
        if output.status.success() {
            return Ok(());
        }
        Err(PackageError::Failed {
            tool: what.to_string(),
            output: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        }
        .into())
    };
    let mut make_venv = Command::new(&python);
    make_venv.args(["-m", "venv"]).arg(&venv);
    // Made writable by no one else whatever this process's umask, or it would never pass
    // the check above and be made again at every build.
    // SAFETY: `umask` is async-signal-safe and touches no memory; it runs in the child
    // between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut make_venv, || {
            libc::umask(0o022);
            Ok(())
        });
    }
    step(
        &mut make_venv,
        &format!("`{python} -m venv` (needs Python 3 with venv; or set SANDPY_PYTHON)"),
    )?;
    std::fs::write(&marker, TOOLCHAIN).map_err(file_error(&marker))?;
    Ok(venv)
}

/// Read the installed distributions; refuse compiled extensions (naming the packages),
/// removing them from the pure-fallback ones.
fn inspect(site: &Path) -> Result<PackageSet, Error> {
    let mut set = PackageSet {
        distributions: Vec::new(),
        import_names: Vec::new(),
        removed_extensions: Vec::new(),
    };
    let mut compiled = Vec::new();
    let mut dist_infos: Vec<PathBuf> = std::fs::read_dir(site)
        .map_err(file_error(site))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "dist-info"))
        .collect();
    dist_infos.sort();
    for info in dist_infos {
        let metadata = std::fs::read_to_string(info.join("METADATA")).unwrap_or_default();
        let field = |key: &str| {
            metadata
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .unwrap_or("?")
                .trim()
                .to_string()
        };
        let (name, version) = (field("Name:"), field("Version:"));
        let record = std::fs::read_to_string(info.join("RECORD")).unwrap_or_default();
        let files: Vec<&str> = record
            .lines()
            .filter_map(|l| l.split(',').next())
            .filter(|f| !f.is_empty())
            .collect();
        let extensions: Vec<&str> = files
            .iter()
            .copied()
            .filter(|f| [".so", ".pyd", ".dylib"].iter().any(|x| f.ends_with(x)))
            .collect();
        if !extensions.is_empty() {
            if PURE_FALLBACK.contains(&name.to_ascii_lowercase().as_str()) {
                for file in &extensions {
                    let _ = std::fs::remove_file(site.join(file));
                    set.removed_extensions.push(file.to_string());
                }
            } else {
                compiled.push(format!("{name} {version} ({})", extensions.join(", ")));
            }
        }
        for file in &files {
            let top = file.split('/').next().unwrap_or_default();
            let name = top.strip_suffix(".py").unwrap_or(top);
            let importable = !name.is_empty()
                && !name.starts_with('_')
                && !top.contains(".dist-info")
                && !matches!(top, "bin" | "__pycache__" | "..")
                && (top.ends_with(".py") || file.contains('/'))
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !set.import_names.iter().any(|n| n == name);
            if importable {
                set.import_names.push(name.to_string());
            }
        }
        set.distributions.push((name, version));
    }
    if !compiled.is_empty() {
        return Err(PackageError::Compiled { refused: compiled }.into());
    }
    set.import_names.sort();
    Ok(set)
}
