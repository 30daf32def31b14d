//! The native tier's network boundary: no socket of a run's own reaches the host, and
//! HTTP goes through the host under the WebAssembly tier's allowlist rules.

use super::native::{assert_blocked, attacks, native_config, native_run};
use super::sandpy;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

#[test]
fn network_boundary_no_socket_reaches_the_host() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &[], json!({}));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    let unix_path = dir.path().join("host.sock");
    let _unix = std::os::unix::net::UnixListener::bind(&unix_path).expect("unix listener");
    let body = format!(
        r#"
attempt("tcp_loopback", lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2))
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", {port})))
attempt("unix_path", lambda: socket.socket(socket.AF_UNIX).connect({unix:?}))
attempt("unix_abstract", lambda: socket.socket(socket.AF_UNIX).connect("\0sandpy-test"))
attempt("netlink", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
attempt("raw_socket", lambda: raw(41, 2, 3, 1))
attempt("socketpair_is_local", lambda: (lambda pair: pair[0].send(b"ok"))(socket.socketpair()))
"#,
        unix = unix_path.display().to_string(),
    );
    let found = attacks(&config, &body, "");
    assert_blocked(
        &found,
        &[
            "tcp_loopback",
            "udp",
            "unix_path",
            "unix_abstract",
            "netlink",
            "raw_socket",
        ],
    );
    assert_eq!(found["socketpair_is_local"][0], "allowed", "{found:?}");
    assert!(
        listener.accept().is_err(),
        "the run reached the host's loopback listener"
    );
}

/// The network tests' real HTTP server (`crates/sandpy/tests/fixtures/http_server.py`),
/// logging each request to `log`, and its port.
fn http_server(log: &Path) -> (std::process::Child, u16) {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../sandpy/tests/fixtures/http_server.py");
    let mut server = Command::new("python3")
        .arg(script)
        .arg(log)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 starts the test server");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(server.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("port");
    let port = line.trim().parse().expect("the server prints its port");
    (server, port)
}

/// The network by allowlist in the native tier: the run keeps its empty network
/// namespace (a socket of its own reaches nothing), and `urllib.request` goes through the
/// host with the WebAssembly tier's rules: allowed host, refused host, secret put in by
/// the host and scrubbed from the echo (the WebAssembly tier's suite is
/// `crates/sandpy/tests/all/network.rs`).
#[test]
fn network_boundary_native_runs_reach_allowed_hosts_through_the_host_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("requests.jsonl");
    let (mut server, port) = http_server(&log);
    let network = json!({"network": {
        "allow": [format!("127.0.0.1:{port}"), format!("127.0.0.2:{port}")],
        // Secrets go over https only, to the ports their entries name, unless the entry
        // says `allow_http` (the test server is plain http).
        "secrets": {"API_TOKEN": {"env": "SANDPY_TEST_SECRET",
                                  "hosts": [format!("127.0.0.1:{port}")], "allow_http": true}},
    }});
    let config = native_config(dir.path(), &["json", "socket", "urllib.request"], network);
    let code = format!(
        r#"
import json, os, socket, urllib.request
seen = []
token = os.environ["API_TOKEN"]
request = urllib.request.Request("http://127.0.0.1:{port}/echo",
                                 headers={{"Authorization": "Bearer " + token}})
with urllib.request.urlopen(request) as r:
    seen.append(json.load(r)["headers"]["Authorization"])
for attempt in (lambda: urllib.request.urlopen("http://127.0.0.3:{port}/echo"),
                lambda: socket.create_connection(("127.0.0.1", {port}), timeout=2)):
    try:
        attempt()
        seen.append("allowed")
    except OSError as e:
        seen.append(type(e).__name__)
seen
"#
    );
    let out = sandpy()
        .args(["run", "--json", "--config", &config, "-c", &code])
        .env("SANDPY_TEST_SECRET", "native-s3cret-value")
        .output()
        .expect("sandpy");
    let _ = server.kill();
    let _ = server.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("native-s3cret-value"), "{stdout}");
    let execution: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout}{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        execution["return_value"],
        json!([
            "Bearer sandpy-secret:API_TOKEN",
            "PermissionError",
            "PermissionError"
        ]),
        "{execution}"
    );
    let received = std::fs::read_to_string(&log).expect("the server's log");
    assert!(
        received.contains("Bearer native-s3cret-value"),
        "{received}"
    );
    assert_eq!(received.lines().count(), 1, "{received}");
    assert_eq!(
        execution["requests"].as_array().map(Vec::len),
        Some(2),
        "{execution}"
    );
}

/// The WebAssembly tier's network attacks (`crates/sandpy/tests/all/network.rs`), in the
/// native tier, in one run: addresses by other spellings, the metadata address, a redirect
/// to a host not on the list, a name that resolves to 127.0.0.1 (no entry names that
/// address), a response over the run's bytes in, and one that trickles past the request
/// timeout.
#[test]
fn network_boundary_native_runs_meet_the_same_rules_as_webassembly_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("requests.jsonl");
    let (mut server, port) = http_server(&log);
    let network = json!({"network": {
        "allow": [format!("127.0.0.2:{port}"), format!("localhost:{port}")],
        "limits": {"max_bytes_in": 1_048_576, "request_timeout_ms": 2000},
    }});
    let config = native_config(dir.path(), &["urllib.request"], network);
    let urls = [
        format!("http://2130706433:{port}/echo"),
        format!("http://[::1]:{port}/echo"),
        format!("http://[::ffff:127.0.0.1]:{port}/echo"),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        format!("http://127.0.0.2:{port}/redirect?to=http://127.0.0.1:{port}/echo"),
        format!("http://localhost:{port}/echo"),
        format!("http://127.0.0.2:{port}/big?n=5000000"),
        format!("http://127.0.0.2:{port}/slow"),
        format!("http://127.0.0.2:{port}/echo"),
    ];
    let code = format!(
        "import urllib.request\nseen = []\nfor url in {urls:?}:\n    try:\n        \
         urllib.request.urlopen(url).read()\n        seen.append('ok')\n    \
         except OSError as e:\n        seen.append(type(e).__name__)\nseen"
    );
    let (exit, execution) = native_run(&config, &code, &[], "");
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(exit, 0, "{execution}");
    assert_eq!(
        execution["return_value"],
        json!([
            "PermissionError",
            "PermissionError",
            "PermissionError",
            "PermissionError",
            "PermissionError",
            // A name that resolves to an internal address no entry allows for it: refused
            // by the operator's rules, not a failure to connect.
            "PermissionError",
            "PermissionError",
            "TimeoutError",
            "ok"
        ]),
        "{execution}"
    );
    let received = std::fs::read_to_string(&log).unwrap_or_default();
    let paths: Vec<&str> = received
        .lines()
        .map(|l| {
            l.split("\"path\": \"")
                .nth(1)
                .unwrap_or("")
                .split('"')
                .next()
                .unwrap_or("")
        })
        .collect();
    assert_eq!(
        paths,
        [
            format!("/redirect?to=http://127.0.0.1:{port}/echo").as_str(),
            "/big?n=5000000",
            "/slow",
            "/echo"
        ],
        "nothing refused reached the server"
    );
}
