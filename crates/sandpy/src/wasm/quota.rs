//! The quotas of a WebAssembly run's folders and the cap on its open files, charged by
//! the filesystem functions that `disk.rs` shadows.
//!
//! Accounting is optimistic and self-correcting: growth is added to a running total;
//! when the total would pass the quota, the folder is measured afresh (deleted and
//! truncated files give their room back) before refusing. Each entry (file, folder,
//! link) costs [`ENTRY_BYTES`], so empty files cannot exhaust the host's inodes either.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode;

/// What each directory entry costs against a quota.
pub(crate) const ENTRY_BYTES: u64 = 512;

/// Files (and folders) a run may hold open at once; the host's descriptor table is
/// shared by every run of the process.
pub(crate) const MAX_OPEN_DESCRIPTORS: usize = 256;

/// One preopened folder as the guest sees it, and its quota (none when read-only).
pub(crate) struct Area {
    /// Guest path, e.g. `/tmp`.
    pub guest: String,
    pub(super) root: PathBuf,
    /// `None`: read-only (wasmtime-wasi refuses every write).
    pub(super) limit: Option<u64>,
    pub(super) used: Mutex<u64>,
}

impl Area {
    /// A writable area over `root`, which must start empty.
    pub(crate) fn writable(guest: &str, root: &Path, limit: u64) -> Area {
        Area {
            guest: guest.into(),
            root: root.into(),
            limit: Some(limit),
            used: Mutex::new(0),
        }
    }

    pub(crate) fn read_only(guest: &str, root: &Path) -> Area {
        Area {
            guest: guest.into(),
            root: root.into(),
            limit: None,
            used: Mutex::new(0),
        }
    }

    pub(super) fn used(&self) -> MutexGuard<'_, u64> {
        self.used.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Measure the folder afresh; returns the bytes it holds.
    pub(crate) fn remeasure(&self) -> u64 {
        let measured = measure(&self.root);
        *self.used() = measured;
        measured
    }

    /// Take `growth` bytes from the quota, or say how much is left.
    pub(super) fn charge(&self, growth: u64) -> Result<(), DiskLimit> {
        let Some(limit) = self.limit else {
            return Err(DiskLimit::ReadOnly);
        };
        let mut used = self.used();
        if used.saturating_add(growth) <= limit {
            *used += growth;
            return Ok(());
        }
        *used = measure(&self.root);
        if used.saturating_add(growth) <= limit {
            *used += growth;
            return Ok(());
        }
        Err(DiskLimit::Quota {
            area: self.guest.clone(),
            limit,
        })
    }
}

/// Bytes under `root`: file lengths plus [`ENTRY_BYTES`] per entry; symlinks are not
/// followed.
fn measure(root: &Path) -> u64 {
    let mut total = 0u64;
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            total = total.saturating_add(ENTRY_BYTES);
            if meta.is_dir() {
                pending.push(entry.path());
            } else if meta.is_file() {
                total = total.saturating_add(meta.len());
            }
        }
    }
    total
}

/// Why a write was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DiskLimit {
    Quota { area: String, limit: u64 },
    OpenFiles,
    ReadOnly,
}

impl DiskLimit {
    pub(super) fn code(&self) -> ErrorCode {
        match self {
            DiskLimit::Quota { .. } => ErrorCode::InsufficientSpace,
            DiskLimit::OpenFiles => ErrorCode::InsufficientMemory,
            DiskLimit::ReadOnly => ErrorCode::NotPermitted,
        }
    }

    /// The message of the `disk_limit` status, when a refusal ended the run.
    pub(crate) fn message(&self) -> String {
        match self {
            DiskLimit::Quota { area, limit } => {
                format!("the run exceeded its disk quota of {limit} bytes under {area}")
            }
            DiskLimit::OpenFiles => {
                format!("the run had more than {MAX_OPEN_DESCRIPTORS} files open at once")
            }
            DiskLimit::ReadOnly => "the run wrote to a read-only folder".into(),
        }
    }
}

/// Which area each live descriptor belongs to, and the first limit refusal of the run.
#[derive(Default)]
pub(crate) struct DiskGuard {
    pub(super) areas: Vec<Arc<Area>>,
    pub(super) descriptors: HashMap<u32, Arc<Area>>,
    pub(super) refusal: Arc<Mutex<Option<DiskLimit>>>,
}

impl DiskGuard {
    pub(crate) fn new(areas: Vec<Arc<Area>>) -> DiskGuard {
        DiskGuard {
            areas,
            ..DiskGuard::default()
        }
    }

    /// The first quota or open-file refusal since the last call, if any.
    pub(crate) fn take_refusal(&self) -> Option<DiskLimit> {
        self.refusal
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    pub(super) fn note(&self, refusal: &DiskLimit) {
        if *refusal != DiskLimit::ReadOnly {
            self.refusal
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert_with(|| refusal.clone());
        }
    }

    pub(super) fn area(&self, fd: u32) -> Result<Arc<Area>, DiskLimit> {
        self.descriptors
            .get(&fd)
            .cloned()
            .ok_or(DiskLimit::ReadOnly)
    }

    /// Whether two descriptors are in the same folder tree: moving or linking between
    /// trees is refused as a cross-device operation (`EXDEV`), as between file systems,
    /// so that a file cannot leave one quota for another (`shutil.move` copies instead).
    pub(super) fn same_area(&self, a: u32, b: u32) -> bool {
        matches!((self.area(a), self.area(b)), (Ok(a), Ok(b)) if Arc::ptr_eq(&a, &b))
    }

    pub(super) fn charge(&self, fd: u32, growth: u64) -> Result<(), ErrorCode> {
        self.area(fd)
            .and_then(|area| area.charge(growth))
            .map_err(|refusal| {
                self.note(&refusal);
                refusal.code()
            })
    }
}
