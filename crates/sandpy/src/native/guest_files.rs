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
pub(crate) fn write(cache_dir: &Path) -> Result<PathBuf, NativeError> {
    let mut digest = Sha256::new();
    for (path, text) in FILES {
        digest.update(path.as_bytes());
        digest.update(text.as_bytes());
    }
    let hash: String = digest.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let folder = cache_dir.join(format!("native-guest-{hash}"));
    if folder.is_dir() {
        return Ok(folder);
    }
    let error = |source| NativeError::Guest {
        path: folder.clone(),
        source,
    };
    std::fs::create_dir_all(cache_dir).map_err(error)?;
    // Written beside, then renamed: a concurrent start sees all of it or none.
    let staging = tempfile::Builder::new()
        .prefix(".native-guest-")
        .tempdir_in(cache_dir)
        .map_err(error)?;
    for (path, text) in FILES {
        let target = staging.path().join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(error)?;
        }
        std::fs::write(&target, text).map_err(error)?;
    }
    let staged = staging.keep();
    if let Err(e) = std::fs::rename(&staged, &folder) {
        let _ = std::fs::remove_dir_all(&staged);
        if !folder.is_dir() {
            return Err(error(e));
        }
    }
    Ok(folder)
}
