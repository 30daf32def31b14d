//! The native tier as the host runs it: starts the zygote, and for each run (or session
//! cell) hands it the run's descriptors, has the run served (`serve.rs`) and decides the
//! execution. A session's process is `session.rs`.

use super::confine;
use super::made_ahead::TopUp;
use super::protocol::{RunFds, RunRequest, ZygoteSetup, ZygoteStatus};
use super::python::PythonInstall;
use super::serve::{Inputs, Launched, Run, RunEnd, Streams};
use super::{guest_files, Layer, NativeConfig, NativeError};
use crate::access::Access;
use crate::execution::Execution;
use crate::plan::Plan;
use crate::verdict::NativeEnd;
use crate::Limits;
use nix::sys::socket::{
    sendmsg, socketpair, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType,
};
use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Host paths every run reads besides the Python installation: the system's libraries
/// (and the links to them) and the dynamic linker's cache.
const SYSTEM_PATHS: [&str; 7] = [
    "/usr",
    "/bin",
    "/lib",
    "/lib64",
    "/sbin",
    "/etc/ld.so.cache",
    "/etc/localtime",
];

/// How long the zygote may take to import its packages.
const START_TIMEOUT: Duration = Duration::from_secs(300);

/// A running zygote and what runs need to know about it.
pub struct NativeTier {
    control: OwnedFd,
    zygote: std::sync::Mutex<std::process::Child>,
    install: PythonInstall,
    layers_off: Vec<Layer>,
    /// What a session's snapshot names as its runtime ([`NativeTier::runtime_id`]).
    runtime_id: String,
    /// Processes made ahead of their runs (`made_ahead.rs`).
    pub(super) made_ahead: super::made_ahead::MadeAhead,
    /// Every run in a process cloned for it ([`NativeConfig::fresh_only`]).
    pub(super) fresh_only: bool,
}

impl std::fmt::Debug for NativeTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeTier")
            .field("python", &self.install.version)
            .field("prefix", &self.install.prefix)
            .finish()
    }
}

/// The zygote imports the installation's code as the user sandpy runs as (root, often),
/// before any confinement: each of its folders must be one that no other user controls
/// ([`crate::host_paths`]), and the packages' folders so at every depth (a package folder
/// another user could write in would run their code in the zygote).
fn check_install(install: &PythonInstall) -> Result<(), NativeError> {
    use crate::host_paths::{existing_folder, trusted_tree, FolderError, Use};
    let missing = |e: &FolderError| matches!(e, FolderError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound);
    for folder in install.folders() {
        match existing_folder(&folder, Use::Trusted) {
            Err(e) if !missing(&e) => return Err(NativeError::InstallFolder(e)),
            _ => {}
        }
    }
    for folder in &install.site_dirs {
        // The folders its `.pth` files add (an editable install's source) are imported
        // from as well.
        for folder in std::iter::once(folder.clone()).chain(pth_folders(folder)) {
            match trusted_tree(&folder) {
                Err(e) if !missing(&e) => return Err(NativeError::InstallFolder(e)),
                _ => {}
            }
        }
    }
    Ok(())
}

/// The folders that `site` adds for the `.pth` files in `site_dir`: each line that is
/// neither a comment nor an `import` line, relative to `site_dir`.
fn pth_folders(site_dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(site_dir) else {
        return Vec::new();
    };
    let mut folders = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "pth") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        for line in text.lines().map(str::trim_end) {
            if line.is_empty() || line.starts_with('#') || line.starts_with("import") {
                continue;
            }
            folders.push(site_dir.join(line));
        }
    }
    folders
}

impl NativeTier {
    /// Check the kernel, find the Python, start the zygote and wait until its packages
    /// are imported. Blocking (seconds with large packages).
    pub fn start(config: &NativeConfig, cache_dir: &Path) -> Result<NativeTier, NativeError> {
        confine::kernel_support().map_err(NativeError::Kernel)?;
        let python = config.python_executable();
        // Run to probe it, as this user, before any confinement: a path (not a name looked
        // up on `PATH`) must be a file no other user controls.
        if python.components().count() > 1 {
            crate::host_paths::trusted_file(&python).map_err(NativeError::InstallFolder)?;
        }
        let install = PythonInstall::probe(&python)?;
        let guest_dir = guest_files::write(cache_dir)?;
        check_install(&install)?;
        let mut readable: Vec<PathBuf> = SYSTEM_PATHS.iter().map(PathBuf::from).collect();
        readable.extend(confine::DEVICES.iter().map(PathBuf::from));
        for folder in install.folders().into_iter().chain([guest_dir.clone()]) {
            let folder = folder.canonicalize().unwrap_or(folder);
            if let Some(reason) = confine::unshowable(&folder) {
                return Err(NativeError::Unshowable {
                    path: folder,
                    reason,
                });
            }
            readable.push(folder);
        }
        let setup = ZygoteSetup {
            libpython: install.libpython.clone().unwrap_or_default(),
            python_home: install.base_prefix.clone(),
            guest_dir,
            site_dirs: install.site_dirs.clone(),
            preimport: config.preimport.clone(),
            readable,
        };
        let (control, zygote_end) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| NativeError::Start(format!("socketpair: {e}")))?;
        let (launcher, arguments) = match config.launcher.split_first() {
            Some((program, arguments)) => (PathBuf::from(program), arguments.to_vec()),
            None => (
                std::env::current_exe().map_err(|source| NativeError::Launcher {
                    launcher: PathBuf::from("(this program)"),
                    source,
                })?,
                vec![super::zygote::ZYGOTE_ARG.into()],
            ),
        };
        let zygote_fd = zygote_end.as_raw_fd();
        let mut command = std::process::Command::new(&launcher);
        // The zygote's whole environment. Numerical libraries read it as they load:
        // no thread pools (a fork keeps only the forking thread); glibc keeps one malloc
        // arena, whose address space would otherwise count against the memory cap per
        // thread.
        command
            .args(arguments)
            .env_clear()
            .envs([
                ("PYTHONNOUSERSITE", "1"),
                ("PYTHONDONTWRITEBYTECODE", "1"),
                ("OPENBLAS_NUM_THREADS", "1"),
                ("OMP_NUM_THREADS", "1"),
                ("MKL_NUM_THREADS", "1"),
                ("MALLOC_ARENA_MAX", "1"),
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null());
        // SAFETY: only dup2 runs between fork and exec.
        unsafe {
            command.pre_exec(move || {
                if libc::dup2(zygote_fd, super::zygote::CONTROL_FD) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().map_err(|source| NativeError::Launcher {
            launcher: launcher.clone(),
            source,
        })?;
        drop(zygote_end);
        let tier = NativeTier {
            control,
            zygote: std::sync::Mutex::new(child),
            runtime_id: runtime_id(&install, &config.preimport),
            install,
            layers_off: config.layers_off.clone(),
            made_ahead: Default::default(),
            fresh_only: config.fresh_only,
        };
        let setup_json =
            serde_json::to_vec(&setup).map_err(|e| NativeError::Start(e.to_string()))?;
        send(&tier.control, &setup_json, &[])
            .map_err(|e| NativeError::Start(format!("cannot reach the zygote: {e}")))?;
        match tier.receive_status()? {
            ZygoteStatus::Ready => {}
            ZygoteStatus::Error(message) => return Err(NativeError::Start(message)),
        }
        Ok(tier)
    }

    fn receive_status(&self) -> Result<ZygoteStatus, NativeError> {
        let mut polled = [libc::pollfd {
            fd: self.control.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let ms = START_TIMEOUT.as_millis() as i32;
        // SAFETY: poll over one valid pollfd.
        if unsafe { libc::poll(polled.as_mut_ptr(), 1, ms) } <= 0 {
            return Err(NativeError::Start(format!(
                "the zygote did not start within {} s",
                START_TIMEOUT.as_secs()
            )));
        }
        let mut buffer = vec![0u8; 1 << 16];
        // SAFETY: a read into a valid buffer.
        let n = unsafe {
            libc::read(
                self.control.as_raw_fd(),
                buffer.as_mut_ptr().cast(),
                buffer.len(),
            )
        };
        if n <= 0 {
            let status = self.zygote.lock().ok().and_then(|mut c| c.wait().ok());
            return Err(NativeError::Start(format!(
                "the zygote exited before it was ready ({})",
                status.map_or("unknown status".into(), |s| s.to_string())
            )));
        }
        serde_json::from_slice(&buffer[..n as usize])
            .map_err(|e| NativeError::Start(format!("bad answer from the zygote: {e}")))
    }

    /// Whether the zygote is still running (a run after it died starts a new one).
    pub fn is_alive(&self) -> bool {
        self.zygote
            .lock()
            .map(|mut child| matches!(child.try_wait(), Ok(None)))
            .unwrap_or(false)
    }

    /// The Python version runs get.
    pub fn python_version(&self) -> &str {
        &self.install.version
    }

    /// The identity of what runs get (the Python, its packages, the zygote's imports),
    /// which a session's snapshot records: replaying it under another need not reach the
    /// same state.
    pub fn runtime_id(&self) -> &str {
        &self.runtime_id
    }

    /// Run `task` in a new confined fork of the zygote (made ahead when one of its
    /// shape waits).
    pub(crate) async fn run(&self, plan: &Plan<'_>, access: Access, inputs: Inputs) -> Execution {
        let limits = plan.limits;
        let mut run = Run::new(access, limits, &inputs);
        let launched = self
            .process_for(self.request(limits, &inputs.mounts, false))
            .await
            .map_err(NativeEnd::Internal);
        let ended = match launched {
            // The streams go when the run is served: the zygote then ends what is left
            // of the process.
            Ok((mut streams, stdin, top_up)) => {
                let stdin = Some((stdin, inputs.stdin.clone()));
                let (task, guest) = (plan.task, &plan.guest);
                let ended = run
                    .serve(&mut streams, stdin, task, guest, &inputs, plan.deadline)
                    .await;
                self.made_ahead.top_up(top_up, |r| self.launch(r));
                ended
            }
            Err(end) => RunEnd::without(end),
        };
        run.execution(ended, plan.deadline.started())
    }

    /// The request for a run (or a session's process) with `limits` and `mounts`.
    pub(super) fn request(
        &self,
        limits: &Limits,
        mounts: &[(PathBuf, String)],
        session: bool,
    ) -> RunRequest {
        RunRequest {
            timeout_ms: limits.timeout.as_millis().min(u64::MAX as u128) as u64,
            memory_bytes: limits.memory_bytes as u64,
            disk_bytes: limits.disk_bytes,
            output_files_bytes: limits.output_files_bytes,
            mounts: mounts.to_vec(),
            without: self.layers_off.clone(),
            session,
            ahead: false,
        }
    }

    /// A confined process for `request`, running under its time limit: made ahead when
    /// one of its shape waits (`made_ahead.rs`), unless the tier makes a fresh one per run;
    /// and what to make ahead once the run answered (`made_ahead.top_up`).
    pub(super) async fn process_for(
        &self,
        request: RunRequest,
    ) -> Result<(Streams, tokio::net::unix::pipe::Sender, TopUp), String> {
        if self.fresh_only {
            let (streams, stdin) = self.launch(&request).and_then(Streams::open)?;
            return Ok((streams, stdin, TopUp::default()));
        }
        let launch = |request: &RunRequest| self.launch(request);
        self.made_ahead.process_for(request, launch).await
    }

    /// Hand the zygote `request` with the run's descriptors; the host's ends.
    pub(super) fn launch(&self, request: &RunRequest) -> Result<Launched, String> {
        let pair = || {
            socketpair(
                AddressFamily::Unix,
                SockType::Stream,
                None,
                SockFlag::SOCK_CLOEXEC,
            )
        };
        let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC);
        let made = (|| -> nix::Result<_> {
            let (channel, child_channel) = pair()?;
            let (report, zygote_report) = pair()?;
            let (stdin_read, stdin_write) = pipe()?;
            let (stdout_read, stdout_write) = pipe()?;
            let (stderr_read, stderr_write) = pipe()?;
            let fds = RunFds {
                channel: child_channel,
                stdin: stdin_read,
                stdout: stdout_write,
                stderr: stderr_write,
                report: zygote_report,
            };
            let launched = Launched {
                channel,
                report,
                stdin: stdin_write,
                stdout: stdout_read,
                stderr: stderr_read,
            };
            Ok((fds, launched))
        })();
        let (fds, launched) =
            made.map_err(|e| format!("cannot make the run's descriptors: {e}"))?;
        let json = serde_json::to_vec(request).map_err(|e| e.to_string())?;
        let raw = [
            fds.channel.as_raw_fd(),
            fds.stdin.as_raw_fd(),
            fds.stdout.as_raw_fd(),
            fds.stderr.as_raw_fd(),
            fds.report.as_raw_fd(),
        ];
        send(&self.control, &json, &raw).map_err(|e| {
            let status = self
                .zygote
                .lock()
                .ok()
                .and_then(|mut c| c.try_wait().ok().flatten());
            match status {
                Some(status) => format!("the native tier's zygote has exited ({status})"),
                None => format!("cannot reach the native tier's zygote: {e}"),
            }
        })?;
        Ok(launched)
    }
}

impl Drop for NativeTier {
    fn drop(&mut self) {
        // The zygote leaves when its control socket closes; runs in flight end with it.
        let _ =
            nix::sys::socket::shutdown(self.control.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        if let Ok(mut child) = self.zygote.lock() {
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `native-` and a hash of the Python's version and prefix, the names of what its
/// package folders hold (a package's `.dist-info` folder names its version) and the
/// modules the zygote imports.
fn runtime_id(install: &PythonInstall, preimport: &[String]) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    let mut add = |part: &[u8]| {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part);
    };
    add(install.version.as_bytes());
    add(install.prefix.as_os_str().as_encoded_bytes());
    for folder in &install.site_dirs {
        add(folder.as_os_str().as_encoded_bytes());
        let mut names: Vec<_> = std::fs::read_dir(folder)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.file_name())
            .collect();
        names.sort();
        for name in names {
            add(name.as_encoded_bytes());
        }
    }
    for module in preimport {
        add(module.as_bytes());
    }
    let digest = hash.finalize();
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("native-{hex}")
}

fn send(control: &OwnedFd, bytes: &[u8], fds: &[i32]) -> nix::Result<()> {
    let iov = [IoSlice::new(bytes)];
    let rights = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &rights };
    loop {
        match sendmsg::<()>(
            control.as_raw_fd(),
            &iov,
            cmsgs,
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => return other.map(drop),
        }
    }
}
