//! One upstream server: how the hub reaches it (a stdio server in its own process group,
//! an HTTP or HTTPS server through rmcp's client), its live connection, its status, when a
//! failed start may be tried again, and how it is stopped.

use super::bounded::BoundedChild;
use super::tls;
use crate::config::ServerSpec;
use process_wrap::tokio::{CommandWrap, KillOnDrop, ProcessGroup};
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{Peer, RoleClient, ServiceExt};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;
use std::time::{Duration, Instant};

type Client = RunningService<RoleClient, ClientConfig>;

/// The largest upstream message for results of `result_bytes`: a result and its text copy,
/// plus the envelope.
pub(super) fn message_limit(result_bytes: usize) -> usize {
    result_bytes.saturating_mul(2).saturating_add(64 * 1024)
}

/// The hub's time limits for starting servers (see the hub's module doc); tests shorten them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    /// A stdio server's first start, which may download it (`npx -y`).
    pub(super) first_start: Duration,
    /// Every other start: an HTTP server, a restart, a retry.
    pub(super) handshake: Duration,
    /// The wait before the first retry of a failed server; doubled after each failure.
    pub(super) backoff: Duration,
    /// The longest wait between retries.
    pub(super) max_backoff: Duration,
    /// How long a stopping server may take to exit on its own before its group is killed.
    pub(super) stop_grace: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            first_start: Duration::from_secs(60),
            handshake: Duration::from_secs(15),
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            stop_grace: Duration::from_secs(2),
        }
    }
}

/// An upstream's process group (its id is the server's pid), killed whole (`SIGKILL`)
/// when dropped: the server and everything it started, even after the server itself
/// exited. Linux does not give a process-group id to a new process while any process of
/// that group is alive, so the signal reaches only what this server started.
struct ProcessGroupKill(Option<u32>);

impl Drop for ProcessGroupKill {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Some(pgid) = self.0.and_then(|id| libc::pid_t::try_from(id).ok()) {
            // SAFETY: killpg has no memory effects; a group that is gone gives ESRCH.
            unsafe { libc::killpg(pgid, libc::SIGKILL) };
        }
    }
}

/// A live connection and, for a stdio server, its process group.
pub(super) struct Connection {
    client: Client,
    group: ProcessGroupKill,
}

impl Connection {
    /// Close the connection (a stdio server gets `grace` to exit after its stdin closes),
    /// then kill whatever is left of its process group.
    pub(super) async fn stop(self, grace: Duration) {
        let Connection { client, group } = self;
        let _ = tokio::time::timeout(grace, client.cancel()).await;
        drop(group);
    }
}

/// When a failed server may be tried again.
#[derive(Debug, Default)]
pub(super) struct Retry {
    /// Failed starts in a row.
    failures: u32,
    /// Not before this instant; `None` when the last start succeeded.
    pub(super) next: Option<Instant>,
}

/// One upstream server and its live connection.
pub(super) struct Upstream {
    pub(super) name: String,
    pub(super) spec: ServerSpec,
    /// The largest message read from the server ([`message_limit`]).
    pub(super) message_limit: usize,
    pub(super) client: tokio::sync::Mutex<Option<Connection>>,
    pub(super) status: RwLock<String>,
    pub(super) timing: Timing,
    /// Whether a start ever succeeded: only a stdio server's first start gets
    /// [`Timing::first_start`].
    pub(super) connected_once: AtomicBool,
    /// Held while the server is being started or retried, so other users wait for it.
    pub(super) retry: tokio::sync::Mutex<Retry>,
}

fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("sandpy", env!("CARGO_PKG_VERSION")),
    )
}

/// Start or reach the server. Error texts may hold expanded values: callers hide them.
async fn connect(
    name: &str,
    spec: &ServerSpec,
    message_limit: usize,
    handshake: Duration,
) -> Result<Connection, String> {
    match spec {
        ServerSpec::Stdio {
            command,
            args,
            env,
            cwd,
            ..
        } => {
            let mut wrap = CommandWrap::with_new(command, |c| {
                c.args(args).envs(env);
                if let Some(cwd) = cwd {
                    c.current_dir(cwd);
                }
            });
            // Its own process group, killed whole on drop: `npx` and the server it starts.
            wrap.wrap(ProcessGroup::leader()).wrap(KillOnDrop);
            let transport = BoundedChild::spawn(wrap, name, message_limit)
                .map_err(|e| format!("cannot start `{command}`: {e}"))?;
            // Made before the handshake, so a server that never answers is killed whole.
            let group = ProcessGroupKill(transport.id());
            let client = tokio::time::timeout(handshake, client_config().serve(transport))
                .await
                .map_err(|_| handshake_timeout(handshake))?
                .map_err(|e| format!("MCP handshake failed: {e}"))?;
            Ok(Connection { client, group })
        }
        ServerSpec::Http {
            url,
            headers,
            ca_file,
            ..
        } => {
            // The config checked the headers; a spec built in code may still hold bad ones.
            let mut custom = HashMap::new();
            for (name, value) in headers {
                let name = axum::http::HeaderName::try_from(name.as_str())
                    .map_err(|_| format!("header {name:?}: not a valid HTTP header name"))?;
                let value = axum::http::HeaderValue::try_from(value.as_str())
                    .map_err(|_| format!("header {name}: not a valid HTTP header value"))?;
                custom.insert(name, value);
            }
            let client = tls::http_client(url.starts_with("https://"), ca_file.as_ref())?;
            let config = StreamableHttpClientTransportConfig::with_uri(url.clone())
                .custom_headers(custom)
                .max_json_response_size(message_limit)
                .max_sse_event_size(message_limit);
            let transport = StreamableHttpClientTransport::with_client(client, config);
            let client = tokio::time::timeout(handshake, client_config().serve(transport))
                .await
                .map_err(|_| handshake_timeout(handshake))?
                .map_err(|e| {
                    tls::explain(name, url, ca_file.as_ref(), &e)
                        .unwrap_or_else(|| format!("cannot connect to {url}: {e}"))
                })?;
            Ok(Connection {
                client,
                group: ProcessGroupKill(None),
            })
        }
    }
}

fn handshake_timeout(limit: Duration) -> String {
    format!(
        "no answer to the MCP handshake within {} s",
        limit.as_secs_f64()
    )
}

impl Retry {
    /// After a start: forget the failures, or wait longer before the next try.
    pub(super) fn record(&mut self, ready: bool, timing: &Timing) {
        if ready {
            *self = Retry::default();
            return;
        }
        let wait = timing
            .backoff
            .saturating_mul(1u32 << self.failures.min(16))
            .min(timing.max_backoff);
        self.failures = self.failures.saturating_add(1);
        self.next = Some(Instant::now() + wait);
    }
}

impl Upstream {
    pub(super) fn set_status(&self, status: String) {
        *self.status.write().unwrap_or_else(|e| e.into_inner()) = status;
    }

    /// A live peer: the current connection, or a new one if there is none or it died.
    /// Returns whether it reconnected, so the caller can refresh the tool list.
    pub(super) async fn peer(&self) -> Result<(Peer<RoleClient>, bool), String> {
        let mut slot = self.client.lock().await;
        if let Some(live) = slot.as_ref() {
            if !live.client.is_transport_closed() {
                return Ok((live.client.peer().clone(), false));
            }
        }
        if let Some(dead) = slot.take() {
            tracing::warn!("upstream {} died; restarting it", self.name);
            tokio::spawn(dead.stop(self.timing.stop_grace));
        }
        let first_stdio = matches!(self.spec, ServerSpec::Stdio { .. })
            && !self.connected_once.load(Ordering::Relaxed);
        let limit = match first_stdio {
            true => self.timing.first_start,
            false => self.timing.handshake,
        };
        let live = connect(&self.name, &self.spec, self.message_limit, limit)
            .await
            .map_err(|e| self.spec.hide(&e))?;
        self.connected_once.store(true, Ordering::Relaxed);
        let peer = live.client.peer().clone();
        *slot = Some(live);
        Ok((peer, true))
    }

    /// Whether its tools are listed.
    pub(super) fn is_ready(&self) -> bool {
        self.status
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .starts_with("ready")
    }

    /// What to do about `error`, when it is a TLS or HTTP authentication failure of an
    /// HTTP server (a certificate that changed, a token that was revoked). The text may hold
    /// expanded values: callers hide them.
    pub(super) fn explain(&self, error: &(dyn std::error::Error + 'static)) -> Option<String> {
        match &self.spec {
            ServerSpec::Http { url, ca_file, .. } => {
                tls::explain(&self.name, url, ca_file.as_ref(), error)
            }
            ServerSpec::Stdio { .. } => None,
        }
    }

    /// Drop the connection after a transport error (even one whose transport still looks
    /// open), so that the next call starts the server afresh.
    pub(super) async fn forget(&self) {
        if let Some(live) = self.client.lock().await.take() {
            tokio::spawn(live.stop(self.timing.stop_grace));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Timing;
    use crate::client::testing::{fake, quick, status};
    use crate::client::Hub;
    use crate::config::ConfigFile;
    use rmcp::model::JsonObject;
    use sandpy::tools::ToolHost;
    use serde_json::Value;
    use std::collections::HashMap;
    use std::env::VarError;
    use std::path::Path;
    use std::time::{Duration, Instant};

    const SECRET: &str = "sk-live-9f8e7d6c5b4a3210";

    /// The pid a fake server wrote to `path` (waiting for it a little).
    fn read_pid(path: &Path) -> i32 {
        for _ in 0..100 {
            if let Some(pid) = std::fs::read_to_string(path)
                .ok()
                .and_then(|t| t.parse().ok())
            {
                return pid;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no pid in {}", path.display());
    }

    /// Whether `pid` runs (a zombie waiting for its reaper does not).
    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(") ")
                    .map(|(_, rest)| !rest.starts_with('Z'))
            })
            .unwrap_or(false)
    }

    /// The live processes whose command line holds `path`.
    fn processes_naming(path: &Path) -> Vec<i32> {
        let needle = path.as_os_str().as_encoded_bytes();
        std::fs::read_dir("/proc")
            .expect("/proc")
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
            .filter(|&pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|line| line.windows(needle.len()).any(|w| w == needle))
                    && alive(pid)
            })
            .collect()
    }

    async fn dies_within(pid: i32, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while Instant::now() < until {
            if !alive(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_upstreams_background_child_dies_with_it_on_crash_restart_and_shutdown() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pids = dir.path().join("grandchild");
        let pids_arg = pids.to_str().expect("utf-8");
        let hub = Hub::start_with(&fake(&["--grandchild", pids_arg]), quick()).await;
        assert!(status(&hub).starts_with("ready"), "{}", status(&hub));
        let first = read_pid(&pids);
        assert!(alive(first));

        let crashed = hub
            .call("mcp__fake__crash".into(), serde_json::json!({}))
            .await
            .expect_err("the server exits");
        assert!(crashed.contains("failed during the call"), "{crashed}");
        assert!(
            dies_within(first, Duration::from_secs(10)).await,
            "the crashed server's child {first} outlived it"
        );

        std::fs::remove_file(&pids).expect("pid file");
        let answer = hub
            .call("mcp__fake__ping".into(), serde_json::json!({}))
            .await;
        assert_eq!(
            answer,
            Ok(Value::from("pong")),
            "restarted on the next call"
        );
        let second = read_pid(&pids);
        assert!(alive(second));

        hub.shutdown().await;
        assert!(
            dies_within(second, Duration::from_secs(10)).await,
            "the server's child {second} outlived the hub's shutdown"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_that_never_answers_the_handshake_is_given_up_on_and_killed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pids = dir.path().join("server");
        let args = ["--silent", "--pidfile", pids.to_str().expect("utf-8")];
        // Long enough for Python to start on a busy machine, so that what is killed
        // is usually a running server; the check below holds either way.
        let timing = Timing {
            first_start: Duration::from_secs(2),
            ..quick()
        };
        let hub = Hub::launch_with(&fake(&args), timing);
        assert_eq!(status(&hub), "starting", "launch does not wait");
        assert!(!hub.wait_started(Duration::from_millis(1)).await);
        assert!(hub.wait_started(Duration::from_secs(30)).await);
        assert_eq!(
            status(&hub),
            "unavailable: no answer to the MCP handshake within 2 s"
        );
        // Found by its command line, which names this test's own pid file: a server
        // killed before it wrote that file is found as well as one that wrote it.
        let until = Instant::now() + Duration::from_secs(10);
        while !processes_naming(&pids).is_empty() && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let left = processes_naming(&pids);
        assert!(
            left.is_empty(),
            "the silent server {left:?} was left running"
        );
        hub.shutdown().await;
    }

    #[tokio::test]
    async fn statuses_and_errors_show_the_config_text_not_values_from_the_environment() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port(); // closed again: connecting is refused
        let text = format!(
            r#"{{"mcpServers": {{
                "remote": {{"url": "http://127.0.0.1:{port}/mcp?key=${{SECRET}}",
                            "headers": {{"Authorization": "Bearer ${{SECRET}}"}}}},
                "local": {{"command": "/nonexistent/${{SECRET}}/server", "env": {{"T": "${{SECRET}}"}}}}}}}}"#
        );
        let lookup = |name: &str| match name {
            "SECRET" => Ok(SECRET.to_string()),
            _ => Err(VarError::NotPresent),
        };
        let config = ConfigFile::parse_with(&text, Path::new("t.json"), &lookup).expect("valid");
        let hub = Hub::start(&config).await;
        let statuses: HashMap<String, String> = hub
            .servers()
            .into_iter()
            .map(|s| (s.name, s.status))
            .collect();
        let remote = &statuses["remote"];
        assert!(
            remote.starts_with(&format!(
                "unavailable: cannot connect to http://127.0.0.1:{port}/mcp?key=${{SECRET}}: "
            )),
            "{remote}"
        );
        let local = &statuses["local"];
        assert!(
            local.starts_with("unavailable: cannot start `/nonexistent/${SECRET}/server`: "),
            "{local}"
        );
        let missing = hub.explain_missing("mcp__remote__search");
        assert!(
            missing.contains("remote (unavailable: cannot connect"),
            "{missing}"
        );
        let called = hub
            .call(
                "mcp__remote__search".into(),
                Value::Object(JsonObject::new()),
            )
            .await
            .expect_err("no such tool");
        for text in [remote, local, &missing, &called] {
            assert!(!text.contains(SECRET), "a secret in {text:?}");
        }
        hub.shutdown().await;
    }
}
