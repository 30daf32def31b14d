//! A run's process as the zygote sees it: cloned into its namespaces
//! ([`spawn_run`]), supervised to its deadline and CPU limit ([`Supervised`]), stopped,
//! read (its `/output` at a deadline, its peak size) and reaped.

use super::protocol::{
    collected_frame, Collected, Ended, Report, ReportFile, RunFds, RunRequest, ANSWERED,
    CELL_STARTED,
};
use super::Zygote;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// A run the zygote supervises: its time limit, and its report to the host.
pub(super) struct Supervised {
    pub(super) pid: i32,
    pub(super) pidfd: OwnedFd,
    pub(super) report: OwnedFd,
    /// When the run (a session: its current cell) is ended; none between a session's
    /// cells.
    pub(super) deadline: Option<Instant>,
    /// A session, whose cells the host starts and ends on the report socket.
    pub(super) session: bool,
    /// Made ahead and not yet started: no deadline until the host sends the first time
    /// limit ([`RunRequest::ahead`]).
    pub(super) waiting: bool,
    /// Bytes of a cell limit not yet whole.
    pub(super) from_host: Vec<u8>,
    pub(super) timed_out: bool,
    pub(super) abandoned: bool,
    /// The size of the run's `/output`, which bounds what is read of it at the deadline.
    pub(super) output_files_bytes: u64,
    /// The files of a run ended at its deadline.
    pub(super) files: Vec<ReportFile>,
    /// A stop asked for once the run answered, not yet seen complete ([`Stopping`]).
    pub(super) stopping: Option<Stopping>,
}

/// A run being stopped to be collected: the zygote looks again at `next` (sooner at
/// first, then less often) and gives up at `until`, serving everything else meanwhile.
pub(super) struct Stopping {
    until: Instant,
    pub(super) next: Instant,
    pause: Duration,
}

impl Supervised {
    /// Read what the host wrote on the report socket: [`ANSWERED`], and a session's cell
    /// limits. False when the host hung up.
    pub(super) fn read_from_host(&mut self) -> bool {
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
            } else if (self.session || self.waiting) && !self.abandoned {
                // A run made ahead starts once; a session's process at each cell.
                self.waiting = false;
                self.start_cell(ms);
            }
        }
        true
    }

    /// The run answered: stop the whole process, so that nothing it left running (a
    /// thread that ignores `SIGXCPU`) uses the CPU after its cell, and, once every thread
    /// stopped ([`Supervised::check_stop`], from the zygote's loop: it never waits for
    /// a run), tell the host what the kernel says it left.
    pub(super) fn collect(&mut self) {
        if self.abandoned || self.stopping.is_some() {
            return;
        }
        self.deadline = None;
        // SAFETY: SIGSTOP to our own (unreaped) child.
        if unsafe { libc::kill(self.pid, libc::SIGSTOP) } != 0 {
            self.collected(false);
            return;
        }
        let now = Instant::now();
        self.stopping = Some(Stopping {
            until: now + STOP_WAIT,
            next: now,
            pause: Duration::from_micros(20),
        });
        self.check_stop();
    }

    /// Whether the stop asked for by [`Supervised::collect`] is complete (every thread
    /// stopped, its group stop reported), or the process ended: then the run is
    /// collected. Past [`STOP_WAIT`] it is collected as not stopped (and ended).
    pub(super) fn check_stop(&mut self) {
        let Some(stopping) = self.stopping.as_mut() else {
            return;
        };
        // A stop is reported only while the process is stopped.
        let now = Instant::now();
        let stopped = match peek_child(self.pid, libc::WSTOPPED | libc::WEXITED) {
            // Stopped, or gone (a run that ended after its outcome is not waited for).
            Ok(Some(code)) => Some(code == libc::CLD_STOPPED),
            Err(e) if e.kind() != std::io::ErrorKind::Interrupted => Some(false),
            _ if now >= stopping.until => Some(false),
            _ => None,
        };
        match stopped {
            Some(stopped) => {
                self.stopping = None;
                self.collected(stopped);
            }
            None => {
                // Usually a few microseconds: looked at again soon, then less often.
                stopping.next = now + stopping.pause;
                stopping.pause = (stopping.pause * 2).min(Duration::from_millis(2));
            }
        }
    }

    /// Tell the host what the kernel says the run left: the files under its `/output`
    /// (then emptied, for a session's next cell) and its peak resident size. A one-shot
    /// run is then killed; a session's process stays stopped until its next cell starts.
    fn collected(&mut self, stopped: bool) {
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

    /// Start a session's cell (or a run made ahead) with a limit of `ms`: its deadline,
    /// and its CPU time on top of what the run used so far; then let the stopped process
    /// go on.
    pub(super) fn start_cell(&mut self, ms: u64) {
        if exited(self.pid) || kill_pending(self.pid) {
            // Not acknowledged: the host reads the run's report instead (a process made
            // ahead that died, or is dying, while it waited is replaced by a fresh one).
            return;
        }
        self.deadline = Some(deadline_in(ms));
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: prlimit of our own child with valid pointers. The soft limit moves on
        // to this cell's; the hard one to a second past it where the zygote may raise it
        // again at the next cell ([`super::confine::raises_hard_limits`]), and otherwise stays as it is
        // (the run itself may change neither: seccomp).
        unsafe {
            if libc::prlimit(self.pid, libc::RLIMIT_CPU, std::ptr::null(), &mut limit) == 0 {
                let soft =
                    cpu_seconds(self.pid).saturating_add(super::confine::cpu_limit_seconds(ms));
                if super::confine::raises_hard_limits() {
                    limit.rlim_max = soft.saturating_add(1);
                }
                limit.rlim_cur = soft.min(limit.rlim_max);
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

    pub(super) fn kill(&self) {
        // SAFETY: SIGKILL to our own (unreaped) child: pid 1 of its namespace, so all of
        // the run goes.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
    }

    /// Reap the run and tell the host how it ended (unless the host gave up on it).
    pub(super) fn reap_and_report(self) {
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
/// it go (a byte on its sync pipe); it builds its root and confines itself (then, made
/// ahead, waits for its task).
pub(super) fn spawn_run(
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
        // A run made ahead gets its deadline when the host starts it.
        deadline: (!request.ahead).then_some(deadline),
        session: request.session,
        waiting: request.ahead,
        from_host: Vec::new(),
        timed_out: false,
        abandoned: false,
        output_files_bytes: request.output_files_bytes,
        files: Vec::new(),
        stopping: None,
    })
}

/// How long a run's every thread has to stop once it answered (the zygote serves
/// everything else meanwhile); a run not stopped by then is ended. The run cannot undo a
/// stop: seccomp refuses it `SIGCONT` by every route (`seccomp::signal_rules`).
const STOP_WAIT: Duration = Duration::from_secs(1);

/// Whether process `pid` (our child) has ended; it is not reaped.
fn exited(pid: i32) -> bool {
    matches!(peek_child(pid, libc::WEXITED), Ok(Some(_)))
}

/// What `waitid` reports of our child `pid` for `events` (`WEXITED`, `WSTOPPED`) without
/// waiting or consuming it (`WNOHANG | WNOWAIT`: an exit is reaped later): its `si_code`,
/// or `None` when nothing is to report.
fn peek_child(pid: i32, events: libc::c_int) -> std::io::Result<Option<libc::c_int>> {
    // SAFETY: an all-zero siginfo is valid.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid on our own child with a valid out-pointer; WNOWAIT consumes nothing.
    let n = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            events | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: si_pid is set by waitid when it reported a child.
    Ok((unsafe { info.si_pid() } == pid).then_some(info.si_code))
}

/// Whether a `SIGKILL` is pending for process `pid`: it was killed and has not yet run
/// to its end (the kernel marks the kill as it is sent).
fn kill_pending(pid: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kill_bit = 1u64 << (libc::SIGKILL - 1);
    status
        .lines()
        .filter_map(|line| {
            line.strip_prefix("SigPnd:")
                .or_else(|| line.strip_prefix("ShdPnd:"))
        })
        .filter_map(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .any(|mask| mask & kill_bit != 0)
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
