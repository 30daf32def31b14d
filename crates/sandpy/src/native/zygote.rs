//! The zygote: a process of its own (the `sandpy` binary started with [`ZYGOTE_ARG`])
//! that embeds CPython, imports the guest code and the configured packages once, and then
//! forks one supervisor per run request. It never runs user code.

use super::protocol::{RunFds, RunRequest, ZygoteSetup, ZygoteStatus};
use super::python::CApi;
use super::seccomp::Filters;
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

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

/// What the zygote keeps for its supervisors.
pub(crate) struct Zygote {
    pub api: CApi,
    pub setup: ZygoteSetup,
    pub filters: Filters,
    pub vm_bytes: u64,
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
    let setup: ZygoteSetup = match receive(&control) {
        Ok(Some((bytes, _))) => match serde_json::from_slice(&bytes) {
            Ok(setup) => setup,
            Err(e) => return refuse(&control, format!("bad setup: {e}")),
        },
        _ => return 1,
    };
    match start(&control, setup, embedded) {
        Ok(zygote) => serve(&control, &zygote),
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
    // SAFETY: setting dispositions; the zygote reaps its supervisors by ignoring SIGCHLD.
    unsafe {
        libc::signal(libc::SIGCHLD, libc::SIG_IGN);
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
    let (vm_bytes, rss_bytes) = own_size();
    send(
        control,
        &ZygoteStatus::Ready {
            vm_bytes,
            rss_bytes,
        },
    );
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

/// This process's address-space and resident sizes, in bytes.
fn own_size() -> (u64, u64) {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let mut pages = statm
        .split_whitespace()
        .map(|n| n.parse::<u64>().unwrap_or(0));
    // SAFETY: sysconf with a valid name.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    let vm = pages.next().unwrap_or(0) * page;
    let rss = pages.next().unwrap_or(0) * page;
    (vm, rss)
}

/// Fork a supervisor for each run request until the host closes the socket.
fn serve(control: &OwnedFd, zygote: &Zygote) -> i32 {
    loop {
        let (bytes, fds) = match receive(control) {
            Ok(Some(message)) => message,
            Ok(None) => return 0,
            Err(_) => return 1,
        };
        let Some(fds) = RunFds::from_vec(fds) else {
            continue; // descriptors missing: the host sees its report socket close
        };
        let Ok(request) = serde_json::from_slice::<RunRequest>(&bytes) else {
            continue;
        };
        if let Err(why) = spawn_supervisor(control, zygote, request, fds) {
            tracing::debug!("native run not started: {why}");
        }
    }
}

/// Clone a supervisor into the run's new namespaces and map its user ids; it starts once
/// they are written (a byte on its sync pipe).
fn spawn_supervisor(
    control: &OwnedFd,
    zygote: &Zygote,
    request: RunRequest,
    fds: RunFds,
) -> Result<(), String> {
    let (sync_read, sync_write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| e.to_string())?;
    let flags = super::confine::namespaces(&request).bits() as libc::c_ulong;
    zygote.api.before_fork();
    // SAFETY: clone without a new stack behaves as fork (the zygote is single-threaded);
    // the child only runs the supervisor and leaves with _exit.
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
        // SAFETY: the control socket is the zygote's; the supervisor never uses it.
        unsafe { libc::close(control.as_raw_fd()) };
        let mut byte = [0u8; 1];
        // SAFETY: a read into a valid one-byte buffer.
        let n = unsafe { libc::read(sync_read.as_raw_fd(), byte.as_mut_ptr().cast(), 1) };
        if n != 1 {
            super::supervisor::report_failure(
                &fds.report,
                "the zygote could not map the run's user ids".into(),
            );
            // SAFETY: leaves at once.
            unsafe { libc::_exit(0) }
        }
        super::supervisor::run(zygote, request, fds)
    }
    zygote.api.after_fork_parent();
    drop(sync_read);
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        let why = format!("clone into new namespaces: {e}");
        super::supervisor::report_failure(&fds.report, why.clone());
        return Err(why);
    }
    let mapped = super::confine::write_id_maps(pid as i32);
    if mapped.is_ok() {
        // SAFETY: a one-byte write to the sync pipe.
        unsafe { libc::write(sync_write.as_raw_fd(), b"1".as_ptr().cast(), 1) };
    }
    // Dropping the sync pipe without the byte makes the supervisor report the failure.
    mapped.map_err(|e| e.to_string())
}

/// One datagram and the descriptors it carries; `None` at EOF.
fn receive(control: &OwnedFd) -> nix::Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
    let mut buffer = vec![0u8; MAX_MESSAGE];
    let mut space = nix::cmsg_space!([RawFd; RunFds::COUNT]);
    let (length, fds) = {
        let mut iov = [IoSliceMut::new(&mut buffer)];
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
    buffer.truncate(length);
    Ok(Some((buffer, fds)))
}
