//! What a set of sessions may hold: the server's caps ([`SessionLimits`]), each tenant's
//! ([`TenantQuota`]), and the cap a refused session met ([`SessionCap`]).

use std::time::Duration;

/// How much one tenant's sessions may hold at once. Defaults: 8 sessions and 2048 MiB,
/// so that with the default 64 sessions of 256 MiB a server serves at least eight
/// tenants' sessions at once, and one tenant reaches its count before its memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantQuota {
    /// Sessions the tenant holds at once.
    pub max_sessions: usize,
    /// Memory the tenant's sessions may reserve together: each reserves its cap
    /// ([`SessionLimits::memory_bytes`]), whether it has used it yet or not.
    pub memory_bytes: usize,
}

impl TenantQuota {
    /// No cap of the tenant's own: only the set's caps apply (one process's own sessions).
    pub const UNLIMITED: TenantQuota = TenantQuota {
        max_sessions: usize::MAX,
        memory_bytes: usize::MAX,
    };
}

impl Default for TenantQuota {
    fn default() -> Self {
        TenantQuota {
            max_sessions: 8,
            memory_bytes: 2048 << 20,
        }
    }
}
/// Which cap a new session would go past, for the `busy` answer to name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SessionCap {
    /// The server's sessions, all tenants together ([`SessionLimits::max_sessions`]).
    #[error("the server's session limit ({0}) is reached")]
    Server(usize),
    /// The tenant's own count ([`TenantQuota::max_sessions`]).
    #[error("this client's session limit ({0}) is reached")]
    TenantSessions(usize),
    /// The server's session memory, all tenants together
    /// ([`SessionLimits::total_memory_bytes`]).
    #[error("the server's session memory ({} MiB, {} MiB a session) is reached", .total >> 20, .session >> 20)]
    ServerMemory {
        /// The server's total.
        total: usize,
        /// What each session reserves.
        session: usize,
    },
    /// The tenant's own memory ([`TenantQuota::memory_bytes`]).
    #[error("this client's session memory ({} MiB, {} MiB a session) is reached", .tenant >> 20, .session >> 20)]
    TenantMemory {
        /// The tenant's memory quota.
        tenant: usize,
        /// What each session reserves.
        session: usize,
    },
}

/// Settings of a [`Sessions`] set. Defaults: 10 minutes idle TTL, 64 sessions, 256 MiB
/// of memory and a 16 MiB journal each, no total memory cap beyond that (64 x 256 MiB),
/// and each tenant the default [`TenantQuota`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionLimits {
    /// A session idle this long is closed (by a reaper thread on time, and on every
    /// access).
    pub idle_ttl: Duration,
    /// Sessions alive at once, all tenants together; a new one beyond it is `busy`.
    pub max_sessions: usize,
    /// Memory cap of each session's instance.
    pub memory_bytes: usize,
    /// Cap of each session's journal (the runs kept for save and fork, in host memory);
    /// see [`Session`] for what happens past it.
    pub journal_bytes: u64,
    /// Memory all sessions together may reserve (each reserves `memory_bytes`); `None`
    /// leaves it at `max_sessions` x `memory_bytes`.
    pub total_memory_bytes: Option<usize>,
    /// What each tenant may hold, unless the server gives a tenant a quota of its own.
    pub per_tenant: TenantQuota,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            idle_ttl: Duration::from_secs(600),
            max_sessions: 64,
            memory_bytes: 256 << 20,
            journal_bytes: 16 << 20,
            total_memory_bytes: None,
            per_tenant: TenantQuota::default(),
        }
    }
}
