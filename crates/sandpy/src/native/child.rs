//! One run's process, cloned by the zygote into the run's namespaces: it builds its own
//! root, confines itself and runs the code (a session: one cell after another) as pid 1
//! of its pid namespace. The zygote
//! supervises it (`zygote::Supervised`): the time limit, the host's hang-up, the report.

use super::confine::{self, ChildFds, Source};
use super::protocol::{Ended, Report, RunRequest};
use super::Zygote;
use std::os::fd::{AsRawFd, OwnedFd};

/// Exit status of a run whose confinement failed (it wrote why to its stderr).
pub(crate) const CONFINEMENT_FAILED: i32 = 121;

/// Build the run's root, confine, run the code, and exit.
pub(crate) fn run(zygote: &Zygote, request: &RunRequest, fds: ChildFds) -> ! {
    let mut readable = zygote.setup.readable.clone();
    readable.extend(request.mounts.iter().map(|(_, guest)| guest.into()));
    let confined = confine::move_descriptors(fds).and_then(|()| {
        let mut sources = Source::open_all(&zygote.setup.readable);
        sources.extend(Source::open_mounts(&request.mounts)?);
        confine::build_root(&sources, request)?;
        drop(sources);
        confine::confine_child(request, zygote.vm_bytes, &readable, &zygote.filters)
    });
    if let Err(e) = confined {
        let message = format!("sandpy: the run could not be confined: {e}\n");
        // SAFETY: a write of a valid buffer to the run's stderr.
        unsafe { libc::write(2, message.as_ptr().cast(), message.len()) };
        // SAFETY: leaves at once.
        unsafe { libc::_exit(CONFINEMENT_FAILED) }
    }
    zygote.api.after_fork_child();
    // A process made ahead warms up while it waits for its task (`_warm_up`).
    let ran = zygote.api.run(match (request.session, request.ahead) {
        (true, true) => "import sandpy_native\nsandpy_native.serve(ahead=True)\n",
        (true, false) => "import sandpy_native\nsandpy_native.serve()\n",
        (false, true) => "import sandpy_native\nsandpy_native.run(ahead=True)\n",
        (false, false) => "import sandpy_native\nsandpy_native.run()\n",
    });
    // SAFETY: leaves without Python's finalisation (the outcome is sent and flushed).
    unsafe { libc::_exit(if ran { 0 } else { 1 }) }
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

/// Write `done` to the host's report socket.
pub(crate) fn write_report(report: &OwnedFd, done: &Report) {
    if let Ok(bytes) = serde_json::to_vec(done) {
        write_all(report, &bytes);
    }
}

/// Write all of `bytes` to `report` (a blocking socket; the host reads it as it comes).
pub(crate) fn write_all(report: &OwnedFd, bytes: &[u8]) {
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

/// Reap the run: its wait status and peak resident size in bytes.
pub(crate) fn reap(pid: i32) -> (i32, u64) {
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
