//! [`Sessions`]: a set of [`Session`]s by owner and id, for servers, with an idle TTL, a
//! memory cap each, and caps on how many sessions the whole set and each owner hold.
//!
//! A session belongs to the [`Tenant`] that made it: an id is only unique within its
//! tenant (two tenants may both have a `"main"`), and a tenant can reach only its own
//! sessions, through [`Sessions::of`]. Another tenant's session is answered exactly like a
//! missing one, so that ids cannot be probed. The per-tenant caps keep one client from
//! taking every slot; a refusal names the cap it met ([`SessionCap`]).
//!
//! Idle sessions are closed on time: a reaper thread wakes at the next session's expiry
//! and drops it (a native session's process then ends), as well as on every access.

use super::{
    Session, SessionCap, SessionError, SessionInfo, SessionLimits, SessionSnapshot, TenantQuota,
};
use crate::execution::{Execution, Status};
use crate::{RunOptions, Sandbox};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Who owns sessions: an id unique within the server (a connection, a token's name) and
/// its quota.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant {
    /// The owner's id; sessions are kept under it.
    pub id: Arc<str>,
    /// What the owner may hold.
    pub quota: TenantQuota,
}

impl Tenant {
    /// The tenant `id` with `quota`.
    pub fn new(id: impl Into<Arc<str>>, quota: TenantQuota) -> Tenant {
        Tenant {
            id: id.into(),
            quota,
        }
    }

    /// The one owner of a set that serves a single client (`local`, unlimited quota):
    /// what the [`Sessions`] methods without a tenant use.
    pub fn local() -> Tenant {
        Tenant::new("local", TenantQuota::UNLIMITED)
    }
}
struct Entry {
    session: Arc<Session>,
    last_used: Mutex<Instant>,
}

impl Entry {
    fn new(session: Session) -> Arc<Entry> {
        Arc::new(Entry {
            session: Arc::new(session),
            last_used: Mutex::new(Instant::now()),
        })
    }

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

/// Each tenant's sessions by id.
#[derive(Default)]
struct Owners {
    by_tenant: HashMap<Arc<str>, HashMap<String, Arc<Entry>>>,
    /// Sessions of all tenants together.
    count: usize,
}

impl Owners {
    fn get(&self, tenant: &str, id: &str) -> Option<Arc<Entry>> {
        self.by_tenant.get(tenant)?.get(id).cloned()
    }

    fn contains(&self, tenant: &str, id: &str) -> bool {
        self.by_tenant
            .get(tenant)
            .is_some_and(|sessions| sessions.contains_key(id))
    }

    /// The cap a new session of `tenant` would go past, if any.
    fn full(&self, tenant: &Tenant, limits: &SessionLimits) -> Option<SessionCap> {
        let held = self.by_tenant.get(&tenant.id).map_or(0, HashMap::len);
        let quota = tenant.quota;
        if held >= quota.max_sessions {
            return Some(SessionCap::TenantSessions(quota.max_sessions));
        }
        let reserved = (held + 1).saturating_mul(limits.memory_bytes);
        if reserved > quota.memory_bytes {
            return Some(SessionCap::TenantMemory {
                tenant: quota.memory_bytes,
                session: limits.memory_bytes,
            });
        }
        if self.count >= limits.max_sessions {
            return Some(SessionCap::Server(limits.max_sessions));
        }
        if let Some(total) = limits.total_memory_bytes {
            if (self.count + 1).saturating_mul(limits.memory_bytes) > total {
                return Some(SessionCap::ServerMemory {
                    total,
                    session: limits.memory_bytes,
                });
            }
        }
        None
    }

    fn insert(&mut self, tenant: &Tenant, id: &str, entry: Arc<Entry>) {
        let sessions = self.by_tenant.entry(tenant.id.clone()).or_default();
        if sessions.insert(id.to_string(), entry).is_none() {
            self.count += 1;
        }
    }

    fn remove(&mut self, tenant: &str, id: &str) -> bool {
        let Some(sessions) = self.by_tenant.get_mut(tenant) else {
            return false;
        };
        let removed = sessions.remove(id).is_some();
        if sessions.is_empty() {
            self.by_tenant.remove(tenant);
        }
        if removed {
            self.count -= 1;
        }
        removed
    }

    /// Drop every session idle `ttl` or longer that no call is using.
    fn expire(&mut self, ttl: Duration) {
        drop(self.take_expired(ttl));
    }

    /// Take out every session idle `ttl` or longer that no call is using (the caller
    /// drops them, outside the lock).
    fn take_expired(&mut self, ttl: Duration) -> Vec<Arc<Entry>> {
        let mut count = 0;
        let mut expired = Vec::new();
        self.by_tenant.retain(|_, sessions| {
            sessions.retain(|_, entry| {
                let keep = entry.idle() < ttl || Arc::strong_count(entry) > 1;
                if !keep {
                    expired.push(entry.clone());
                }
                keep
            });
            count += sessions.len();
            !sessions.is_empty()
        });
        self.count = count;
        expired
    }

    /// How long until the next session is idle `ttl`, if any session is held.
    fn next_expiry(&self, ttl: Duration) -> Option<Duration> {
        self.by_tenant
            .values()
            .flat_map(HashMap::values)
            .map(|entry| ttl.saturating_sub(entry.idle()))
            .min()
    }
}

/// The sessions of a set and its reaper's bell.
struct Shared {
    owners: Mutex<Owners>,
    /// Rung when the set is dropped, so that the reaper leaves.
    wake: Condvar,
    closed: AtomicBool,
}

/// The shortest a reaper waits between two looks.
const REAPER_MIN_WAIT: Duration = Duration::from_millis(10);

/// Close `shared`'s sessions as they reach `ttl` idle, until the set is dropped. A
/// session in use is looked at again a `ttl` later (its call touches it as it ends).
fn reap(shared: Arc<Shared>, ttl: Duration) {
    let mut owners = shared.owners.lock().unwrap_or_else(|e| e.into_inner());
    while !shared.closed.load(Ordering::Acquire) {
        let expired = owners.take_expired(ttl);
        if !expired.is_empty() {
            // Dropped without the lock held: a native session's process is ended.
            drop(owners);
            drop(expired);
            owners = shared.owners.lock().unwrap_or_else(|e| e.into_inner());
            continue;
        }
        let wait = owners
            .next_expiry(ttl)
            .unwrap_or(ttl)
            .clamp(REAPER_MIN_WAIT, ttl.max(REAPER_MIN_WAIT));
        owners = match shared.wake.wait_timeout(owners, wait) {
            Ok((owners, _)) => owners,
            Err(poisoned) => poisoned.into_inner().0,
        };
    }
}

/// Sessions by owner and id, for servers: a tenant's `run` creates a session on first use.
pub struct Sessions {
    sandbox: Sandbox,
    limits: SessionLimits,
    shared: Arc<Shared>,
    local: Tenant,
}

impl Drop for Sessions {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.wake.notify_all();
    }
}

impl Sessions {
    /// An empty set over `sandbox`, with its reaper thread (without one, when the thread
    /// cannot be started, idle sessions are closed on the next access only).
    pub fn new(sandbox: &Sandbox, limits: SessionLimits) -> Sessions {
        let shared = Arc::new(Shared {
            owners: Mutex::new(Owners::default()),
            wake: Condvar::new(),
            closed: AtomicBool::new(false),
        });
        let reaper = shared.clone();
        let ttl = limits.idle_ttl;
        let started = std::thread::Builder::new()
            .name("sandpy-session-reaper".into())
            .spawn(move || reap(reaper, ttl));
        if let Err(e) = started {
            tracing::warn!("no session reaper ({e}): idle sessions close on the next access");
        }
        Sessions {
            sandbox: sandbox.clone(),
            limits,
            shared,
            local: Tenant::local(),
        }
    }

    /// The limits the set was made with.
    pub fn limits(&self) -> &SessionLimits {
        &self.limits
    }

    /// `tenant`'s sessions: the only ones it can run in, list, reset, close, save or fork.
    pub fn of<'a>(&'a self, tenant: &'a Tenant) -> TenantSessions<'a> {
        TenantSessions {
            sessions: self,
            tenant,
        }
    }

    /// How many sessions each tenant holds (tenants without sessions left out), e.g. for
    /// metrics.
    pub fn open_by_tenant(&self) -> Vec<(String, usize)> {
        let owners = self.owners();
        let mut open: Vec<(String, usize)> = owners
            .by_tenant
            .iter()
            .map(|(tenant, sessions)| (tenant.to_string(), sessions.len()))
            .collect();
        open.sort();
        open
    }

    /// The ids of the sessions `tenant` holds.
    pub fn ids_of(&self, tenant: &str) -> Vec<String> {
        let owners = self.owners();
        let mut ids: Vec<String> = owners
            .by_tenant
            .get(tenant)
            .map(|sessions| sessions.keys().cloned().collect())
            .unwrap_or_default();
        ids.sort();
        ids
    }

    /// Close every session of `tenant` (its connection ended); how many there were.
    pub fn close_tenant(&self, tenant: &str) -> usize {
        let mut owners = self.owners();
        let closed = owners.by_tenant.remove(tenant).map_or(0, |s| s.len());
        owners.count -= closed;
        closed
    }

    fn owners(&self) -> std::sync::MutexGuard<'_, Owners> {
        self.shared.owners.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Close sessions idle longer than the TTL.
    fn expire(&self) {
        self.owners().expire(self.limits.idle_ttl);
    }

    /// Run `code` in the local tenant's session `id` (see [`TenantSessions::run`]).
    pub async fn run(&self, id: &str, code: &str, options: &RunOptions) -> Execution {
        self.of(&self.local).run(id, code, options).await
    }

    /// The local tenant's sessions (see [`TenantSessions::list`]).
    pub async fn list(&self) -> Vec<SessionInfo> {
        self.of(&self.local).list().await
    }

    /// Reset the local tenant's session `id` (see [`TenantSessions::reset`]).
    pub async fn reset(&self, id: &str) -> bool {
        self.of(&self.local).reset(id).await
    }

    /// Close the local tenant's session `id` (see [`TenantSessions::close`]).
    pub fn close(&self, id: &str) -> bool {
        self.of(&self.local).close(id)
    }

    /// The journal of the local tenant's session `id` (see [`TenantSessions::snapshot`]).
    pub async fn snapshot(&self, id: &str) -> Result<SessionSnapshot, SessionError> {
        self.of(&self.local).snapshot(id).await
    }

    /// A new local session `id` from `snapshot` (see [`TenantSessions::restore`]).
    pub async fn restore(
        &self,
        id: &str,
        snapshot: &SessionSnapshot,
        options: &RunOptions,
    ) -> Result<(), SessionError> {
        self.of(&self.local).restore(id, snapshot, options).await
    }

    /// Fork the local tenant's session `from` (see [`TenantSessions::fork`]).
    pub async fn fork(
        &self,
        from: &str,
        to: &str,
        options: &RunOptions,
    ) -> Result<(), SessionError> {
        self.of(&self.local).fork(from, to, options).await
    }
}

/// One tenant's view of a [`Sessions`] set (from [`Sessions::of`]): every id is looked up
/// among the tenant's own sessions only.
pub struct TenantSessions<'a> {
    sessions: &'a Sessions,
    tenant: &'a Tenant,
}

impl TenantSessions<'_> {
    fn get(&self, id: &str) -> Result<Arc<Entry>, SessionError> {
        self.sessions
            .owners()
            .get(&self.tenant.id, id)
            .ok_or_else(|| SessionError::NotFound(id.to_string()))
    }

    /// Run `code` in session `id`, creating it if needed; `busy`, naming the cap, when a
    /// new session would pass the tenant's or the server's.
    pub async fn run(&self, id: &str, code: &str, options: &RunOptions) -> Execution {
        let sessions = self.sessions;
        sessions.expire();
        let entry = {
            let mut owners = sessions.owners();
            match owners.get(&self.tenant.id, id) {
                Some(entry) => entry,
                None => {
                    if let Some(cap) = owners.full(self.tenant, &sessions.limits) {
                        let message = format!("{cap}; close a session or wait for one to expire");
                        return Execution::refused(Status::Busy, message);
                    }
                    let session = Session::new(&sessions.sandbox, &sessions.limits);
                    let entry = Entry::new(session);
                    owners.insert(self.tenant, id, entry.clone());
                    entry
                }
            }
        };
        entry.touch();
        let execution = entry.session.run(code, options).await;
        entry.touch();
        execution
    }

    /// The tenant's live sessions, by id.
    pub async fn list(&self) -> Vec<SessionInfo> {
        self.sessions.expire();
        let entries: Vec<(String, Arc<Entry>)> = self
            .sessions
            .owners()
            .by_tenant
            .get(&self.tenant.id)
            .map(|sessions| {
                sessions
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let mut out = Vec::with_capacity(entries.len());
        for (id, entry) in entries {
            out.push(entry.session.info(&id, entry.idle()).await);
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out
    }

    /// Reset session `id` to a fresh interpreter; false if the tenant has none.
    pub async fn reset(&self, id: &str) -> bool {
        match self.get(id) {
            Ok(entry) => {
                entry.session.reset().await;
                entry.touch();
                true
            }
            Err(_) => false,
        }
    }

    /// Close session `id`, freeing its instance; false if the tenant has none.
    pub fn close(&self, id: &str) -> bool {
        self.sessions.owners().remove(&self.tenant.id, id)
    }

    fn insert(&self, id: &str, session: Session) -> Result<(), SessionError> {
        let mut owners = self.sessions.owners();
        if owners.contains(&self.tenant.id, id) {
            return Err(SessionError::Exists(id.to_string()));
        }
        if let Some(cap) = owners.full(self.tenant, &self.sessions.limits) {
            return Err(SessionError::Full(cap));
        }
        owners.insert(self.tenant, id, Entry::new(session));
        Ok(())
    }

    /// The journal of session `id`.
    pub async fn snapshot(&self, id: &str) -> Result<SessionSnapshot, SessionError> {
        let entry = self.get(id)?;
        entry.touch();
        entry.session.snapshot().await
    }

    /// A new session `id` rebuilt from `snapshot`; refused before the replay when the id
    /// is taken or a cap would be passed.
    pub async fn restore(
        &self,
        id: &str,
        snapshot: &SessionSnapshot,
        options: &RunOptions,
    ) -> Result<(), SessionError> {
        let sessions = self.sessions;
        sessions.expire();
        {
            let owners = sessions.owners();
            if owners.contains(&self.tenant.id, id) {
                return Err(SessionError::Exists(id.to_string()));
            }
            if let Some(cap) = owners.full(self.tenant, &sessions.limits) {
                return Err(SessionError::Full(cap));
            }
        }
        let session =
            Session::restore(&sessions.sandbox, snapshot, &sessions.limits, options).await?;
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
