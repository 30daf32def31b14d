//! The one place that decides whether sandpy may use a host path: the folders it keeps for
//! itself (the cache with compiled code, the native guest's files and the toolchain; the
//! scratch base; saved sessions; the warm runner's sockets), the files whose content the
//! host trusts (config files, CA files, cached code), and the paths a user names for a run
//! (program files, input files, mounts, the output folder).
//!
//! Such paths are opened by name, so whoever can change a folder on the way can change
//! what sandpy reads, runs or writes: a cache folder another user made first let their
//! Python run in root's zygote. Every path is therefore walked from `/`, one component at a
//! time, without following a link blindly:
//!
//! - each folder on the way belongs to this user or to root, and no other user can write
//!   in it unless it is sticky (as `/tmp` is: there others cannot rename what is ours),
//!   and then what is used in it is this user's or root's too (its owner could swap it);
//! - a link on the way is followed only if this user or root made it (a link's owner is
//!   the only one who can change it inside such a folder); any other user's link is refused;
//! - the path itself is then checked for what it is for ([`Use`], [`trusted_file`],
//!   [`input`]).
//!
//! Once a path passes, no other user can change any component of it, so what is opened
//! later is what was checked. What is refused comes back as a [`FolderError`] that names
//! the component and whose it is, never used.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// Why a host path cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FolderError {
    /// The path (or a folder on the way) could not be made or inspected.
    #[error("cannot create or inspect `{path}`")]
    Io {
        /// The path.
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
    /// A folder, a link or anything but a regular file is in the file's place.
    #[error("`{path}` is not a regular file")]
    NotAFile {
        /// The file.
        path: PathBuf,
    },
    /// Another user owns the path (or a folder on the way), so they control what is in it.
    #[error("`{path}` belongs to user {owner}, not to this user ({uid}) or root: another user controls what is in it; remove it or choose another place")]
    NotOwned {
        /// The path or the folder on the way.
        path: PathBuf,
        /// Its owner's user id.
        owner: u32,
        /// This process's effective user id.
        uid: u32,
    },
    /// Other users can write in the path (or a folder on the way), so what is in it may be
    /// theirs.
    #[error("`{path}` can be written by other users (mode {mode:o}): remove it, close it or choose another place")]
    OpenToOthers {
        /// The path or the folder on the way.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A link on the way belongs to another user, who can point it anywhere at any time.
    #[error("`{path}` is a link made by user {owner}, not by this user ({uid}) or root: it is not followed")]
    ForeignLink {
        /// The link.
        path: PathBuf,
        /// Its owner's user id.
        owner: u32,
        /// This process's effective user id.
        uid: u32,
    },
    /// More links on the way than the kernel itself follows.
    #[error("`{path}`: more than {MAX_LINKS} links on the way")]
    TooManyLinks {
        /// The path asked for.
        path: PathBuf,
    },
}

/// Links followed on one path at most, as Linux's own `MAXSYMLINKS`.
const MAX_LINKS: usize = 40;

/// What a folder is for, and so which owners and modes it may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Use {
    /// Holds what runs write and sessions saved: made mode 0700, this user's alone; an
    /// existing one readable by others (an older sandpy made them 0755) is closed.
    Private,
    /// Holds what this host loads (compiled code, the native guest, the toolchain): owned
    /// by this user or by root (an image made by root and run by another user) and written
    /// by no one else. Others may read.
    Trusted,
}

/// The user this process acts as.
fn this_user() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Where a walk ended: the real path (links resolved) and what is there, if anything.
struct Walked {
    real: PathBuf,
    meta: Option<std::fs::Metadata>,
}

/// Walk `path` from `/`: every folder on the way must be this user's or root's and closed
/// to other writers (unless sticky), and every link on the way this user's or root's.
/// With `make`, missing components are made (the last one with `make`'s mode, those
/// before it 0755 before the umask) and checked like the rest; without it, the walk ends
/// at the first missing one. The last component is not judged: the caller does that.
fn walk(path: &Path, make: Option<u32>) -> Result<Walked, FolderError> {
    let uid = this_user();
    let io = |at: &Path| {
        let at = at.to_path_buf();
        move |source| FolderError::Io { path: at, source }
    };
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().map_err(io(path))?.join(path)
    };
    let mut pending: VecDeque<OsString> = VecDeque::new();
    push_components(&mut pending, &absolute, false);
    let mut real = PathBuf::from("/");
    let mut meta = std::fs::symlink_metadata(&real).map_err(io(&real))?;
    let mut links = 0;
    while let Some(name) = pending.pop_front() {
        if name == ".." {
            real.pop();
            meta = std::fs::symlink_metadata(&real).map_err(io(&real))?;
            continue;
        }
        // `real` is a folder on the way to something: it must be one no one else controls.
        let shared = folder_on_the_way(&real, &meta, uid)?;
        let next = real.join(&name);
        let last = pending.is_empty();
        let found = match std::fs::symlink_metadata(&next) {
            Ok(found) => found,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match make {
                None => {
                    return Ok(Walked {
                        real: next,
                        meta: None,
                    })
                }
                Some(mode) => {
                    let mode = if last { mode } else { 0o755 };
                    match std::fs::DirBuilder::new().mode(mode).create(&next) {
                        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                            return Err(io(&next)(e))
                        }
                        // Someone may have made it first: judged like any other below.
                        _ => std::fs::symlink_metadata(&next).map_err(io(&next))?,
                    }
                }
            },
            Err(e) => return Err(io(&next)(e)),
        };
        // In a sticky folder open to others (as `/tmp`), an entry's owner may rename it and
        // put anything in its place: what is used there must be ours or root's.
        if shared && found.uid() != uid && found.uid() != 0 && !found.file_type().is_symlink() {
            return Err(FolderError::NotOwned {
                path: next,
                owner: found.uid(),
                uid,
            });
        }
        if found.file_type().is_symlink() {
            if found.uid() != uid && found.uid() != 0 {
                return Err(FolderError::ForeignLink {
                    path: next,
                    owner: found.uid(),
                    uid,
                });
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(FolderError::TooManyLinks {
                    path: path.to_path_buf(),
                });
            }
            let target = std::fs::read_link(&next).map_err(io(&next))?;
            if target.is_absolute() {
                real = PathBuf::from("/");
                meta = std::fs::symlink_metadata(&real).map_err(io(&real))?;
            }
            push_components(&mut pending, &target, true);
            continue;
        }
        real = next;
        meta = found;
    }
    Ok(Walked {
        real,
        meta: Some(meta),
    })
}

/// Queue `path`'s components (at the front when `front`, as a link's target is walked
/// before what followed the link).
fn push_components(pending: &mut VecDeque<OsString>, path: &Path, front: bool) {
    let parts: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name.to_os_string()),
            Component::ParentDir => Some("..".into()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    if front {
        for part in parts.into_iter().rev() {
            pending.push_front(part);
        }
    } else {
        pending.extend(parts);
    }
}

/// A folder that something sandpy uses lies in: a real folder of this user's or root's
/// that no other user can write in, or a sticky one (others cannot rename what is not
/// theirs in it). True for the sticky one that others can write in: what is used in it
/// must then be this user's or root's too.
fn folder_on_the_way(path: &Path, meta: &std::fs::Metadata, uid: u32) -> Result<bool, FolderError> {
    if !meta.is_dir() {
        return Err(FolderError::NotAFolder {
            path: path.to_path_buf(),
        });
    }
    if meta.uid() != uid && meta.uid() != 0 {
        return Err(FolderError::NotOwned {
            path: path.to_path_buf(),
            owner: meta.uid(),
            uid,
        });
    }
    let mode = meta.mode() & 0o7777;
    let open = mode & 0o022 != 0;
    if open && mode & 0o1000 == 0 {
        return Err(FolderError::OpenToOthers {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(open)
}

/// Make `path` (and the folders above it) if it is missing, then check that it, and every
/// folder and link on the way to it, is fit for `purpose`: a real folder, owned as [`Use`]
/// says, that no other user can write in. A link in its own place is refused, even ours.
pub(crate) fn ensure(path: &Path, purpose: Use) -> Result<(), FolderError> {
    check_folder(path, purpose, true)
}

/// [`ensure`] for a folder that must exist already (one that sandpy does not make: a
/// Python installation's folders): a missing one is an [`FolderError::Io`] error.
pub(crate) fn existing_folder(path: &Path, purpose: Use) -> Result<(), FolderError> {
    check_folder(path, purpose, false)
}

fn check_folder(path: &Path, purpose: Use, make: bool) -> Result<(), FolderError> {
    let uid = this_user();
    if let Ok(link) = std::fs::symlink_metadata(path) {
        if link.file_type().is_symlink() {
            // Never followed; whose it is, if not ours, is what the user needs to know.
            if link.uid() != uid && link.uid() != 0 {
                return Err(FolderError::ForeignLink {
                    path: path.to_path_buf(),
                    owner: link.uid(),
                    uid,
                });
            }
            return Err(FolderError::NotAFolder {
                path: path.to_path_buf(),
            });
        }
    }
    // Made private, or readable by others where they may read it (a venv the native
    // tier's confined runs read, a folder of outputs).
    let mode = if purpose == Use::Private {
        0o700
    } else {
        0o755
    };
    let walked = walk(path, make.then_some(mode))?;
    let meta = walked.meta.ok_or_else(|| FolderError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::from_raw_os_error(libc::ENOENT),
    })?;
    if !meta.is_dir() {
        return Err(FolderError::NotAFolder {
            path: path.to_path_buf(),
        });
    }
    owned_and_closed(path, &meta, uid, purpose == Use::Trusted)?;
    // Readable by others (an older sandpy made them 0755): closed.
    let mode = meta.mode() & 0o7777;
    if purpose == Use::Private && mode & 0o077 != 0 {
        std::fs::set_permissions(&walked.real, std::fs::Permissions::from_mode(0o700)).map_err(
            |source| FolderError::Io {
                path: path.to_path_buf(),
                source,
            },
        )?;
    }
    Ok(())
}

/// Check a file whose content this host trusts (a config file, a CA file, cached native
/// code, the toolchain's programs): every folder and link on the way as [`ensure`] checks
/// them, and the file itself a regular file (not a link) of this user's or root's that no
/// other user can write. Returns its metadata.
pub(crate) fn trusted_file(path: &Path) -> Result<std::fs::Metadata, FolderError> {
    let uid = this_user();
    let walked = walk(path, None)?;
    let Some(meta) = walked.meta else {
        return Err(FolderError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::from_raw_os_error(libc::ENOENT),
        });
    };
    if !meta.is_file() {
        return Err(FolderError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    owned_and_closed(path, &meta, uid, true)?;
    Ok(meta)
}

/// `meta` (of `path`) owned by this user (or by root where `root_too`) and writable by no
/// one else: one that others could write in may already hold their links, so it is refused,
/// not repaired.
fn owned_and_closed(
    path: &Path,
    meta: &std::fs::Metadata,
    uid: u32,
    root_too: bool,
) -> Result<(), FolderError> {
    if meta.uid() != uid && !(root_too && meta.uid() == 0) {
        return Err(FolderError::NotOwned {
            path: path.to_path_buf(),
            owner: meta.uid(),
            uid,
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(FolderError::OpenToOthers {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// Check a folder of programs this host runs (the toolchain's venv): the folder as
/// [`ensure`] checks it for [`Use::Trusted`], and everything in it, at any depth, this
/// user's or root's and writable by no one else, with every link in it this user's or
/// root's (where a link leads outside is checked when that program is run, by
/// [`trusted_file`]). Refused at the first entry that is not.
pub(crate) fn trusted_tree(path: &Path) -> Result<(), FolderError> {
    existing_folder(path, Use::Trusted)?;
    let uid = this_user();
    let mut folders = vec![path.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let io = |source| FolderError::Io {
            path: folder.clone(),
            source,
        };
        for entry in std::fs::read_dir(&folder).map_err(io)? {
            let entry = entry.map_err(io)?;
            let entry_path = entry.path();
            let meta =
                std::fs::symlink_metadata(&entry_path).map_err(|source| FolderError::Io {
                    path: entry_path.clone(),
                    source,
                })?;
            if meta.uid() != uid && meta.uid() != 0 {
                return Err(FolderError::NotOwned {
                    path: entry_path,
                    owner: meta.uid(),
                    uid,
                });
            }
            if meta.file_type().is_symlink() {
                continue;
            }
            let mode = meta.mode() & 0o7777;
            if mode & 0o022 != 0 {
                return Err(FolderError::OpenToOthers {
                    path: entry_path,
                    mode,
                });
            }
            if meta.is_dir() {
                folders.push(entry_path);
            }
        }
    }
    Ok(())
}

/// Check a path a user names for a run (a program or input file, a mount) and return it
/// with its links resolved: every folder and link on the way as [`ensure`] checks them,
/// so no other user can swap what it leads to between this check and its use. The file
/// or folder itself may be anyone's (what it holds goes into the sandbox), unless it lies
/// in a sticky folder open to others, where its owner could swap it. A missing path is
/// returned as it would be.
pub(crate) fn input(path: &Path) -> Result<PathBuf, FolderError> {
    Ok(walk(path, None)?.real)
}

/// The scratch base when none is configured: a folder of this user's own under the system's
/// temporary folder, so that users of one machine never share (or fight over) one.
pub(crate) fn default_scratch_base() -> PathBuf {
    std::env::temp_dir().join(format!("sandpy-{}", this_user()))
}

#[cfg(test)]
mod tests;
