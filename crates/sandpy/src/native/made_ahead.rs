//! Runs' processes made ahead: when a run (or a session's first cell) starts, the zygote
//! clones and confines the next process of the same shape while this one runs; it waits
//! for its task with no deadline, and the next run of that shape takes it instead of
//! paying the clone, the namespaces, the root's mounts, Landlock and seccomp after its
//! code arrived (as `wasm/made_ahead.rs` does for WebAssembly instances).
//!
//! While it waits, a process made ahead runs a fixed warm-up program of its own
//! (`_warm_up` in `guest/sandpy_native.py`), so that the zygote's pages every run writes
//! are copied before its task comes.
//!
//! A process made ahead never ran a run's code: it is a fork of the zygote, not of a
//! run, so it holds nothing of the last run. Its shape is its whole [`RunRequest`] (the limits
//! set as it was confined, the sizes of its `/tmp` and `/output`, its mounts, the layers,
//! one-shot or session): a run whose request differs in anything makes a fresh process,
//! so that every process runs under its own run's limits and sees its own run's mounts.
//! What else a run is given (its code, input files, environment, stdin, the tools and
//! network the host serves it) comes with its task. A run with mounts always gets a fresh
//! process: its folders are bound as they are when it is made. At most [`MAX_MADE_AHEAD`] wait at
//! once, [`PER_SHAPE`] per shape; each is ended (the zygote kills it at the hang-up of its
//! report socket) when it is pushed out, when the tier is dropped, and with the zygote.
//!
//! When the next process is asked for: the zygote serves one thing at a time, and its
//! clone of a process (~3 ms of page-table copy) held up the start and the collect of
//! the run beside it, and took a core from it. So while another of its shape waits, a run
//! that took a process has the next one made once it answered ([`MadeAhead::top_up`]):
//! runs that come apart never share the machine with a clone. Only a run that leaves
//! none of its shape waiting (runs back to back) has the next one asked for as it starts.

use super::protocol::{cell_limit, RunRequest, CELL_STARTED};
use super::serve::{Launched, Streams};
use crate::verdict::NativeEnd;
use std::os::fd::AsRawFd;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How many processes wait made ahead at most (the newest shapes used stay).
pub(super) const MAX_MADE_AHEAD: usize = 4;

/// How many processes of one shape wait made ahead at most: two, so that a run takes
/// one while the other stays ready, and its replacement is made after the run answered.
pub(super) const PER_SHAPE: usize = 2;

/// How long the zygote may take to start a process with its time limit (a run made
/// ahead, or a session's cell).
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A process made ahead, the request it was made for, and the host's ends of its
/// descriptors (dropping them makes the zygote end it).
struct Waiting {
    shape: RunRequest,
    launched: Launched,
}

/// The processes made ahead of their runs, oldest first.
#[derive(Default)]
pub(super) struct MadeAhead {
    waiting: std::sync::Mutex<Vec<Waiting>>,
}

impl MadeAhead {
    /// The process made ahead for `shape`, if one waits and has not ended: the oldest
    /// (the likeliest to be warm); one that crashed or was killed while it waited is
    /// dropped and the next looked at.
    fn take(&self, shape: &RunRequest) -> Option<Launched> {
        let mut waiting = self.waiting.lock().ok()?;
        loop {
            let at = waiting.iter().position(|process| process.shape == *shape)?;
            let process = waiting.remove(at);
            if !ended(&process.launched) {
                return Some(process.launched);
            }
        }
    }

    /// How many processes of `shape` wait (those that ended are dropped).
    fn count(&self, shape: &RunRequest) -> usize {
        self.waiting.lock().map_or(0, |mut waiting| {
            waiting.retain(|process| !ended(&process.launched));
            waiting
                .iter()
                .filter(|process| process.shape == *shape)
                .count()
        })
    }
}

/// The shape whose processes made ahead are made up to [`PER_SHAPE`] once its run
/// answered ([`MadeAhead::top_up`]); none for a run with mounts, or a tier that makes a
/// fresh process per run.
#[derive(Debug, Default)]
#[must_use = "the processes made ahead are topped up once the run answered"]
pub(super) struct TopUp(Option<RunRequest>);

/// Whether the zygote reported the process's end (a report, or the socket closed): a
/// process waiting for its task has nothing else to say.
fn ended(launched: &Launched) -> bool {
    let mut polled = [libc::pollfd {
        fd: launched.report.as_raw_fd(),
        events: libc::POLLIN | libc::POLLRDHUP,
        revents: 0,
    }];
    // SAFETY: poll over one valid pollfd, without waiting.
    let n = unsafe { libc::poll(polled.as_mut_ptr(), 1, 0) };
    n != 0
}

/// Why a process did not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NotStarted {
    /// It has ended (the zygote's report or EOF came instead).
    Ended,
    /// The zygote did not answer within [`START_TIMEOUT`].
    TimedOut,
}

impl NotStarted {
    /// Why a session's cell could not start, for its execution.
    pub(super) fn cell_end(self) -> NativeEnd {
        NativeEnd::Internal(match self {
            NotStarted::Ended => {
                "the session's process ended between its runs; reset the session".into()
            }
            NotStarted::TimedOut => format!(
                "the native tier's zygote did not start the cell within {} s",
                START_TIMEOUT.as_secs()
            ),
        })
    }
}

/// Tell the zygote that the process of `report` starts with a time limit of `ms`, and
/// wait until that limit is in force and the process runs.
pub(super) async fn start(report: &mut tokio::net::UnixStream, ms: u64) -> Result<(), NotStarted> {
    let ms = ms.min(u64::MAX - 1); // u64::MAX is ANSWERED
    let started = async {
        report.write_all(&cell_limit(ms)).await?;
        let mut answer = [0u8; 1];
        report.read_exact(&mut answer).await?;
        Ok::<_, std::io::Error>(answer[0] == CELL_STARTED)
    };
    match tokio::time::timeout(START_TIMEOUT, started).await {
        Ok(Ok(true)) => Ok(()),
        Ok(_) => Err(NotStarted::Ended),
        Err(_) => Err(NotStarted::TimedOut),
    }
}

impl MadeAhead {
    /// A confined process for `request`, running under its time limit: the one made
    /// ahead for its shape when one waits and starts, else a fresh one from `launch`.
    /// When none of its shape is left waiting, the next one is asked for now (after this
    /// one started: the zygote serves one thing at a time, and this run comes first);
    /// the rest once the run answered, with the [`TopUp`] returned. Returns the streams
    /// and the stdin.
    pub(super) async fn process_for(
        &self,
        request: RunRequest,
        launch: impl Fn(&RunRequest) -> Result<Launched, String>,
    ) -> Result<(Streams, tokio::net::unix::pipe::Sender, TopUp), String> {
        // A run with mounts binds its folders as they are when its process is made: one
        // made ahead would show a folder replaced since (deleted and made again) as it was.
        if !request.mounts.is_empty() {
            let (streams, stdin) = launch(&request).and_then(Streams::open)?;
            return Ok((streams, stdin, TopUp::default()));
        }
        let shape = RunRequest {
            ahead: true,
            ..request.clone()
        };
        let mut taken = None;
        if let Some(launched) = self.take(&shape) {
            if let Ok((mut streams, stdin)) = Streams::open(launched) {
                if start(&mut streams.report, request.timeout_ms).await.is_ok() {
                    taken = Some((streams, stdin));
                }
            }
            // Otherwise it ended while it waited (dropped here: the zygote reaps it).
        }
        let (streams, stdin) = match taken {
            Some(process) => process,
            None => launch(&request).and_then(Streams::open)?,
        };
        if self.count(&shape) == 0 {
            // Back to back: the next run may come before this one answers.
            self.make_ahead(&shape, &launch);
        }
        Ok((streams, stdin, TopUp(Some(shape))))
    }

    /// Once a run answered (its process stopped and read): have the zygote make its
    /// shape's processes up to [`PER_SHAPE`], off the run's path.
    pub(super) fn top_up(
        &self,
        top_up: TopUp,
        launch: impl Fn(&RunRequest) -> Result<Launched, String>,
    ) {
        let Some(shape) = top_up.0 else {
            return;
        };
        for _ in self.count(&shape)..PER_SHAPE {
            if !self.make_ahead(&shape, &launch) {
                return;
            }
        }
    }

    /// Have the zygote make a process of `shape` ahead, unless [`PER_SHAPE`] wait
    /// already; the oldest is ended when more than [`MAX_MADE_AHEAD`] would wait. False
    /// when none was made.
    fn make_ahead(
        &self,
        shape: &RunRequest,
        launch: impl Fn(&RunRequest) -> Result<Launched, String>,
    ) -> bool {
        let Ok(mut waiting) = self.waiting.lock() else {
            return false;
        };
        let of_shape = waiting
            .iter()
            .filter(|process| process.shape == *shape)
            .count();
        if of_shape >= PER_SHAPE {
            return false;
        }
        let made = match launch(shape) {
            Ok(launched) => {
                waiting.push(Waiting {
                    shape: shape.clone(),
                    launched,
                });
                true
            }
            Err(why) => {
                tracing::debug!("no native process made ahead: {why}");
                false
            }
        };
        while waiting.len() > MAX_MADE_AHEAD {
            waiting.remove(0);
        }
        made
    }
}
