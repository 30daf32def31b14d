//! Saved sessions on disk: `<save_dir>/<name>.session.json` for the process's own
//! sessions, `<save_dir>/<tenant>/<name>.session.json` for a tenant's.
//!
//! Whoever can write in `save_dir` could plant a link there to make the server write over,
//! or read back, a file elsewhere. So no link is followed below `save_dir`: a tenant's
//! folder must be a real folder; a save is written to a new file (`create_new`, which
//! never follows a link) and renamed over the name (which replaces a link, not its
//! target); a read opens the name only if it is not a link, and checks that the file it
//! opened is the one it looked at (no swap in between). `save_dir` itself may be a link
//! (the operator chose it); the folder it names must be this user's alone (mode 0700, made
//! so if missing), so that no other user can plant anything in it in the first place.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A saved session could not be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum SaveError {
    /// The folder could not be made or read.
    #[error("cannot use the folder {}: {source}", .path.display())]
    Folder {
        /// The folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `save_dir` is not this user's alone (another user owns it or can write in it).
    #[error(transparent)]
    NotPrivate(sandpy::files::FolderError),
    /// A link (or something else than a file or folder) was found where a save goes.
    #[error("{} is a link or not a plain file or folder; saved sessions never follow links", .0.display())]
    Link(PathBuf),
    /// No save has this name.
    #[error("no saved session {0:?}")]
    Missing(String),
    /// The file is larger than any save of a journal within its cap.
    #[error("{} holds {size} bytes, more than a saved session may ({max}, from sandpy.sessions.journal_mb)", .path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The most a save may hold.
        max: u64,
    },
    /// Writing failed.
    #[error("cannot write {}: {source}", .path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Reading failed.
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl SaveError {
    /// The message for a caller: whole for the process's own client; for a `remote` one
    /// (over HTTP) without the server's paths, which are logged instead.
    pub(crate) fn shown(&self, remote: bool) -> String {
        if !remote {
            return self.to_string();
        }
        tracing::warn!("saved sessions: {self}");
        match self {
            SaveError::Folder { source, .. } => format!("cannot use the save folder: {source}"),
            SaveError::NotPrivate(_) => {
                "the save folder is not this server's alone (its log says why)".into()
            }
            SaveError::Link(_) => {
                "the save or its folder is a link or not a plain file or folder; saved sessions never follow links".into()
            }
            SaveError::Missing(_) => self.to_string(),
            SaveError::TooLarge { size, max, .. } => format!(
                "the save holds {size} bytes, more than a saved session may ({max}, from sandpy.sessions.journal_mb)"
            ),
            SaveError::Write { source, .. } => format!("cannot write the save: {source}"),
            SaveError::Read { source, .. } => format!("cannot read the save: {source}"),
        }
    }
}

/// Where saves are kept: `root` (made if missing), then `tenant`'s own folder in it.
pub(crate) struct SaveDir {
    path: PathBuf,
}

impl SaveDir {
    /// The folder `root` (the config's `save_dir`), or its `tenant` subfolder; made if
    /// missing, refused if that subfolder is a link.
    pub(crate) fn open(root: &Path, tenant: Option<&str>) -> Result<SaveDir, SaveError> {
        // The folder a link names is the one checked: the operator chose the link.
        let resolved = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
        sandpy::files::private_folder(&resolved).map_err(SaveError::NotPrivate)?;
        let Some(tenant) = tenant else {
            return Ok(SaveDir { path: root.into() });
        };
        let path = root.join(tenant);
        match std::fs::create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(source) => return Err(SaveError::Folder { path, source }),
        }
        let meta = std::fs::symlink_metadata(&path).map_err(|source| SaveError::Folder {
            path: path.clone(),
            source,
        })?;
        if !meta.is_dir() {
            return Err(SaveError::Link(path));
        }
        Ok(SaveDir { path })
    }

    /// The file of the save `name` (a plain name, checked by the caller).
    pub(crate) fn file(&self, name: &str) -> PathBuf {
        self.path.join(format!("{name}.session.json"))
    }

    /// Write `text` as the save `name`, replacing an earlier one (or a link planted in its
    /// place, never its target); the file's path.
    pub(crate) fn write(&self, name: &str, text: &[u8]) -> Result<PathBuf, SaveError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = self.file(name);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let temp = self
            .path
            .join(format!(".{name}.{}-{n}.tmp", std::process::id()));
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .and_then(|mut file| file.write_all(text))
            .and_then(|()| std::fs::rename(&temp, &path));
        if let Err(source) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(SaveError::Write { path, source });
        }
        Ok(path)
    }

    /// The text of the save `name`; refused if the name is a link, or if the file holds
    /// more than `max` bytes (checked before reading, and the read stops there).
    pub(crate) fn read(&self, name: &str, max: u64) -> Result<String, SaveError> {
        let path = self.file(name);
        let read_error = |source| SaveError::Read {
            path: path.clone(),
            source,
        };
        let seen = match std::fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(SaveError::Missing(name.into()))
            }
            Err(e) => return Err(read_error(e)),
        };
        if !seen.is_file() {
            return Err(SaveError::Link(path));
        }
        let file = File::open(&path).map_err(read_error)?;
        let opened = file.metadata().map_err(read_error)?;
        if (opened.dev(), opened.ino()) != (seen.dev(), seen.ino()) {
            return Err(SaveError::Link(path)); // swapped for a link after the look
        }
        let too_large = |size| SaveError::TooLarge {
            path: path.clone(),
            size,
            max,
        };
        if opened.len() > max {
            return Err(too_large(opened.len()));
        }
        let mut text = String::new();
        file.take(max.saturating_add(1))
            .read_to_string(&mut text)
            .map_err(read_error)?;
        if text.len() as u64 > max {
            return Err(too_large(text.len() as u64)); // grew after the look
        }
        Ok(text)
    }
}
