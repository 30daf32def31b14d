//! The official MCP Python SDK's calls to `sandpy serve --http` share its connections:
//! between the two, a proxy (written here) counts the TCP connections the client opens.
//! The SDK stops reading an SSE answer at its answer event and closes the response, and
//! httpx then closes the connection, so a server that answered each call as a stream
//! cost a new connection per call (issue 48); an answer sent whole keeps it.

use crate::mcp_client;
use crate::serve::http_server_without_upstreams;
use serde_json::json;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A proxy on a free loopback port to `upstream`, forwarding both ways; counts the
/// connections clients open to it.
fn counting_proxy(upstream: std::net::SocketAddr) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    let opened = Arc::new(AtomicUsize::new(0));
    let counted = opened.clone();
    std::thread::spawn(move || {
        for client in listener.incoming().map_while(Result::ok) {
            counted.fetch_add(1, Ordering::SeqCst);
            let Ok(server) = TcpStream::connect(upstream) else {
                continue;
            };
            for (from, to) in [(&client, &server), (&server, &client)] {
                let (mut from, mut to) = (
                    from.try_clone().expect("clone"),
                    to.try_clone().expect("clone"),
                );
                let _ = from.set_nodelay(true);
                std::thread::spawn(move || {
                    let mut buffer = [0u8; 16 << 10];
                    while let Ok(n @ 1..) = from.read(&mut buffer) {
                        if to.write_all(&buffer[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(Shutdown::Write);
                });
            }
        }
    });
    (format!("http://{address}/mcp"), opened)
}

#[test]
fn the_python_sdks_calls_share_one_kept_alive_connection() {
    let (_dir, _server, upstream) = http_server_without_upstreams();
    let (proxied, opened) = counting_proxy(upstream);
    const CALLS: usize = 12;
    let requests: Vec<_> = (0..CALLS)
        .map(|i| json!({"method": "call_tool", "name": "run_python", "arguments": {"code": format!("{i} * 2")}}))
        .collect();
    let (out, status, stderr) = mcp_client(&["http", &proxied], &json!(requests));
    assert_eq!(status, 0, "{out} {stderr}");
    for (i, result) in out.as_array().expect("results").iter().enumerate() {
        assert_eq!(
            result["structuredContent"]["return_value"],
            json!(i * 2),
            "{result}"
        );
    }
    // `initialize` and `notifications/initialized` (the SDK leaves the latter's 202 unread,
    // which closes that connection), the SDK's standing GET stream, the first call (a
    // fresh server's first run can take longer than the server holds a stream for its
    // answer, and a streamed answer costs the connection), the calls' connection, and one
    // spare. A connection per call was 17.
    let opened = opened.load(Ordering::SeqCst);
    assert!(
        opened <= 5,
        "{opened} connections for initialize, {CALLS} calls and the session's end"
    );
}
