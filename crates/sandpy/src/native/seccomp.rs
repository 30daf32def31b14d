//! The seccomp allow-list of a confined run: the system calls CPython, numpy, pandas and
//! scikit-learn make while computing, reading and writing files and running threads.
//! Anything else fails with `EPERM`: no `socket()`, no exec, no new processes (threads
//! only), no namespaces, ptrace, mounts, bpf, io_uring, keys, perf or userfaultfd, no
//! change to the CPU time limit, no `SIGCONT` by any route (the zygote holds a session's
//! process stopped between cells: [`signal_rules`]), no larger socket or pipe buffers
//! ([`buffer_rules`]). A system call of another architecture (`int 0x80`) kills the
//! process.
//!
//! Compiled once, in the zygote; each child only loads it.

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

/// System calls allowed with any arguments.
const ALLOWED: &[libc::c_long] = &[
    // descriptors and files
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_preadv,
    libc::SYS_pwritev,
    libc::SYS_preadv2,
    libc::SYS_pwritev2,
    libc::SYS_openat,
    libc::SYS_close,
    libc::SYS_close_range,
    libc::SYS_fstat,
    libc::SYS_newfstatat,
    libc::SYS_statx,
    libc::SYS_statfs,
    libc::SYS_fstatfs,
    libc::SYS_lseek,
    libc::SYS_faccessat,
    libc::SYS_faccessat2,
    libc::SYS_pipe2,
    libc::SYS_dup,
    libc::SYS_dup3,
    libc::SYS_flock,
    libc::SYS_fsync,
    libc::SYS_fdatasync,
    libc::SYS_truncate,
    libc::SYS_ftruncate,
    libc::SYS_fallocate,
    libc::SYS_fadvise64,
    libc::SYS_getdents64,
    libc::SYS_getcwd,
    libc::SYS_chdir,
    libc::SYS_fchdir,
    libc::SYS_renameat,
    libc::SYS_renameat2,
    libc::SYS_mkdirat,
    libc::SYS_linkat,
    libc::SYS_unlinkat,
    libc::SYS_symlinkat,
    libc::SYS_readlinkat,
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    libc::SYS_umask,
    libc::SYS_utimensat,
    libc::SYS_copy_file_range,
    libc::SYS_sendfile,
    // waiting for descriptors
    libc::SYS_pselect6,
    libc::SYS_ppoll,
    libc::SYS_epoll_create1,
    libc::SYS_epoll_ctl,
    libc::SYS_epoll_pwait,
    libc::SYS_epoll_pwait2,
    libc::SYS_eventfd2,
    // the run's own sockets (its channel, and socketpairs)
    libc::SYS_sendto,
    libc::SYS_recvfrom,
    libc::SYS_sendmsg,
    libc::SYS_recvmsg,
    libc::SYS_shutdown,
    libc::SYS_getsockname,
    libc::SYS_getpeername,
    libc::SYS_getsockopt,
    // memory
    libc::SYS_mmap,
    libc::SYS_munmap,
    libc::SYS_mprotect,
    libc::SYS_mremap,
    libc::SYS_madvise,
    libc::SYS_msync,
    libc::SYS_mincore,
    libc::SYS_brk,
    libc::SYS_membarrier,
    libc::SYS_get_mempolicy,
    // signals
    libc::SYS_rt_sigaction,
    libc::SYS_rt_sigprocmask,
    libc::SYS_rt_sigreturn,
    libc::SYS_rt_sigpending,
    libc::SYS_rt_sigtimedwait,
    libc::SYS_rt_sigsuspend,
    libc::SYS_sigaltstack,
    // threads and time
    libc::SYS_futex,
    libc::SYS_set_robust_list,
    libc::SYS_get_robust_list,
    libc::SYS_set_tid_address,
    libc::SYS_rseq,
    libc::SYS_sched_yield,
    libc::SYS_sched_getaffinity,
    libc::SYS_sched_setaffinity,
    libc::SYS_sched_getparam,
    libc::SYS_sched_getscheduler,
    libc::SYS_sched_get_priority_max,
    libc::SYS_sched_get_priority_min,
    libc::SYS_getcpu,
    libc::SYS_nanosleep,
    libc::SYS_clock_nanosleep,
    libc::SYS_clock_gettime,
    libc::SYS_clock_getres,
    libc::SYS_gettimeofday,
    libc::SYS_getitimer,
    libc::SYS_setitimer,
    libc::SYS_timer_settime,
    libc::SYS_timer_gettime,
    libc::SYS_timer_delete,
    libc::SYS_timerfd_create,
    libc::SYS_timerfd_settime,
    libc::SYS_timerfd_gettime,
    // identity and limits (raising a hard limit needs a capability the run lacks)
    libc::SYS_getpid,
    libc::SYS_gettid,
    libc::SYS_getppid,
    libc::SYS_getuid,
    libc::SYS_geteuid,
    libc::SYS_getgid,
    libc::SYS_getegid,
    libc::SYS_getgroups,
    libc::SYS_getresuid,
    libc::SYS_getresgid,
    libc::SYS_getpgid,
    libc::SYS_getsid,
    libc::SYS_getrlimit,
    libc::SYS_getrusage,
    libc::SYS_times,
    libc::SYS_sysinfo,
    libc::SYS_uname,
    libc::SYS_getrandom,
    libc::SYS_restart_syscall,
    libc::SYS_exit,
    libc::SYS_exit_group,
    libc::SYS_wait4,
    libc::SYS_waitid,
    libc::SYS_seccomp,
];

/// The same, for the system calls x86-64 has besides the generic ones.
#[cfg(target_arch = "x86_64")]
const ALLOWED_LEGACY: &[libc::c_long] = &[
    libc::SYS_open,
    libc::SYS_stat,
    libc::SYS_lstat,
    libc::SYS_access,
    libc::SYS_pipe,
    libc::SYS_dup2,
    libc::SYS_getdents,
    libc::SYS_rename,
    libc::SYS_mkdir,
    libc::SYS_rmdir,
    libc::SYS_link,
    libc::SYS_unlink,
    libc::SYS_symlink,
    libc::SYS_readlink,
    libc::SYS_chmod,
    libc::SYS_utime,
    libc::SYS_utimes,
    libc::SYS_select,
    libc::SYS_poll,
    libc::SYS_epoll_create,
    libc::SYS_epoll_wait,
    libc::SYS_eventfd,
    libc::SYS_time,
    libc::SYS_alarm,
    libc::SYS_getpgrp,
    libc::SYS_arch_prctl,
];

#[cfg(not(target_arch = "x86_64"))]
const ALLOWED_LEGACY: &[libc::c_long] = &[];

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

/// Why the filters could not be made or loaded.
#[derive(Debug, thiserror::Error)]
#[error("seccomp: {0}")]
pub(crate) struct SeccompError(String);

impl From<seccompiler::BackendError> for SeccompError {
    fn from(e: seccompiler::BackendError) -> Self {
        SeccompError(e.to_string())
    }
}

impl From<seccompiler::Error> for SeccompError {
    fn from(e: seccompiler::Error) -> Self {
        SeccompError(e.to_string())
    }
}

/// The compiled filters of a run.
pub(crate) struct Filters {
    allow_list: BpfProgram,
    /// `clone3` answered `ENOSYS`, so that threads are made with `clone` (whose flags
    /// the allow-list can read; `clone3` passes them in memory).
    no_clone3: BpfProgram,
}

fn condition(
    arg: u8,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, seccompiler::BackendError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
}

/// `fcntl` commands that choose a signal or a process to signal on a descriptor's events
/// (`F_SETOWN`, `F_SETOWN_EX`, `F_SETSIG`; `F_SETLEASE` and `F_NOTIFY` make the caller
/// the owner), and `F_SETPIPE_SZ` (a pipe's buffer, host memory, stays at its default).
const FCNTL_REFUSED: [libc::c_int; 6] = [
    libc::F_SETOWN,
    F_SETOWN_EX,
    F_SETSIG,
    libc::F_SETLEASE,
    libc::F_NOTIFY,
    libc::F_SETPIPE_SZ,
];

/// `fcntl(F_SETSIG)` and `F_SETOWN_EX` (not in the libc crate for every target).
const F_SETSIG: libc::c_int = 10;
const F_SETOWN_EX: libc::c_int = 15;

/// `ioctl` requests that set a descriptor's owner, as `F_SETOWN` does: `FIOSETOWN` and
/// `SIOCSPGRP` (`asm-generic/sockios.h`).
const IOCTL_REFUSED: [u64; 2] = [0x8901, 0x8902];

/// Socket options that size a socket's buffers, which are host memory outside the run's
/// address space: they stay at the system's defaults (`net.core.wmem_default`).
const SOCKOPT_REFUSED: [libc::c_int; 4] = [
    libc::SO_SNDBUF,
    libc::SO_RCVBUF,
    libc::SO_SNDBUFFORCE,
    libc::SO_RCVBUFFORCE,
];

/// Every way a run could send a signal to itself (Landlock scopes signals to the run),
/// closed to `SIGCONT`, which would cancel the zygote's stop of a session's process
/// between cells (and of a run being collected): `kill`, `tkill`, `tgkill` and
/// `rt_sigqueueinfo` with any other signal; `rt_tgsigqueueinfo`, `pidfd_send_signal`,
/// `io_uring`, `mq_notify`, `ptrace` and `prctl(PR_SET_PDEATHSIG)` not at all (not in the
/// list); a POSIX timer only with no `sigevent` (its signal is then `SIGALRM`: the
/// structure is in memory, which seccomp cannot read); no owner or signal for a
/// descriptor's events (`fcntl` and `ioctl` above). `setitimer` and `alarm` send fixed
/// signals, never `SIGCONT`.
fn signal_rules(rules: &mut BTreeMap<i64, Vec<SeccompRule>>) -> Result<(), SeccompError> {
    // (argument: the signal's position)
    for (call, signal_arg) in [
        (libc::SYS_kill, 1),
        (libc::SYS_tkill, 1),
        (libc::SYS_tgkill, 2),
        (libc::SYS_rt_sigqueueinfo, 1),
    ] {
        rules.insert(
            call,
            vec![SeccompRule::new(vec![condition(
                signal_arg,
                SeccompCmpOp::Ne,
                libc::SIGCONT as u64,
            )?])?],
        );
    }
    rules.insert(
        libc::SYS_timer_create,
        vec![SeccompRule::new(vec![SeccompCondition::new(
            1,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::Eq,
            0,
        )?])?],
    );
    let none_of = |arg: u8, values: &mut dyn Iterator<Item = u64>| {
        values
            .map(|value| condition(arg, SeccompCmpOp::Ne, value))
            .collect::<Result<Vec<_>, _>>()
            .and_then(SeccompRule::new)
    };
    rules.insert(
        libc::SYS_fcntl,
        vec![none_of(1, &mut FCNTL_REFUSED.iter().map(|&c| c as u64))?],
    );
    rules.insert(
        libc::SYS_ioctl,
        vec![none_of(1, &mut IOCTL_REFUSED.iter().copied())?],
    );
    Ok(())
}

/// Socket options at any level but `SOL_SOCKET`, and there any but the buffer sizes.
fn buffer_rules(rules: &mut BTreeMap<i64, Vec<SeccompRule>>) -> Result<(), SeccompError> {
    let mut other_option: Vec<SeccompCondition> = Vec::new();
    for option in SOCKOPT_REFUSED {
        other_option.push(condition(2, SeccompCmpOp::Ne, option as u64)?);
    }
    rules.insert(
        libc::SYS_setsockopt,
        vec![
            SeccompRule::new(vec![condition(
                1,
                SeccompCmpOp::Ne,
                libc::SOL_SOCKET as u64,
            )?])?,
            SeccompRule::new(other_option)?,
        ],
    );
    Ok(())
}

impl Filters {
    /// Compile both filters.
    pub(crate) fn compile() -> Result<Filters, SeccompError> {
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = ALLOWED
            .iter()
            .chain(ALLOWED_LEGACY)
            .map(|&nr| (nr, Vec::new()))
            .collect();
        // New threads only: a clone without CLONE_THREAD (fork) is refused.
        let thread = libc::CLONE_THREAD as u64;
        rules.insert(
            libc::SYS_clone,
            vec![SeccompRule::new(vec![condition(
                0,
                SeccompCmpOp::MaskedEq(thread),
                thread,
            )?])?],
        );
        // Unix socketpairs only: a pair reaches nothing outside the run.
        rules.insert(
            libc::SYS_socketpair,
            vec![SeccompRule::new(vec![condition(
                0,
                SeccompCmpOp::Eq,
                libc::AF_UNIX as u64,
            )?])?],
        );
        // Limits may be read and set, but not the CPU time's: a session's is moved by the
        // zygote as each cell starts, under a hard limit the run could raise it to.
        rules.insert(
            libc::SYS_prlimit64,
            vec![
                SeccompRule::new(vec![SeccompCondition::new(
                    2,
                    SeccompCmpArgLen::Qword,
                    SeccompCmpOp::Eq,
                    0,
                )?])?,
                SeccompRule::new(vec![condition(
                    1,
                    SeccompCmpOp::Ne,
                    libc::RLIMIT_CPU as u64,
                )?])?,
            ],
        );
        signal_rules(&mut rules)?;
        buffer_rules(&mut rules)?;
        // Naming threads, reading the name, and what loading another seccomp filter takes
        // (filters only ever narrow: the second one below is loaded under the first).
        rules.insert(
            libc::SYS_prctl,
            [
                libc::PR_SET_NAME,
                libc::PR_GET_NAME,
                libc::PR_SET_NO_NEW_PRIVS,
            ]
            .iter()
            .map(|&option| SeccompRule::new(vec![condition(0, SeccompCmpOp::Eq, option as u64)?]))
            .collect::<Result<_, _>>()?,
        );
        let allow_list = SeccompFilter::new(
            rules,
            SeccompAction::Errno(libc::EPERM as u32),
            SeccompAction::Allow,
            ARCH,
        )?
        .try_into()?;
        let no_clone3 = SeccompFilter::new(
            BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            ARCH,
        )?
        .try_into()?;
        Ok(Filters {
            allow_list,
            no_clone3,
        })
    }

    /// Load both into this thread (no_new_privs must be set). The last loaded is
    /// evaluated first, so `clone3`'s `ENOSYS` wins over the allow-list's `EPERM`.
    pub(crate) fn apply(&self) -> Result<(), SeccompError> {
        seccompiler::apply_filter(&self.allow_list)?;
        seccompiler::apply_filter(&self.no_clone3)?;
        Ok(())
    }
}
