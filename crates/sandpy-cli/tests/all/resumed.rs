//! A call whose response stream breaks, resumed by the official MCP Python SDK: between
//! the SDK and `sandpy serve --http` a proxy (written here) cuts the connection that carries
//! the `tools/call` response right after its priming event, as a network or a proxy's
//! timeout would. The SDK reconnects by itself (`GET` with `Last-Event-ID`) after the
//! priming event's `retry`, and must get the result.

use crate::mcp_client;
use crate::serve::http_server_without_upstreams;
use serde_json::json;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// What the proxy saw and did.
#[derive(Default)]
struct Seen {
    /// Whether it cut a response after its priming event.
    cut: AtomicBool,
    /// Everything the client sent.
    requests: Mutex<Vec<u8>>,
}

/// A proxy on a free loopback port to `upstream`: it forwards both ways, and cuts the
/// first connection whose response carries a request stream's priming event (`id: 0/…`,
/// the `initialize` answer's and the standalone stream's are `id: 0`) right after it.
fn cutting_proxy(upstream: std::net::SocketAddr) -> (String, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    let seen = Arc::new(Seen::default());
    let shared = seen.clone();
    std::thread::spawn(move || {
        for client in listener.incoming().map_while(Result::ok) {
            let Ok(server) = TcpStream::connect(upstream) else {
                continue;
            };
            let seen = shared.clone();
            let (mut from_client, mut to_server) = (
                client.try_clone().expect("clone"),
                server.try_clone().expect("clone"),
            );
            let requests = seen.clone();
            std::thread::spawn(move || {
                let mut buffer = [0u8; 16 << 10];
                while let Ok(n @ 1..) = from_client.read(&mut buffer) {
                    let mut all = requests.requests.lock().unwrap_or_else(|e| e.into_inner());
                    all.extend_from_slice(&buffer[..n]);
                    drop(all);
                    if to_server.write_all(&buffer[..n]).is_err() {
                        break;
                    }
                }
                let _ = to_server.shutdown(Shutdown::Write);
            });
            std::thread::spawn(move || forward_and_cut(server, client, &seen));
        }
    });
    (format!("http://{address}/mcp"), seen)
}

/// Server to client, cutting both connections after the first request stream's priming
/// event if none was cut yet.
fn forward_and_cut(mut server: TcpStream, mut client: TcpStream, seen: &Seen) {
    let mut buffer = [0u8; 16 << 10];
    let mut window = Vec::new();
    while let Ok(n @ 1..) = server.read(&mut buffer) {
        let chunk = &buffer[..n];
        if !seen.cut.load(Ordering::SeqCst) {
            let start = window.len();
            window.extend_from_slice(chunk);
            let text = String::from_utf8_lossy(&window).into_owned();
            if let Some(at) = text.find("id: 0/") {
                if let Some(end) = text[at..].find("\n\n") {
                    if !seen.cut.swap(true, Ordering::SeqCst) {
                        let through = (at + end + 2).saturating_sub(start).min(n);
                        let _ = client.write_all(&chunk[..through]);
                        let _ = client.shutdown(Shutdown::Both);
                        let _ = server.shutdown(Shutdown::Both);
                        return;
                    }
                }
            }
        }
        if client.write_all(chunk).is_err() {
            break;
        }
    }
    let _ = client.shutdown(Shutdown::Write);
}

#[test]
fn the_python_sdk_resumes_a_call_whose_stream_was_cut_and_gets_its_result() {
    let (_dir, _server, upstream) = http_server_without_upstreams();
    let (proxied, seen) = cutting_proxy(upstream);
    let requests = json!([{"method": "call_tool", "name": "run_python", "arguments": {
        "code": "import time\ntime.sleep(1)\n'done after the cut'"}}]);
    // The SDK waits `retry` (3 s) before it reconnects; a server that lost the result
    // would have it reconnect forever, so the test waits a minute at most.
    let (sender, answer) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(mcp_client(&["http", &proxied], &requests));
    });
    let (out, status, stderr) = answer
        .recv_timeout(Duration::from_secs(60))
        .expect("the client's result within a minute");
    assert!(
        seen.cut.load(Ordering::SeqCst),
        "the proxy cut the call's stream"
    );
    assert_eq!(status, 0, "{out} {stderr}");
    assert_eq!(
        out[0]["structuredContent"]["return_value"], "done after the cut",
        "{out} {stderr}"
    );
    let sent = seen.requests.lock().unwrap_or_else(|e| e.into_inner());
    let sent = String::from_utf8_lossy(&sent).to_ascii_lowercase();
    assert!(
        sent.contains("\r\nlast-event-id: 0/0\r\n"),
        "the SDK resumed after the priming event: {sent}"
    );
}
