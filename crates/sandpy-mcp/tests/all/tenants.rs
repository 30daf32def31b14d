//! Tenants over real HTTP: `SandpyServer` behind `HttpListener` on loopback, driven by
//! several rmcp HTTP clients. A client reaches only its own sessions and saves (a foreign
//! id is answered as a missing one), one tenant cannot take every session slot, and no link
//! planted in `save_dir` is followed. Each test ends by checking the server still answers.

use crate::{block_on, config, sandbox, text};
use rmcp::model::ErrorCode;
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{ErrorData, RoleClient, ServiceExt};
use sandpy_mcp::{HttpListener, SandpyServer};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// A server on a free loopback port, until dropped.
pub(crate) struct Served {
    pub(crate) url: String,
    pub(crate) saved: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// Serve with these keys in the config's `sandpy` section (sessions saved in a temporary
/// folder) and the single bearer `token`, if any.
pub(crate) async fn serve(sandpy: Value, token: Option<&str>) -> Served {
    let saved = tempfile::tempdir().expect("tempdir");
    let mut section = json!({"sessions": {"save_dir": saved.path()}});
    if let (Value::Object(section), Value::Object(extra)) = (&mut section, sandpy) {
        for (key, value) in extra {
            match (section.get_mut(&key), value) {
                (Some(Value::Object(old)), Value::Object(new)) => old.extend(new),
                (_, value) => drop(section.insert(key, value)),
            }
        }
    }
    let config = config(&json!({"mcpServers": {}, "sandpy": section}).to_string());
    let hub = sandpy_mcp::Hub::start(&config).await;
    let resolved = config.settings.resolve(None).expect("no policy to resolve");
    let server = SandpyServer::new(sandbox().clone(), hub, &resolved).expect("server");
    let listener = HttpListener::bind(
        ([127, 0, 0, 1], 0).into(),
        token.map(str::to_string),
        &resolved.settings.tenants,
    )
    .await
    .expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("address"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(listener.serve(server, async move {
        let _ = stopped.await;
    }));
    Served {
        url,
        saved,
        _stop: stop,
    }
}

/// One MCP client (its own MCP session), with `token` as its bearer token.
pub(crate) struct Client(pub(crate) RunningService<RoleClient, ()>);

impl Client {
    pub(crate) async fn connect(url: &str, token: Option<&str>) -> Client {
        // rmcp's reqwest client needs a process-wide rustls provider (see sandpy-mcp's docs).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_string());
        if let Some(token) = token {
            config = config.auth_header(token);
        }
        let transport = StreamableHttpClientTransport::from_config(config);
        Client(().serve(transport).await.expect("connect"))
    }

    async fn call(&self, tool: &str, arguments: Value) -> Result<Value, ErrorData> {
        crate::call_tool(&self.0, tool, arguments).await
    }

    /// `tool`'s result, which must not be a protocol error.
    pub(crate) async fn result(&self, tool: &str, arguments: Value) -> Value {
        crate::tool_result(&self.0, tool, arguments).await
    }

    /// Run `code` in session `session`; the structured content.
    async fn run(&self, session: &str, code: &str) -> Value {
        let result = self
            .result("run_python", json!({"code": code, "session_id": session}))
            .await;
        result["structuredContent"].clone()
    }

    /// The ids `list_sessions` shows.
    async fn listed(&self) -> Vec<String> {
        let listed = self.result("list_sessions", json!({})).await;
        listed["structuredContent"]["sessions"]
            .as_array()
            .expect("sessions")
            .iter()
            .map(|s| s["id"].as_str().expect("id").to_string())
            .collect()
    }

    /// The server still runs code for this client.
    pub(crate) async fn still_served(&self) {
        let ok = self.result("run_python", json!({"code": "6 * 7"})).await;
        assert_eq!(ok["structuredContent"]["return_value"], 42, "{ok}");
    }

    pub(crate) async fn close(self) {
        let _ = self.0.cancel().await;
    }
}

/// Every session tool, pointed at session `id` of someone else: each must answer exactly
/// as for an id nobody has (`no session "<id>"`), and change nothing.
async fn foreign_session_is_missing(client: &Client, id: &str) {
    let missing = format!("no session {id:?}");
    for (tool, arguments) in [
        ("reset_session", json!({"session_id": id})),
        ("close_session", json!({"session_id": id})),
        (
            "fork_session",
            json!({"session_id": id, "new_session_id": "stolen"}),
        ),
    ] {
        let result = client.result(tool, arguments).await;
        assert_eq!(result["isError"], true, "{tool}: {result}");
        assert_eq!(text(&result), missing, "{tool}");
    }
}

#[test]
fn a_client_cannot_run_in_read_list_reset_close_or_fork_another_clients_session() {
    block_on(async {
        let served = serve(json!({}), None).await;
        let a = Client::connect(&served.url, None).await;
        let b = Client::connect(&served.url, None).await;
        a.run("main", "secret = 'A'").await;
        a.run("a-only", "kept = 1").await;

        assert_eq!(b.listed().await, Vec::<String>::new(), "B sees none of A's");
        let b_main = b.run("main", "'secret' in globals()").await;
        assert_eq!(
            b_main["return_value"], false,
            "the same id is B's own session: {b_main}"
        );
        assert_eq!(b.listed().await, ["main"]);
        foreign_session_is_missing(&b, "a-only").await;
        let never = b
            .result("reset_session", json!({"session_id": "never"}))
            .await;
        assert_eq!(
            text(&never),
            "no session \"never\"",
            "the same as a missing one"
        );
        // Over HTTP without a tenant token, a save would outlive its owner: refused.
        let save = b
            .call("save_session", json!({"session_id": "main", "name": "x"}))
            .await
            .expect_err("saving needs a tenant token");
        assert_eq!(save.code, ErrorCode::INVALID_PARAMS);
        assert!(save.message.contains("sandpy.tenants"), "{save:?}");

        // A's sessions are untouched.
        assert_eq!(a.run("main", "secret").await["return_value"], "A");
        assert_eq!(a.run("a-only", "kept").await["return_value"], 1);
        let mut listed = a.listed().await;
        listed.sort();
        assert_eq!(listed, ["a-only", "main"]);
        a.still_served().await;
        b.still_served().await;
    });
}

#[test]
fn a_token_tenant_cannot_reach_another_tenants_sessions_or_saves() {
    block_on(async {
        let tenants =
            json!({"tenants": {"agent-a": {"token": "token-a"}, "agent-b": {"token": "token-b"}}});
        let served = serve(tenants, None).await;
        let a = Client::connect(&served.url, Some("token-a")).await;
        let b = Client::connect(&served.url, Some("token-b")).await;
        a.run("main", "secret = 'A'").await;
        let saved = a
            .result("save_session", json!({"session_id": "main", "name": "nb"}))
            .await;
        assert_eq!(saved["isError"], false, "{saved}");
        assert!(
            served
                .saved
                .path()
                .join("agent-a/nb.session.json")
                .is_file(),
            "saved in the tenant's own folder"
        );

        assert_eq!(b.listed().await, Vec::<String>::new());
        foreign_session_is_missing(&b, "main").await;
        let restored = b
            .result(
                "restore_session",
                json!({"name": "nb", "session_id": "copy"}),
            )
            .await;
        assert_eq!(restored["isError"], true, "{restored}");
        assert_eq!(text(&restored), "no saved session \"nb\"");
        let save = b
            .result("save_session", json!({"session_id": "main", "name": "nb"}))
            .await;
        assert_eq!(text(&save), "no session \"main\"", "{save}");
        // B's own "main", restored into, is B's: A's is untouched.
        b.run("main", "secret = 'B'").await;
        let saved = b
            .result("save_session", json!({"session_id": "main", "name": "nb"}))
            .await;
        assert_eq!(saved["isError"], false, "{saved}");
        b.run("other", "1").await;
        let b_restored = b
            .result(
                "restore_session",
                json!({"name": "nb", "session_id": "copy"}),
            )
            .await;
        assert_eq!(b_restored["isError"], false, "{b_restored}");
        assert_eq!(b.run("copy", "secret").await["return_value"], "B");

        // A's sessions survive its reconnecting with a new MCP session: the token is the tenant.
        a.close().await;
        let a = Client::connect(&served.url, Some("token-a")).await;
        assert_eq!(a.listed().await, ["main"]);
        assert_eq!(a.run("main", "secret").await["return_value"], "A");
        let restored = a
            .result(
                "restore_session",
                json!({"name": "nb", "session_id": "copy"}),
            )
            .await;
        assert_eq!(restored["isError"], false, "{restored}");
        assert_eq!(a.run("copy", "secret").await["return_value"], "A");
        a.still_served().await;
        b.still_served().await;
    });
}

#[test]
fn one_tenant_filling_its_caps_leaves_room_for_others_and_busy_names_the_cap() {
    block_on(async {
        let caps = json!({
            "sessions": {"max_sessions": 5, "memory_mb": 256},
            "tenants": {"agent-a": {"token": "token-a", "max_sessions": 2},
                        "agent-b": {"token": "token-b", "memory_mb": 512}}
        });
        let served = serve(caps, Some("anyone")).await;
        let a = Client::connect(&served.url, Some("token-a")).await;
        let b = Client::connect(&served.url, Some("token-b")).await;
        let c = Client::connect(&served.url, Some("anyone")).await;
        let busy = |execution: &Value| {
            assert_eq!(execution["status"], "busy", "{execution}");
            execution["error"]["message"]
                .as_str()
                .expect("message")
                .to_string()
        };
        for client in [&a, &b] {
            for id in ["s1", "s2"] {
                assert_eq!(client.run(id, "1").await["status"], "ok");
            }
        }
        assert_eq!(
            busy(&a.run("s3", "1").await),
            "this client's session limit (2) is reached; close a session or wait for one to expire"
        );
        assert_eq!(
            busy(&b.run("s3", "1").await),
            "this client's session memory (512 MiB, 256 MiB a session) is reached; close a session or wait for one to expire"
        );
        // Another client still gets a session, up to the server's total.
        assert_eq!(c.run("s1", "1").await["status"], "ok");
        assert_eq!(
            busy(&c.run("s2", "1").await),
            "the server's session limit (5) is reached; close a session or wait for one to expire"
        );
        let forked = a
            .result(
                "fork_session",
                json!({"session_id": "s1", "new_session_id": "s3"}),
            )
            .await;
        assert_eq!(
            text(&forked),
            "this client's session limit (2) is reached; close a session or wait for one to expire"
        );
        let closed = a.result("close_session", json!({"session_id": "s1"})).await;
        assert_eq!(closed["isError"], false, "{closed}");
        assert_eq!(c.run("s2", "1").await["status"], "ok", "a freed slot");

        // A client's sessions go with its MCP session: its slots come back.
        c.close().await;
        let d = Client::connect(&served.url, Some("anyone")).await;
        let started = Instant::now();
        loop {
            let execution = d.run("s1", "1").await;
            if execution["status"] == "ok" {
                break;
            }
            busy(&execution);
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the closed MCP session's sessions were not freed"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for client in [&a, &b, &d] {
            client.still_served().await;
        }
    });
}

#[test]
fn a_link_or_a_huge_file_planted_in_save_dir_is_not_followed_nor_read() {
    block_on(async {
        let tenants =
            json!({"tenants": {"agent-a": {"token": "token-a"}, "agent-b": {"token": "token-b"}}});
        let served = serve(tenants, None).await;
        let outside = tempfile::tempdir().expect("tempdir");
        let precious = outside.path().join("precious.txt");
        std::fs::write(&precious, "precious").expect("write");
        let a = Client::connect(&served.url, Some("token-a")).await;
        a.run("main", "x = 1").await;
        let a_dir = served.saved.path().join("agent-a");
        std::fs::create_dir_all(&a_dir).expect("tenant folder");

        // A link where a save goes: the save replaces the link, the target is untouched.
        let planted = a_dir.join("nb.session.json");
        std::os::unix::fs::symlink(&precious, &planted).expect("symlink");
        let saved = a
            .result("save_session", json!({"session_id": "main", "name": "nb"}))
            .await;
        assert_eq!(saved["isError"], false, "{saved}");
        assert_eq!(
            std::fs::read_to_string(&precious).expect("read"),
            "precious"
        );
        let meta = std::fs::symlink_metadata(&planted).expect("saved");
        assert!(meta.is_file(), "the link was replaced by the save");

        // A link to a real saved session elsewhere: not read.
        let elsewhere = outside.path().join("other.session.json");
        std::fs::copy(&planted, &elsewhere).expect("copy");
        std::os::unix::fs::symlink(&elsewhere, a_dir.join("evil.session.json")).expect("symlink");
        let restored = a
            .result(
                "restore_session",
                json!({"name": "evil", "session_id": "evil"}),
            )
            .await;
        assert_eq!(restored["isError"], true, "{restored}");
        assert!(
            text(&restored).contains(
                "is a link or not a plain file or folder; saved sessions never follow links"
            ),
            "{restored}"
        );
        assert_eq!(a.listed().await, ["main"], "nothing restored");

        // A file planted under a save's name, larger than any save may be: not read whole.
        let huge = std::fs::File::create(a_dir.join("huge.session.json")).expect("create");
        huge.set_len(1 << 30).expect("a sparse GiB");
        let restored = a
            .result(
                "restore_session",
                json!({"name": "huge", "session_id": "huge"}),
            )
            .await;
        assert!(
            text(&restored).contains("holds 1073741824 bytes, more than a saved session may"),
            "{restored}"
        );

        // A tenant's folder planted as a link to a folder outside: neither written nor read.
        std::os::unix::fs::symlink(outside.path(), served.saved.path().join("agent-b"))
            .expect("symlink");
        let b = Client::connect(&served.url, Some("token-b")).await;
        b.run("main", "y = 2").await;
        let save = b
            .result(
                "save_session",
                json!({"session_id": "main", "name": "other"}),
            )
            .await;
        assert_eq!(save["isError"], true, "{save}");
        assert!(text(&save).contains("is a link"), "{save}");
        let restore = b
            .result(
                "restore_session",
                json!({"name": "other", "session_id": "z"}),
            )
            .await;
        assert!(text(&restore).contains("is a link"), "{restore}");
        let mut left: Vec<String> = std::fs::read_dir(outside.path())
            .expect("outside")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            ["other.session.json", "precious.txt"],
            "nothing written outside"
        );
        a.still_served().await;
        b.still_served().await;
    });
}
