//! The folders sandpy keeps on the host for itself: the scratch base (every run's `/tmp`
//! and `/output`, and the guest's `/`), the compiled-code cache and the saved sessions.
//!
//! They are reopened by path, so whoever can change what is in them can change what a run
//! sees (a run folder swapped for a link to `/` gave the guest the host's files) or what
//! the host loads (a compiled runtime in the cache is native code). A folder is used only
//! when this user owns it and no other user can write in it; a scratch or session folder
//! is, besides, closed to every other user (mode 0700). A folder someone else made first,
//! or a link in its place, is refused with an error that says whose it is, never used.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a folder sandpy keeps for itself cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FolderError {
    /// The folder (or one above it) could not be made or inspected.
    #[error("cannot create or inspect `{path}`")]
    Io {
        /// The folder.
        path: PathBuf,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// A link, a file or anything but a real folder is in the folder's place.
    #[error("`{path}` is not a folder (a link or a file is in its place): remove it or choose another folder")]
    NotAFolder {
        /// The folder.
        path: PathBuf,
    },
    /// Another user owns the folder, so they control what is in it.
    #[error("`{path}` belongs to user {owner}, not to this user ({uid}): another user controls what is in it; remove it or choose another folder")]
    NotOwned {
        /// The folder.
        path: PathBuf,
        /// Its owner's user id.
        owner: u32,
        /// This process's effective user id.
        uid: u32,
    },
    /// Other users can write in the folder, so what is in it may be theirs.
    #[error("`{path}` can be written by other users (mode {mode:o}): remove it or choose another folder")]
    OpenToOthers {
        /// The folder.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
}

/// What a folder is for, and so which owners and modes it may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Use {
    /// Holds what runs write and sessions saved: made mode 0700, this user's alone; an
    /// existing one readable by others (an older sandpy made them 0755) is closed.
    Private,
    /// Holds what this host loads (compiled code): owned by this user or by root (an image
    /// made by root and run by another user) and written by no one else. Others may read.
    Trusted,
}

/// Make `path` (and the folders above it) if it is missing, then check that it is fit for
/// `purpose`: a real folder, owned as [`Use`] says, that no other user can write in.
pub(crate) fn ensure(path: &Path, purpose: Use) -> Result<(), FolderError> {
    let io = |source| FolderError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(io(e)),
        _ => {}
    }
    let meta = std::fs::symlink_metadata(path).map_err(io)?;
    if !meta.is_dir() {
        return Err(FolderError::NotAFolder {
            path: path.to_path_buf(),
        });
    }
    let uid = nix::unistd::geteuid().as_raw();
    let owner_ok = meta.uid() == uid || (purpose == Use::Trusted && meta.uid() == 0);
    if !owner_ok {
        return Err(FolderError::NotOwned {
            path: path.to_path_buf(),
            owner: meta.uid(),
            uid,
        });
    }
    let mode = meta.mode() & 0o7777;
    // A folder others could write in may already hold their links: refused, not repaired.
    if mode & 0o022 != 0 {
        return Err(FolderError::OpenToOthers {
            path: path.to_path_buf(),
            mode,
        });
    }
    if purpose == Use::Private && mode & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
    }
    Ok(())
}

/// The scratch base when none is configured: a folder of this user's own under the system's
/// temporary folder, so that users of one machine never share (or fight over) one.
pub(crate) fn default_scratch_base() -> PathBuf {
    std::env::temp_dir().join(format!("sandpy-{}", nix::unistd::geteuid().as_raw()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_folder_is_made_private_and_a_readable_one_of_ours_is_closed() {
        let base = tempfile::tempdir().expect("temp dir");
        let made = base.path().join("a/b");
        ensure(&made, Use::Private).expect("made");
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").mode() & 0o777;
        assert_eq!(mode(&made), 0o700);
        let open = base.path().join("open");
        std::fs::create_dir(&open).expect("mkdir");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        ensure(&open, Use::Private).expect("closed");
        assert_eq!(mode(&open), 0o700);
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        ensure(&open, Use::Trusted).expect("a cache may be read by others");
        assert_eq!(mode(&open), 0o755, "and is left as it is");
    }

    #[test]
    fn a_folder_others_can_write_in_or_a_link_is_refused() {
        let base = tempfile::tempdir().expect("temp dir");
        let shared = base.path().join("shared");
        std::fs::create_dir(&shared).expect("mkdir");
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
        for purpose in [Use::Private, Use::Trusted] {
            let error = ensure(&shared, purpose).expect_err("refused");
            assert!(
                matches!(error, FolderError::OpenToOthers { mode: 0o1777, .. }),
                "{error:?}"
            );
        }
        let link = base.path().join("link");
        std::os::unix::fs::symlink("/", &link).expect("symlink");
        let error = ensure(&link, Use::Private).expect_err("refused");
        assert!(matches!(error, FolderError::NotAFolder { .. }), "{error:?}");
        assert!(error.to_string().contains("link"), "{error}");
    }
}
