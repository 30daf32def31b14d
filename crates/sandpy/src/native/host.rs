//! The host side of the native tier: starts the zygote, and for each run hands it the
//! run's descriptors, then serves the run's channel (task, tool calls, outcome), reads
//! its output under the cap and the zygote's report, and decides the execution.

use super::confine;
use super::protocol::{
    cell_limit, task_line, Ended, GuestMessage, GuestOutcome, Report, ReportFile, RunFds,
    RunRequest, ZygoteSetup, ZygoteStatus, BETWEEN_CELLS, CELL_STARTED,
};
use super::python::PythonInstall;
use super::{guest_files, Layer, NativeConfig, NativeError};
use crate::bindings::{GuestOptions, Task, ToolCall};
use crate::execution::{Execution, Status};
use crate::files::OutputFile;
use crate::network::FetchError;
use crate::options::{OutputSink, Stream};
use crate::output::Capture;
use crate::tool_access::{RecordedCall, ToolAccess};
use crate::verdict::{self, NativeEnd};
use crate::Limits;
use nix::sys::socket::{
    sendmsg, socketpair, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType,
};
use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

/// How long the zygote may take to put a session's cell limits in force.
const CELL_START_TIMEOUT: Duration = Duration::from_secs(10);

/// How long after its time limit a run's report may take before the host gives up.
const REPORT_GRACE: Duration = Duration::from_secs(2);

/// A running zygote and what runs need to know about it.
pub struct NativeTier {
    control: OwnedFd,
    zygote: std::sync::Mutex<std::process::Child>,
    install: PythonInstall,
    layers_off: Vec<Layer>,
    /// What a session's snapshot names as its runtime ([`NativeTier::runtime_id`]).
    runtime_id: String,
}

impl std::fmt::Debug for NativeTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeTier")
            .field("python", &self.install.version)
            .field("prefix", &self.install.prefix)
            .finish()
    }
}

impl NativeTier {
    /// Check the kernel, find the Python, start the zygote and wait until its packages
    /// are imported. Blocking (seconds with large packages).
    pub fn start(config: &NativeConfig, cache_dir: &Path) -> Result<NativeTier, NativeError> {
        confine::kernel_support().map_err(NativeError::Kernel)?;
        let python = config.python_executable();
        let install = PythonInstall::probe(&python)?;
        let guest_dir = guest_files::write(cache_dir)?;
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

    /// Run `task` in a new confined fork of the zygote.
    pub(crate) async fn run(
        &self,
        task: &Task,
        options: &GuestOptions,
        limits: &Limits,
        tools: ToolAccess,
        inputs: Inputs,
        started: Instant,
    ) -> Execution {
        let mut run = Run::new(tools, limits, &inputs);
        let launched = self
            .launch(limits, &inputs.mounts, false)
            .and_then(Streams::open)
            .map_err(NativeEnd::Internal);
        let ended = match launched {
            // The streams go when the run is served: the zygote then ends what is left
            // of the process.
            Ok((mut streams, stdin)) => {
                let stdin = Some((stdin, inputs.stdin.clone()));
                run.serve(&mut streams, stdin, task, options, &inputs, started)
                    .await
            }
            Err(end) => RunEnd::without(end),
        };
        run.execution(ended, started)
    }

    /// Run one cell of a session in its process: `kept`'s, or a new one (with the
    /// session's `memory_cap`, the mounts and quotas of this first cell). The process is
    /// kept for the next cell when this one returned normally: then its tool calls are
    /// returned, in order.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn cell(
        self: &Arc<Self>,
        kept: &mut Option<NativeSession>,
        memory_cap: u64,
        task: &Task,
        options: &GuestOptions,
        limits: &Limits,
        tools: ToolAccess,
        inputs: Inputs,
        started: Instant,
    ) -> (Execution, Option<Vec<RecordedCall>>) {
        let limits = &Limits {
            memory_bytes: memory_cap as usize,
            ..limits.clone()
        };
        let mut run = Run::new(tools, limits, &inputs);
        let session = match kept.take() {
            Some(mut session) => session.start_cell(limits).await.map(|()| session),
            None => self
                .launch(limits, &inputs.mounts, true)
                .and_then(Streams::open)
                .map_err(NativeEnd::Internal)
                // A session's stdin is empty.
                .map(|(streams, _stdin)| NativeSession {
                    _tier: self.clone(),
                    streams,
                    memory_peak: 0,
                }),
        };
        let (ended, session) = match session {
            Ok(mut session) => {
                let ended = run
                    .serve(&mut session.streams, None, task, options, &inputs, started)
                    .await;
                (ended, Some(session))
            }
            Err(end) => (RunEnd::without(end), None),
        };
        let answered = matches!(ended.end, NativeEnd::Outcome(_));
        let memory_peak = ended.max_rss_bytes;
        let execution = run.execution(ended, started);
        if let Some(mut session) = session {
            let fit = answered
                && execution.status != Status::MemoryLimit
                && !execution.output_truncated
                && session.end_cell().await;
            if fit {
                session.memory_peak = session.memory_peak.max(memory_peak);
                *kept = Some(session);
                let calls = run.tools.recorded.take().unwrap_or_default();
                return (execution, Some(calls));
            }
        }
        (execution, None)
    }

    /// Hand the zygote a run request with the run's descriptors; the host's ends.
    fn launch(
        &self,
        limits: &Limits,
        mounts: &[(PathBuf, String)],
        session: bool,
    ) -> Result<Launched, String> {
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
        let request = RunRequest {
            timeout_ms: limits.timeout.as_millis().min(u64::MAX as u128) as u64,
            memory_bytes: limits.memory_bytes as u64,
            disk_bytes: limits.disk_bytes,
            output_files_bytes: limits.output_files_bytes,
            mounts: mounts.to_vec(),
            without: self.layers_off.clone(),
            session,
        };
        let json = serde_json::to_vec(&request).map_err(|e| e.to_string())?;
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

/// The host's ends of one run's descriptors.
struct Launched {
    channel: OwnedFd,
    report: OwnedFd,
    stdin: OwnedFd,
    stdout: OwnedFd,
    stderr: OwnedFd,
}

/// The host's ends of a run's channel, report socket and output pipes, as tokio reads
/// them (stdin is written on its own: a session's is closed at once).
struct Streams {
    channel_read: tokio::net::unix::OwnedReadHalf,
    channel_write: tokio::net::unix::OwnedWriteHalf,
    report: tokio::net::UnixStream,
    stdout: tokio::net::unix::pipe::Receiver,
    stderr: tokio::net::unix::pipe::Receiver,
}

impl Streams {
    /// A launched run's descriptors, opened, and its stdin; why not.
    fn open(launched: Launched) -> Result<(Streams, tokio::net::unix::pipe::Sender), String> {
        let stream = |fd: OwnedFd| {
            let std = std::os::unix::net::UnixStream::from(fd);
            std.set_nonblocking(true)?;
            tokio::net::UnixStream::from_std(std)
        };
        let opened = (|| -> std::io::Result<_> {
            let (channel_read, channel_write) = stream(launched.channel)?.into_split();
            let streams = Streams {
                channel_read,
                channel_write,
                report: stream(launched.report)?,
                stdout: tokio::net::unix::pipe::Receiver::from_owned_fd(launched.stdout)?,
                stderr: tokio::net::unix::pipe::Receiver::from_owned_fd(launched.stderr)?,
            };
            let stdin = tokio::net::unix::pipe::Sender::from_owned_fd(launched.stdin)?;
            Ok((streams, stdin))
        })();
        opened.map_err(|e| format!("run descriptors: {e}"))
    }
}

/// A session's process: a confined fork of the zygote that keeps its interpreter (and
/// its scratch folder) from one cell to the next. Dropped, it hangs up its report
/// socket and the zygote ends it.
pub(crate) struct NativeSession {
    /// The zygote the process was forked from, kept running while the session lives.
    _tier: Arc<NativeTier>,
    streams: Streams,
    memory_peak: u64,
}

impl NativeSession {
    /// The process's peak resident size so far (the zygote's pages it shares included).
    pub(crate) fn memory_peak(&self) -> u64 {
        self.memory_peak
    }

    /// Tell the zygote that a cell starts with `limits.timeout`, and wait until its limits
    /// are in force; fails when the process ended since its last cell.
    async fn start_cell(&mut self, limits: &Limits) -> Result<(), NativeEnd> {
        let ms = limits.timeout.as_millis().min(u64::MAX as u128 - 1) as u64;
        let report = &mut self.streams.report;
        let started = async {
            report.write_all(&cell_limit(ms)).await?;
            let mut answer = [0u8; 1];
            report.read_exact(&mut answer).await?;
            Ok::<_, std::io::Error>(answer[0] == CELL_STARTED)
        };
        match tokio::time::timeout(CELL_START_TIMEOUT, started).await {
            Ok(Ok(true)) => Ok(()),
            Ok(_) => Err(NativeEnd::Internal(
                "the session's process ended between its runs; reset the session".into(),
            )),
            Err(_) => Err(NativeEnd::Internal(format!(
                "the native tier's zygote did not start the cell within {} s",
                CELL_START_TIMEOUT.as_secs()
            ))),
        }
    }

    /// Tell the zygote that the cell answered, so that the process waits for the next
    /// one without a deadline; false when it cannot be told.
    async fn end_cell(&mut self) -> bool {
        let idle = cell_limit(BETWEEN_CELLS);
        self.streams.report.write_all(&idle).await.is_ok()
    }
}

/// What a run is given besides its code: stdin, input files (checked: paths under
/// `/tmp`, sizes within the disk quota) and read-only mounts (checked folders).
pub(crate) struct Inputs {
    stdin: Vec<u8>,
    files: Vec<(String, Vec<u8>)>,
    mounts: Vec<(PathBuf, String)>,
    /// Where the run's output goes as it is written, besides the capture.
    on_output: Option<OutputSink>,
    /// Cancelled: the run is killed at once.
    cancel: Option<tokio_util::sync::CancellationToken>,
}

impl Inputs {
    /// The run's stdin, files, mounts and output sink, or why they are refused (as the WebAssembly
    /// tier refuses them).
    pub(crate) fn check(options: &crate::RunOptions, limits: &Limits) -> Result<Inputs, String> {
        let adding: u64 = options
            .files
            .iter()
            .map(|f| f.content.len() as u64 + 4096)
            .sum();
        if adding > limits.disk_bytes {
            return Err(format!(
                "the input files need {adding} bytes, over the disk quota of {} bytes",
                limits.disk_bytes
            ));
        }
        let mut files = Vec::with_capacity(options.files.len());
        for file in &options.files {
            let relative = crate::files::scratch_relative(&file.path)?;
            files.push((
                relative.to_string_lossy().into_owned(),
                file.content.clone(),
            ));
        }
        let mounts = crate::files::check_mounts(&options.mounts)
            .map_err(|e| e.to_string())?
            .0;
        Ok(Inputs {
            stdin: options.stdin.clone().unwrap_or_default(),
            files,
            mounts,
            on_output: options.on_output.clone(),
            cancel: options.cancel.clone(),
        })
    }
}

/// How a served run ended, with what it left.
struct RunEnd {
    end: NativeEnd,
    files: Vec<ReportFile>,
    max_rss_bytes: u64,
}

impl RunEnd {
    fn without(end: NativeEnd) -> RunEnd {
        RunEnd {
            end,
            files: Vec::new(),
            max_rss_bytes: 0,
        }
    }
}

/// One run being served.
struct Run<'a> {
    tools: ToolAccess,
    capture: Capture,
    limits: &'a Limits,
}

/// Bytes read at a time from each stream (four buffers per run, faulted in per run).
const CHUNK: usize = 16 << 10;

impl<'a> Run<'a> {
    fn new(tools: ToolAccess, limits: &'a Limits, inputs: &Inputs) -> Run<'a> {
        Run {
            tools,
            capture: Capture::new(limits.output_bytes, inputs.on_output.clone()),
            limits,
        }
    }

    /// The execution of a run that ended so.
    fn execution(&mut self, ended: RunEnd, started: Instant) -> Execution {
        let mut execution = verdict::native(
            ended.end,
            self.capture.finish(),
            self.limits,
            self.tools.calls as u64,
            ended.max_rss_bytes,
            started.elapsed(),
        );
        execution.files = ended
            .files
            .into_iter()
            .map(|f| OutputFile::new(f.name, f.content))
            .collect();
        if let Some(network) = self.tools.network.take() {
            execution.requests = network.made;
        }
        execution
    }

    /// The longest channel message the host holds: a batch of calls with arguments at
    /// their cap, or an outcome with texts at the output cap and `/output`'s files,
    /// base64, each with room for JSON escapes.
    fn max_message(&self) -> usize {
        let limits = self.limits;
        let files = (limits.output_files_bytes as usize).saturating_mul(2);
        // A request's body and headers, base64 and JSON-escaped.
        let network_out = self.tools.network.as_ref().map_or(0, |n| n.max_bytes_out());
        limits
            .tool_result_bytes
            .saturating_mul(4)
            .saturating_add(limits.output_bytes.saturating_mul(4))
            .saturating_add(files)
            .saturating_add(network_out.saturating_mul(2))
            .saturating_add(1 << 20)
    }

    /// Send the task (and stdin), then serve the run until its outcome, its end or a
    /// limit; its descriptors are left open (dropping them ends the process).
    async fn serve(
        &mut self,
        streams: &mut Streams,
        stdin: Option<(tokio::net::unix::pipe::Sender, Vec<u8>)>,
        task: &Task,
        options: &GuestOptions,
        inputs: &Inputs,
        started: Instant,
    ) -> RunEnd {
        let Streams {
            channel_read,
            channel_write,
            report,
            stdout,
            stderr,
        } = streams;
        let first = task_line(task, options, &inputs.files);
        // The task and stdin are written beside the rest, so that a program that does not
        // read them cannot stall the host.
        let writes = async move {
            let task_sent = channel_write.write_all(&first).await;
            (channel_write, task_sent)
        };
        let stdin_task = async move {
            if let Some((mut pipe, bytes)) = stdin {
                let _ = pipe.write_all(&bytes).await;
            }
        };
        tokio::pin!(writes, stdin_task);
        let mut channel_write = None;
        let mut stdin_done = false;

        let deadline = started + self.limits.timeout;
        self.tools.deadline = Some(deadline.into());
        if let Some(network) = &mut self.tools.network {
            network.deadline = Some(deadline.into());
        }
        let run_deadline = tokio::time::Instant::from_std(deadline);
        let hard_deadline = tokio::time::Instant::from_std(
            started + self.limits.timeout.saturating_add(REPORT_GRACE),
        );
        let max_message = self.max_message();
        let mut message: Vec<u8> = Vec::new();
        let mut outcome: Option<GuestOutcome> = None;
        let mut stopped: Option<NativeEnd> = None;
        let mut report_bytes: Vec<u8> = Vec::new();
        // The zygote's report is a few bytes (how the run ended, its peak size), and the
        // files of a run it ended at its deadline: base64 of at most the size of
        // `/output`, with their names.
        let report_cap =
            (64 << 10) + super::left_output::report_bytes(self.limits.output_files_bytes);
        let (mut channel_open, mut stdout_open, mut stderr_open, mut report_open) =
            (true, true, true, true);
        let mut out_buf = vec![0u8; CHUNK];
        let mut err_buf = vec![0u8; CHUNK];
        let mut channel_buf = vec![0u8; CHUNK];
        let mut report_buf = vec![0u8; CHUNK];

        while channel_open || stdout_open || stderr_open || report_open {
            tokio::select! {
                written = &mut writes, if channel_write.is_none() => {
                    let (writer, sent) = written;
                    channel_write = Some(writer);
                    if sent.is_err() {
                        // The child died before reading its task; its report says why.
                    }
                }
                _ = &mut stdin_task, if !stdin_done => stdin_done = true,
                n = stdout.read(&mut out_buf), if stdout_open => match n {
                    Ok(n) if n > 0 => {
                        if !self.capture.append(Stream::Stdout, &out_buf[..n]) {
                            stopped.get_or_insert(NativeEnd::Output);
                            break;
                        }
                    }
                    _ => stdout_open = false,
                },
                n = stderr.read(&mut err_buf), if stderr_open => match n {
                    Ok(n) if n > 0 => {
                        if !self.capture.append(Stream::Stderr, &err_buf[..n]) {
                            stopped.get_or_insert(NativeEnd::Output);
                            break;
                        }
                    }
                    _ => stderr_open = false,
                },
                n = report.read(&mut report_buf), if report_open => match n {
                    Ok(n) if n > 0 => {
                        if report_bytes.len() + n > report_cap {
                            stopped.get_or_insert(NativeEnd::Internal(
                                "the run's report is over its size limit".into(),
                            ));
                            break;
                        }
                        report_bytes.extend_from_slice(&report_buf[..n]);
                    }
                    _ => report_open = false,
                },
                n = channel_read.read(&mut channel_buf), if channel_open && channel_write.is_some() => match n {
                    Ok(n) if n > 0 => {
                        // Only the new bytes are searched for the end of a line.
                        let searched = message.len();
                        message.extend_from_slice(&channel_buf[..n]);
                        let mut from = searched;
                        while let Some(end) = message[from..]
                            .iter()
                            .position(|&b| b == b'\n')
                            .map(|at| from + at)
                        {
                            from = 0;
                            let line: Vec<u8> = message.drain(..=end).collect();
                            let Some(writer) = channel_write.as_mut() else { break };
                            let answered = tokio::time::timeout_at(
                                run_deadline,
                                self.answer(&line[..end], writer, &mut outcome),
                            );
                            let answered = tokio::select! {
                                answered = answered => Some(answered),
                                () = cancelled(inputs.cancel.as_ref()) => None,
                            };
                            match answered {
                                Some(Ok(Ok(()))) => {}
                                Some(Ok(Err(end))) => {
                                    stopped.get_or_insert(end);
                                    break;
                                }
                                Some(Err(_)) => {
                                    stopped.get_or_insert(NativeEnd::Timeout {
                                        waiting_for: self.tools.waiting_for(),
                                    });
                                    break;
                                }
                                None => {
                                    stopped.get_or_insert(NativeEnd::Cancelled {
                                        waiting_for: self.tools.waiting_for(),
                                    });
                                    break;
                                }
                            }
                        }
                        if stopped.is_some() || outcome.is_some() {
                            break;
                        }
                        if message.len() > max_message {
                            stopped.get_or_insert(NativeEnd::Message(max_message));
                            break;
                        }
                    }
                    _ => channel_open = false,
                },
                () = cancelled(inputs.cancel.as_ref()) => {
                    stopped.get_or_insert(NativeEnd::Cancelled {
                        waiting_for: self.tools.waiting_for(),
                    });
                    break;
                }
                _ = tokio::time::sleep_until(hard_deadline) => {
                    stopped.get_or_insert(NativeEnd::Timeout {
                        waiting_for: self.tools.waiting_for(),
                    });
                    break;
                }
            }
        }
        if let Some(mut outcome) = outcome {
            // The program flushed its output before it sent the outcome: what is left is
            // in the pipes now. The process's end is not waited for (the report socket is
            // dropped below, which makes the zygote end what is left of the run). Read
            // with read(2) itself: tokio's `try_read` answers "would block" without
            // asking the kernel while its reactor has not yet seen the pipe readable,
            // which lost the last output of a run on a loaded machine. The pipes are
            // non-blocking, so an empty one ends the loop.
            for (pipe, which, buffer) in [
                (&stdout, Stream::Stdout, &mut out_buf),
                (&stderr, Stream::Stderr, &mut err_buf),
            ] {
                while let Ok(n @ 1..) = nix::unistd::read(pipe, buffer) {
                    if !self.capture.append(which, &buffer[..n]) {
                        break;
                    }
                }
            }
            let files = std::mem::take(&mut outcome.files);
            let max_rss_bytes = outcome.max_rss_bytes;
            let end = stopped.unwrap_or_else(|| NativeEnd::Outcome(outcome.into()));
            return RunEnd {
                end,
                files,
                max_rss_bytes,
            };
        }
        if let Some(end) = stopped {
            // The caller hangs up the report socket, which makes the zygote kill the run.
            return RunEnd::without(end);
        }
        let Ok(report) = serde_json::from_slice::<Report>(&report_bytes) else {
            let why = "the native tier's zygote ended the run without a report";
            return RunEnd::without(NativeEnd::Internal(why.into()));
        };
        let end = match report.ended {
            Ended::TimedOut => NativeEnd::Timeout {
                waiting_for: self.tools.waiting_for(),
            },
            Ended::Failed(why) => {
                NativeEnd::Internal(format!("the run could not be set up: {why}"))
            }
            Ended::Exited(super::child::CONFINEMENT_FAILED) => {
                NativeEnd::Internal("the run could not be confined (see stderr)".into())
            }
            Ended::Exited(code) => NativeEnd::Exited(code),
            Ended::Signaled(signal) => NativeEnd::Signaled(signal),
        };
        RunEnd {
            end,
            files: report.files,
            max_rss_bytes: report.max_rss_bytes,
        }
    }

    /// Answer one message of the child; the outcome is kept. An `Err` ends the run.
    async fn answer(
        &mut self,
        line: &[u8],
        writer: &mut tokio::net::unix::OwnedWriteHalf,
        outcome: &mut Option<GuestOutcome>,
    ) -> Result<(), NativeEnd> {
        let message: GuestMessage =
            serde_json::from_slice(line).map_err(|e| NativeEnd::Channel(format!("{e}")))?;
        let internal = |e: wasmtime::Error| NativeEnd::Internal(e.to_string());
        let answer = match message {
            GuestMessage::Outcome(reported) => {
                *outcome = Some(reported);
                return Ok(());
            }
            GuestMessage::CallTools(calls) => {
                let calls = calls
                    .into_iter()
                    .map(|c| ToolCall {
                        name: c.name,
                        arguments: c.arguments,
                    })
                    .collect();
                match self.tools.call_tools(calls).await {
                    Ok(results) => serde_json::to_value(results),
                    Err(_) if self.tools.limit_hit => return Err(NativeEnd::ToolCalls),
                    Err(e) => return Err(internal(e)),
                }
            }
            GuestMessage::ListTools => {
                serde_json::to_value(self.tools.list_tools().await.map_err(internal)?)
            }
            GuestMessage::ToolNames => {
                serde_json::to_value(self.tools.tool_names().await.map_err(internal)?)
            }
            GuestMessage::ToolSchema(name) => {
                serde_json::to_value(self.tools.tool_schema(name).await.map_err(internal)?)
            }
            GuestMessage::SearchTools { query, limit } => serde_json::to_value(
                self.tools
                    .search_tools(query, limit)
                    .await
                    .map_err(internal)?,
            ),
            GuestMessage::Fetch(request) => serde_json::to_value(match &mut self.tools.network {
                Some(network) => network.fetch(request).await,
                None => Err(FetchError::Refused(crate::network::NO_NETWORK.into())),
            }),
        };
        let mut bytes = answer
            .map_err(|e| NativeEnd::Internal(e.to_string()))?
            .to_string()
            .into_bytes();
        bytes.push(b'\n');
        // A child that stopped reading only stalls itself: its time limit still runs.
        let _ = writer.write_all(&bytes).await;
        Ok(())
    }
}

/// Done when `cancel` is cancelled; never without one.
async fn cancelled(cancel: Option<&tokio_util::sync::CancellationToken>) {
    match cancel {
        Some(cancel) => cancel.cancelled().await,
        None => std::future::pending().await,
    }
}
