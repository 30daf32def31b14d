//! The files of a run: a private scratch folder seen as `/tmp` (and the working
//! directory), an `/output` folder whose files come back in the [`Execution`], input
//! files written into the scratch folder before the run, and read-only mounts of host
//! folders: the types both tiers share and the checks of paths a request names. Where
//! the WebAssembly tier keeps them on the host: `wasm/workspace.rs`; the native tier
//! builds them in the run's own root (`native/confine.rs`).
//!
//! [`Execution`]: crate::Execution

use serde::{Deserialize, Serialize};
use std::path::{Component, Path, PathBuf};

pub use crate::host_paths::FolderError;

/// Make `path` a folder of this user's alone (mode 0700), or refuse it if another user
/// owns it, can write in it, or put a link in its place, or controls a folder or link on
/// the way to it: for folders a front end keeps beside sandpy's own (saved sessions, the
/// warm runner's sockets), which are reopened by path.
pub fn private_folder(path: &Path) -> Result<(), FolderError> {
    crate::host_paths::ensure(path, crate::host_paths::Use::Private)
}

/// Make `path` (and the folders above it) if missing, and check that it is a real folder
/// of this user's (or root's) that no other user can write in, reached through folders and
/// links no other user controls: for folders a front end writes a run's files into.
pub fn output_folder(path: &Path) -> Result<(), FolderError> {
    crate::host_paths::ensure(path, crate::host_paths::Use::Trusted)
}

/// Check a file whose content the host acts on (a config file, a CA file): a regular file
/// of this user's or root's that no other user can write, reached through folders and
/// links no other user controls.
pub fn trusted_file(path: &Path) -> Result<(), FolderError> {
    crate::host_paths::trusted_file(path).map(drop)
}

/// Check a path a user names for a run (a program or input file, a mount, the output
/// folder) and return it with its links resolved: no other user controls a folder or a
/// link on the way, so what is used later is what was named. The item itself may be
/// anyone's.
pub fn user_path(path: &Path) -> Result<PathBuf, FolderError> {
    crate::host_paths::input(path)
}

/// Where the scratch folder appears in the guest (also the working directory).
pub const SCRATCH_DIR: &str = "/tmp";
/// Files the program writes under this folder are returned in [`crate::Execution::files`].
pub const OUTPUT_DIR: &str = "/output";

/// A file handed to the program: written into its scratch folder before it starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFile {
    /// Where the program finds it: relative to `/tmp` (the working directory), or an
    /// absolute path under `/tmp`.
    pub path: String,
    /// The file's bytes.
    #[serde(with = "base64_bytes", rename = "content_base64")]
    pub content: Vec<u8>,
}

/// A host folder the program may read (never write) at a guest path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    /// The host folder.
    pub host: PathBuf,
    /// Absolute guest path, e.g. `/data`; not `/`, and not at or under `/tmp` or `/output`.
    pub guest: String,
}

/// A file the program left under `/output`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputFile {
    /// Path relative to `/output`, with `/` separators (e.g. `charts/sales.png`).
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// Guessed from the extension; `application/octet-stream` when unknown.
    pub mime_type: String,
    /// The file's bytes.
    #[serde(with = "base64_bytes", rename = "content_base64")]
    pub content: Vec<u8>,
}

/// Why a run's input files were not all written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum InputsError {
    /// A file is refused (bad path, over the quota) or could not be written.
    #[error("{0}")]
    Refused(String),
    /// Writing them took the run's whole time limit.
    #[error(
        "writing the input files took the run's whole time limit ({written} of {total} written)"
    )]
    OutOfTime {
        /// Files written before the limit.
        written: usize,
        /// Files given.
        total: usize,
    },
}

impl From<String> for InputsError {
    fn from(message: String) -> InputsError {
        InputsError::Refused(message)
    }
}

/// Why a set of mounts is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MountError {
    /// The guest path is not absolute, is `/`, or contains `..`.
    #[error("mount guest path `{path}` {problem}")]
    GuestPath {
        /// The guest path as given.
        path: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The host folder cannot be opened.
    #[error("mount `{}`: cannot open the host folder: {reason}", .host.display())]
    HostUnreadable {
        /// The host path as given.
        host: PathBuf,
        /// The system's reason.
        reason: String,
    },
    /// The host path is not a folder.
    #[error("mount `{}`: the host path is not a folder", .host.display())]
    NotAFolder {
        /// The host path as given.
        host: PathBuf,
    },
    /// The guest path is at, under or above `/tmp` or `/output`.
    #[error("mount at `{guest}` overlaps {provided}, which sandpy provides")]
    Provided {
        /// The normalised guest path.
        guest: String,
        /// `/tmp` or `/output`.
        provided: &'static str,
    },
    /// Two mounts' guest paths overlap.
    #[error("mounts at `{guest}` and `{other}` overlap")]
    Overlap {
        /// The later mount's guest path.
        guest: String,
        /// The earlier one's.
        other: String,
    },
}

impl Mount {
    /// Check a set of mounts as a run would: absolute, non-overlapping guest paths away
    /// from `/tmp` and `/output`, existing host folders.
    pub fn validate(mounts: &[Mount]) -> Result<(), MountError> {
        check_mounts(mounts).map(drop)
    }
}

/// Mounts that passed [`check_mounts`]: canonical host folders and normalised guest paths.
#[derive(Debug)]
pub(crate) struct CheckedMounts(pub(crate) Vec<(PathBuf, String)>);

impl OutputFile {
    /// A file named `name` (relative to `/output`), its type guessed from the extension.
    pub(crate) fn new(name: String, content: Vec<u8>) -> OutputFile {
        let mime_type = mime_guess::from_path(&name)
            .first_or_octet_stream()
            .to_string();
        OutputFile {
            name,
            size: content.len() as u64,
            mime_type,
            content,
        }
    }

    /// The content as text, when it is UTF-8.
    pub fn text(&self) -> Option<&str> {
        std::str::from_utf8(&self.content).ok()
    }
}

pub(crate) mod base64_bytes {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)
    }
}

/// An input's path relative to the scratch folder, or why it is refused.
pub(crate) fn scratch_relative(path: &str) -> Result<PathBuf, String> {
    let rest = match path.strip_prefix(SCRATCH_DIR) {
        Some(rest) if rest.starts_with('/') => rest,
        _ if path.starts_with('/') => {
            return Err(format!(
                "input file `{path}` must be relative or under {SCRATCH_DIR} (the working directory); mount a folder to put files elsewhere"
            ))
        }
        _ => path,
    };
    let mut relative = PathBuf::new();
    for part in rest.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(format!("input file `{path}` must not contain `..`")),
            part if part.contains('\0') => {
                return Err(format!("input file `{path}` contains a NUL byte"))
            }
            part => relative.push(part),
        }
    }
    if relative.as_os_str().is_empty() {
        return Err(format!("input file `{path}` names no file"));
    }
    Ok(relative)
}

/// Mounts with canonical host folders and normalised guest paths, or why one is refused.
pub(crate) fn check_mounts(mounts: &[Mount]) -> Result<CheckedMounts, MountError> {
    let mut checked: Vec<(PathBuf, String)> = Vec::with_capacity(mounts.len());
    for mount in mounts {
        let guest = normal_guest_path(&mount.guest)?;
        // Resolved through the one check of host paths: no other user controls a folder or
        // a link on the way, so the folder opened for each run is the one checked here.
        let host =
            crate::host_paths::input(&mount.host).map_err(|e| MountError::HostUnreadable {
                host: mount.host.clone(),
                reason: e.to_string(),
            })?;
        match std::fs::metadata(&host) {
            Err(e) => {
                return Err(MountError::HostUnreadable {
                    host: mount.host.clone(),
                    reason: e.to_string(),
                })
            }
            Ok(meta) if !meta.is_dir() => {
                return Err(MountError::NotAFolder {
                    host: mount.host.clone(),
                })
            }
            Ok(_) => {}
        }
        let overlaps = |other: &str| {
            let (a, b) = (format!("{guest}/"), format!("{other}/"));
            a.starts_with(&b) || b.starts_with(&a)
        };
        if let Some(taken) = [SCRATCH_DIR, OUTPUT_DIR]
            .into_iter()
            .find(|dir| overlaps(dir))
        {
            return Err(MountError::Provided {
                guest,
                provided: taken,
            });
        }
        if let Some((_, other)) = checked.iter().find(|(_, other)| overlaps(other)) {
            return Err(MountError::Overlap {
                guest,
                other: other.clone(),
            });
        }
        checked.push((host, guest));
    }
    Ok(CheckedMounts(checked))
}

fn normal_guest_path(path: &str) -> Result<String, MountError> {
    let refuse = |problem| {
        Err(MountError::GuestPath {
            path: path.to_string(),
            problem,
        })
    };
    if !path.starts_with('/') {
        return refuse("must be absolute");
    }
    let mut parts = Vec::new();
    for component in Path::new(path).components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            _ => return refuse("must not contain `..`"),
        }
    }
    if parts.is_empty() {
        return refuse("must not be `/`");
    }
    Ok(format!("/{}", parts.join("/")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_paths_stay_in_the_scratch_folder() {
        assert_eq!(
            scratch_relative("data.csv").unwrap(),
            PathBuf::from("data.csv")
        );
        assert_eq!(
            scratch_relative("/tmp/in/data.csv").unwrap(),
            PathBuf::from("in/data.csv")
        );
        assert_eq!(scratch_relative("./a//b").unwrap(), PathBuf::from("a/b"));
        for bad in [
            "../x",
            "a/../../x",
            "/etc/passwd",
            "/tmpx/a",
            "",
            "/tmp/",
            "a\0b",
        ] {
            assert!(scratch_relative(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn mounts_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().to_path_buf();
        let mount = |guest: &str| Mount {
            host: host.clone(),
            guest: guest.into(),
        };
        assert_eq!(check_mounts(&[mount("/data/")]).unwrap().0[0].1, "/data");
        for bad in ["data", "/", "/tmp", "/tmp/x", "/output", "/a/../tmp"] {
            assert!(check_mounts(&[mount(bad)]).is_err(), "{bad:?} was accepted");
        }
        assert!(check_mounts(&[mount("/a"), mount("/a/b")])
            .unwrap_err()
            .to_string()
            .contains("overlap"));
        let missing = Mount {
            host: host.join("missing"),
            guest: "/m".into(),
        };
        assert!(check_mounts(&[missing])
            .unwrap_err()
            .to_string()
            .contains("cannot open"));
    }
}
