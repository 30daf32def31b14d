//! What one call may set about its run, and the run's options made from it: the server's
//! settings bound each (a request's timeout is at most the server's).

use super::ServerState;
use sandpy::{LimitOverrides, RunOptions};
use std::num::NonZeroU64;
use std::sync::atomic::Ordering;

/// What one call may set about its run; the server's settings bound each.
#[derive(Default)]
pub(super) struct RunRequest {
    /// Wall-clock limit in ms, at most the server's.
    pub(super) timeout_ms: Option<NonZeroU64>,
    /// Narrows the server's allowlist.
    pub(super) allowed_tools: Option<Vec<String>>,
    /// Put in the run's `/tmp` before the code starts.
    pub(super) files: Vec<sandpy::files::InputFile>,
    /// The tier the request asked for, when the server lets requests choose.
    pub(super) tier: Option<sandpy::Tier>,
}

impl ServerState {
    /// An id for the next run, unique within this server's life.
    pub(super) fn next_execution_id(&self) -> String {
        let n = self.executions.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", std::process::id())
    }

    /// A run's options: the server's limits, policy, mounts and tools, as narrowed by
    /// `request` (its timeout at most the server's).
    pub(super) fn options(&self, execution_id: String, request: RunRequest) -> RunOptions {
        let server_limit = self.run.effective_limits().timeout;
        let timeout_ms = request.timeout_ms.map(|ms| {
            let limit = u64::try_from(server_limit.as_millis()).unwrap_or(u64::MAX);
            ms.get().min(limit)
        });
        RunOptions {
            limit_overrides: LimitOverrides {
                timeout_ms,
                ..LimitOverrides::default()
            },
            tools: Some(self.hub.for_execution(execution_id, self.audit.clone())),
            allowed_tools: request.allowed_tools,
            files: request.files,
            tier: request.tier.unwrap_or(self.run.tier),
            ..self.run.clone()
        }
    }
}
