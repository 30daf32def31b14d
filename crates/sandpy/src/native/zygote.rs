//! The zygote: a process of its own (the `sandpy` binary started with [`ZYGOTE_ARG`])
//! that embeds CPython, imports the guest code and the configured packages once, and then
//! clones one run per request into its namespaces and supervises it. It never runs user
//! code.

use super::protocol::{
    collected_frame, Collected, Ended, Report, ReportFile, RunFds, RunRequest, ZygoteSetup,
    ZygoteStatus, ANSWERED, CELL_STARTED,
};
use super::python::CApi;
use super::seccomp::Filters;
use super::Zygote;
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// The first argument that makes a `sandpy` process a zygote.
pub const ZYGOTE_ARG: &str = "__sandpy-native-zygote";

/// The descriptor of the zygote's control socket.
pub(crate) const CONTROL_FD: RawFd = 3;

/// Largest control message (a setup or a run request).
const MAX_MESSAGE: usize = 1 << 20;

/// Run as the native tier's zygote when this process was started as one (it then never
/// returns); otherwise return at once. Front ends that start the native tier call this
/// first thing in `main`.
pub fn main_if_requested() {
    if std::env::args_os()
        .nth(1)
        .is_some_and(|arg| arg == ZYGOTE_ARG)
    {
        std::process::exit(main());
    }
}

fn main() -> i32 {
    run_zygote(false)
}

/// Serve as the native tier's zygote from inside a running Python interpreter (a host
/// that is itself Python starts the configured Python calling this through its extension
/// module, with the GIL held); never returns.
pub fn serve_as_zygote() -> ! {
    std::process::exit(run_zygote(true))
}

fn run_zygote(embedded: bool) -> i32 {
    // SAFETY: the host started this process with its control socket at CONTROL_FD.
    let control = unsafe { OwnedFd::from_raw_fd(CONTROL_FD) };
    let mut buffer = vec![0u8; MAX_MESSAGE];
    let setup: ZygoteSetup = match receive(&control, &mut buffer) {
        Ok(Some((bytes, _))) => match serde_json::from_slice(bytes) {
            Ok(setup) => setup,
            Err(e) => return refuse(&control, format!("bad setup: {e}")),
        },
        _ => return 1,
    };
    match start(&control, setup, embedded) {
        Ok(zygote) => serve(&control, &zygote, &mut buffer),
        Err(message) => refuse(&control, message),
    }
}

fn refuse(control: &OwnedFd, message: String) -> i32 {
    send(control, &ZygoteStatus::Error(message));
    1
}

fn send(control: &OwnedFd, status: &ZygoteStatus) {
    if let Ok(bytes) = serde_json::to_vec(status) {
        // SAFETY: a write of a valid buffer to an owned descriptor.
        unsafe { libc::write(control.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
    }
}

fn start(control: &OwnedFd, setup: ZygoteSetup, embedded: bool) -> Result<Zygote, String> {
    let filters = Filters::compile().map_err(|e| e.to_string())?;
    if !embedded {
        // The interpreter's home, read as it starts (the host set the rest).
        std::env::set_var("PYTHONHOME", &setup.python_home);
    }
    // SAFETY: mallopt with integer arguments, before any thread exists.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
    // SAFETY: setting a disposition (a host gone mid-report is an error, not a signal).
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    let api = if embedded {
        CApi::attach()?
    } else {
        CApi::start(&setup.libpython)?
    };
    let boot = format!(
        "import sys\nsys.path.insert(0, {})\nimport sandpy_native\nsandpy_native.boot({}, {})\n",
        literal(&setup.guest_dir),
        literal(&setup.site_dirs),
        literal(&setup.preimport),
    );
    if !api.run(&boot) {
        return Err("the zygote's Python start failed (its traceback is on stderr)".into());
    }
    // A fork keeps only the forking thread: a thread a package started would be missing,
    // with whatever it held, in every run.
    let threads = std::fs::read_dir("/proc/self/task").map_or(1, |tasks| tasks.count());
    if threads != 1 {
        return Err(format!(
            "the zygote has {threads} threads after importing {:?}; it must have one \
             (a package started threads at import)",
            setup.preimport
        ));
    }
    collapse_heap();
    let vm_bytes = own_address_space();
    send(control, &ZygoteStatus::Ready);
    Ok(Zygote {
        api,
        setup,
        filters,
        vm_bytes,
    })
}

/// Back the zygote's anonymous memory (the interpreter's heap, the packages' data) with
/// huge pages where the kernel allows: every run's fork copies the page tables, and a
/// huge page is one entry where small pages are 512. A child's first write to one
/// copies 4 KiB as before.
fn collapse_heap() {
    const MADV_COLLAPSE: libc::c_int = 25;
    const HUGE: usize = 2 << 20;
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        // Anonymous private read-write mappings only (the brk heap is named `[heap]`).
        let path = fields.nth(3);
        if !perms.starts_with("rw") || !perms.ends_with('p') || path.is_some_and(|p| p != "[heap]")
        {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        let (first, last) = (start.next_multiple_of(HUGE), end / HUGE * HUGE);
        if last <= first {
            continue;
        }
        // SAFETY: advice on this process's own mapped ranges; failures are harmless.
        unsafe {
            libc::madvise(
                first as *mut libc::c_void,
                last - first,
                libc::MADV_HUGEPAGE,
            );
            libc::madvise(first as *mut libc::c_void, last - first, MADV_COLLAPSE);
        }
    }
}

/// A list or string as a JSON literal, which Python reads as the same value.
fn literal<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "None".into())
}

/// This process's address-space size in bytes (a run's memory cap comes on top).
fn own_address_space() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf with a valid name.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    pages * page
}

/// Start a run for each request and supervise every live one, until the host closes
/// the control socket (then every live run is killed).
fn serve(control: &OwnedFd, zygote: &Zygote, buffer: &mut [u8]) -> i32 {
    let mut live: Vec<Supervised> = Vec::new();
    loop {
        let now = Instant::now();
        let wait_ms = live
            .iter()
            .filter(|run| !run.timed_out && !run.abandoned)
            .filter_map(|run| run.deadline)
            .map(|deadline| deadline.saturating_duration_since(now).as_millis())
            .min()
            .map_or(-1, |ms| ms.clamp(1, i32::MAX as u128) as i32);
        let mut polled = vec![libc::pollfd {
            fd: control.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        for run in &live {
            polled.push(libc::pollfd {
                fd: run.pidfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            polled.push(libc::pollfd {
                // A run the host gave up on is no longer watched for the hang-up.
                fd: if run.abandoned {
                    -1
                } else {
                    run.report.as_raw_fd()
                },
                events: libc::POLLIN | libc::POLLRDHUP,
                revents: 0,
            });
        }
        // SAFETY: poll over valid pollfd entries (negative descriptors are skipped).
        let n = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, wait_ms) };
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return 1;
        }
        let mut ended = Vec::new();
        for (i, run) in live.iter_mut().enumerate() {
            let (exited, hung_up) = (polled[1 + 2 * i].revents, polled[2 + 2 * i].revents);
            if hung_up != 0 && !run.abandoned && !run.read_from_host() {
                // The host has its answer, or gave up: nothing is reported.
                run.abandoned = true;
                run.kill();
            }
            let now = Instant::now();
            if !run.timed_out && !run.abandoned && run.deadline.is_some_and(|d| now >= d) {
                run.timed_out = true;
                // Stopped, then its /output read (the run cannot send it any more), then
                // killed.
                // SAFETY: SIGSTOP to our own (unreaped) child.
                unsafe { libc::kill(run.pid, libc::SIGSTOP) };
                run.files = super::left_output::read(run.pid, run.output_files_bytes);
                run.kill();
            }
            if exited != 0 {
                ended.push(i);
            }
        }
        for i in ended.into_iter().rev() {
            let run = live.swap_remove(i);
            run.reap_and_report();
        }
        if polled[0].revents != 0 {
            let (bytes, fds) = match receive(control, buffer) {
                Ok(Some(message)) => message,
                Ok(None) | Err(_) => {
                    for run in live {
                        run.kill();
                        run.reap_and_report();
                    }
                    return 0;
                }
            };
            let Some(fds) = RunFds::from_vec(fds) else {
                continue; // descriptors missing: the host sees its report socket close
            };
            let Ok(request) = serde_json::from_slice::<RunRequest>(bytes) else {
                continue;
            };
            match spawn_run(control, zygote, request, fds) {
                Ok(run) => live.push(run),
                Err(why) => tracing::debug!("native run not started: {why}"),
            }
        }
    }
}

/// A run the zygote supervises: its time limit, and its report to the host.
struct Supervised {
    pid: i32,
    pidfd: OwnedFd,
    report: OwnedFd,
    /// When the run (a session: its current cell) is ended; none between a session's
    /// cells.
    deadline: Option<Instant>,
    /// A session, whose cells the host starts and ends on the report socket.
    session: bool,
    /// Bytes of a cell limit not yet whole.
    from_host: Vec<u8>,
    timed_out: bool,
    abandoned: bool,
    /// The size of the run's `/output`, which bounds what is read of it at the deadline.
    output_files_bytes: u64,
    /// The files of a run ended at its deadline.
    files: Vec<ReportFile>,
}

impl Supervised {
    /// Read what the host wrote on the report socket: [`ANSWERED`], and a session's cell
    /// limits. False when the host hung up.
    fn read_from_host(&mut self) -> bool {
        let mut bytes = [0u8; 64];
        // SAFETY: a non-blocking read into a valid buffer.
        let n = unsafe {
            libc::recv(
                self.report.as_raw_fd(),
                bytes.as_mut_ptr().cast(),
                bytes.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            let error = std::io::Error::last_os_error().kind();
            return matches!(
                error,
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
            );
        }
        if n == 0 {
            return false;
        }
        self.from_host.extend_from_slice(&bytes[..n as usize]);
        while let Some((limit, _)) = self.from_host.split_first_chunk::<8>() {
            let ms = u64::from_le_bytes(*limit);
            self.from_host.drain(..8);
            if ms == ANSWERED {
                self.collect();
            } else if self.session && !self.abandoned {
                self.start_cell(ms);
            }
        }
        true
    }

    /// The run answered: stop the whole process, so that nothing it left running (a
    /// thread that ignores `SIGXCPU`) uses the CPU after its cell, and tell the host what
    /// the kernel says it left: the files under its `/output` (then emptied, for a
    /// session's next cell) and its peak resident size. A one-shot run is then killed; a
    /// session's process stays stopped until its next cell starts.
    fn collect(&mut self) {
        if self.abandoned {
            return;
        }
        self.deadline = None;
        let stopped = stop(self.pid);
        let files = super::left_output::read(self.pid, self.output_files_bytes);
        if self.session && stopped {
            super::left_output::empty(self.pid);
        }
        let collected = Collected {
            stopped,
            max_rss_bytes: peak_rss(self.pid),
            files,
        };
        super::child::write_all(&self.report, &collected_frame(&collected));
        if !self.session || !stopped {
            // Nothing is reported of it any more: the host has what it needs.
            self.abandoned = true;
            self.kill();
        }
    }

    /// Start a session's cell with a limit of `ms`: its deadline, and its CPU time on
    /// top of what the run used so far; then let the stopped process go on.
    fn start_cell(&mut self, ms: u64) {
        self.deadline = Some(deadline_in(ms));
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: prlimit of our own child with valid pointers: its hard limit is read
        // and kept, only the soft one moves (the run itself may not change it: seccomp).
        unsafe {
            if libc::prlimit(self.pid, libc::RLIMIT_CPU, std::ptr::null(), &mut limit) == 0 {
                limit.rlim_cur = cpu_seconds(self.pid)
                    .saturating_add(super::confine::cpu_limit_seconds(ms))
                    .min(limit.rlim_max);
                libc::prlimit(self.pid, libc::RLIMIT_CPU, &limit, std::ptr::null_mut());
            }
        }
        // SAFETY: SIGCONT to our own (unreaped) child, stopped since its last cell.
        unsafe { libc::kill(self.pid, libc::SIGCONT) };
        // The host sends the cell's task once the limits are in force: a cell must not
        // run under the last one's CPU limit.
        // SAFETY: a one-byte write from a valid buffer to an owned descriptor.
        unsafe { libc::write(self.report.as_raw_fd(), [CELL_STARTED].as_ptr().cast(), 1) };
    }

    fn kill(&self) {
        // SAFETY: SIGKILL to our own (unreaped) child: pid 1 of its namespace, so all of
        // the run goes.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
    }

    /// Reap the run and tell the host how it ended (unless the host gave up on it).
    fn reap_and_report(self) {
        let (status, max_rss_bytes) = super::child::reap(self.pid);
        if self.abandoned {
            return;
        }
        let ended = if self.timed_out {
            Ended::TimedOut
        } else if libc::WIFEXITED(status) {
            Ended::Exited(libc::WEXITSTATUS(status))
        } else if libc::WIFSIGNALED(status) {
            match libc::WTERMSIG(status) {
                libc::SIGXCPU => Ended::TimedOut,
                signal => Ended::Signaled(signal),
            }
        } else {
            Ended::Failed(format!("the run ended with wait status {status}"))
        };
        super::child::write_report(
            &self.report,
            &Report {
                ended,
                max_rss_bytes,
                files: self.files,
            },
        );
    }
}

/// Clone the run's process straight into its new namespaces, map its user ids, and let
/// it go (a byte on its sync pipe); it builds its root and confines itself.
fn spawn_run(
    control: &OwnedFd,
    zygote: &Zygote,
    request: RunRequest,
    fds: RunFds,
) -> Result<Supervised, String> {
    let (sync_read, sync_write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| e.to_string())?;
    let flags = super::confine::namespaces(&request).bits() as libc::c_ulong;
    let deadline = deadline_in(request.timeout_ms);
    zygote.api.before_fork();
    // SAFETY: clone without a new stack behaves as fork (the zygote is single-threaded);
    // the child only runs the run and leaves with _exit.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags | libc::SIGCHLD as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if pid == 0 {
        drop(sync_write);
        // SAFETY: the control socket is the zygote's; the run never uses it.
        unsafe { libc::close(control.as_raw_fd()) };
        let RunFds {
            channel,
            stdin,
            stdout,
            stderr,
            report,
        } = fds;
        drop(report);
        let mut byte = [0u8; 1];
        // SAFETY: a read into a valid one-byte buffer.
        let n = unsafe { libc::read(sync_read.as_raw_fd(), byte.as_mut_ptr().cast(), 1) };
        if n != 1 {
            // SAFETY: leaves at once: the zygote could not map the user ids.
            unsafe { libc::_exit(super::child::CONFINEMENT_FAILED) }
        }
        let child = super::confine::ChildFds {
            stdin,
            stdout,
            stderr,
            channel,
        };
        super::child::run(zygote, &request, child)
    }
    zygote.api.after_fork_parent();
    drop(sync_read);
    if pid < 0 {
        let why = format!(
            "clone into new namespaces: {}",
            std::io::Error::last_os_error()
        );
        super::child::report_failure(&fds.report, why.clone());
        return Err(why);
    }
    let pid = pid as i32;
    let run = (|| {
        super::confine::write_id_maps(pid).map_err(|e| e.to_string())?;
        // SAFETY: pidfd_open of our own child.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if pidfd < 0 {
            return Err(format!("pidfd_open: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: the kernel just made this descriptor for us.
        Ok(unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) })
    })();
    let pidfd = match run {
        Ok(pidfd) => pidfd,
        Err(why) => {
            // SAFETY: kill and reap our own child, which never started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            super::child::reap(pid);
            super::child::report_failure(&fds.report, why.clone());
            return Err(why);
        }
    };
    // SAFETY: a one-byte write to the sync pipe.
    unsafe { libc::write(sync_write.as_raw_fd(), b"1".as_ptr().cast(), 1) };
    let RunFds { report, .. } = fds; // the run's other descriptors are the child's now
    Ok(Supervised {
        pid,
        pidfd,
        report,
        deadline: Some(deadline),
        session: request.session,
        from_host: Vec::new(),
        timed_out: false,
        abandoned: false,
        output_files_bytes: request.output_files_bytes,
        files: Vec::new(),
    })
}

/// How long the zygote waits for a run's every thread to stop.
const STOP_WAIT: Duration = Duration::from_secs(1);

/// Stop process `pid` (our child) and wait until all of its threads are stopped (its
/// group stop is reported); false when that did not happen within [`STOP_WAIT`]. The
/// run cannot undo it: seccomp refuses it `SIGCONT`.
fn stop(pid: i32) -> bool {
    // SAFETY: SIGSTOP to our own (unreaped) child.
    if unsafe { libc::kill(pid, libc::SIGSTOP) } != 0 {
        return false;
    }
    let until = Instant::now() + STOP_WAIT;
    // Usually a few microseconds: looked at again soon at first, then less often.
    let mut pause = Duration::from_micros(20);
    loop {
        // SAFETY: an all-zero siginfo is valid.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on our own child with a valid out-pointer; nothing is consumed
        // (WNOWAIT): the exit is reaped later, and a stop is reported only while the
        // process is stopped.
        let n = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WSTOPPED | libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: si_pid is set by waitid when it reported a child.
        if n == 0 && unsafe { info.si_pid() } == pid {
            // Stopped, or gone (a run that ended after its outcome is not waited for).
            return info.si_code == libc::CLD_STOPPED;
        }
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return false;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(2));
    }
}

/// The peak resident size of process `pid` in bytes, as the kernel counts it (`VmHWM`).
fn peak_rss(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kib| kib.saturating_mul(1024))
}

/// The instant `ms` from now (a year for a limit past any run's life).
fn deadline_in(ms: u64) -> Instant {
    let now = Instant::now();
    now.checked_add(Duration::from_millis(ms))
        .unwrap_or_else(|| now + Duration::from_secs(365 * 86_400))
}

/// The CPU time process `pid` used so far, in whole seconds rounded up.
fn cpu_seconds(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command's closing parenthesis; utime and stime are the 14th
    // and 15th of the line, in clock ticks.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: u64 = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|field| field.parse::<u64>().ok())
        .sum();
    // SAFETY: sysconf with a valid name.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    ticks.div_ceil(per_second)
}

/// One datagram, read into `buffer` (kept from one request to the next: a fresh one
/// would be faulted in for every run), and the descriptors it carries; `None` at EOF.
fn receive<'a>(
    control: &OwnedFd,
    buffer: &'a mut [u8],
) -> nix::Result<Option<(&'a [u8], Vec<OwnedFd>)>> {
    let mut space = nix::cmsg_space!([RawFd; RunFds::COUNT]);
    let (length, fds) = {
        let mut iov = [IoSliceMut::new(buffer)];
        let message = loop {
            match recvmsg::<()>(
                control.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_CMSG_CLOEXEC,
            ) {
                Err(nix::errno::Errno::EINTR) => continue,
                other => break other?,
            }
        };
        let mut fds = Vec::new();
        for cmsg in message.cmsgs()? {
            if let ControlMessageOwned::ScmRights(raw) = cmsg {
                // SAFETY: the kernel just installed these descriptors for this process.
                fds.extend(
                    raw.into_iter()
                        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                );
            }
        }
        (message.bytes, fds)
    };
    if length == 0 && fds.is_empty() {
        return Ok(None);
    }
    Ok(Some((&buffer[..length], fds)))
}
