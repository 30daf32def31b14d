//! What `GET /metrics` tells an operator, in the Prometheus text format: runs by tier and
//! status, run and tool-call latency, tool calls by tool and outcome, upstream health,
//! sessions per tenant, MCP sessions, runs in flight, bytes streamed, the process's RSS.
//!
//! Counters and histograms are kept as things happen; gauges (upstreams, sessions, RSS)
//! are read when scraped. Label sets are bounded: statuses and tiers are closed sets, tool
//! names come from upstreams whose names were vetted, and past [`MAX_TOOL_LABELS`] tools
//! (or [`MAX_TENANT_LABELS`] tenants) the rest are counted under `_other`, so a hostile
//! upstream or a crowd of clients cannot grow the scrape without bound.
//!
//! A tenant's name can be a person's (an OAuth claim such as an email), and `/metrics` is
//! open by default: so sessions are labelled by a hash of each tenant's name, keyed with
//! random bits drawn when the process starts (`tenant="t-3f9c…"`: stable while it runs,
//! not to be looked up in a list of names), unless the operator asks for the names and
//! puts `/metrics` behind the token ([`crate::HttpListener::metrics_tenant_names`]).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::HashSet;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::Duration;

/// Distinct tools counted by name; calls of further tools count as `_other`.
pub(crate) const MAX_TOOL_LABELS: usize = 1000;
/// Distinct tenants shown by name; the sessions of further tenants count as `_other`.
pub(crate) const MAX_TENANT_LABELS: usize = 100;
/// The label value that stands for everything past a cap.
const OTHER: &str = "_other";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    tier: &'static str,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TierLabel {
    tier: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    upstream: String,
    tool: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpstreamLabel {
    upstream: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabel {
    tenant: String,
}

/// The server's metrics; one per hub, shared by everything that records.
pub struct Metrics {
    registry: Registry,
    runs: Family<RunLabels, Counter>,
    run_seconds: Family<TierLabel, Histogram>,
    in_flight: Gauge,
    tool_calls: Family<ToolLabels, Counter>,
    tool_seconds: Family<UpstreamLabel, Histogram>,
    /// The (upstream, tool) pairs counted by name so far.
    tools_named: Mutex<HashSet<(String, String)>>,
    upstream_up: Family<UpstreamLabel, Gauge>,
    sessions: Family<TenantLabel, Gauge>,
    mcp_sessions: Gauge,
    streamed_bytes: Counter,
    rss_bytes: Gauge,
    /// The key of the tenants' hashed labels, random per process.
    tenant_key: std::collections::hash_map::RandomState,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Every metric, registered under `sandpy_`.
    pub fn new() -> Metrics {
        // 0.5 ms to ~16 s: a fresh run takes about a millisecond, a slow one its limit.
        let run_buckets = || Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        // 1 ms to ~32 s: tool calls cross a process or a network.
        let tool_buckets = || Histogram::new(exponential_buckets(0.001, 2.0, 16));
        let metrics = Metrics {
            registry: Registry::with_prefix("sandpy"),
            runs: Family::default(),
            run_seconds: Family::new_with_constructor(run_buckets),
            in_flight: Gauge::default(),
            tool_calls: Family::default(),
            tool_seconds: Family::new_with_constructor(tool_buckets),
            tools_named: Mutex::new(HashSet::new()),
            upstream_up: Family::default(),
            sessions: Family::default(),
            mcp_sessions: Gauge::default(),
            streamed_bytes: Counter::default(),
            rss_bytes: Gauge::default(),
            tenant_key: std::collections::hash_map::RandomState::new(),
        };
        let mut registry = metrics.registry;
        registry.register(
            "runs",
            "Runs that ended, by tier and status (busy: refused by admission)",
            metrics.runs.clone(),
        );
        registry.register(
            "run_duration_seconds",
            "Wall-clock time of runs, by tier",
            metrics.run_seconds.clone(),
        );
        registry.register(
            "runs_in_flight",
            "Runs executing or waiting for a run slot",
            metrics.in_flight.clone(),
        );
        registry.register(
            "tool_calls",
            "Tool calls that reached an upstream, by upstream, tool and outcome (ok, error)",
            metrics.tool_calls.clone(),
        );
        registry.register(
            "tool_call_duration_seconds",
            "Time from a tool call's start to its answer, by upstream",
            metrics.tool_seconds.clone(),
        );
        registry.register(
            "upstream_up",
            "1 when the upstream server is ready, 0 otherwise",
            metrics.upstream_up.clone(),
        );
        registry.register(
            "sessions_open",
            "run_python sessions open, by tenant",
            metrics.sessions.clone(),
        );
        registry.register(
            "mcp_sessions_open",
            "MCP sessions open over HTTP",
            metrics.mcp_sessions.clone(),
        );
        registry.register(
            "streamed_bytes",
            "Output bytes sent as progress notifications",
            metrics.streamed_bytes.clone(),
        );
        registry.register(
            "process_resident_memory_bytes",
            "Resident memory of the server process",
            metrics.rss_bytes.clone(),
        );
        Metrics {
            registry,
            ..metrics
        }
    }

    /// A run ended with `status` on `tier` after `duration`.
    pub fn run(&self, tier: sandpy::Tier, status: sandpy::Status, duration: Duration) {
        let tier = match tier {
            sandpy::Tier::Wasm => "wasm",
            sandpy::Tier::Native => "native",
        };
        let labels = RunLabels {
            tier,
            status: status.as_str(),
        };
        self.runs.get_or_create(&labels).inc();
        let tier = TierLabel { tier };
        let seconds = duration.as_secs_f64();
        self.run_seconds.get_or_create(&tier).observe(seconds);
    }

    /// Runs in flight now.
    pub fn in_flight(&self) -> i64 {
        self.in_flight.get()
    }

    /// One more run in flight, until the guard is dropped.
    pub fn run_started(&self) -> InFlight {
        self.in_flight.inc();
        InFlight(self.in_flight.clone())
    }

    /// A tool call of `upstream`'s `tool` was answered (`ok`) or failed after `duration`.
    pub fn tool_call(&self, upstream: &str, tool: &str, ok: bool, duration: Duration) {
        let named = {
            let mut named = self.tools_named.lock().unwrap_or_else(|e| e.into_inner());
            let key = (upstream.to_string(), tool.to_string());
            named.contains(&key) || (named.len() < MAX_TOOL_LABELS && named.insert(key))
        };
        let labels = ToolLabels {
            upstream: upstream.to_string(),
            tool: if named {
                tool.to_string()
            } else {
                OTHER.into()
            },
            outcome: if ok { "ok" } else { "error" },
        };
        self.tool_calls.get_or_create(&labels).inc();
        let upstream = UpstreamLabel {
            upstream: upstream.to_string(),
        };
        let seconds = duration.as_secs_f64();
        self.tool_seconds.get_or_create(&upstream).observe(seconds);
    }

    /// `bytes` of output went out in a progress notification.
    pub fn streamed(&self, bytes: usize) {
        self.streamed_bytes.inc_by(bytes as u64);
    }

    /// The text of a scrape, with the gauges read now: each upstream and whether it is
    /// ready, sessions per tenant (by name when `names`, else by the keyed hash of each
    /// name, [`Metrics::tenant_label`]), MCP sessions (over HTTP), the process's RSS.
    pub fn scrape(
        &self,
        upstreams: &[(String, bool)],
        sessions: &[(String, usize)],
        mcp_sessions: Option<usize>,
        names: bool,
    ) -> String {
        self.upstream_up.clear();
        for (name, up) in upstreams {
            let label = UpstreamLabel {
                upstream: name.clone(),
            };
            self.upstream_up.get_or_create(&label).set(i64::from(*up));
        }
        self.sessions.clear();
        for (i, (tenant, open)) in sessions.iter().enumerate() {
            let tenant = match (i < MAX_TENANT_LABELS, names) {
                (false, _) => OTHER.to_string(),
                (true, true) => tenant.clone(),
                (true, false) => self.tenant_label(tenant),
            };
            let label = TenantLabel { tenant };
            self.sessions.get_or_create(&label).inc_by(*open as i64);
        }
        if let Some(open) = mcp_sessions {
            self.mcp_sessions.set(open as i64);
        }
        if let Some(rss) = resident_bytes() {
            self.rss_bytes.set(rss as i64);
        }
        let mut text = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::error!("cannot encode the metrics: {e}");
        }
        text
    }
}

impl Metrics {
    /// The label of `tenant` in an open scrape: `t-` and 16 hex digits of its name hashed
    /// with this process's key (SipHash), which tells nothing of the name.
    pub fn tenant_label(&self, tenant: &str) -> String {
        format!("t-{:016x}", self.tenant_key.hash_one(tenant))
    }
}

/// A run counted in flight until dropped.
pub struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The process's resident memory, from `/proc/self/statm` (Linux).
#[cfg(target_os = "linux")]
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

#[cfg(not(target_os = "linux"))]
fn resident_bytes() -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_labels_past_the_cap_are_counted_as_other() {
        let metrics = Metrics::new();
        for i in 0..MAX_TOOL_LABELS + 5 {
            metrics.tool_call("up", &format!("t{i}"), true, Duration::from_millis(1));
        }
        let text = metrics.scrape(&[("up".into(), true)], &[("local".into(), 2)], None, true);
        assert!(
            text.contains(r#"sandpy_tool_calls_total{upstream="up",tool="_other",outcome="ok"} 5"#),
            "{text}"
        );
        assert!(text.contains(r#"sandpy_upstream_up{upstream="up"} 1"#));
        assert!(text.contains(r#"sandpy_sessions_open{tenant="local"} 2"#));
        let named = text.matches("sandpy_tool_calls_total{").count();
        assert_eq!(named, MAX_TOOL_LABELS + 1);
    }

    #[test]
    fn tenant_labels_are_hashed_unless_names_are_asked_for() {
        let metrics = Metrics::new();
        let sessions = [("oauth:alice.private@example.com".to_string(), 1)];
        let open = metrics.scrape(&[], &sessions, None, false);
        assert!(!open.contains("alice"), "{open}");
        let label = metrics.tenant_label(&sessions[0].0);
        assert!(
            open.contains(&format!(r#"sandpy_sessions_open{{tenant="{label}"}} 1"#)),
            "{open}"
        );
        assert_ne!(label, metrics.tenant_label("oauth:bob@example.com"));
        assert_ne!(
            label,
            Metrics::new().tenant_label(&sessions[0].0),
            "keyed per process"
        );
        let named = metrics.scrape(&[], &sessions, None, true);
        assert!(
            named.contains(r#"tenant="oauth:alice.private@example.com""#),
            "{named}"
        );
    }
}
