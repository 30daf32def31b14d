//! [`Sessions`]: a set of [`Session`]s by id, for servers, with an idle TTL, a maximum
//! count and a memory cap each.

use crate::execution::{Execution, Status};
use crate::{RunOptions, Sandbox, Session, SessionError, SessionSnapshot};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    /// Host memory its journal holds (what a save would write).
    pub journal_bytes: u64,
    /// Whether it can be saved or forked (false once its journal passed its cap).
    pub saveable: bool,
}

/// Settings of a [`Sessions`] set. Defaults: 10 minutes idle TTL, 64 sessions, 256 MiB
/// of memory and a 16 MiB journal each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionLimits {
    /// A session idle this long is closed (checked on every access).
    pub idle_ttl: Duration,
    /// Sessions alive at once; a run for a new id beyond it ends `busy`.
    pub max_sessions: usize,
    /// Memory cap of each session's instance.
    pub memory_bytes: usize,
    /// Cap of each session's journal (the runs kept for save and fork, in host memory);
    /// see [`Session`](crate::Session) for what happens past it.
    pub journal_bytes: u64,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            idle_ttl: Duration::from_secs(600),
            max_sessions: 64,
            memory_bytes: 256 << 20,
            journal_bytes: 16 << 20,
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
                    return Execution::refused(Status::Busy, message);
                }
                None => {
                    let entry = Arc::new(Entry {
                        session: Arc::new(Session::new(&self.sandbox, &self.limits)),
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

    fn get(&self, id: &str) -> Result<Arc<Entry>, SessionError> {
        self.entries()
            .get(id)
            .cloned()
            .ok_or_else(|| SessionError::NotFound(id.to_string()))
    }

    fn insert(&self, id: &str, session: Session) -> Result<(), SessionError> {
        let mut entries = self.entries();
        if entries.contains_key(id) {
            return Err(SessionError::Exists(id.to_string()));
        }
        if entries.len() >= self.limits.max_sessions {
            return Err(SessionError::Full(self.limits.max_sessions));
        }
        let entry = Entry {
            session: Arc::new(session),
            last_used: Mutex::new(Instant::now()),
        };
        entries.insert(id.to_string(), Arc::new(entry));
        Ok(())
    }

    /// The journal of session `id`.
    pub async fn snapshot(&self, id: &str) -> Result<SessionSnapshot, SessionError> {
        let entry = self.get(id)?;
        entry.touch();
        entry.session.snapshot().await
    }

    /// A new session `id` rebuilt from `snapshot`.
    pub async fn restore(
        &self,
        id: &str,
        snapshot: &SessionSnapshot,
        options: &RunOptions,
    ) -> Result<(), SessionError> {
        self.expire();
        if self.entries().contains_key(id) {
            return Err(SessionError::Exists(id.to_string()));
        }
        let session = Session::restore(&self.sandbox, snapshot, &self.limits, options).await?;
        self.insert(id, session)
    }

    /// A new session `to` with the state of session `from`.
    pub async fn fork(
        &self,
        from: &str,
        to: &str,
        options: &RunOptions,
    ) -> Result<(), SessionError> {
        let snapshot = self.snapshot(from).await?;
        self.restore(to, &snapshot, options).await
    }
}
