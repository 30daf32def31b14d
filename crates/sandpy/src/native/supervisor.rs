//! A run's supervisor: forked by the zygote, it enters the run's namespaces, builds its
//! filesystem, forks the child that runs the code (pid 1 of the run's pid namespace),
//! waits for it within the time limit, collects `/output` and reports to the host. When
//! the host hangs up the report socket, the supervisor kills the run.

use super::confine::{self, ChildFds, Source};
use super::protocol::{Ended, Report, ReportFile, RunFds, RunRequest};
use super::zygote::Zygote;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Exit status of a child whose confinement failed (it wrote why to its stderr).
pub(crate) const CONFINEMENT_FAILED: i32 = 121;

/// Supervise one run, report, and exit.
pub(crate) fn run(zygote: &Zygote, request: RunRequest, fds: RunFds) -> ! {
    let RunFds {
        channel,
        stdin,
        stdout,
        stderr,
        report,
    } = fds;
    let child = ChildFds {
        stdin,
        stdout,
        stderr,
        channel,
    };
    let outcome = supervise(zygote, &request, child, &report);
    match outcome {
        Ok(Some(done)) => write_report(&report, &done),
        Ok(None) => {} // the host hung up: nobody to tell
        Err(e) => report_failure(&report, e.to_string()),
    }
    // SAFETY: leaves without running the zygote's (Python's) exit handlers.
    unsafe { libc::_exit(0) }
}

/// Tell the host that the run could not be set up.
pub(crate) fn report_failure(report: &OwnedFd, message: String) {
    write_report(
        report,
        &Report {
            ended: Ended::Failed(message),
            max_rss_bytes: 0,
            files: Vec::new(),
        },
    );
}

fn write_report(report: &OwnedFd, done: &Report) {
    let Ok(bytes) = serde_json::to_vec(done) else {
        return;
    };
    let mut written = 0;
    while written < bytes.len() {
        // SAFETY: a write from a valid buffer to an owned descriptor.
        let n = unsafe {
            libc::write(
                report.as_raw_fd(),
                bytes[written..].as_ptr().cast(),
                bytes.len() - written,
            )
        };
        if n <= 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        written += n as usize;
    }
}

fn supervise(
    zygote: &Zygote,
    request: &RunRequest,
    child: ChildFds,
    report: &OwnedFd,
) -> Result<Option<Report>, confine::ConfineError> {
    let started = Instant::now();
    // SAFETY: restores the default so that this process can wait for its child.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
    let mut sources = Source::open_all(&zygote.setup.readable);
    sources.extend(Source::open_mounts(&request.mounts)?);
    confine::build_root(&sources, request)?;
    drop(sources);
    // Set after the change of user in `build_root`, which clears it: when the zygote
    // goes, so does the run.
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .map_err(|e| confine::ConfineError::from_errno("pdeathsig", e))?;
    // CPython's fork locks are still held from the zygote's `before_fork`: the child
    // releases them (`after_fork_child`); this process never runs Python.
    // SAFETY: single-threaded; the child confines itself and runs Python.
    let pid = match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => child_main(zygote, request, child),
        Ok(nix::unistd::ForkResult::Parent { child }) => child,
        Err(e) => {
            return Err(confine::ConfineError::from_errno("fork the run", e));
        }
    };
    drop(child);
    let deadline = started + Duration::from_millis(request.timeout_ms);
    let Some((ended, max_rss_bytes)) = wait(pid.as_raw(), deadline, report) else {
        return Ok(None);
    };
    Ok(Some(Report {
        ended,
        max_rss_bytes,
        files: collect_output(request.output_files_bytes),
    }))
}

fn child_main(zygote: &Zygote, request: &RunRequest, fds: ChildFds) -> ! {
    let mut readable = zygote.setup.readable.clone();
    readable.extend(request.mounts.iter().map(|(_, guest)| guest.into()));
    let confined =
        confine::confine_child(fds, request, zygote.vm_bytes, &readable, &zygote.filters);
    if let Err(e) = confined {
        let message = format!("sandpy: the run could not be confined: {e}\n");
        // SAFETY: a write to stderr (the run's stderr once confine_child moved it).
        unsafe { libc::write(2, message.as_ptr().cast(), message.len()) };
        // SAFETY: leaves at once.
        unsafe { libc::_exit(CONFINEMENT_FAILED) }
    }
    zygote.api.after_fork_child();
    let ran = zygote
        .api
        .run("import sandpy_native\nsandpy_native.run()\n");
    // SAFETY: leaves without Python's finalisation (the outcome is sent and flushed).
    unsafe { libc::_exit(if ran { 0 } else { 1 }) }
}

/// Wait for the child until `deadline`; kill it then, or when the host hangs up (`None`).
/// How it ended and its peak resident size.
fn wait(pid: i32, deadline: Instant, report: &OwnedFd) -> Option<(Ended, u64)> {
    // SAFETY: pidfd_open of our own child.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
    let mut timed_out = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            timed_out = true;
            break;
        }
        let mut polled = [
            libc::pollfd {
                fd: pidfd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: report.as_raw_fd(),
                events: libc::POLLIN | libc::POLLRDHUP,
                revents: 0,
            },
        ];
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: poll over two valid pollfd entries.
        let n = unsafe { libc::poll(polled.as_mut_ptr(), 2, ms) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        if polled[1].revents != 0 {
            // The host is gone or gave up on the run.
            kill_and_reap(pid);
            return None;
        }
        if polled[0].revents != 0 || pidfd < 0 {
            break;
        }
    }
    if timed_out {
        // SAFETY: kill our own child (pid 1 of its namespace: all of the run goes).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let (status, rss) = reap(pid);
    let ended = if timed_out {
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
    Some((ended, rss))
}

fn kill_and_reap(pid: i32) {
    // SAFETY: kill and reap our own child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    reap(pid);
}

/// The child's wait status and peak resident size in bytes.
fn reap(pid: i32) -> (i32, u64) {
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: wait4 on our own child with valid out-pointers.
        let n = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if n >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break;
        }
    }
    (status, (usage.ru_maxrss.max(0) as u64) * 1024)
}

/// The regular files under `/output` (links and other kinds are skipped), at most
/// `budget` bytes in all: the folder's own size cap already bounds them.
fn collect_output(budget: u64) -> Vec<ReportFile> {
    let root = std::path::Path::new(crate::files::OUTPUT_DIR);
    let mut files = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    let mut total = 0u64;
    while let Some(folder) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                pending.push(path);
            } else if meta.is_file() && total + meta.len() <= budget {
                let Ok(content) = std::fs::read(&path) else {
                    continue;
                };
                total += content.len() as u64;
                let name = path
                    .strip_prefix(root)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .into_owned();
                files.push(ReportFile { name, content });
            }
        }
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    files
}
