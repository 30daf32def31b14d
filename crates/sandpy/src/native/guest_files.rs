//! The guest's Python code for the native tier, compiled into the binary and written
//! once per build to a folder the zygote imports from (and its children read).

use super::NativeError;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// (path inside the folder, text): the WebAssembly guest's own package, unchanged, and
/// the native tier's stand-ins for what componentize-py generates.
const FILES: &[(&str, &str)] = &[
    ("sandpy_native.py", include_str!("guest/sandpy_native.py")),
    ("sandpy_channel.py", include_str!("guest/sandpy_channel.py")),
    (
        "componentize_py_types.py",
        include_str!("guest/componentize_py_types.py"),
    ),
    (
        "wit_world/__init__.py",
        include_str!("guest/wit_world/__init__.py"),
    ),
    (
        "wit_world/imports/__init__.py",
        include_str!("guest/wit_world/imports/__init__.py"),
    ),
    (
        "wit_world/imports/types.py",
        include_str!("guest/wit_world/imports/types.py"),
    ),
    (
        "wit_world/imports/tools.py",
        include_str!("guest/wit_world/imports/tools.py"),
    ),
    (
        "wit_world/imports/network.py",
        include_str!("guest/wit_world/imports/network.py"),
    ),
    (
        "sandpy_guest/__init__.py",
        include_str!("../../../../guest/sandpy_guest/__init__.py"),
    ),
    (
        "sandpy_guest/display.py",
        include_str!("../../../../guest/sandpy_guest/display.py"),
    ),
    (
        "sandpy_guest/event_loop.py",
        include_str!("../../../../guest/sandpy_guest/event_loop.py"),
    ),
    (
        "sandpy_guest/network.py",
        include_str!("../../../../guest/sandpy_guest/network.py"),
    ),
    (
        "sandpy_guest/http_libraries.py",
        include_str!("../../../../guest/sandpy_guest/http_libraries.py"),
    ),
    (
        "sandpy_guest/packages.py",
        include_str!("../../../../guest/sandpy_guest/packages.py"),
    ),
    (
        "sandpy_guest/policy.py",
        include_str!("../../../../guest/sandpy_guest/policy.py"),
    ),
    (
        "sandpy_guest/preload.py",
        include_str!("../../../../guest/sandpy_guest/preload.py"),
    ),
    (
        "sandpy_guest/runner.py",
        include_str!("../../../../guest/sandpy_guest/runner.py"),
    ),
    (
        "sandpy_guest/tools.py",
        include_str!("../../../../guest/sandpy_guest/tools.py"),
    ),
];

/// Write the files under `cache_dir` (once per content) and return their folder.
///
/// The zygote imports them as the user it runs as (root, often) before any confinement, so
/// the cache folder is checked as every folder sandpy loads code from
/// ([`crate::host_paths`]), and a folder found under the expected name is used only if it
/// holds exactly these files with exactly this text: anything else (a file changed or
/// added, a link, another owner) is put aside and written again, never trusted by name.
pub(crate) fn write(cache_dir: &Path) -> Result<PathBuf, NativeError> {
    use crate::host_paths::{ensure, Use};
    let mut digest = Sha256::new();
    for (path, text) in FILES {
        digest.update(path.as_bytes());
        digest.update(text.as_bytes());
    }
    let hash: String = digest.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    ensure(cache_dir, Use::Trusted).map_err(NativeError::GuestFolder)?;
    let folder = cache_dir.join(format!("native-guest-{hash}"));
    if holds_exactly(&folder) {
        return Ok(folder);
    }
    let error = |source| NativeError::Guest {
        path: folder.clone(),
        source,
    };
    // Written beside, then renamed: a concurrent start sees all of it or none.
    let staging = tempfile::Builder::new()
        .prefix(".native-guest-")
        .tempdir_in(cache_dir)
        .map_err(error)?;
    // Modes set, not left to the umask: a group-writable file would never pass the check.
    let mode = |path: &Path, mode| {
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode))
    };
    for (path, text) in FILES {
        let target = staging.path().join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(error)?;
            for folder in Path::new(path).ancestors().skip(1) {
                if !folder.as_os_str().is_empty() {
                    mode(&staging.path().join(folder), 0o755).map_err(error)?;
                }
            }
        }
        std::fs::write(&target, text).map_err(error)?;
        mode(&target, 0o644).map_err(error)?;
    }
    // What was under the name (if anything) is moved aside first: a rename does not
    // replace a folder that holds files.
    if std::fs::symlink_metadata(&folder).is_ok() {
        let aside = tempfile::Builder::new()
            .prefix(".native-guest-stale-")
            .tempdir_in(cache_dir)
            .map_err(error)?
            .keep();
        let stale = aside.join("stale");
        match std::fs::rename(&folder, &stale) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(error(e)),
            _ => {}
        }
        let _ = std::fs::remove_dir_all(&aside);
    }
    let staged = staging.keep();
    if let Err(e) = std::fs::rename(&staged, &folder) {
        let _ = std::fs::remove_dir_all(&staged);
        // Another start may have put the same files there first.
        if !holds_exactly(&folder) {
            return Err(error(e));
        }
    }
    Ok(folder)
}

/// Whether `folder` is a real folder (no link) that holds exactly [`FILES`], each a regular
/// file of this user's or root's that no one else can write, with the expected text.
fn holds_exactly(folder: &Path) -> bool {
    use crate::host_paths::{ensure, trusted_file, Use};
    if std::fs::symlink_metadata(folder).map_or(true, |m| !m.is_dir()) {
        return false;
    }
    if ensure(folder, Use::Trusted).is_err() {
        return false;
    }
    let expected_entries: std::collections::BTreeSet<PathBuf> = FILES
        .iter()
        .flat_map(|(path, _)| Path::new(path).ancestors().map(Path::to_path_buf))
        .filter(|p| !p.as_os_str().is_empty())
        .collect();
    let mut found = std::collections::BTreeSet::new();
    if !list(folder, Path::new(""), &mut found) || found != expected_entries {
        return false;
    }
    FILES.iter().all(|(path, text)| {
        let file = folder.join(path);
        trusted_file(&file).is_ok()
            && std::fs::read(&file).is_ok_and(|bytes| bytes == text.as_bytes())
    })
}

/// Every entry under `folder` (relative to the top), into `found`; false if a folder on
/// the way cannot be read or is open to other writers.
fn list(folder: &Path, relative: &Path, found: &mut std::collections::BTreeSet<PathBuf>) -> bool {
    let Ok(entries) = std::fs::read_dir(folder.join(relative)) else {
        return false;
    };
    for entry in entries {
        let Ok(entry) = entry else { return false };
        let name = relative.join(entry.file_name());
        let Ok(kind) = entry.file_type() else {
            return false;
        };
        if kind.is_dir()
            && (crate::host_paths::ensure(&folder.join(&name), crate::host_paths::Use::Trusted)
                .is_err()
                || !list(folder, &name, found))
        {
            return false;
        }
        found.insert(name);
    }
    true
}
