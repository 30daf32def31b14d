//! Third-party pure-Python packages: installed from PyPI into a folder (to mount at
//! `/packages`), or bundled into a new runtime component whose snapshot has them
//! imported (`sandpy build`). Packages with compiled extensions are refused by name,
//! except those known to fall back to pure Python without them.

use crate::{Config, Error};
use std::path::{Path, PathBuf};
use std::process::Command;

// Keep in step with `COMPONENTIZE_PY` in build.rs.
const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";

/// The guest's Python version: wheels are chosen for it, not for the build machine.
const GUEST_PYTHON: &str = "3.14";

include!("../curated.rs");

/// Distributions whose compiled extensions are optional speedups with a pure-Python
/// fallback: the extensions are removed instead of refusing the package.
const PURE_FALLBACK: &[&str] = &["pyyaml", "markupsafe"];

include!(concat!(env!("OUT_DIR"), "/guest_files.rs"));

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
        return Err(Error::Packages("no packages given".into()));
    }
    let venv = toolchain(config)?;
    config.report_progress(&format!(
        "sandpy: installing {} for Python {GUEST_PYTHON}...",
        packages.join(" ")
    ));
    let mut pip = Command::new(venv.join("bin/pip"));
    pip.args([
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-compile",
        "--only-binary=:all:",
    ])
    .args([
        "--python-version",
        GUEST_PYTHON,
        "--implementation",
        "cp",
        "--abi",
        "cp314",
        "--abi",
        "abi3",
        "--abi",
        "none",
    ])
    // Linux wheel tags too, so that a package shipping only compiled wheels resolves
    // and is refused by name below (rather than by pip's "no matching distribution").
    .args([
        "--platform",
        "manylinux2014_x86_64",
        "--platform",
        "manylinux_2_28_x86_64",
        "--platform",
        "any",
        "--target",
    ])
    .arg(target)
    .args(packages);
    let output = pip
        .output()
        .map_err(|e| Error::Packages(format!("cannot start pip: {e}")))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let hint = if stderr.contains("No matching distribution") {
            "\n  (no wheel for Python 3.14: the package may not exist, or may only ship source that needs compiling)"
        } else {
            ""
        };
        return Err(Error::Packages(format!(
            "pip could not install {}:\n{}{hint}",
            packages.join(" "),
            stderr.trim()
        )));
    }
    inspect(target)
}

/// Build a runtime component at `output` with `packages` imported in its snapshot (pass
/// [`CURATED`] among them to keep the built-in runtime's packages).
pub fn build_runtime(
    packages: &[String],
    output: &Path,
    config: &Config,
) -> Result<PackageSet, Error> {
    let work = tempfile::tempdir()
        .map_err(|e| Error::Packages(format!("cannot make a build folder: {e}")))?;
    let (guest, site) = (work.path().join("guest"), work.path().join("site"));
    let set = install(packages, &site, config)?;
    for (relative, bytes) in GUEST_FILES {
        let path = guest.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Error::Packages(format!("{}: {e}", parent.display())))?;
        }
        std::fs::write(&path, bytes)
            .map_err(|e| Error::Packages(format!("{}: {e}", path.display())))?;
    }
    let listing = format!("PACKAGES = {:?}\n", set.import_names);
    std::fs::write(guest.join("sandpy_packages.py"), listing)
        .map_err(|e| Error::Packages(e.to_string()))?;
    let output = std::path::absolute(output)
        .map_err(|e| Error::Packages(format!("{}: {e}", output.display())))?;
    config.report_progress(
        "sandpy: building the runtime (pre-initialising CPython with the packages, ~1 minute)...",
    );
    let venv = toolchain(config)?;
    let built = Command::new(venv.join("bin/componentize-py"))
        .current_dir(&guest)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .args(["-d", "wit", "-w", "sandbox", "componentize", "-p", "."])
        .arg("-p")
        .arg(&site)
        .args(["app", "-o"])
        .arg(&output)
        .output()
        .map_err(|e| Error::Packages(format!("cannot start componentize-py: {e}")))?;
    if !built.status.success() {
        return Err(Error::Packages(format!(
            "componentize-py failed (a package may fail to import at build time):\n{}{}",
            String::from_utf8_lossy(&built.stdout),
            String::from_utf8_lossy(&built.stderr)
        )));
    }
    Ok(set)
}

/// The venv with pip and componentize-py, made once in the cache folder.
fn toolchain(config: &Config) -> Result<PathBuf, Error> {
    let venv = config.resolved_cache_dir().join("toolchain");
    let marker = venv.join(".sandpy-componentize-py");
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(COMPONENTIZE_PY) {
        return Ok(venv);
    }
    config.report_progress(&format!(
        "sandpy: setting up {COMPONENTIZE_PY} in {} (once)...",
        venv.display()
    ));
    let python = std::env::var("SANDPY_PYTHON").unwrap_or_else(|_| "python3".into());
    let step = |command: &mut Command, what: &str| -> Result<(), Error> {
        let output = command
            .output()
            .map_err(|e| Error::Packages(format!("{what}: cannot start: {e}")))?;
        if output.status.success() {
            return Ok(());
        }
        Err(Error::Packages(format!(
            "{what} failed:\n{}",
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    };
    step(
        Command::new(&python).args(["-m", "venv"]).arg(&venv),
        &format!("`{python} -m venv` (needs Python 3 with venv; or set SANDPY_PYTHON)"),
    )?;
    step(
        Command::new(venv.join("bin/pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            COMPONENTIZE_PY,
        ]),
        &format!("`pip install {COMPONENTIZE_PY}` (needs PyPI)"),
    )?;
    std::fs::write(&marker, COMPONENTIZE_PY)
        .map_err(|e| Error::Packages(format!("{}: {e}", marker.display())))?;
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
        .map_err(|e| Error::Packages(format!("{}: {e}", site.display())))?
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
        return Err(Error::Packages(format!(
            "compiled extension modules cannot run in the sandbox; only pure-Python packages can be added. Refused: {}",
            compiled.join("; ")
        )));
    }
    set.import_names.sort();
    Ok(set)
}
