//! The files a run left under `/output`, read by the zygote through `/proc/<pid>/root` at
//! every end where the process is still there: once the run answered (it is stopped
//! first), and at its deadline, so that a timed-out run returns its files as it does in
//! the WebAssembly tier. The run never reports its files itself: what its code can write
//! (the channel) is never authority over what the host returns. A session's `/output` is
//! then emptied ([`empty`]) for its next cell.
//!
//! The run's `/output` is its own tmpfs and the run may still be changing it, so nothing
//! in it is trusted: each name is opened on its own relative to its folder's descriptor
//! with `O_NOFOLLOW` (a link, even one swapped in during the walk, is never followed out of
//! the run's root into the zygote's), only regular files are read, opening never blocks
//! (`O_NONBLOCK`: a FIFO), and what is read is bounded by the run's `/output` size, a count
//! of entries and a depth, whatever sizes the files claim (a sparse file claims any).

use super::protocol::ReportFile;
use nix::dir::Dir;
use nix::fcntl::{open, openat, OFlag};
use nix::sys::stat::{fstat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};
use std::io::Read;
use std::os::fd::OwnedFd;

/// Most entries (files and folders) looked at.
const MAX_ENTRIES: usize = 10_000;
/// Deepest folder looked into.
const MAX_DEPTH: usize = 32;
/// Most bytes of names (paths under `/output`) reported in all.
const MAX_NAME_BYTES: usize = 1 << 20;

/// The most bytes the files read from an `/output` of `output_files_bytes` take in the
/// zygote's JSON report: content as base64 (4/3), names with every byte escaped (`\u00XX`,
/// 6), and each file's JSON frame.
pub(crate) fn report_bytes(output_files_bytes: u64) -> usize {
    (output_files_bytes as usize)
        .saturating_mul(2)
        .saturating_add(MAX_NAME_BYTES * 6)
        .saturating_add(MAX_ENTRIES * 64)
}

/// The regular files under the `/output` of run `pid` (which must still be alive), at most
/// `cap` bytes of content in all, sorted by name.
pub(crate) fn read(pid: i32, cap: u64) -> Vec<ReportFile> {
    let Some(output) = open_output(pid) else {
        return Vec::new();
    };
    let mut walk = Walk {
        files: Vec::new(),
        left: cap,
        entries: 0,
        name_bytes: 0,
    };
    walk.folder(output, String::new(), 0);
    walk.files.sort_by(|a, b| a.name.cmp(&b.name));
    walk.files
}

/// The `/output` folder of run `pid`, opened without following a link.
fn open_output(pid: i32) -> Option<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let root = open(
        format!("/proc/{pid}/root").as_str(),
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    );
    root.and_then(|root| openat(&root, "output", flags, Mode::empty()))
        .ok()
}

/// Remove what is under the `/output` of run `pid` (which must be stopped), each name
/// under its folder's descriptor, never following a link, within the walk's bounds;
/// what cannot be removed stays (and is returned again with the next cell).
pub(crate) fn empty(pid: i32) {
    if let Some(output) = open_output(pid) {
        let mut entries = 0;
        remove_within(output, 0, &mut entries);
    }
}

fn remove_within(folder: OwnedFd, depth: usize, entries: &mut usize) {
    let Ok(mut dir) = Dir::from_fd(folder) else {
        return;
    };
    let mut names = Vec::new();
    for entry in dir.iter().flatten() {
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        *entries += 1;
        if *entries > MAX_ENTRIES {
            break;
        }
        names.push(name.to_owned());
    }
    for name in names {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        if depth < MAX_DEPTH {
            if let Ok(inner) = openat(&dir, name.as_c_str(), flags, Mode::empty()) {
                remove_within(inner, depth + 1, entries);
                let _ = unlinkat(&dir, name.as_c_str(), UnlinkatFlags::RemoveDir);
                continue;
            }
        }
        let _ = unlinkat(&dir, name.as_c_str(), UnlinkatFlags::NoRemoveDir);
    }
}

struct Walk {
    files: Vec<ReportFile>,
    /// Bytes of content still allowed.
    left: u64,
    entries: usize,
    name_bytes: usize,
}

impl Walk {
    fn folder(&mut self, folder: OwnedFd, prefix: String, depth: usize) {
        let Ok(mut dir) = Dir::from_fd(folder) else {
            return;
        };
        let mut names = Vec::new();
        for entry in dir.iter().flatten() {
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            self.entries += 1;
            if self.entries > MAX_ENTRIES {
                break;
            }
            // Names that are not UTF-8 cannot be reported (the WebAssembly tier has none).
            if let Ok(name) = std::str::from_utf8(name) {
                names.push(name.to_string());
            }
        }
        for name in names {
            let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
            let Ok(fd) = openat(&dir, name.as_str(), flags, Mode::empty()) else {
                continue; // a link (ELOOP), or gone
            };
            let Ok(stat) = fstat(&fd) else {
                continue;
            };
            let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
            let path = format!("{prefix}{name}");
            self.name_bytes += path.len();
            if self.name_bytes > MAX_NAME_BYTES {
                return;
            }
            if kind == SFlag::S_IFDIR {
                if depth < MAX_DEPTH {
                    self.folder(fd, format!("{path}/"), depth + 1);
                }
            } else if kind == SFlag::S_IFREG {
                // As in the WebAssembly tier, a file that does not fit in what is left is
                // skipped, never cut.
                let mut content = Vec::new();
                let read = std::fs::File::from(fd)
                    .take(self.left.saturating_add(1))
                    .read_to_end(&mut content);
                if read.is_ok() && content.len() as u64 <= self.left {
                    self.left -= content.len() as u64;
                    self.files.push(ReportFile {
                        name: path,
                        content,
                    });
                }
            }
        }
    }
}
