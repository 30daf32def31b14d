//! `sandpy serve --http` against clients that misbehave on purpose: sockets opened and left
//! idle or half-sent, and a flood of MCP `initialize` requests. Each test ends with a real
//! client (the official Python SDK) that must still get in and run code.

use crate::mcp_client;
use crate::serve::{http_server_with, Server};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

const TOKEN: &str = "s3cret";

/// `sandpy serve --http` with its open-file limit at `fds` (a shell's `ulimit -n`).
fn server_with_fd_limit(fds: u32) -> (Server, String) {
    let mut command = Command::new("sh");
    command
        .args([
            "-c",
            &format!("ulimit -n {fds} && exec \"$0\" \"$@\""),
            env!("CARGO_BIN_EXE_sandpy"),
        ])
        .env_remove("SANDPY_CONFIG")
        .env_remove("SANDPY_TOKEN")
        .stdin(std::process::Stdio::null());
    let (server, url, _) = http_server_with(command, &["--token", TOKEN]);
    (server, url)
}

/// A real client lists the tools and runs code; returns what `run_python` returned.
fn real_client_runs_code(url: &str) -> Value {
    let requests = json!([
        {"method": "list_tools"},
        {"method": "call_tool", "name": "run_python", "arguments": {"code": "sum(range(10))"}}
    ]);
    let (out, status, stderr) = mcp_client(&["http", url, TOKEN], &requests);
    assert_eq!(status, 0, "the real client failed: {out}\n{stderr}");
    out[1]["structuredContent"]["return_value"].clone()
}

fn vm_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches(" kB").trim().parse().ok())
        .expect("a VmRSS line")
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn idle_and_half_sent_connections_neither_exhaust_descriptors_nor_lock_out_a_real_client() {
    let (server, url) = server_with_fd_limit(1024);
    let address = url.trim_start_matches("http://").trim_end_matches("/mcp");
    let mut sockets = Vec::new();
    for i in 0..1100 {
        let Ok(mut socket) = TcpStream::connect(address) else {
            continue; // the backlog was full: that is the server's right
        };
        if i % 2 == 1 {
            let partial = format!("POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Le");
            let _ = socket.write_all(partial.as_bytes());
        }
        sockets.push(socket);
    }
    assert!(sockets.len() > 1000, "only {} connected", sockets.len());
    let opened = Instant::now();
    let fds = open_fds(server.0.id());
    eprintln!(
        "{} slow sockets connected; the server has {fds} descriptors open",
        sockets.len()
    );
    assert!(fds < 1024, "the server is at its descriptor limit");

    assert_eq!(real_client_runs_code(&url), json!(45));
    eprintln!(
        "the real client ran code {:?} after the flood",
        opened.elapsed()
    );

    // Every slow socket is closed by the server: at the cap to make room, else after the
    // 10 s header timeout.
    for socket in &mut sockets {
        let left = Duration::from_secs(25).saturating_sub(opened.elapsed());
        socket
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .expect("timeout");
        let mut buffer = [0u8; 256];
        let closed = match socket.read(&mut buffer) {
            Ok(0) => true,
            Ok(_) => true, // an answer (408 or 400) and then the close
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        };
        assert!(
            closed,
            "a slow socket was still open after {:?}",
            opened.elapsed()
        );
    }
    eprintln!(
        "every slow socket closed {:?} after the flood",
        opened.elapsed()
    );
    assert_eq!(
        real_client_runs_code(&url),
        json!(45),
        "the server still answers"
    );
    drop(server);
}

/// One bare `initialize` over its own connection; returns the status code.
fn initialize(address: &str) -> u16 {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"flood","version":"0"}}}"#;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let Ok(mut stream) = TcpStream::connect(address) else {
        return 0;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    if stream.write_all(request.as_bytes()).is_err() {
        return 0;
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer)
        .get(9..12)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

#[test]
fn an_initialize_flood_from_one_client_keeps_memory_bounded_and_the_server_answering() {
    let (server, url) = server_with_fd_limit(4096);
    let address = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    let pid = server.0.id();
    // The peak from here on: not the runtime's compilation at start-up (a first run after
    // a build compiles it, and that alone peaks at some 400 MiB).
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("reset the peak RSS");
    let before_mib = vm_kib(pid, "VmRSS:") / 1024;
    let floods: Vec<_> = (0..4)
        .map(|_| {
            let address = address.clone();
            std::thread::spawn(move || {
                let mut codes = std::collections::BTreeMap::<u16, usize>::new();
                for _ in 0..2000 {
                    *codes.entry(initialize(&address)).or_default() += 1;
                }
                codes
            })
        })
        .collect();
    let mut codes = std::collections::BTreeMap::<u16, usize>::new();
    for flood in floods {
        for (code, n) in flood.join().expect("flood") {
            *codes.entry(code).or_default() += n;
        }
    }
    // Each new session past the client's cap closes its least recently used one.
    assert_eq!(codes, [(200, 8000)].into_iter().collect(), "{codes:?}");
    let peak_mib = vm_kib(pid, "VmHWM:") / 1024;
    eprintln!(
        "8,000 initializes: {codes:?}, RSS {before_mib} MiB before, peak {peak_mib} MiB, now {} MiB",
        vm_kib(pid, "VmRSS:") / 1024
    );
    assert!(
        peak_mib < 300,
        "peak RSS {peak_mib} MiB after 8,000 initializes"
    );
    assert_eq!(
        real_client_runs_code(&url),
        json!(45),
        "the server still answers"
    );
    drop(server);
}
