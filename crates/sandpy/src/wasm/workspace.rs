//! A WebAssembly run's host folders: its scratch folder (`/tmp`, the working directory)
//! and `/output`, made in a host folder of their own, input files written into them, the
//! mounts preopened read-only, and the guest's read-only `/`. A folder left as it was
//! made is kept for the next run; `quota.rs` holds the quotas.

use super::quota::{Area, DiskGuard, ENTRY_BYTES};
use crate::files::{
    check_mounts, scratch_relative, CheckedMounts, InputFile, InputsError, Mount, OutputFile,
    OUTPUT_DIR, SCRATCH_DIR,
};
use crate::Limits;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

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
    pub(crate) fn new(base: PathBuf, keep: usize) -> RunFolders {
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
        // Checked at each new folder: made again if something removed it (a cleaner of /tmp).
        crate::host_paths::ensure(base, crate::host_paths::Use::Private)
            .map_err(|e| e.to_string())?;
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
    pub(super) fn create(
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
    pub(super) fn write_inputs(
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
            .map(|f| f.content.len() as u64 + ENTRY_BYTES)
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
    pub(super) fn preopen(&self, wasi: &mut WasiCtxBuilder) -> Result<(), String> {
        let open = |wasi: &mut WasiCtxBuilder, host: &Path, guest: &str, perms| {
            wasi.preopened_dir(host, guest, perms)
                .map(drop)
                .map_err(|e| format!("cannot open `{}` for the guest: {e:#}", host.display()))
        };
        // The run's own folders are local and small: their file operations run on the
        // run's thread instead of a hop to tokio's blocking pool and back (every run
        // stats a path under `/` as it starts). Mounts are the operator's folders, which
        // may be slow: they keep the blocking pool.
        wasi.allow_blocking_current_thread(true);
        open(wasi, self.root.path(), "/", FsPerms::ReadOnly)?;
        open(wasi, &self.scratch_path(), SCRATCH_DIR, FsPerms::ReadWrite)?;
        open(wasi, &self.output_path(), OUTPUT_DIR, FsPerms::ReadWrite)?;
        wasi.allow_blocking_current_thread(false);
        for (host, area) in &self.mounts {
            open(wasi, host, &area.guest, FsPerms::ReadOnly)?;
        }
        Ok(())
    }

    /// The quota keeper for a store using this workspace.
    pub(super) fn guard(&self) -> DiskGuard {
        let root = Arc::new(Area::read_only("/", self.root.path()));
        let mut areas = vec![root, self.scratch.clone(), self.output.clone()];
        areas.extend(self.mounts.iter().map(|(_, area)| area.clone()));
        DiskGuard::new(areas)
    }

    /// Whether `mounts` are the ones this workspace was made with.
    pub(super) fn has_mounts(&self, mounts: &[Mount]) -> bool {
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
    pub(super) fn outputs(&self) -> Vec<OutputFile> {
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
    pub(super) fn clear_outputs(&self) {
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
