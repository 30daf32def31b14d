//! When the hub starts a server: its first start, and the retries of one that failed,
//! on use and with backoff, that callers wait for or leave to the background.

use super::upstream::Upstream;
use super::Hub;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

impl Hub {
    pub(super) async fn first_start(self, upstream: Arc<Upstream>) {
        let mut retry = upstream.retry.lock().await;
        self.refresh(upstream.clone()).await;
        retry.record(upstream.is_ready(), &upstream.timing);
        drop(retry);
        self.0.started.send_modify(|n| *n += 1);
    }

    /// Start `upstream` again if it is not ready and its backoff allows; a retry already
    /// under way is waited for instead.
    pub(super) async fn retry(&self, upstream: Arc<Upstream>) {
        let mut retry = upstream.retry.lock().await;
        let waiting = retry.next.is_some_and(|next| Instant::now() < next);
        if upstream.is_ready() || waiting || self.0.closing.load(Ordering::Relaxed) {
            return;
        }
        tracing::info!("upstream {}: retrying its start", upstream.name);
        self.refresh(upstream.clone()).await;
        retry.record(upstream.is_ready(), &upstream.timing);
    }

    /// The servers not ready whose retry is due or under way (the one `name` belongs
    /// to, or all).
    pub(super) fn due(&self, name: Option<&str>) -> Vec<Arc<Upstream>> {
        if self.0.closing.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let now = Instant::now();
        self.0
            .upstreams
            .iter()
            .filter(|u| name.is_none_or(|name| name.starts_with(&format!("mcp__{}__", u.name))))
            .filter(|u| !u.is_ready())
            .filter(|u| match u.retry.try_lock() {
                Ok(retry) => retry.next.is_none_or(|next| now >= next),
                Err(_) => true, // under way: waited for
            })
            .cloned()
            .collect()
    }

    /// Retry the due servers in the background (a listing cannot wait for them).
    pub(super) fn retry_in_background(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // A start under way needs no second task.
        let due = self
            .due(None)
            .into_iter()
            .filter(|u| u.retry.try_lock().is_ok());
        for upstream in due {
            let hub = self.clone();
            runtime.spawn(async move { hub.retry(upstream).await });
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::client::testing::{fake, quick, status};
    use crate::client::upstream::Timing;
    use crate::client::Hub;
    use sandpy::tools::ToolHost;
    use serde_json::Value;
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_that_failed_to_start_is_retried_on_use_with_backoff() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (need, starts) = (dir.path().join("need"), dir.path().join("starts"));
        let args = [
            "--need",
            need.to_str().expect("utf-8"),
            "--starts",
            starts.to_str().expect("utf-8"),
        ];
        let count = || {
            std::fs::read_to_string(&starts)
                .map(|t| t.lines().count())
                .unwrap_or(0)
        };
        // Waits of a second and two: a busy machine's pauses stay well inside them.
        let timing = Timing {
            backoff: Duration::from_secs(1),
            ..quick()
        };
        let hub = Hub::start_with(&fake(&args), timing).await;
        assert!(status(&hub).starts_with("unavailable"), "{}", status(&hub));
        assert_eq!(count(), 1);
        let missing = ["mcp__fake__ping".to_string()];

        hub.prepare(&missing).await;
        assert_eq!(count(), 1, "retried within its backoff");
        tokio::time::sleep(Duration::from_millis(1100)).await;
        hub.prepare(&missing).await;
        assert_eq!(count(), 2, "not retried on use once due");
        assert!(status(&hub).starts_with("unavailable"));

        std::fs::write(&need, "").expect("need");
        hub.prepare(&missing).await;
        assert_eq!(count(), 2, "the second wait is longer (2 s)");
        tokio::time::sleep(Duration::from_millis(2100)).await;
        let listed = hub.list_tools(); // a listing retries in the background
        assert!(listed.is_empty());
        hub.prepare(&[]).await; // and a listing that can wait, waits for it
        assert_eq!(count(), 3);
        assert!(status(&hub).starts_with("ready"), "{}", status(&hub));
        let answer = hub
            .call("mcp__fake__ping".into(), serde_json::json!({}))
            .await;
        assert_eq!(answer, Ok(Value::from("pong")));
        hub.shutdown().await;
    }
}
