//! `HttpListener` under small [`HttpLimits`], attacked over raw sockets: the caps and
//! timeouts answer with a status and a message, and the server answers afterwards.

use crate::{block_on, config, sandbox};
use sandpy_mcp::{HttpLimits, HttpListener, Hub, SandpyServer};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The clients of these tests: each a tenant whose token is its name, so that the server
/// checks the token and counts each as a client of its own (an unchecked bearer value
/// does not make a client).
const CLIENTS: [&str; 8] = ["a", "b", "c", "d", "t", "other", "greedy", "third"];

/// Serve on a free loopback port, with a tenant for each of [`CLIENTS`], within `limits`.
pub(crate) async fn serve(limits: HttpLimits) -> SocketAddr {
    let tenants: Vec<String> = CLIENTS
        .iter()
        .map(|name| format!(r#""{name}": {{"token": "{name}"}}"#))
        .collect();
    let config = config(&format!(
        r#"{{"mcpServers": {{}}, "sandpy": {{"tenants": {{{}}}}}}}"#,
        tenants.join(", ")
    ));
    let hub = Hub::start(&config).await;
    let resolved = config.settings.resolve(None).expect("resolved");
    let server = SandpyServer::new(sandbox().clone(), hub, &resolved).expect("server");
    let listener = HttpListener::bind(([127, 0, 0, 1], 0).into(), None, &resolved.settings.tenants)
        .await
        .expect("bind")
        .with_limits(limits);
    let address = listener.local_addr().expect("address");
    tokio::spawn(listener.serve(server, std::future::pending()));
    address
}

/// Send `request` on a new connection; the status line and the body, as text.
async fn send(address: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(address).await.expect("connect");
    stream.write_all(request).await.expect("send");
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer));
    read.await.expect("an answer in time").expect("read");
    String::from_utf8_lossy(&answer).into_owned()
}

/// An `initialize` from the client that presents `token`.
async fn initialize(address: SocketAddr, token: &str) -> String {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    send(address, request.as_bytes()).await
}

#[test]
fn past_the_servers_session_cap_initialize_is_refused_with_503_until_sessions_expire() {
    block_on(async {
        let address = serve(HttpLimits {
            max_sessions: 3,
            session_idle: Duration::from_secs(5),
            ..HttpLimits::default()
        })
        .await;
        for client in ["a", "b", "c"] {
            let answer = initialize(address, client).await;
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        }
        let refused = initialize(address, "d").await;
        assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
        assert!(
            refused.contains("the server holds 3 MCP sessions, its most"),
            "{refused}"
        );
        // Unused, they expire and give their places back.
        tokio::time::sleep(Duration::from_secs(8)).await;
        let answer = initialize(address, "d").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    });
}

#[test]
fn a_client_at_its_session_cap_displaces_its_own_oldest_session_not_anothers() {
    block_on(async {
        let address = serve(HttpLimits {
            max_sessions_per_client: 2,
            max_sessions: 3,
            ..HttpLimits::default()
        })
        .await;
        assert!(initialize(address, "other")
            .await
            .starts_with("HTTP/1.1 200"));
        for _ in 0..20 {
            let answer = initialize(address, "greedy").await;
            assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        }
        // The other client's session was never displaced: the server holds 3, and a new
        // client would find it full.
        let refused = initialize(address, "third").await;
        assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
    });
}

#[test]
fn a_body_that_stops_halfway_gets_408_within_the_body_timeout() {
    block_on(async {
        let address = serve(HttpLimits {
            body_timeout: Duration::from_secs(1),
            ..HttpLimits::default()
        })
        .await;
        let started = Instant::now();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer t\r\nContent-Length: 1000\r\n\r\n{{\"jsonrpc\""
        );
        let answer = send(address, request.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("did not arrive within 1 s"), "{answer}");
        assert!(started.elapsed() < Duration::from_secs(20), "not promptly");
        assert!(initialize(address, "t").await.starts_with("HTTP/1.1 200"));
    });
}

#[test]
fn a_connection_that_sends_no_headers_is_closed_after_the_header_timeout() {
    block_on(async {
        let address = serve(HttpLimits {
            header_timeout: Duration::from_secs(1),
            ..HttpLimits::default()
        })
        .await;
        let started = Instant::now();
        let answer = send(address, b"POST /mcp HTTP/1.1\r\nHost: x\r\n").await;
        assert!(!answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(started.elapsed() < Duration::from_secs(20), "not promptly");
        assert!(initialize(address, "t").await.starts_with("HTTP/1.1 200"));
    });
}

/// A web page in a person's browser attacks a server on loopback (DNS rebinding, a
/// cross-site POST): a request whose `Origin` is not allowed gets 403 before anything
/// else; a loopback origin (a local tool's page) and a client that sends none go on.
#[test]
fn origin_of_a_web_page_is_refused_and_loopback_pages_are_not() {
    block_on(async {
        let address = serve(HttpLimits::default()).await;
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
        let with_origin = |origin: &str| {
            format!(
                "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer t\r\n{origin}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
        };
        for evil in [
            "http://evil.example.com",
            "null",
            "http://localhost.evil.example.com",
        ] {
            let answer = send(
                address,
                with_origin(&format!("Origin: {evil}\r\n")).as_bytes(),
            )
            .await;
            assert!(answer.starts_with("HTTP/1.1 403"), "{evil}: {answer}");
            assert!(
                answer.contains("is not allowed (sandpy.allowed_origins)"),
                "{answer}"
            );
        }
        for fine in [
            "Origin: http://localhost:6274\r\n",
            "Origin: http://127.0.0.1\r\n",
            "",
        ] {
            let answer = send(address, with_origin(fine).as_bytes()).await;
            assert!(answer.starts_with("HTTP/1.1 200"), "{fine}: {answer}");
            let lower = answer.to_ascii_lowercase();
            let cors = lower.contains("access-control-expose-headers: mcp-session-id");
            assert_eq!(
                cors,
                !fine.is_empty(),
                "CORS only for a browser's origin: {answer}"
            );
        }
        // A browser's preflight, which carries no token: answered for an allowed origin
        // only, before the token is asked for.
        let preflight = |origin: &str| {
            format!(
                "OPTIONS /mcp HTTP/1.1\r\nHost: {address}\r\nOrigin: {origin}\r\nAccess-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization, content-type, mcp-session-id\r\nConnection: close\r\n\r\n"
            )
        };
        let answer = send(address, preflight("http://localhost:6274").as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 204"), "{answer}");
        let lower = answer.to_ascii_lowercase();
        assert!(
            lower.contains("access-control-allow-origin: http://localhost:6274"),
            "{answer}"
        );
        assert!(
            lower.contains(
                "access-control-allow-headers: authorization, content-type, accept, mcp-session-id"
            ),
            "{answer}"
        );
        let answer = send(address, preflight("http://evil.example.com").as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    });
}

/// A body that is not JSON, and a JSON-RPC batch (which MCP 2025-06-18 removed), are
/// answered as JSON-RPC says: 400 with a `-32700` parse error and a `-32600` invalid
/// request, in JSON (rmcp's transport answered both 415 with plain text).
#[test]
fn a_body_that_is_not_one_jsonrpc_message_gets_a_jsonrpc_error() {
    block_on(async {
        let address = serve(HttpLimits::default()).await;
        let post = |body: &str| {
            format!(
                "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer t\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
        };
        let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#;
        for (body, code) in [("{not json", -32700), (batch, -32600)] {
            let answer = send(address, post(body).as_bytes()).await;
            assert!(answer.starts_with("HTTP/1.1 400"), "{body}: {answer}");
            assert!(
                answer
                    .to_ascii_lowercase()
                    .contains("content-type: application/json"),
                "{answer}"
            );
            // The body, whether sent with a length or in chunks: the one JSON object.
            let json =
                &answer[answer.find('{').expect("a body")..=answer.rfind('}').expect("a body")];
            let error: serde_json::Value = serde_json::from_str(json).expect("JSON");
            assert_eq!(error["error"]["code"], code, "{answer}");
            assert_eq!(error["id"], serde_json::Value::Null, "{answer}");
        }
        assert!(initialize(address, "t").await.starts_with("HTTP/1.1 200"));
    });
}
