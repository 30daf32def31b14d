//! Each tenant's share of the run slots and of the queue, over HTTP.
//!
//! The sandbox has one admission queue for every caller: so many runs execute at once, so
//! many wait, the rest are answered `busy`. Without a share, one tenant's calls could take
//! every slot and fill the queue, and every other tenant would wait or be answered `busy`.
//! So a tenant's runs enter the sandbox's admission only while it has fewer than its share
//! of slots there (`sandpy.max_tenant_runs`, by default half the slots, rounded up); its
//! further runs wait in a line of its own, at most `sandpy.max_tenant_queued_runs` of them
//! (by default half the queue) and at most the run's timeout, and past that are answered
//! `busy` at once. Another tenant's run then finds a slot free (the slots past the share)
//! and room in the queue. The process's own client (stdio) has no share: it is alone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// The shares of every tenant with runs in flight.
pub(super) struct RunShares {
    /// Runs of one tenant in the sandbox at once.
    max_running: usize,
    /// Runs of one tenant waiting for its share.
    max_waiting: usize,
    tenants: Mutex<HashMap<Arc<str>, Share>>,
}

/// One tenant's share: its slots, and how many of its runs hold or wait for one.
struct Share {
    slots: Arc<Semaphore>,
    users: usize,
}

/// Why a run did not get its tenant's share.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum NoShare {
    /// The tenant's line is full.
    #[error("sandpy is busy for this client: its {running} run slots are taken and {waiting} of its runs already wait (sandpy.max_tenant_runs, max_tenant_queued_runs); retry later")]
    LineFull {
        /// The tenant's slots.
        running: usize,
        /// Its line.
        waiting: usize,
    },
    /// None of its slots freed up within the run's timeout.
    #[error("sandpy is busy for this client: none of its {running} run slots freed up within the run's {} ms timeout; retry later", .waited.as_millis())]
    WaitedTooLong {
        /// The tenant's slots.
        running: usize,
        /// How long the run waited.
        waited: Duration,
    },
    /// The request was cancelled while it waited.
    #[error("cancelled while waiting for a run slot")]
    Cancelled,
}

/// A tenant's slot, held while its run is in the sandbox.
pub(super) struct Turn<'a> {
    _permit: OwnedSemaphorePermit,
    _user: User<'a>,
}

/// One of a tenant's runs, holding or waiting for a slot; its share is forgotten when the
/// last one goes.
struct User<'a> {
    shares: &'a RunShares,
    tenant: Arc<str>,
}

impl Drop for User<'_> {
    fn drop(&mut self) {
        let mut tenants = self.shares.lock();
        if let Some(share) = tenants.get_mut(&self.tenant) {
            share.users -= 1;
            if share.users == 0 {
                tenants.remove(&self.tenant);
            }
        }
    }
}

impl NoShare {
    /// The status of a run refused for it.
    pub(super) fn status(&self) -> sandpy::Status {
        match self {
            NoShare::Cancelled => sandpy::Status::Cancelled,
            NoShare::LineFull { .. } | NoShare::WaitedTooLong { .. } => sandpy::Status::Busy,
        }
    }
}

impl RunShares {
    /// Shares of `slots` run slots and `queued` places in the queue: `max_running` and
    /// `max_waiting` when set, else half of each (the slots rounded up).
    pub(super) fn new(
        slots: usize,
        queued: usize,
        max_running: Option<usize>,
        max_waiting: Option<usize>,
    ) -> RunShares {
        RunShares {
            max_running: max_running.unwrap_or(slots.div_ceil(2)).max(1),
            max_waiting: max_waiting.unwrap_or(queued / 2),
            tenants: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Share>> {
        // Every change under the lock is one step: a panic leaves it consistent.
        self.tenants.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot of `tenant`'s share: at once, after waiting in its line (at most
    /// `patience`, or until `cancel`), or refused at once when its line is full.
    pub(super) async fn take(
        &self,
        tenant: &Arc<str>,
        patience: Duration,
        cancel: &CancellationToken,
    ) -> Result<Turn<'_>, NoShare> {
        let slots = {
            let mut tenants = self.lock();
            let share = tenants.entry(tenant.clone()).or_insert_with(|| Share {
                slots: Arc::new(Semaphore::new(self.max_running)),
                users: 0,
            });
            if share.users >= self.max_running + self.max_waiting {
                return Err(NoShare::LineFull {
                    running: self.max_running,
                    waiting: self.max_waiting,
                });
            }
            share.users += 1;
            share.slots.clone()
        };
        let user = User {
            shares: self,
            tenant: tenant.clone(),
        };
        let permit = tokio::select! {
            acquired = tokio::time::timeout(patience, slots.acquire_owned()) => match acquired {
                Ok(Ok(permit)) => permit,
                Ok(Err(_)) | Err(_) => {
                    return Err(NoShare::WaitedTooLong {
                        running: self.max_running,
                        waited: patience,
                    })
                }
            },
            () = cancel.cancelled() => return Err(NoShare::Cancelled),
        };
        Ok(Turn {
            _permit: permit,
            _user: user,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_tenant_past_its_share_waits_or_is_refused_and_another_is_not() {
        let shares = RunShares::new(4, 2, None, None);
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        let cancel = CancellationToken::new();
        let patience = Duration::from_millis(50);
        let first = shares.take(&a, patience, &cancel).await.expect("a's first");
        let second = shares
            .take(&a, patience, &cancel)
            .await
            .expect("a's second");
        let waited = shares.take(&a, patience, &cancel).await.err();
        let expected = NoShare::WaitedTooLong {
            running: 2,
            waited: patience,
        };
        assert_eq!(waited, Some(expected));
        let b_turn = shares.take(&b, patience, &cancel).await;
        assert!(b_turn.is_ok(), "b gets a slot beside a at its share");
        let waiting = {
            let shares = &shares;
            let a = a.clone();
            let cancel = cancel.clone();
            async move {
                shares
                    .take(&a, Duration::from_secs(5), &cancel)
                    .await
                    .is_ok()
            }
        };
        let full = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let refused = shares.take(&a, patience, &cancel).await.err();
            assert_eq!(
                refused,
                Some(NoShare::LineFull {
                    running: 2,
                    waiting: 1
                })
            );
            drop(first);
        };
        let (waited, ()) = tokio::join!(waiting, full);
        assert!(waited, "a's waiting run got the slot a's first let go");
        drop((second, b_turn));
        assert!(
            shares.lock().is_empty(),
            "no share is kept for tenants gone"
        );
    }
}
