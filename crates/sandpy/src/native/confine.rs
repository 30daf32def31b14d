//! Confinement of one run. The zygote clones it into new namespaces (user, mount, pid,
//! net, ipc, uts, cgroup) whose root is an unprivileged user on the host; the run builds
//! its filesystem: a read-only root holding only the Python installation, the packages,
//! the guest code and a few devices, a size-capped `/tmp` (scratch) and `/output`. It
//! then confines itself before any user code runs: its own session, only its four
//! descriptors, rlimits, no capabilities, Landlock, and the seccomp allow-list.

use super::protocol::RunRequest;
use super::Layer;
use landlock::{
    path_beneath_rules, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope, ABI,
};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::CloneFlags;
use nix::unistd::{Gid, Uid};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use std::path::{Path, PathBuf};

/// A confinement step failed; the run does not start.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {source}")]
pub(crate) struct ConfineError {
    step: String,
    #[source]
    source: std::io::Error,
}

fn failed<E: Into<std::io::Error>>(step: impl Into<String>) -> impl FnOnce(E) -> ConfineError {
    let step = step.into();
    move |e| ConfineError {
        step,
        source: e.into(),
    }
}

fn other(step: &str, e: impl std::fmt::Display) -> ConfineError {
    ConfineError {
        step: step.into(),
        source: std::io::Error::other(e.to_string()),
    }
}

/// The uid and gid a run has on the host when sandpy runs as root.
const NOBODY: u32 = 65534;

/// Where the run's root is put together before `pivot_root`.
const STAGING: &str = "/tmp";

/// Files and folders of the host that the run sees read-only at the same path, opened
/// (inside the run's mount namespace) while the run still has its host identity.
pub(crate) enum Source {
    Folder(PathBuf, OwnedFd),
    File(PathBuf, OwnedFd),
    /// A top-level link such as `/lib -> usr/lib`, made again in the run's root.
    Link(PathBuf, PathBuf),
}

impl Source {
    /// The host path, which is also the path the run sees.
    fn path(&self) -> &Path {
        match self {
            Source::Folder(path, _) | Source::File(path, _) | Source::Link(path, _) => path,
        }
    }

    /// Every path that exists; a path inside a folder already listed is skipped.
    pub(super) fn open_all(paths: &[PathBuf]) -> Vec<Source> {
        let mut sorted: Vec<&PathBuf> = paths.iter().collect();
        sorted.sort();
        sorted.dedup();
        let mut sources: Vec<Source> = Vec::new();
        let mut folders: Vec<&Path> = Vec::new();
        for path in sorted {
            if folders.iter().any(|folder| path.starts_with(folder)) {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(path) else {
                continue;
            };
            if meta.is_symlink() {
                if let Ok(target) = std::fs::read_link(path) {
                    sources.push(Source::Link(path.clone(), target));
                }
                continue;
            }
            let Ok(fd) = nix::fcntl::open(
                path,
                nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            ) else {
                continue;
            };
            if meta.is_dir() {
                folders.push(path);
                sources.push(Source::Folder(path.clone(), fd));
            } else {
                sources.push(Source::File(path.clone(), fd));
            }
        }
        sources
    }

    /// The run's mounts: each host folder, seen read-only at its guest path.
    pub(super) fn open_mounts(mounts: &[(PathBuf, String)]) -> Result<Vec<Source>, ConfineError> {
        mounts
            .iter()
            .map(|(host, guest)| {
                let fd = nix::fcntl::open(
                    host,
                    nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY,
                    nix::sys::stat::Mode::empty(),
                )
                .map_err(failed(format!("open mount {}", host.display())))?;
                Ok(Source::Folder(PathBuf::from(guest), fd))
            })
            .collect()
    }
}

/// Why a host path cannot be shown to a run at its own path, if it cannot: `/` would show
/// the whole host, and `/tmp` and `/output` (or anything under `/output`) are the run's
/// own folders. A path under `/tmp` is fine: it is shown inside the run's `/tmp`.
pub(crate) fn unshowable(path: &Path) -> Option<&'static str> {
    if path == Path::new("/") {
        Some("it would show the host's whole filesystem to every run")
    } else if path == Path::new("/tmp") {
        Some(
            "`/tmp` is the run's own scratch folder; move it to a folder below `/tmp` or elsewhere",
        )
    } else if path.starts_with("/output") {
        Some("`/output` is the run's own output folder; move it elsewhere")
    } else {
        None
    }
}

/// The namespaces a run is cloned into: user, mount, net, ipc, uts, cgroup, and pid (the
/// run is pid 1 of its own pid namespace).
pub(crate) fn namespaces(request: &RunRequest) -> CloneFlags {
    let mut flags = CloneFlags::CLONE_NEWUSER
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWCGROUP;
    if !request.without(Layer::PidNamespace) {
        flags |= CloneFlags::CLONE_NEWPID;
    }
    flags
}

/// Map the root of `pid`'s new user namespace to `nobody` on the host when sandpy runs
/// as root (to the caller's own uid otherwise). Written from the parent namespace, where
/// root may map another user; the run keeps its host identity until
/// [`become_namespace_root`], so that it can still reach private folders such as
/// `/root` while it builds the run's filesystem.
pub(crate) fn write_id_maps(pid: i32) -> Result<(), ConfineError> {
    let (uid, gid) = if nix::unistd::geteuid().is_root() {
        (NOBODY, NOBODY)
    } else {
        (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        )
    };
    let write = |name: &str, text: String| {
        std::fs::write(format!("/proc/{pid}/{name}"), text).map_err(failed(name.to_string()))
    };
    write("setgroups", "deny".into())?;
    write("uid_map", format!("0 {uid} 1\n"))?;
    write("gid_map", format!("0 {gid} 1\n"))
}

/// Take the namespace's root identity (the mapped user on the host): a root caller
/// leaves host root here, after the filesystem is built.
pub(crate) fn become_namespace_root() -> Result<(), ConfineError> {
    let (uid, gid) = (Uid::from_raw(0), Gid::from_raw(0));
    nix::unistd::setresgid(gid, gid, gid).map_err(failed("setresgid"))?;
    nix::unistd::setresuid(uid, uid, uid).map_err(failed("setresuid"))?;
    // Changing uid cleared it; the run reads its own /proc/self/fd.
    nix::sys::prctl::set_dumpable(true).map_err(failed("set dumpable"))
}

fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

fn bind_read_only(source: &Path, target: &Path) -> Result<(), ConfineError> {
    bind(source, target, MsFlags::MS_NODEV)
}

/// A bind of `source` at `target`, read-only, no set-uid, and `extra` (`MS_NODEV` for all
/// but the four devices, which open only where devices may be opened).
fn bind(source: &Path, target: &Path, extra: MsFlags) -> Result<(), ConfineError> {
    let step = || format!("bind {}", target.display());
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(failed(step()))?;
    mount(
        None::<&str>,
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | extra,
        None::<&str>,
    )
    .map_err(failed(format!("read-only {}", target.display())))
}

fn tmpfs(target: &Path, bytes: u64, mode: &str) -> Result<(), ConfineError> {
    tmpfs_with_inodes(target, bytes, mode, 0)
}

/// A tmpfs of `bytes` with `extra` inodes beyond the run's own share.
fn tmpfs_with_inodes(
    target: &Path,
    bytes: u64,
    mode: &str,
    extra: u64,
) -> Result<(), ConfineError> {
    // Inodes are host memory too: one per 4 KiB of the size, at least 64.
    let inodes = (bytes / 4096).max(64) + extra;
    mount(
        Some("tmpfs"),
        target,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(format!("size={bytes},nr_inodes={inodes},mode={mode}").as_str()),
    )
    .map_err(failed(format!("tmpfs {}", target.display())))
}

/// The devices a run has: reading zeros and randomness, writing to nowhere. Bound without
/// `nodev` (every other bind has it), so that they open; Landlock lets them be read and
/// written, nothing else under `/dev`.
pub(crate) const DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"];

/// Most tasks (threads: a run cannot fork) a run or a session's process has at once:
/// `RLIMIT_NPROC`, counted by the kernel per user in the run's own user namespace, so
/// per run. A thread past it is refused (`EAGAIN`; Python's error names the limit).
pub(crate) const MAX_TASKS: u64 = 128;

/// Build the run's root from `sources`, the devices, `/tmp` and `/output`, and move
/// into it; the host's root is then out of reach (detached, not hidden).
pub(crate) fn build_root(sources: &[Source], request: &RunRequest) -> Result<(), ConfineError> {
    // Files the run makes must belong to a user the namespace knows.
    become_namespace_root()?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(failed("make mounts private"))?;
    if request.without(Layer::Root) {
        return tmpfs(Path::new("/tmp"), request.disk_bytes.max(4096), "1777");
    }
    let staging = Path::new(STAGING);
    tmpfs(staging, 1 << 20, "0755")?;
    let inside = |path: &Path| staging.join(path.strip_prefix("/").unwrap_or(path));
    // The run's own `/tmp` and `/output` come first: a host path under `/tmp` (a venv, a
    // Python, the cache folder of a checkout under `/tmp`) is then shown read-only at its
    // own path inside the run's `/tmp` instead of being hidden beneath it. The folders
    // leading to it are counted on top of the scratch folder's inodes.
    let skeleton = sources
        .iter()
        .filter_map(|source| source.path().strip_prefix("/tmp").ok())
        .map(|path| path.components().count() as u64)
        .sum::<u64>();
    let scratch = staging.join("tmp");
    std::fs::create_dir_all(&scratch).map_err(failed("mkdir /tmp"))?;
    tmpfs_with_inodes(&scratch, request.disk_bytes.max(4096), "1777", skeleton)?;
    let output = staging.join("output");
    std::fs::create_dir_all(&output).map_err(failed("mkdir /output"))?;
    tmpfs(&output, request.output_files_bytes.max(4096), "0777")?;
    for source in sources {
        match source {
            Source::Link(path, target) => {
                let at = inside(path);
                if let Some(parent) = at.parent() {
                    std::fs::create_dir_all(parent).map_err(failed("mkdir"))?;
                }
                std::os::unix::fs::symlink(target, &at)
                    .map_err(failed(format!("symlink {}", path.display())))?;
            }
            Source::Folder(path, fd) => {
                let at = inside(path);
                std::fs::create_dir_all(&at).map_err(failed(format!("mkdir {}", at.display())))?;
                bind_read_only(&fd_path(fd), &at)?;
            }
            Source::File(path, fd) => {
                let at = inside(path);
                if let Some(parent) = at.parent() {
                    std::fs::create_dir_all(parent).map_err(failed("mkdir"))?;
                }
                std::fs::File::create(&at).map_err(failed(format!("touch {}", at.display())))?;
                let device = DEVICES.iter().any(|device| path == Path::new(device));
                let nodev = if device {
                    MsFlags::empty()
                } else {
                    MsFlags::MS_NODEV
                };
                bind(&fd_path(fd), &at, nodev)?;
            }
        }
    }
    nix::unistd::chdir(staging).map_err(failed("chdir"))?;
    nix::unistd::pivot_root(".", ".").map_err(failed("pivot_root"))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(failed("detach the host's root"))?;
    nix::unistd::chdir("/").map_err(failed("chdir /"))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        None::<&str>,
    )
    .map_err(failed("read-only root"))
}

/// The child's descriptors, put at 0-3 by [`confine_child`].
pub(crate) struct ChildFds {
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
    pub channel: OwnedFd,
}

/// Put the run's four descriptors at 0-3 (stdin, stdout, stderr, channel), first thing,
/// so that every later failure is written to the run's stderr.
pub(crate) fn move_descriptors(fds: ChildFds) -> Result<(), ConfineError> {
    let wanted: [RawFd; 4] = [
        fds.stdin.as_raw_fd(),
        fds.stdout.as_raw_fd(),
        fds.stderr.as_raw_fd(),
        fds.channel.as_raw_fd(),
    ];
    // Move the four out of the way of 0-3 first, so that no dup2 clobbers another.
    let mut high = Vec::with_capacity(4);
    for fd in wanted {
        // SAFETY: plain descriptor duplication.
        let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 64) };
        if copy < 0 {
            return Err(failed("dup")(std::io::Error::last_os_error()));
        }
        high.push(copy);
    }
    drop(fds);
    for (target, fd) in high.into_iter().enumerate() {
        // SAFETY: dup2 onto the standard numbers (clears close-on-exec there).
        if unsafe { libc::dup2(fd, target as RawFd) } < 0 {
            return Err(failed("dup2")(std::io::Error::last_os_error()));
        }
        // SAFETY: the copy is ours and no longer needed.
        unsafe { libc::close(fd) };
    }
    Ok(())
}

/// Everything the child does to itself, once its root is built, before Python runs
/// user code.
pub(crate) fn confine_child(
    request: &RunRequest,
    zygote_vm_bytes: u64,
    readable: &[PathBuf],
    filters: &super::seccomp::Filters,
) -> Result<(), ConfineError> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .map_err(failed("pdeathsig"))?;
    if !request.without(Layer::Setsid) {
        nix::unistd::setsid().map_err(failed("setsid"))?;
    }
    // SAFETY: closes every descriptor above the four the child keeps.
    if unsafe { libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32) } < 0 {
        return Err(failed("close_range")(std::io::Error::last_os_error()));
    }
    set_limits(request, zygote_vm_bytes)?;
    drop_capabilities()?;
    nix::sys::prctl::set_no_new_privs().map_err(failed("no_new_privs"))?;
    if !request.without(Layer::Landlock) {
        // Folders of the run's own root may be listed, as in the WebAssembly tier
        // (`os.listdir('/')`): it holds only what was bound into it. Without that root (a
        // test build's ablation) Landlock keeps host folder listings out too.
        let list_root = !request.without(Layer::Root);
        landlock(readable, list_root)?;
    }
    if !request.without(Layer::Seccomp) {
        filters.apply().map_err(|e| other("seccomp", e))?;
    }
    Ok(())
}

fn set_limits(request: &RunRequest, zygote_vm_bytes: u64) -> Result<(), ConfineError> {
    use nix::sys::resource::{setrlimit, Resource};
    let seconds = cpu_limit_seconds(request.timeout_ms);
    // A session's CPU time grows with each cell (the zygote moves the soft limit as a
    // cell starts), so its hard limit stays where it was unless the zygote may raise it
    // at each cell (`raises_hard_limits`, read in the zygote before the fork).
    let cpu_hard = if request.session && !raises_hard_limits() {
        nix::sys::resource::getrlimit(Resource::RLIMIT_CPU)
            .map_err(failed("getrlimit RLIMIT_CPU"))?
            .1
    } else {
        seconds + 1
    };
    let address_space = zygote_vm_bytes.saturating_add(request.memory_bytes);
    let limits = [
        (Resource::RLIMIT_AS, address_space, address_space),
        (Resource::RLIMIT_NOFILE, 256, 256),
        (Resource::RLIMIT_CORE, 0, 0),
        (Resource::RLIMIT_CPU, seconds, cpu_hard),
        (Resource::RLIMIT_MSGQUEUE, 0, 0),
        (Resource::RLIMIT_NPROC, MAX_TASKS, MAX_TASKS),
        (Resource::RLIMIT_MEMLOCK, 0, 0),
    ];
    for (resource, soft, hard) in limits {
        setrlimit(resource, soft, hard).map_err(failed(format!("setrlimit {resource:?}")))?;
    }
    Ok(())
}

fn drop_capabilities() -> Result<(), ConfineError> {
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments; EINVAL past the last capability.
        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
    }
    // SAFETY: as above.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let data = [Data::default(); 2];
    // SAFETY: capset with a v3 header and two zeroed data words.
    if unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) } < 0 {
        return Err(failed("capset")(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The Landlock ABI whose rights the tier asks for: file access (with device ioctls),
/// TCP bind and connect (no port allowed), signal and abstract-socket scoping.
const LANDLOCK_ABI: ABI = ABI::V6;

fn landlock(readable: &[PathBuf], list_root: bool) -> Result<(), ConfineError> {
    let abi = LANDLOCK_ABI;
    let error = |e: landlock::RulesetError| other("landlock", e);
    let mut read: Vec<&Path> = readable.iter().map(PathBuf::as_path).collect();
    read.retain(|p| p.exists());
    let devices: Vec<&Path> = DEVICES.iter().map(Path::new).collect();
    let listable: &[&str] = if list_root { &["/"] } else { &[] };
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(error)?
        .handle_access(AccessNet::from_all(abi))
        .map_err(error)?
        .scope(Scope::from_all(abi))
        .map_err(error)?
        .create()
        .map_err(error)?
        .add_rules(path_beneath_rules(read, AccessFs::from_read(abi)))
        .map_err(error)?
        .add_rules(path_beneath_rules(
            devices,
            AccessFs::from_read(abi) | AccessFs::WriteFile,
        ))
        .map_err(error)?
        .add_rules(path_beneath_rules(listable, AccessFs::ReadDir))
        .map_err(error)?
        .add_rules(path_beneath_rules(
            ["/tmp", "/output"],
            AccessFs::from_all(abi),
        ))
        .map_err(error)?
        .restrict_self()
        .map_err(error)?;
    if status.ruleset != landlock::RulesetStatus::FullyEnforced {
        return Err(other("landlock", "the ruleset is not fully enforced"));
    }
    Ok(())
}

/// Whether this kernel has what the tier needs; the missing feature named otherwise.
pub(crate) fn kernel_support() -> Result<(), String> {
    let probe = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(LANDLOCK_ABI))
        .and_then(|r| r.handle_access(AccessNet::from_all(LANDLOCK_ABI)))
        .and_then(|r| r.scope(Scope::from_all(LANDLOCK_ABI)))
        .and_then(|r| r.create());
    if let Err(e) = probe {
        return Err(format!(
            "Landlock ABI 6 (Linux 6.12: file, TCP and scope rules) is not available: {e}"
        ));
    }
    let max = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    if max == Some(0) {
        return Err("user namespaces are disabled (user.max_user_namespaces = 0)".into());
    }
    if let Ok(value) = std::fs::read_to_string("/proc/sys/kernel/unprivileged_userns_clone") {
        if value.trim() == "0" {
            return Err(
                "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)"
                    .into(),
            );
        }
    }
    Ok(())
}

impl RunRequest {
    /// Whether `layer` is switched off for this run: only ever in debug builds, where
    /// the tests show that each layer stops its own attack.
    pub(super) fn without(&self, layer: Layer) -> bool {
        cfg!(debug_assertions) && self.without.contains(&layer)
    }
}

/// The CPU time a run with a time limit of `ms` may use, in whole seconds: the limit
/// rounded up, and one more (the wall-clock deadline is the limit; this is its backstop
/// for a zygote that could not act on it).
pub(crate) fn cpu_limit_seconds(ms: u64) -> u64 {
    ms.div_ceil(1000) + 1
}

/// Whether the zygote may raise a run's hard limits (it holds `CAP_SYS_RESOURCE`, as
/// root): then a session's CPU time has a hard limit a second past each cell's soft one,
/// raised as the next cell starts; without it the hard limit stays where the zygote's
/// was, and the stop between cells alone keeps the process off the CPU. Read once, in the
/// zygote before its first run (a run's own capabilities are its namespace's).
pub(super) fn raises_hard_limits() -> bool {
    static RAISES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *RAISES.get_or_init(|| {
        const CAP_SYS_RESOURCE: u32 = 24;
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        status
            .lines()
            .find_map(|line| line.strip_prefix("CapEff:"))
            .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            .is_some_and(|mask| mask & (1 << CAP_SYS_RESOURCE) != 0)
    })
}

#[cfg(test)]
mod tests {
    use super::unshowable;
    use std::path::Path;

    #[test]
    fn only_the_runs_own_folders_and_the_root_are_unshowable() {
        for path in ["/", "/tmp", "/output", "/output/venv"] {
            assert!(unshowable(Path::new(path)).is_some(), "{path}");
        }
        for path in [
            "/tmp/x/venv",
            "/usr",
            "/root/.pyenv",
            "/outputs",
            "/var/tmp/venv",
        ] {
            assert!(unshowable(Path::new(path)).is_none(), "{path}");
        }
    }
}
