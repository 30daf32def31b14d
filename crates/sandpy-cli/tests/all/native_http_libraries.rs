//! `requests` and `httpx` from the native tier's venv go through the host, as
//! `urllib.request` does: the same program as the WebAssembly tier's test
//! (`crates/sandpy/tests/fixtures/http_libraries.py`) against the network tests' real
//! server over http and https (a CA made here with `openssl`), held to the same expected
//! lines (`http_libraries.expected`): GET/POST/JSON/headers/redirect/stream/timeout with
//! each library, then the allowlist, secrets and the run's bytes in attacked through each.

use super::native::{native_config, native_run};
use serde_json::{json, Value};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const SECRET: &str = "native-http-libraries-s3cret";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sandpy/tests/fixtures")
}

/// The network tests' server (`http_server.py`), with TLS when given a certificate and
/// its key; killed on drop.
struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Server {
    fn start(dir: &Path, tls: Option<(&Path, &Path)>) -> Server {
        let log = dir.join("requests.jsonl");
        let mut command = Command::new("python3");
        command.arg(fixtures().join("http_server.py")).arg(&log);
        if let Some((cert, key)) = tls {
            command.arg(cert).arg(key);
        }
        let mut child = command
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 starts the test server");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("port");
        let port = line.trim().parse().expect("the server prints its port");
        Server { child, port, log }
    }

    /// What the server received: one JSON object per request.
    fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("json line"))
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A CA and a certificate it signed for 127.0.0.1, made with `openssl` in `dir`:
/// (CA file, certificate, key).
fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509", "-days", "1", "-subj", "/CN=sandpy test CA"],
            &ec[..],
            &["-keyout", "ca.key", "-out", "ca.pem"],
            &["-addext", "basicConstraints=critical,CA:TRUE"],
            &["-addext", "keyUsage=critical,keyCertSign"],
        ]
        .concat(),
    );
    openssl(
        &[
            &["req", "-subj", "/CN=127.0.0.1"],
            &ec[..],
            &["-keyout", "key.pem", "-out", "leaf.csr"],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("leaf.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .expect("extensions");
    openssl(&[
        "x509",
        "-req",
        "-days",
        "1",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-extfile",
        "leaf.ext",
        "-out",
        "cert.pem",
    ]);
    (
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    )
}

/// The fixture program with its part and addresses put before it.
fn program(part: &str, names: &[(&str, String)]) -> String {
    let mut code = format!("PART = {part:?}\n");
    for (name, value) in names {
        code.push_str(&format!("{name} = {value:?}\n"));
    }
    code + &std::fs::read_to_string(fixtures().join("http_libraries.py")).expect("the fixture")
}

/// The lines `part` of the fixture prints, with `{NAME}`s filled in.
fn expected(part: &str, names: &[(&str, String)]) -> String {
    let text = std::fs::read_to_string(fixtures().join("http_libraries.expected"))
        .expect("the expected lines");
    let mut section = text
        .split(&format!("--- {part}\n"))
        .nth(1)
        .expect("the part")
        .split("--- ")
        .next()
        .unwrap_or_default()
        .to_string();
    for (name, value) in names {
        section = section.replace(&format!("{{{name}}}"), value);
    }
    section
}

/// The "use" part in the native tier against `base` with `network`; `requests` is
/// imported by the zygote (patched then), `httpx` by the run (patched as it is imported).
fn uses(dir: &Path, base: String, network: Value) {
    let config = native_config(dir, &["requests"], json!({ "network": network }));
    let names = [("BASE", base)];
    let (exit, execution) = native_run(&config, &program("use", &names), &[], "");
    assert_eq!(exit, 0, "{execution}");
    assert_eq!(execution["stdout"], expected("use", &names), "{execution}");
    assert_eq!(
        execution["requests"].as_array().map(Vec::len),
        Some(21),
        "{execution}"
    );
}

#[test]
fn native_requests_and_httpx_get_post_redirect_stream_and_time_out_over_http() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), None);
    let network = json!({"allow": [format!("127.0.0.1:{}", server.port)]});
    uses(
        dir.path(),
        format!("http://127.0.0.1:{}", server.port),
        network,
    );
}

#[test]
fn native_requests_and_httpx_get_post_redirect_stream_and_time_out_over_https() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = certificates(dir.path());
    let server = Server::start(dir.path(), Some((&cert, &key)));
    let network = json!({"allow": [format!("127.0.0.1:{}", server.port)], "ca_file": ca});
    uses(
        dir.path(),
        format!("https://127.0.0.1:{}", server.port),
        network,
    );
    assert!(!server.received().is_empty());
}

#[test]
fn network_boundary_native_requests_and_httpx_meet_the_allowlist_and_secrets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), None);
    let port = server.port;
    let network = json!({
        "allow": [format!("127.0.0.2:{port}"), format!("127.0.0.4:{port}"), format!("localhost:{port}")],
        "limits": {"max_bytes_in": 1_048_576},
        "secrets": {"API_TOKEN": {"env": "SANDPY_TEST_HTTP_SECRET",
                                  "hosts": [format!("127.0.0.2:{port}")], "allow_http": true}},
    });
    let config = native_config(dir.path(), &[], json!({ "network": network }));
    let names = [
        ("BASE", format!("http://127.0.0.2:{port}")),
        ("SECOND", format!("http://127.0.0.4:{port}")),
        ("REFUSED", format!("http://127.0.0.3:{port}")),
        ("PORT", port.to_string()),
    ];
    let out = super::sandpy()
        .args(["run", "--json", "--config", &config, "-c"])
        .arg(program("attacks", &names))
        .env("SANDPY_TEST_HTTP_SECRET", SECRET)
        .output()
        .expect("sandpy");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains(SECRET), "{stdout}");
    let execution: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{e}: {stdout}{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        execution["stdout"],
        expected("attacks", &names),
        "{execution}"
    );
    // Per library: the redirect's first hop, the two requests with the placeholder (the
    // value only to its own host) and the two whose answers were cut; nothing refused
    // reached the server.
    let received: Vec<(String, String)> = server
        .received()
        .iter()
        .map(|r| {
            let field = |name: &str| r["headers"][name].as_str().unwrap_or("").to_string();
            (field("Host"), field("Authorization"))
        })
        .collect();
    let one_library = [
        (format!("127.0.0.2:{port}"), String::new()),
        (format!("127.0.0.2:{port}"), format!("Bearer {SECRET}")),
        (
            format!("127.0.0.4:{port}"),
            "Bearer sandpy-secret:API_TOKEN".to_string(),
        ),
        (format!("127.0.0.2:{port}"), String::new()),
        (format!("127.0.0.2:{port}"), String::new()),
    ];
    let all_three: Vec<_> = (0..3).flat_map(|_| one_library.clone()).collect();
    assert_eq!(received, all_three);
    let records = execution["requests"].as_array().expect("requests");
    assert_eq!(records.len(), 3 * 10, "{execution}");
    let refused = records.iter().filter(|r| r["status"].is_null()).count();
    assert_eq!(refused, 3 * 7, "{execution}");
}

/// `http_gathered.py`'s `part` in the native tier against `base` with `network`: its JSON.
fn gathered(dir: &Path, part: &str, base: &str, network: Value) -> Value {
    let config = native_config(dir, &[], json!({ "network": network }));
    let code = format!("PART = {part:?}\nBASE = {base:?}\n")
        + &std::fs::read_to_string(fixtures().join("http_gathered.py")).expect("the fixture");
    let (exit, execution) = native_run(&config, &code, &[], "");
    assert_eq!(exit, 0, "{execution}");
    let stdout = execution["stdout"].as_str().unwrap_or_default();
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("{e}: {execution}"))
}

/// As in the WebAssembly tier: four gathered requests that each wait 300 ms take well
/// under four times one (a behaviour with a wide margin, not a speed figure).
#[test]
fn native_httpx_async_requests_gathered_on_the_event_loop_overlap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), None);
    let network = json!({"allow": [format!("127.0.0.1:{}", server.port)]});
    let base = format!("http://127.0.0.1:{}", server.port);
    let got = gathered(dir.path(), "overlap", &base, network);
    let (one, four) = (got["one"].as_f64().unwrap(), got["four"].as_f64().unwrap());
    assert!(one >= 0.3, "{got}");
    assert!(
        four < 2.5 * one,
        "four gathered took {four} s, one {one} s: {got}"
    );
    let paths: Vec<String> = (0..4).map(|i| format!("/delay?ms=300&i={i}")).collect();
    assert_eq!(got["paths"], json!(paths));
}

/// As in the WebAssembly tier: gathered requests are read 8 at a time at most, and their
/// answers together never pass the run's bytes in.
#[test]
fn network_boundary_native_gathered_requests_stay_within_the_concurrency_cap_and_bytes_in() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), None);
    let network = json!({
        "allow": [format!("127.0.0.1:{}", server.port)],
        "limits": {"max_bytes_in": 1_048_576},
    });
    let base = format!("http://127.0.0.1:{}", server.port);
    let got = gathered(dir.path(), "bounded", &base, network);
    let in_flight = got["in_flight"].as_u64().unwrap();
    assert!((2..=8).contains(&in_flight), "{got}");
    assert_eq!(
        got["big"],
        json!([
            "200 400000",
            "200 400000",
            "SandpyRefused: sandpy network: the response (N bytes or more) would pass the \
             run's 1048576 bytes in (sandpy.network.limits.max_bytes_in)"
        ]),
        "{got}"
    );
}

/// A server whose certificate the operator's trust does not cover: each library fails
/// with its connection error (a failure that may pass, not a refusal) saying why.
#[test]
fn native_https_to_a_server_the_operator_does_not_trust_fails_in_each_library() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_ca, cert, key) = certificates(dir.path());
    let server = Server::start(dir.path(), Some((&cert, &key)));
    // No `ca_file`: the test's CA is not the host's.
    let network = json!({"allow": [format!("127.0.0.1:{}", server.port)]});
    let config = native_config(dir.path(), &[], json!({ "network": network }));
    let url = format!("https://127.0.0.1:{}/echo", server.port);
    let code = format!(
        r#"
import asyncio, httpx, requests
async def get_async():
    async with httpx.AsyncClient() as client:
        return await client.get({url:?})
for get in (lambda: requests.get({url:?}), lambda: httpx.get({url:?}), lambda: asyncio.run(get_async())):
    try:
        get()
        print("reached")
    except Exception as e:
        print(type(e).__name__, isinstance(e, (requests.ConnectionError, httpx.ConnectError)),
              isinstance(e, ConnectionError), isinstance(e, PermissionError), "unknown issuer" in str(e))
"#
    );
    let (exit, execution) = native_run(&config, &code, &[], "");
    assert_eq!(exit, 0, "{execution}");
    assert_eq!(
        execution["stdout"],
        "SandpyFailed True True False True\n".repeat(3),
        "{execution}"
    );
    assert!(
        server.received().is_empty(),
        "no request passed the handshake"
    );
}

/// Requests from several threads at once (a thread pool of `requests.get`) each get their
/// own answer: the run's channel to the host takes one question at a time.
#[test]
fn native_requests_from_threads_each_get_their_own_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path(), None);
    let network = json!({"allow": [format!("127.0.0.1:{}", server.port)]});
    let config = native_config(dir.path(), &[], json!({ "network": network }));
    let code = format!(
        r#"
import concurrent.futures, requests
def get(i):
    return requests.get("http://127.0.0.1:{port}/delay?ms=50&i=%d" % i, timeout=10).json()["path"]
with concurrent.futures.ThreadPoolExecutor(4) as pool:
    got = list(pool.map(get, range(8)))
print(got == ["/delay?ms=50&i=%d" % i for i in range(8)], got)
"#,
        port = server.port
    );
    let (exit, execution) = native_run(&config, &code, &[], "");
    assert_eq!(exit, 0, "{execution}");
    let stdout = execution["stdout"].as_str().unwrap_or_default();
    assert!(stdout.starts_with("True "), "{execution}");
}
