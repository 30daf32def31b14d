//! The zygote: a process of its own (the `sandpy` binary started with [`ZYGOTE_ARG`])
//! that embeds CPython, imports the guest code and the configured packages once, and then
//! clones one run per request into its namespaces and supervises it. It never runs user
//! code.

use super::protocol::{RunFds, RunRequest, ZygoteSetup, ZygoteStatus};
use super::python::CApi;
use super::seccomp::Filters;
use super::supervised::{spawn_run, Supervised};
use super::Zygote;
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Instant;

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
    // A session and process group of its own: a terminal's Ctrl-C (or hang-up) goes to
    // the host's foreground group, which the host handles; the zygote leaves when the
    // host closes its control socket. (Fails only for a group leader: then it already
    // has a group of its own.)
    // SAFETY: setsid takes no arguments.
    unsafe { libc::setsid() };
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
    // Read here, in the zygote: a run reads it after the fork.
    super::confine::raises_hard_limits();
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
        // Until the next deadline, or the next look at a run being stopped.
        let wake = live
            .iter()
            .filter(|run| !run.timed_out && !run.abandoned)
            .filter_map(|run| run.deadline)
            .chain(
                live.iter()
                    .filter_map(|run| Some(run.stopping.as_ref()?.next)),
            )
            .min();
        let timeout = wake.map(|at| {
            let wait = at.saturating_duration_since(now);
            libc::timespec {
                tv_sec: wait.as_secs().min(i32::MAX as u64) as libc::time_t,
                tv_nsec: wait.subsec_nanos() as libc::c_long,
            }
        });
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
        let timeout_ptr = timeout
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: ppoll over valid pollfd entries (negative descriptors are skipped), with
        // a valid timeout or none, and no signal mask.
        let n = unsafe {
            libc::ppoll(
                polled.as_mut_ptr(),
                polled.len() as libc::nfds_t,
                timeout_ptr,
                std::ptr::null(),
            )
        };
        if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return 1;
        }
        let mut ended = Vec::new();
        for (i, run) in live.iter_mut().enumerate() {
            let (exited, hung_up) = (polled[1 + 2 * i].revents, polled[2 + 2 * i].revents);
            if hung_up != 0 && !run.abandoned && !run.read_from_host() {
                // The host has its answer, or gave up: nothing is reported.
                run.abandoned = true;
                run.stopping = None;
                run.kill();
            }
            // A run being stopped is collected once it stopped (or ended), never waited
            // for: the other runs are served meanwhile.
            run.check_stop();
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
