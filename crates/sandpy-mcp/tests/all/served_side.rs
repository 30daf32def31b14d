//! The served side as a party without a token, or a tenant beside others, sees it: no
//! tenant's name in an open answer, every route behind the `Host` check, each tenant's
//! share of the run slots, the queue and the resource store, a request id in flight
//! refused at once, no server path in a remote tenant's answers, JSON nested too deep
//! answered as JSON-RPC says.

use crate::tenants::{serve, Client};
use crate::{block_on, config, text};
use sandpy::Sandbox;
use sandpy_mcp::{HttpListener, Hub, SandpyServer};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Serve `sandbox` on a free loopback port with the config's `sandpy` section, the
/// listener set from it as `sandpy serve --http` sets it.
async fn serve_settings(sandbox: Sandbox, sandpy: Value) -> SocketAddr {
    let config = config(&json!({"mcpServers": {}, "sandpy": sandpy}).to_string());
    let hub = Hub::start(&config).await;
    let resolved = config.settings.resolve(None).expect("resolved");
    let settings = &resolved.settings;
    let server = SandpyServer::new(sandbox, hub, &resolved).expect("server");
    let listener = HttpListener::bind(([127, 0, 0, 1], 0).into(), None, &settings.tenants)
        .await
        .expect("bind")
        .metrics_need_token(settings.metrics_require_token)
        .metrics_tenant_names(settings.metrics_tenant_names)
        .allowed_hosts(&settings.allowed_hosts);
    let address = listener.local_addr().expect("address");
    tokio::spawn(listener.serve(server, std::future::pending()));
    address
}

/// `request` on a new connection; the whole answer as text.
async fn send(address: SocketAddr, request: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer));
    read.await.expect("an answer in time").expect("read");
    String::from_utf8_lossy(&answer).into_owned()
}

/// `GET path` with `Host: host` (and the bearer `token`, if any).
async fn get(address: SocketAddr, path: &str, host: &str, token: Option<&str>) -> String {
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n");
    send(address, &request).await
}

#[test]
fn an_open_metrics_scrape_names_no_tenant_and_names_need_the_token() {
    block_on(async {
        let tenants = json!({"alice.private": {"token": "token-a"}});
        let open = serve_settings(
            crate::sandbox().clone(),
            json!({"tenants": tenants.clone()}),
        )
        .await;
        let alice = Client::connect(&format!("http://{open}/mcp"), Some("token-a")).await;
        alice
            .result("run_python", json!({"code": "1", "session_id": "main"}))
            .await;
        let scrape = get(open, "/metrics", &open.to_string(), None).await;
        assert!(scrape.starts_with("HTTP/1.1 200"), "{scrape}");
        assert!(
            scrape.contains("sandpy_sessions_open{tenant=\"t-"),
            "{scrape}"
        );
        assert!(
            !scrape.contains("alice"),
            "a name in an open scrape: {scrape}"
        );
        alice.close().await;

        let named = json!({"tenants": tenants, "metrics_require_token": true, "metrics_tenant_names": true});
        let closed = serve_settings(crate::sandbox().clone(), named).await;
        let alice = Client::connect(&format!("http://{closed}/mcp"), Some("token-a")).await;
        alice
            .result("run_python", json!({"code": "1", "session_id": "main"}))
            .await;
        let refused = get(closed, "/metrics", &closed.to_string(), None).await;
        assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
        let scrape = get(closed, "/metrics", &closed.to_string(), Some("token-a")).await;
        assert!(
            scrape.contains("sandpy_sessions_open{tenant=\"tenant:alice.private\"} 1"),
            "{scrape}"
        );
        alice.close().await;

        let names_in_the_open = r#"{"sandpy": {"metrics_tenant_names": true}}"#;
        let refused =
            sandpy_mcp::ConfigFile::parse(names_in_the_open, std::path::Path::new("t.json"));
        let message = match refused {
            Err(e) => e.to_string(),
            Ok(_) => panic!("names need the token"),
        };
        assert!(
            message.contains("sandpy.metrics_require_token"),
            "{message}"
        );
    });
}

#[test]
fn every_route_refuses_a_rebound_host_on_loopback() {
    block_on(async {
        let sandpy = json!({"allowed_hosts": ["mcp.example.test"]});
        let address = serve_settings(crate::sandbox().clone(), sandpy).await;
        let port = address.port();
        for path in ["/mcp", "/metrics", "/healthz", "/readyz", "/nothing"] {
            for host in [
                format!("rebound.example.com:{port}"),
                "rebound.example.com".to_string(),
                format!("127.0.0.1.nip.io:{port}"),
            ] {
                let answer = get(address, path, &host, None).await;
                assert!(
                    answer.starts_with("HTTP/1.1 403"),
                    "{path} {host}: {answer}"
                );
            }
            for host in [
                format!("127.0.0.1:{port}"),
                format!("localhost:{port}"),
                "mcp.example.test".to_string(),
            ] {
                let answer = get(address, path, &host, None).await;
                assert!(
                    !answer.starts_with("HTTP/1.1 403"),
                    "{path} {host}: {answer}"
                );
            }
        }
        let ok = get(address, "/healthz", &format!("localhost:{port}"), None).await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    });
}

#[test]
fn one_tenant_at_its_run_share_cannot_make_another_wait_or_get_busy() {
    block_on(async {
        // Two run slots and two places in the queue: each tenant's share is one of each.
        let sandbox = Sandbox::new(sandpy::Config {
            max_concurrent_runs: Some(2),
            max_queued_runs: 2,
            ..crate::sandbox_config()
        })
        .expect("the runtime loads");
        let sandpy = json!({
            "max_concurrent_runs": 2, "max_queued_runs": 2,
            "tenants": {"agent-a": {"token": "token-a"}, "agent-b": {"token": "token-b"}},
        });
        let address = serve_settings(sandbox, sandpy).await;
        let url = format!("http://{address}/mcp");
        let a = Client::connect(&url, Some("token-a")).await;
        let b = Client::connect(&url, Some("token-b")).await;
        let slow = json!({"code": "import time\ntime.sleep(2)\n'a'"});
        let a_calls: Vec<_> = (0..6)
            .map(|_| {
                let peer = a.0.peer().clone();
                let slow = slow.clone();
                tokio::spawn(async move { crate::tool_result(&peer, "run_python", slow).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let started = Instant::now();
        let b_run = b.result("run_python", json!({"code": "6 * 7"})).await;
        let took = started.elapsed();
        assert_eq!(b_run["structuredContent"]["status"], "ok", "{b_run}");
        assert!(
            took < Duration::from_millis(1200),
            "B waited {took:?} for A"
        );
        let mut statuses = Vec::new();
        for call in a_calls {
            let result = call.await.expect("A's call");
            let status = result["structuredContent"]["status"].clone();
            if status == "busy" {
                assert!(text(&result).contains("sandpy.max_tenant_runs"), "{result}");
            }
            statuses.push(status);
        }
        let ok = statuses.iter().filter(|s| *s == "ok").count();
        assert_eq!(ok, 2, "A's share: one running, one waiting: {statuses:?}");
        a.still_served().await;
        b.still_served().await;
    });
}

/// The URIs of a result's `resource_link` items.
fn links(result: &Value) -> Vec<String> {
    let content = result["content"].as_array().expect("content");
    content
        .iter()
        .filter(|item| item["type"] == "resource_link")
        .map(|item| item["uri"].as_str().expect("uri").to_string())
        .collect()
}

#[test]
fn one_tenant_from_many_sessions_cannot_fill_the_resource_store_for_another() {
    block_on(async {
        let sandpy = json!({
            "tenants": {"agent-a": {"token": "token-a"}, "agent-b": {"token": "token-b"}},
            "resources": {"session_mb": 1, "total_mb": 2, "inline_kb": 64},
        });
        let served = serve(sandpy, None).await;
        let write = "open('/output/x.bin', 'wb').write(b'\\xff' * 900 * 1024)";
        let run = json!({"code": write});
        let a1 = Client::connect(&served.url, Some("token-a")).await;
        let a2 = Client::connect(&served.url, Some("token-a")).await;
        let a3 = Client::connect(&served.url, Some("token-a")).await;
        for a in [&a1, &a2, &a3] {
            let kept = a.result("run_python", run.clone()).await;
            assert_eq!(links(&kept).len(), 1, "A keeps within its share: {kept}");
        }
        let b = Client::connect(&served.url, Some("token-b")).await;
        let kept = b.result("run_python", run.clone()).await;
        assert_eq!(links(&kept).len(), 1, "B's file is kept beside A's: {kept}");
        assert!(
            kept["structuredContent"]["resources_not_kept"].is_null(),
            "{kept}"
        );
        b.still_served().await;
    });
}

#[test]
fn a_request_id_in_flight_in_the_session_is_refused_at_once() {
    block_on(async {
        let address = serve_settings(crate::sandbox().clone(), json!({})).await;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::new();
        let url = format!("http://{address}/mcp");
        let post = |session: Option<&str>, body: Value| {
            let mut request = http
                .post(&url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2025-06-18")
                .body(body.to_string());
            if let Some(session) = session {
                request = request.header("mcp-session-id", session);
            }
            request.send()
        };
        let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}});
        let answer = post(None, init).await.expect("initialize");
        let session = answer.headers()["mcp-session-id"]
            .to_str()
            .expect("text")
            .to_string();
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        post(Some(&session), initialized)
            .await
            .expect("initialized");
        let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "run_python", "arguments": {"code": "import time\ntime.sleep(1.5)\n'first'"}}});
        let first = tokio::spawn(post(Some(&session), call.clone()));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let started = Instant::now();
        let second = tokio::time::timeout(Duration::from_secs(5), post(Some(&session), call))
            .await
            .expect("the second request answered at once")
            .expect("an answer");
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(second.status(), 400);
        let error: Value = second.json().await.expect("JSON");
        assert_eq!(error["id"], 7, "{error}");
        assert_eq!(error["error"]["code"], -32600, "{error}");
        let first = tokio::time::timeout(Duration::from_secs(20), async {
            first.await.expect("task").expect("answer").text().await
        })
        .await
        .expect("the first request answered")
        .expect("body");
        assert!(
            first.contains("first") && first.contains("\"id\":7"),
            "{first}"
        );
    });
}

#[test]
fn json_nested_ten_thousand_deep_gets_a_jsonrpc_parse_error() {
    block_on(async {
        let address = serve_settings(crate::sandbox().clone(), json!({})).await;
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"ping","params":{{"a":{}{}}}}}"#,
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{deep}",
            deep.len()
        );
        let answer = send(address, &request).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        let body = &answer[answer.find('{').expect("a body")..=answer.rfind('}').expect("a body")];
        let error: Value = serde_json::from_str(body).expect("JSON");
        assert_eq!(error["error"]["code"], -32700, "{answer}");
    });
}

#[test]
fn save_session_answers_a_remote_tenant_with_no_server_path() {
    block_on(async {
        let tenants =
            json!({"tenants": {"agent-a": {"token": "token-a"}, "agent-b": {"token": "token-b"}}});
        let served = serve(tenants, None).await;
        let root = served
            .saved
            .path()
            .to_str()
            .expect("a text path")
            .to_string();
        let a = Client::connect(&served.url, Some("token-a")).await;
        a.result("run_python", json!({"code": "x = 1", "session_id": "main"}))
            .await;
        let saved = a
            .result("save_session", json!({"session_id": "main", "name": "nb"}))
            .await;
        assert_eq!(saved["structuredContent"]["saved"], "nb", "{saved}");
        assert!(!saved.to_string().contains(&root), "{saved}");

        // Failures too: a tenant's folder planted as a link.
        let outside = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink(outside.path(), served.saved.path().join("agent-b"))
            .expect("symlink");
        let b = Client::connect(&served.url, Some("token-b")).await;
        b.result("run_python", json!({"code": "y = 2", "session_id": "main"}))
            .await;
        for (tool, arguments) in [
            ("save_session", json!({"session_id": "main", "name": "nb"})),
            (
                "restore_session",
                json!({"name": "nb", "session_id": "again"}),
            ),
        ] {
            let refused = b.result(tool, arguments).await;
            assert_eq!(refused["isError"], true, "{refused}");
            assert!(text(&refused).contains("is a link"), "{refused}");
            assert!(!refused.to_string().contains(&root), "{tool}: {refused}");
            let outside = outside.path().to_str().expect("a text path");
            assert!(!refused.to_string().contains(outside), "{tool}: {refused}");
        }
    });
}
