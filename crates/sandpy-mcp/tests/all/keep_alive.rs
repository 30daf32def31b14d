//! Served over HTTP on one kept-alive connection, as every MCP client library sends its
//! requests: a request after the first few must not wait for the client's delayed ACK
//! (Nagle's algorithm on the server's socket held each response's second write ~40 ms).

use crate::block_on;
use crate::http_limits::serve;
use sandpy_mcp::HttpLimits;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One HTTP/1.1 exchange on `stream`: the response's head and body, as text. The body is
/// read to its end (its `Content-Length`, or the last chunk of a chunked SSE stream).
async fn exchange(stream: &mut TcpStream, request: &str) -> (String, String) {
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    let mut buffer = [0u8; 16 * 1024];
    let read_all = async {
        loop {
            let n = stream.read(&mut buffer).await.expect("read");
            assert!(
                n > 0,
                "the server closed a kept-alive connection: {answer:?}"
            );
            answer.extend_from_slice(&buffer[..n]);
            let text = String::from_utf8_lossy(&answer);
            let Some((head, body)) = text.split_once("\r\n\r\n") else {
                continue;
            };
            let lower = head.to_ascii_lowercase();
            let done = if lower.contains("transfer-encoding: chunked") {
                body.starts_with("0\r\n\r\n") || body.ends_with("\r\n0\r\n\r\n")
            } else {
                let length = lower
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length:"))
                    .map_or(0, |value| value.trim().parse::<usize>().expect("a length"));
                body.len() >= length
            };
            if done {
                return (head.to_string(), body.to_string());
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read_all)
        .await
        .expect("an answer in time")
}

fn post(address: SocketAddr, body: &str, session: Option<&str>) -> String {
    let session = session.map_or(String::new(), |id| format!("Mcp-Session-Id: {id}\r\n"));
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer t\r\nMCP-Protocol-Version: 2025-06-18\r\n{session}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// A value of a header in `head`.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

/// `initialize` and `notifications/initialized` on `stream`; the session's id.
async fn open_session(stream: &mut TcpStream, address: SocketAddr) -> String {
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    let (head, body) = exchange(stream, &post(address, initialize, None)).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
    let session = header(&head, "mcp-session-id")
        .expect("a session id")
        .to_string();
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let (head, _) = exchange(stream, &post(address, initialized, Some(&session))).await;
    assert!(head.starts_with("HTTP/1.1 202"), "{head}");
    session
}

#[test]
fn requests_on_one_kept_alive_connection_do_not_wait_for_the_clients_delayed_ack() {
    block_on(async {
        let address = serve(HttpLimits::default()).await;
        let mut stream = TcpStream::connect(address).await.expect("connect");
        // As curl and the SDKs' clients do: the client's own writes are not delayed.
        stream.set_nodelay(true).expect("nodelay");
        let session = open_session(&mut stream, address).await;
        // Linux acknowledges the first segments of a connection at once (quick-ACK mode);
        // the stall showed on every request after those.
        let mut times = Vec::new();
        for id in 2..22 {
            let ping = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
            let started = Instant::now();
            let (head, body) = exchange(&mut stream, &post(address, &ping, Some(&session))).await;
            times.push(started.elapsed());
            assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
            assert!(body.contains(&format!(r#""id":{id}"#)), "{body}");
        }
        times.sort();
        let median = times[times.len() / 2];
        // A delayed ACK is at least 40 ms on Linux; a ping costs well under a millisecond.
        assert!(
            median < Duration::from_millis(20),
            "pings on one kept-alive connection: median {median:?} ({times:?})"
        );
    });
}

/// A quick answer comes whole, as one JSON body (MCP clients read that to its end and keep
/// the connection; they stop reading a stream at its answer and drop it), with the output
/// of a run that ended before any was streamed; an answer that takes longer than the
/// server holds a stream for it, or that has output streamed before it, comes as the SSE
/// stream, its priming event first.
#[test]
fn a_quick_answer_comes_whole_and_a_slow_or_streaming_one_as_sse() {
    block_on(async {
        let address = serve(HttpLimits::default()).await;
        let mut stream = TcpStream::connect(address).await.expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let session = open_session(&mut stream, address).await;
        let call = |id: u32, code: &str| {
            let call = serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "run_python", "arguments": {"code": code},
                           "_meta": {"progressToken": "p"}}});
            post(address, &call.to_string(), Some(&session))
        };
        let (head, body) =
            exchange(&mut stream, &call(2, "print('quick', flush=True)\n6 * 7")).await;
        assert_eq!(
            header(&head, "content-type"),
            Some("application/json"),
            "{head}"
        );
        assert!(header(&head, "content-length").is_some(), "{head}");
        let answer: serde_json::Value = serde_json::from_str(&body).expect("one JSON answer");
        assert_eq!(answer["id"], 2, "{answer}");
        assert_eq!(
            answer["result"]["structuredContent"]["return_value"], 42,
            "{answer}"
        );
        assert_eq!(
            answer["result"]["structuredContent"]["stdout"], "quick\n",
            "{answer}"
        );
        for (id, code) in [
            (3, "import time\ntime.sleep(0.5)\n42"),
            // Past the size that is streamed at once, then well within the hold.
            (
                4,
                "print('x' * 5000, flush=True)\nimport time\ntime.sleep(0.05)\n42",
            ),
        ] {
            let (head, body) = exchange(&mut stream, &call(id, code)).await;
            assert_eq!(
                header(&head, "content-type"),
                Some("text/event-stream"),
                "{code}: {head}"
            );
            // The first event of the chunked body: the priming event (an id, no data).
            let first = body.split("\r\n").nth(1).unwrap_or_default();
            let first = first.split("\n\n").next().unwrap_or_default();
            assert!(
                first.starts_with("id: 0/") || first.contains("\nid: 0/"),
                "{code}: {body}"
            );
            assert!(!first.contains("\"jsonrpc\""), "{code}: {body}");
            assert!(body.contains(&format!(r#""id":{id},"result""#)), "{body}");
            assert!(body.contains("\"return_value\":42"), "{code}: {body}");
        }
    });
}
