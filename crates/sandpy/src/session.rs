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

use crate::bindings::{Sandbox as Instance, Task};
use crate::execution::{Execution, Status};
use crate::files::{InputFile, Workspace};
use crate::host::{HostState, RecordedCall};
use crate::output::Capture;
use crate::sandbox::{check_code, finish, guest_options, tool_access};
use crate::{RunOptions, Sandbox};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wasmtime::Store;

struct Live {
    store: Store<HostState>,
    instance: Instance,
    capture: Capture,
    workspace: Workspace,
}

#[derive(Default)]
struct State {
    live: Option<Live>,
    poisoned: Option<String>,
    runs: u64,
    journal: Vec<Cell>,
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

/// The snapshot format this version writes and reads.
const SNAPSHOT_FORMAT: &str = "sandpy-session/1";

/// One interpreter that keeps its state between runs.
pub struct Session {
    sandbox: Sandbox,
    memory_bytes: usize,
    state: tokio::sync::Mutex<State>,
}

impl Session {
    /// A session whose instance (created on the first run) may grow to `memory_bytes`.
    pub fn new(sandbox: &Sandbox, memory_bytes: usize) -> Session {
        Session {
            sandbox: sandbox.clone(),
            memory_bytes,
            state: tokio::sync::Mutex::new(State::default()),
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

    /// The journal, to save with [`Session::restore`] later.
    pub async fn snapshot(&self) -> SessionSnapshot {
        let state = self.state.lock().await;
        SessionSnapshot {
            format: SNAPSHOT_FORMAT.into(),
            runtime: self.sandbox.runtime().id.clone(),
            cells: state.journal.clone(),
        }
    }

    /// A new session rebuilt from `snapshot` by replaying its cells (tool calls answered
    /// from the journal); fails, naming the cell, if a replayed cell ends differently.
    pub async fn restore(
        sandbox: &Sandbox,
        snapshot: &SessionSnapshot,
        memory_bytes: usize,
        options: &RunOptions,
    ) -> Result<Session, String> {
        if snapshot.format != SNAPSHOT_FORMAT {
            return Err(format!(
                "unknown session format {:?} (this sandpy reads {SNAPSHOT_FORMAT})",
                snapshot.format
            ));
        }
        let session = Session::new(sandbox, memory_bytes);
        {
            let mut state = session.state.lock().await;
            for (i, cell) in snapshot.cells.iter().enumerate() {
                let replay = cell.tool_calls.iter().cloned().collect();
                let options = RunOptions {
                    files: cell.files.clone(),
                    ..options.clone()
                };
                let execution = session
                    .run_cell(&mut state, &cell.code, &options, Some(replay))
                    .await;
                if execution.status != cell.status {
                    let why = execution
                        .error
                        .map(|e| format!(": {}: {}", e.kind, e.message))
                        .unwrap_or_default();
                    return Err(format!(
                        "replaying cell {} ended {} where the journal has {}{why}",
                        i + 1,
                        execution.status,
                        cell.status
                    ));
                }
            }
        }
        Ok(session)
    }

    /// A second session with this one's state (by replay), going its own way from here.
    pub async fn fork(&self, options: &RunOptions) -> Result<Session, String> {
        Session::restore(
            &self.sandbox,
            &self.snapshot().await,
            self.memory_bytes,
            options,
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
            return Execution::refused(Status::SessionPoisoned, "SessionPoisoned", message);
        }
        if let Some(refused) = check_code(code, &options.limits) {
            return refused;
        }
        let mut tools = match tool_access(options) {
            Ok(tools) => tools,
            Err(refused) => return refused,
        };
        tools.recorded = Some(Vec::new());
        tools.replay = replay;
        let _slot = match self.sandbox.admit(options).await {
            Ok(slot) => slot,
            Err(refused) => return refused,
        };
        let started = Instant::now();
        let limits = &options.limits;
        state.runs += 1;
        let mut options = options.clone();
        options
            .filename
            .get_or_insert_with(|| format!("<cell {}>", state.runs));
        let guest_options = guest_options(&options, true);
        let task = Task::Run(code.to_string());
        let mut live = match state.live.take() {
            Some(live) => live,
            None => match self.start(&options, tools.clone()).await {
                Ok(live) => live,
                Err(refused) => return refused,
            },
        };
        let prepared = if live.workspace.has_mounts(&options.mounts) {
            live.workspace.write_inputs(&options.files, limits)
        } else {
            Err("a session keeps the mounts of its first run; close it to change them".to_string())
        };
        if let Err(message) = prepared {
            state.live = Some(live);
            return Execution::refused(Status::InvalidInput, "InvalidInput", message);
        }
        live.capture.reset(limits.output_bytes);
        {
            let data = live.store.data_mut();
            data.tools = tools;
            data.limiter.refused = false;
        }
        live.store.set_epoch_deadline(1);
        let result = tokio::time::timeout(
            limits.timeout,
            live.instance
                .call_execute(&mut live.store, &task, &guest_options),
        )
        .await;
        let (mut execution, returned) = finish(&live.store, &live.capture, result, limits, started);
        execution.files = live.workspace.outputs();
        live.workspace.clear_outputs();
        if !returned || execution.status == Status::MemoryLimit {
            state.poisoned = Some(format!("ended with status {}", execution.status));
        } else {
            let tool_calls = live
                .store
                .data_mut()
                .tools
                .recorded
                .take()
                .unwrap_or_default();
            let files = options.files.clone();
            state.journal.push(Cell {
                code: code.to_string(),
                status: execution.status,
                tool_calls,
                files,
            });
            state.live = Some(live);
        }
        execution
    }

    /// The session's instance and folders, made on its first run.
    async fn start(
        &self,
        options: &RunOptions,
        tools: crate::host::ToolAccess,
    ) -> Result<Live, Execution> {
        let limits = &options.limits;
        let workspace = self.sandbox.new_workspace(limits, &options.mounts)?;
        let capture = Capture::new(limits.output_bytes);
        let runtime = self.sandbox.session_runtime()?;
        let mut store = self.sandbox.new_store(
            runtime,
            &capture,
            self.memory_bytes,
            None,
            tools,
            &workspace,
        )?;
        match runtime.pre.instantiate_async(&mut store).await {
            Ok(instance) => Ok(Live {
                store,
                instance,
                capture,
                workspace,
            }),
            Err(e) => {
                let message = format!("cannot start the session's instance: {e:#}");
                Err(Execution::refused(
                    Status::InternalError,
                    "InternalError",
                    message,
                ))
            }
        }
    }

    /// Forget all state: the next run starts from a fresh interpreter.
    pub async fn reset(&self) {
        let mut state = self.state.lock().await;
        *state = State::default();
    }

    async fn info(&self, id: &str, idle: Duration) -> SessionInfo {
        let state = self.state.lock().await;
        SessionInfo {
            id: id.to_string(),
            runs: state.runs,
            idle_ms: idle.as_millis() as u64,
            poisoned: state.poisoned.is_some(),
            memory_bytes: state
                .live
                .as_ref()
                .map(|l| l.store.data().limiter.peak as u64)
                .unwrap_or(0),
        }
    }
}

/// What [`Sessions::list`] reports of one session.
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
}

/// Settings of a [`Sessions`] set. Defaults: 10 minutes idle TTL, 64 sessions, 256 MiB each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionLimits {
    /// A session idle this long is closed (checked on every access).
    pub idle_ttl: Duration,
    /// Sessions alive at once; a run for a new id beyond it ends `busy`.
    pub max_sessions: usize,
    /// Memory cap of each session's instance.
    pub memory_bytes: usize,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            idle_ttl: Duration::from_secs(600),
            max_sessions: 64,
            memory_bytes: 256 << 20,
        }
    }
}

struct Entry {
    session: Arc<Session>,
    last_used: Mutex<Instant>,
}

impl Entry {
    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    fn idle(&self) -> Duration {
        self.last_used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }
}

/// Sessions by id, for servers: `run` creates a session on first use.
pub struct Sessions {
    sandbox: Sandbox,
    limits: SessionLimits,
    entries: Mutex<HashMap<String, Arc<Entry>>>,
}

impl Sessions {
    /// An empty set over `sandbox`.
    pub fn new(sandbox: &Sandbox, limits: SessionLimits) -> Sessions {
        Sessions {
            sandbox: sandbox.clone(),
            limits,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Entry>>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Close sessions idle longer than the TTL.
    fn expire(&self) {
        let ttl = self.limits.idle_ttl;
        self.entries()
            .retain(|_, entry| entry.idle() < ttl || Arc::strong_count(entry) > 1);
    }

    /// Run `code` in session `id`, creating it if needed.
    pub async fn run(&self, id: &str, code: &str, options: &RunOptions) -> Execution {
        self.expire();
        let entry = {
            let mut entries = self.entries();
            match entries.get(id) {
                Some(entry) => entry.clone(),
                None if entries.len() >= self.limits.max_sessions => {
                    let message = format!(
                        "the session limit ({}) is reached; close a session or wait for one to expire",
                        self.limits.max_sessions
                    );
                    return Execution::refused(Status::Busy, "Busy", message);
                }
                None => {
                    let entry = Arc::new(Entry {
                        session: Arc::new(Session::new(&self.sandbox, self.limits.memory_bytes)),
                        last_used: Mutex::new(Instant::now()),
                    });
                    entries.insert(id.to_string(), entry.clone());
                    entry
                }
            }
        };
        entry.touch();
        let execution = entry.session.run(code, options).await;
        entry.touch();
        execution
    }

    /// Every live session, by id.
    pub async fn list(&self) -> Vec<SessionInfo> {
        self.expire();
        let entries: Vec<(String, Arc<Entry>)> = self
            .entries()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut out = Vec::with_capacity(entries.len());
        for (id, entry) in entries {
            out.push(entry.session.info(&id, entry.idle()).await);
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    /// Reset session `id` to a fresh interpreter; false if there is none.
    pub async fn reset(&self, id: &str) -> bool {
        let entry = self.entries().get(id).cloned();
        match entry {
            Some(entry) => {
                entry.session.reset().await;
                entry.touch();
                true
            }
            None => false,
        }
    }

    /// Close session `id`, freeing its instance; false if there is none.
    pub fn close(&self, id: &str) -> bool {
        self.entries().remove(id).is_some()
    }

    fn get(&self, id: &str) -> Result<Arc<Entry>, String> {
        self.entries()
            .get(id)
            .cloned()
            .ok_or_else(|| format!("no session {id:?}"))
    }

    fn insert(&self, id: &str, session: Session) -> Result<(), String> {
        let mut entries = self.entries();
        if entries.contains_key(id) {
            return Err(format!("session {id:?} already exists; close it first"));
        }
        if entries.len() >= self.limits.max_sessions {
            return Err(format!(
                "the session limit ({}) is reached",
                self.limits.max_sessions
            ));
        }
        let entry = Entry {
            session: Arc::new(session),
            last_used: Mutex::new(Instant::now()),
        };
        entries.insert(id.to_string(), Arc::new(entry));
        Ok(())
    }

    /// The journal of session `id`.
    pub async fn snapshot(&self, id: &str) -> Result<SessionSnapshot, String> {
        let entry = self.get(id)?;
        entry.touch();
        Ok(entry.session.snapshot().await)
    }

    /// A new session `id` rebuilt from `snapshot`.
    pub async fn restore(
        &self,
        id: &str,
        snapshot: &SessionSnapshot,
        options: &RunOptions,
    ) -> Result<(), String> {
        self.expire();
        if self.entries().contains_key(id) {
            return Err(format!("session {id:?} already exists; close it first"));
        }
        let session =
            Session::restore(&self.sandbox, snapshot, self.limits.memory_bytes, options).await?;
        self.insert(id, session)
    }

    /// A new session `to` with the state of session `from`.
    pub async fn fork(&self, from: &str, to: &str, options: &RunOptions) -> Result<(), String> {
        let snapshot = self.snapshot(from).await?;
        self.restore(to, &snapshot, options).await
    }
}
