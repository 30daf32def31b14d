//! Stateful sessions: runs that share one live instance (globals, imports), one at a
//! time in call order; and [`Sessions`], a set of them by id with an idle TTL, a maximum
//! count and a memory cap each.
//!
//! A run that does not return normally (timeout, trap, limit) or hits the memory cap
//! poisons its session: the interpreter may be half-way through anything, so the next
//! run is refused with `session_poisoned` until the session is reset.
//!
//! Saving, restoring and forking work from the session's journal: the code of each run
//! and the answers its tool calls got. A restore replays the journal in a fresh instance,
//! answering tool calls from the journal (tools are not called again). The instance's
//! memory itself cannot be captured: wasmtime 48 offers no public access to the linear
//! memory or the non-exported globals of a component's inner core instances (only its
//! guest-debug instrumentation does, at the cost of slower code). So what the code got
//! from the clock or from `random` is computed anew on replay.
//!
//! The journal is held in host memory, so it has a cap ([`SessionLimits::journal_bytes`]):
//! the cell that passes it is still run and answered, but the journal is dropped and the
//! session can no longer be saved or forked (until a reset starts a new journal). Refusing
//! the run instead cannot work: what a cell adds (its tool calls' answers) is known only
//! after it ran. A snapshot records the runtime it was made with; restoring it under
//! another runtime is refused, since replaying under other packages or another CPython
//! need not reach the same state.

use super::SessionLimits;
use crate::bindings::Task;
use crate::execution::{ErrorInfo, Execution, Status};
use crate::files::InputFile;
use crate::run::{Interpreter, Stage};
use crate::tools::RecordedCall;
use crate::{LimitOverrides, RunOptions, Sandbox};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

struct State {
    interpreter: Interpreter,
    poisoned: Option<String>,
    runs: u64,
    journal: Journal,
}

impl State {
    fn new(limits: &SessionLimits) -> State {
        State {
            interpreter: Interpreter::new(limits.memory_bytes),
            poisoned: None,
            runs: 0,
            journal: Journal::default(),
        }
    }
}

/// The cells kept for save and fork, and their size as a snapshot would write them.
#[derive(Default)]
struct Journal {
    cells: Vec<Cell>,
    bytes: u64,
    /// The cell (from 1) that passed the cap; the cells were dropped then.
    dropped_at: Option<u64>,
}

impl Journal {
    /// Keep `cell`, the session's run number `run`, unless that passes `cap`: then drop
    /// every cell, now and for the rest of this journal.
    fn push(&mut self, cell: Cell, run: u64, cap: u64) {
        if self.dropped_at.is_some() {
            return;
        }
        let bytes = self.bytes.saturating_add(cell.journal_bytes());
        if bytes > cap {
            tracing::info!(cell = run, cap, "session journal over its cap; dropped");
            *self = Journal {
                dropped_at: Some(run),
                ..Journal::default()
            };
            return;
        }
        self.bytes = bytes;
        self.cells.push(cell);
    }
}

/// Counts what is written to it, to size a value's JSON without holding the text.
struct Counter(u64);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A session could not be restored, forked, found or added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The snapshot is of a format this version does not read.
    #[error("unknown session format {found:?} (this sandpy reads {SNAPSHOT_FORMAT})")]
    Format {
        /// The snapshot's `format`.
        found: String,
    },
    /// Replaying a cell ended differently from the journal.
    #[error(
        "replaying cell {cell} ended {status} where the journal has {expected}{}",
        .error.as_ref().map(|e| format!(": {}: {}", e.kind, e.message)).unwrap_or_default()
    )]
    Diverged {
        /// The cell, from 1.
        cell: usize,
        /// How the replay ended.
        status: Status,
        /// How the journal says it ended.
        expected: Status,
        /// The replay's error, if any.
        error: Option<ErrorInfo>,
    },
    /// No session has this id.
    #[error("no session {0:?}")]
    NotFound(String),
    /// The journal passed its cap, so there is nothing to save or fork from.
    #[error(
        "the session's journal passed its cap of {cap} bytes at run {run} \
         (sandpy.sessions.journal_mb), so it can no longer be saved or forked; \
         reset it to start a new journal"
    )]
    JournalDropped {
        /// The cap, in bytes.
        cap: u64,
        /// The run (from 1) whose cell passed it.
        run: u64,
    },
    /// The snapshot is larger than a session's journal may be here.
    #[error("the snapshot holds {bytes} bytes of cells, over the journal cap of {cap} bytes (sandpy.sessions.journal_mb)")]
    TooLarge {
        /// The snapshot's cells, as a journal counts them.
        bytes: u64,
        /// The cap.
        cap: u64,
    },
    /// The snapshot was made under another Python runtime (other packages, another
    /// CPython, the other tier): replaying it need not reach the same state.
    #[error("the snapshot was made with runtime {found}, this server runs {expected}; it cannot be restored here")]
    Runtime {
        /// The snapshot's runtime id.
        found: String,
        /// This sandbox's runtime id.
        expected: String,
    },
    /// The tier the session runs on could not start (the native tier's Python).
    #[error("{0}")]
    Tier(String),
    /// A session with this id exists.
    #[error("session {0:?} already exists; close it first")]
    Exists(String),
    /// A new session would pass a cap: the tenant's or the server's (named).
    #[error("{0}; close a session or wait for one to expire")]
    Full(crate::sessions::SessionCap),
}

/// One run of a session, as its journal keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// The code that ran.
    pub code: String,
    /// How it ended (`ok` or `error`: other runs poison the session and are not kept).
    pub status: Status,
    /// Its tool calls and the answers they got, in order.
    pub tool_calls: Vec<RecordedCall>,
    /// The input files it was given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<InputFile>,
    /// The limits the run was given of its own (its policy's, then its `limit_overrides`):
    /// a replay runs the cell under them, not under the restoring call's.
    #[serde(default, skip_serializing_if = "is_default")]
    pub limits: LimitOverrides,
}

fn is_default(limits: &LimitOverrides) -> bool {
    *limits == LimitOverrides::default()
}

/// What a run's options put over their base limits: its policy's limits, then its own
/// overrides (see [`RunOptions::effective_limits`]).
fn own_limits(options: &RunOptions) -> LimitOverrides {
    match &options.policy {
        Some(policy) => policy.limits.then(&options.limit_overrides),
        None => options.limit_overrides.clone(),
    }
}

impl Cell {
    /// Its size as a snapshot writes it (JSON: input files in base64).
    fn journal_bytes(&self) -> u64 {
        let mut counter = Counter(0);
        match serde_json::to_writer(&mut counter, self) {
            Ok(()) => counter.0,
            Err(_) => u64::MAX, // a value JSON cannot hold: never kept
        }
    }
}

/// A saved session: enough to rebuild its state by replay (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSnapshot {
    /// `sandpy-session/1`.
    pub format: String,
    /// SHA-256 of the Python runtime the journal was recorded with.
    pub runtime: String,
    /// The runs, in order.
    pub cells: Vec<Cell>,
}

impl SessionSnapshot {
    /// Keep each cell's own limits to what a caller may set: a timeout of at most
    /// `max_timeout_ms` and no other override (for a snapshot read from a place the
    /// caller could write, where the cells' limits are the caller's claims).
    pub fn bound_limits(&mut self, max_timeout_ms: u64) {
        for cell in &mut self.cells {
            cell.limits = LimitOverrides {
                timeout_ms: cell.limits.timeout_ms.map(|ms| ms.min(max_timeout_ms)),
                ..LimitOverrides::default()
            };
        }
    }
}

/// The snapshot format this version writes and reads.
const SNAPSHOT_FORMAT: &str = "sandpy-session/1";

/// One interpreter that keeps its state between runs.
pub struct Session {
    sandbox: Sandbox,
    limits: SessionLimits,
    state: tokio::sync::Mutex<State>,
}

impl Session {
    /// A session whose instance (created on the first run) may grow to
    /// `limits.memory_bytes` and whose journal to `limits.journal_bytes` (the set's other
    /// limits do not apply to one session).
    pub fn new(sandbox: &Sandbox, limits: &SessionLimits) -> Session {
        Session {
            sandbox: sandbox.clone(),
            limits: limits.clone(),
            state: tokio::sync::Mutex::new(State::new(limits)),
        }
    }

    /// Run `code` in the session's namespace. `options.stdin` is ignored (a session's
    /// stdin is empty) and the memory limit is the session's own. The session's files
    /// stay between runs (`options.files` are added to them); each run returns the files
    /// it left under `/output` and empties it. The mounts, disk quotas and output cap are
    /// those of the first run.
    pub async fn run(&self, code: &str, options: &RunOptions) -> Execution {
        let mut state = self.state.lock().await; // FIFO: runs go in call order
        self.run_cell(&mut state, code, options, None).await
    }

    /// The journal, to save with [`Session::restore`] later; fails when the journal
    /// passed its cap.
    pub async fn snapshot(&self) -> Result<SessionSnapshot, SessionError> {
        let state = self.state.lock().await;
        if let Some(run) = state.journal.dropped_at {
            return Err(SessionError::JournalDropped {
                cap: self.limits.journal_bytes,
                run,
            });
        }
        let tier = state.interpreter.tier().unwrap_or_default();
        let runtime = self
            .sandbox
            .runner()
            .runtime_id_of(tier)
            .await
            .map_err(SessionError::Tier)?;
        Ok(SessionSnapshot {
            format: SNAPSHOT_FORMAT.into(),
            runtime,
            cells: state.journal.cells.clone(),
        })
    }

    /// A new session rebuilt from `snapshot` by replaying its cells (tool calls answered
    /// from the journal), each under the limits it ran under (its own overrides put over
    /// `options`: a front end that bounds its callers' limits bounds a snapshot's too, see
    /// [`SessionSnapshot::bound_limits`]); cancelling `options.cancel` stops the replay
    /// (the cell then ends `cancelled`, a divergence). Fails, naming the cell, if a
    /// replayed cell ends differently, and before replaying anything if the snapshot is of
    /// another format or runtime or over the journal cap.
    pub async fn restore(
        sandbox: &Sandbox,
        snapshot: &SessionSnapshot,
        limits: &SessionLimits,
        options: &RunOptions,
    ) -> Result<Session, SessionError> {
        if snapshot.format != SNAPSHOT_FORMAT {
            return Err(SessionError::Format {
                found: snapshot.format.clone(),
            });
        }
        let expected = sandbox
            .runner()
            .runtime_id_of(options.tier)
            .await
            .map_err(SessionError::Tier)?;
        // A snapshot without cells holds no state to replay, on any runtime.
        if snapshot.runtime != expected && !snapshot.cells.is_empty() {
            return Err(SessionError::Runtime {
                found: snapshot.runtime.clone(),
                expected,
            });
        }
        let bytes = snapshot
            .cells
            .iter()
            .fold(0u64, |sum, cell| sum.saturating_add(cell.journal_bytes()));
        if bytes > limits.journal_bytes {
            return Err(SessionError::TooLarge {
                bytes,
                cap: limits.journal_bytes,
            });
        }
        let session = Session::new(sandbox, limits);
        {
            let mut state = session.state.lock().await;
            for (i, cell) in snapshot.cells.iter().enumerate() {
                let replay = cell.tool_calls.iter().cloned().collect();
                // A replay prints what the saved runs printed: none of it is new output.
                // Each cell runs under the limits it ran under (its timeout, not the
                // restoring call's default); the options' cancellation stops the replay.
                let options = RunOptions {
                    files: cell.files.clone(),
                    on_output: None,
                    limit_overrides: options.limit_overrides.then(&cell.limits),
                    ..options.clone()
                };
                let execution = session
                    .run_cell(&mut state, &cell.code, &options, Some(replay))
                    .await;
                if execution.status != cell.status {
                    return Err(SessionError::Diverged {
                        cell: i + 1,
                        status: execution.status,
                        expected: cell.status,
                        error: execution.error,
                    });
                }
            }
        }
        Ok(session)
    }

    /// A second session with this one's state (by replay, on this one's tier), going
    /// its own way from here.
    pub async fn fork(&self, options: &RunOptions) -> Result<Session, SessionError> {
        let tier = self
            .state
            .lock()
            .await
            .interpreter
            .tier()
            .unwrap_or(options.tier);
        let options = RunOptions {
            tier,
            ..options.clone()
        };
        Session::restore(
            &self.sandbox,
            &self.snapshot().await?,
            &self.limits,
            &options,
        )
        .await
    }

    async fn run_cell(
        &self,
        state: &mut State,
        code: &str,
        options: &RunOptions,
        replay: Option<VecDeque<RecordedCall>>,
    ) -> Execution {
        if let Some(reason) = &state.poisoned {
            let message =
                format!("the session is unusable since a run {reason}; reset or close it");
            return Execution::refused(Status::SessionPoisoned, message);
        }
        let mut options = options.clone();
        options
            .filename
            .get_or_insert_with(|| format!("<cell {}>", state.runs + 1));
        let task = Task::Run(code.to_string());
        let ran = self
            .sandbox
            .runner()
            .cell(task, &options, &mut state.interpreter, replay)
            .await;
        match ran.stage {
            Stage::Refused => {}
            Stage::Admitted => state.runs += 1,
            Stage::Fit(tool_calls) => {
                state.runs += 1;
                let cell = Cell {
                    code: code.to_string(),
                    status: ran.execution.status,
                    tool_calls,
                    limits: own_limits(&options),
                    files: options.files,
                };
                state
                    .journal
                    .push(cell, state.runs, self.limits.journal_bytes);
            }
            Stage::Unfit => {
                state.runs += 1;
                state.poisoned = Some(format!("ended with status {}", ran.execution.status));
            }
        }
        ran.execution
    }

    /// Forget all state: the next run starts from a fresh interpreter.
    pub async fn reset(&self) {
        let mut state = self.state.lock().await;
        *state = State::new(&self.limits);
    }

    /// What [`Sessions::list`](crate::sessions::Sessions::list) shows of this session.
    pub(crate) async fn info(&self, id: &str, idle: std::time::Duration) -> SessionInfo {
        let state = self.state.lock().await;
        SessionInfo {
            id: id.to_string(),
            runs: state.runs,
            idle_ms: idle.as_millis() as u64,
            poisoned: state.poisoned.is_some(),
            memory_bytes: state.interpreter.memory_peak(),
            journal_bytes: state.journal.bytes,
            saveable: state.journal.dropped_at.is_none(),
        }
    }
}

/// What [`TenantSessions::list`] reports of one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionInfo {
    /// The caller's id.
    pub id: String,
    /// Runs so far.
    pub runs: u64,
    /// Time since the last run started or ended.
    pub idle_ms: u64,
    /// Whether a run poisoned it (reset or close it).
    pub poisoned: bool,
    /// Linear memory it holds.
    pub memory_bytes: u64,
    /// Host memory its journal holds (what a save would write).
    pub journal_bytes: u64,
    /// Whether it can be saved or forked (false once its journal passed its cap).
    pub saveable: bool,
}
