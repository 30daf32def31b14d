//! The files of a run: a private scratch folder seen as `/tmp` (and the working
//! directory), an `/output` folder whose files come back in the [`Execution`], input
//! files written into the scratch folder before the run, and read-only mounts of host
//! folders. All of it lives in a host folder of its own, removed when the run (or the
//! session) ends, or kept for the next run if it was left as it was made; `disk.rs` holds
//! the quotas.
//!
//! [`Execution`]: crate::Execution

use crate::disk::{Area, DiskGuard};
use crate::Limits;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

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

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)
    }
}

/// Where the runs' host folders are made, and the idle ones kept for reuse: a run that
/// leaves its folders empty hands them to the next run instead of removing them (making
/// and removing three folders was ~40 file-system calls per run, some of them journal
/// writes). Emptying a used folder for reuse instead of removing it was tried: no gain
/// (a run with an input and an output file, 1.92-1.99x a `print('hello')` either way).
pub(crate) struct RunFolders {
    base: PathBuf,
    idle: std::sync::Mutex<Vec<RunFolder>>,
    keep: usize,
    /// The guest's `/` for each set of mount points, made once (see [`RunFolders::root`]).
    roots: std::sync::Mutex<HashMap<Vec<String>, Arc<tempfile::TempDir>>>,
}

/// Sets of mount points whose `/` is kept for reuse; beyond them, each run makes its own.
const KEPT_ROOTS: usize = 64;

/// One run folder: `tmp/` and `output/` inside a folder removed when this is dropped.
struct RunFolder {
    dir: tempfile::TempDir,
    /// The sizes of `tmp/` and `output/` when made: a folder grows with the entries ever
    /// made in it, so a reused one must still have this size, or it would tell the next
    /// run that the last one made files.
    fresh_sizes: [u64; 2],
}

/// The run folder's subfolders behind `/tmp` and `/output`.
const SCRATCH_SUBFOLDER: &str = "tmp";
const OUTPUT_SUBFOLDER: &str = "output";
const SUBFOLDERS: [&str; 2] = [SCRATCH_SUBFOLDER, OUTPUT_SUBFOLDER];

impl RunFolders {
    /// Folders under `base`, keeping at most `keep` idle ones.
    pub fn new(base: PathBuf, keep: usize) -> RunFolders {
        RunFolders {
            base,
            idle: std::sync::Mutex::new(Vec::new()),
            keep,
            roots: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The folder the guest sees as `/`, read-only: empty folders named `tmp`, `output`
    /// and after each mount point, so that `/` lists, `os.path.exists('/')` holds and
    /// `os.makedirs('/output/x', exist_ok=True)` works as on Linux, while a new folder
    /// at the top is refused. It holds nothing but those empty folders, so runs share it.
    fn root(&self, mount_points: Vec<String>) -> Result<Arc<tempfile::TempDir>, String> {
        let mut roots = self.roots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(root) = roots.get(&mount_points) {
            return Ok(root.clone());
        }
        let root = Arc::new(self.make_root(&mount_points)?);
        if roots.len() < KEPT_ROOTS {
            roots.insert(mount_points, root.clone());
        }
        Ok(root)
    }

    fn make_root(&self, mount_points: &[String]) -> Result<tempfile::TempDir, String> {
        let root = self.new_folder("root-")?;
        let points = [SCRATCH_DIR, OUTPUT_DIR]
            .into_iter()
            .chain(mount_points.iter().map(String::as_str));
        for point in points {
            let folder = root.path().join(point.trim_start_matches('/'));
            std::fs::create_dir_all(&folder)
                .map_err(|e| format!("cannot create `{}`: {e}", folder.display()))?;
        }
        Ok(root)
    }

    /// A new folder under `base`, named for this process (so that [`sweep_stale`] removes
    /// it if the process dies) and `kind`.
    fn new_folder(&self, kind: &str) -> Result<tempfile::TempDir, String> {
        let base = &self.base;
        std::fs::create_dir_all(base)
            .map_err(|e| format!("cannot create the scratch folder `{}`: {e}", base.display()))?;
        tempfile::Builder::new()
            .prefix(&format!("run-{}-{kind}", std::process::id()))
            .tempdir_in(base)
            .map_err(|e| {
                format!(
                    "cannot create a scratch folder in `{}`: {e}",
                    base.display()
                )
            })
    }

    fn take(&self) -> Result<RunFolder, String> {
        if let Some(folder) = self.idle.lock().ok().and_then(|mut idle| idle.pop()) {
            return Ok(folder);
        }
        let dir = self.new_folder("")?;
        let mut fresh_sizes = [0; 2];
        for (size, name) in fresh_sizes.iter_mut().zip(SUBFOLDERS) {
            let folder = dir.path().join(name);
            std::fs::create_dir(&folder)
                .map_err(|e| format!("cannot create `{}`: {e}", folder.display()))?;
            *size = std::fs::metadata(&folder)
                .map(|m| m.len())
                .unwrap_or(u64::MAX);
        }
        Ok(RunFolder { dir, fresh_sizes })
    }

    /// Keep `folder` for the next run if it is as it was made (empty, same size; its
    /// times are then set to now), else remove it.
    fn give_back(&self, folder: RunFolder) {
        let has_room = || self.idle.lock().is_ok_and(|idle| idle.len() < self.keep);
        // The checks touch the file system: not under the lock other runs wait on.
        if has_room() && folder.as_fresh() {
            if let Ok(mut idle) = self.idle.lock() {
                if idle.len() < self.keep {
                    idle.push(folder);
                }
            }
        }
    }
}

impl RunFolder {
    /// Whether the subfolders are empty and unchanged in size; if so, their times are
    /// reset so that nothing of an earlier run shows.
    fn as_fresh(&self) -> bool {
        SUBFOLDERS
            .iter()
            .zip(self.fresh_sizes)
            .all(|(name, fresh_size)| {
                let path = self.dir.path().join(name);
                let Ok(folder) = std::fs::File::open(&path) else {
                    return false;
                };
                let unchanged = folder
                    .metadata()
                    .is_ok_and(|m| m.is_dir() && m.len() == fresh_size);
                let empty =
                    std::fs::read_dir(&path).is_ok_and(|mut entries| entries.next().is_none());
                let now = std::time::SystemTime::now();
                unchanged
                    && empty
                    && folder
                        .set_times(
                            std::fs::FileTimes::new()
                                .set_accessed(now)
                                .set_modified(now),
                        )
                        .is_ok()
            })
    }
}

/// The host folders behind one run's (or one session's) guest file system.
pub(crate) struct Workspace {
    /// Always `Some` until dropped (then handed back to `folders`).
    folder: Option<RunFolder>,
    /// The guest's `/` (read-only, shared).
    root: Arc<tempfile::TempDir>,
    folders: Arc<RunFolders>,
    scratch: Arc<Area>,
    output: Arc<Area>,
    mounts: Vec<(PathBuf, Arc<Area>)>,
    output_cap: u64,
}

impl Workspace {
    /// Empty scratch and output folders from `folders`, and the mounts.
    pub fn create(
        folders: &Arc<RunFolders>,
        limits: &Limits,
        mounts: CheckedMounts,
    ) -> Result<Workspace, String> {
        let root = folders.root(mounts.0.iter().map(|(_, guest)| guest.clone()).collect())?;
        let folder = folders.take()?;
        let (scratch, output) = (
            folder.dir.path().join(SCRATCH_SUBFOLDER),
            folder.dir.path().join(OUTPUT_SUBFOLDER),
        );
        Ok(Workspace {
            scratch: Arc::new(Area::writable(SCRATCH_DIR, &scratch, limits.disk_bytes)),
            output: Arc::new(Area::writable(
                OUTPUT_DIR,
                &output,
                limits.output_files_bytes,
            )),
            mounts: mounts
                .0
                .into_iter()
                .map(|(host, guest)| {
                    let area = Arc::new(Area::read_only(&guest, &host));
                    (host, area)
                })
                .collect(),
            output_cap: limits.output_files_bytes,
            root,
            folder: Some(folder),
            folders: folders.clone(),
        })
    }

    fn dir(&self) -> &Path {
        self.folder.as_ref().map_or(Path::new(""), |f| f.dir.path())
    }

    fn scratch_path(&self) -> PathBuf {
        self.dir().join(SCRATCH_SUBFOLDER)
    }

    fn output_path(&self) -> PathBuf {
        self.dir().join(OUTPUT_SUBFOLDER)
    }

    /// Write `files` into the scratch folder (without following links the program may
    /// have left there), within the scratch quota, stopping at `deadline`: the setup is
    /// part of the run's time.
    pub fn write_inputs(
        &self,
        files: &[InputFile],
        limits: &Limits,
        deadline: Instant,
    ) -> Result<(), InputsError> {
        if files.is_empty() {
            return Ok(());
        }
        let scratch =
            cap_std::fs::Dir::open_ambient_dir(self.scratch_path(), cap_std::ambient_authority())
                .map_err(|e| format!("cannot open the scratch folder: {e}"))?;
        let used = self.scratch.remeasure();
        let adding: u64 = files
            .iter()
            .map(|f| f.content.len() as u64 + crate::disk::ENTRY_BYTES)
            .sum();
        if used + adding > limits.disk_bytes {
            return Err(InputsError::Refused(format!(
                "the input files need {adding} bytes, over the disk quota of {} bytes ({used} in use)",
                limits.disk_bytes
            )));
        }
        for (written, file) in files.iter().enumerate() {
            if Instant::now() >= deadline {
                self.scratch.remeasure();
                return Err(InputsError::OutOfTime {
                    written,
                    total: files.len(),
                });
            }
            let relative = scratch_relative(&file.path)?;
            if let Some(parent) = relative.parent().filter(|p| !p.as_os_str().is_empty()) {
                scratch.create_dir_all(parent).map_err(|e| {
                    format!("cannot create the folder of input `{}`: {e}", file.path)
                })?;
            }
            scratch
                .write(&relative, &file.content)
                .map_err(|e| format!("cannot write input `{}`: {e}", file.path))?;
        }
        self.scratch.remeasure();
        Ok(())
    }

    /// Preopen the folders in `wasi`: `/` and the mounts read-only, `/tmp` and `/output`
    /// writable. A path goes to the preopen with the longest matching prefix, so `/` only
    /// ever serves the top level itself.
    pub fn preopen(&self, wasi: &mut WasiCtxBuilder) -> Result<(), String> {
        let open = |wasi: &mut WasiCtxBuilder, host: &Path, guest: &str, perms| {
            wasi.preopened_dir(host, guest, perms)
                .map(drop)
                .map_err(|e| format!("cannot open `{}` for the guest: {e:#}", host.display()))
        };
        open(wasi, self.root.path(), "/", FsPerms::ReadOnly)?;
        open(wasi, &self.scratch_path(), SCRATCH_DIR, FsPerms::ReadWrite)?;
        open(wasi, &self.output_path(), OUTPUT_DIR, FsPerms::ReadWrite)?;
        for (host, area) in &self.mounts {
            open(wasi, host, &area.guest, FsPerms::ReadOnly)?;
        }
        Ok(())
    }

    /// The quota keeper for a store using this workspace.
    pub fn guard(&self) -> DiskGuard {
        let root = Arc::new(Area::read_only("/", self.root.path()));
        let mut areas = vec![root, self.scratch.clone(), self.output.clone()];
        areas.extend(self.mounts.iter().map(|(_, area)| area.clone()));
        DiskGuard::new(areas)
    }

    /// Whether `mounts` are the ones this workspace was made with.
    pub fn has_mounts(&self, mounts: &[Mount]) -> bool {
        match check_mounts(mounts) {
            Ok(checked) => checked
                .0
                .iter()
                .map(|(h, g)| (h, g))
                .eq(self.mounts.iter().map(|(h, a)| (h, &a.guest))),
            Err(_) => false,
        }
    }

    /// The files under `/output` (regular files only: links are skipped, never
    /// followed), sorted by name.
    pub fn outputs(&self) -> Vec<OutputFile> {
        let root = self.output_path();
        let mut files = Vec::new();
        let mut total = 0u64;
        let mut pending = vec![root.clone()];
        while let Some(dir) = pending.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let Ok(meta) = path.symlink_metadata() else {
                    continue;
                };
                if meta.is_dir() {
                    pending.push(path);
                    continue;
                }
                if !meta.is_file() || total + meta.len() > self.output_cap {
                    continue;
                }
                let Ok(content) = std::fs::read(&path) else {
                    continue;
                };
                total += content.len() as u64;
                let name = path
                    .strip_prefix(&root)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .replace('\\', "/");
                files.push(OutputFile::new(name, content));
            }
        }
        files.sort_by(|a, b| a.name.cmp(&b.name));
        files
    }

    /// Empty `/output` for the next run of a session.
    pub fn clear_outputs(&self) {
        if let Ok(entries) = std::fs::read_dir(self.output_path()) {
            for entry in entries.flatten() {
                let path = entry.path();
                let removed = match path.symlink_metadata() {
                    Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&path),
                    _ => std::fs::remove_file(&path),
                };
                if let Err(e) = removed {
                    tracing::debug!("cannot clear `{}`: {e}", path.display());
                }
            }
        }
        self.output.remeasure();
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        if let Some(folder) = self.folder.take() {
            self.folders.give_back(folder);
        }
    }
}

/// Remove run folders under `base` left by sandpy processes that no longer exist (killed
/// before they could clean up). Folders are named `run-<pid>-...`; without `/proc` to ask
/// whether a process lives, nothing is removed.
pub(crate) fn sweep_stale(base: &Path) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    remove_run_folders(base, |pid| {
        pid.parse::<u32>()
            .is_ok_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
    });
}

/// Remove this process's run folders under `base`, for a process about to end without
/// dropping its sandbox (a run stopped by ending the process).
pub(crate) fn remove_own_folders(base: &Path) {
    let own = std::process::id().to_string();
    remove_run_folders(base, |pid| pid == own);
}

/// Remove the folders `run-<pid>-...` under `base` whose pid `remove` picks.
fn remove_run_folders(base: &Path, remove: impl Fn(&str) -> bool) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("run-"))
            .and_then(|n| n.split('-').next())
        else {
            continue;
        };
        if remove(pid) {
            if let Err(e) = std::fs::remove_dir_all(entry.path()) {
                tracing::debug!("cannot remove run folder `{}`: {e}", entry.path().display());
            }
        }
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
        let host = std::fs::canonicalize(&mount.host).map_err(|e| MountError::HostUnreadable {
            host: mount.host.clone(),
            reason: e.to_string(),
        })?;
        if !host.is_dir() {
            return Err(MountError::NotAFolder {
                host: mount.host.clone(),
            });
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
