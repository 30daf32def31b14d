//! The network by allowlist, attacked at each boundary against a real local HTTP(S) server
//! (`tests/fixtures/http_server.py`, Python's `http.server`; TLS with a CA the test
//! makes). The guest's own `urllib.request` and `http.client` make the requests.

use crate::{assert_host_fine, run_with};
use sandpy::network::{AllowRule, Network, NetworkRules, Secret};
use sandpy::{Execution, Policy, RunOptions, Status};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub(crate) const SECRET: &str = "s3cret-VALUE-never-in-the-sandbox";

/// A real server on 0.0.0.0 (so 127.0.0.1 and 127.0.0.2 are two hosts), killed on drop.
pub(crate) struct Server {
    child: Child,
    pub(crate) port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    pub(crate) fn start(tls: Option<(&Path, &Path)>) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("requests.jsonl");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/http_server.py");
        let mut command = Command::new("python3");
        command.arg(script).arg(&log);
        if let Some((cert, key)) = tls {
            command.arg(cert).arg(key);
        }
        let mut child = command
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 starts the test server");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("stdout");
        BufReader::new(stdout).read_line(&mut line).expect("port");
        let port = line.trim().parse().expect("the server prints its port");
        Server {
            child,
            port,
            log,
            _dir: dir,
        }
    }

    /// What the server received: one JSON object per request.
    pub(crate) fn received(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
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

pub(crate) fn rules(allow: &[String]) -> NetworkRules {
    NetworkRules {
        allow: allow.iter().map(|a| AllowRule::parse(a).unwrap()).collect(),
        ..NetworkRules::default()
    }
}

pub(crate) fn run_on(code: &str, rules: NetworkRules) -> Execution {
    let options = RunOptions {
        network: Some(Network::new(rules).expect("the network sets up")),
        ..RunOptions::default()
    };
    run_with(code, &options)
}

pub(crate) fn run_ok_on(code: &str, rules: NetworkRules) -> Execution {
    let execution = run_on(code, rules);
    assert_eq!(execution.status, Status::Ok, "{execution:#?}");
    execution
}

/// A program that tries each URL and prints `ok STATUS` or the exception's type and text.
pub(crate) fn try_each(urls: &[String]) -> String {
    format!(
        r#"
import urllib.request
for url in {urls:?}:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            print("ok", r.status)
    except Exception as e:
        print(type(e).__name__, e)
"#
    )
}

#[test]
fn network_boundary_without_a_network_no_request_leaves() {
    let server = Server::start(None);
    let url = format!("http://127.0.0.1:{}/echo", server.port);
    let execution = crate::run_ok(&try_each(&[url]));
    assert!(
        execution
            .stdout
            .starts_with("PermissionError sandpy network: the sandbox has no network"),
        "{}",
        execution.stdout
    );
    // Sockets stay closed with or without a network: the host makes the requests.
    let socket = run_ok_on(
        "import socket\ntry:\n    socket.create_connection(('127.0.0.1', PORT))\nexcept OSError as e:\n    print('refused')"
            .replace("PORT", &server.port.to_string())
            .as_str(),
        rules(&[format!("127.0.0.1:{}", server.port)]),
    );
    assert_eq!(socket.stdout, "refused\n");
    assert!(server.received().is_empty(), "{:?}", server.received());
}

#[test]
fn allowed_requests_work_through_urllib_and_http_client_and_are_recorded() {
    let server = Server::start(None);
    let port = server.port;
    let code = format!(
        r#"
import http.client, json, urllib.request
with urllib.request.urlopen("http://127.0.0.1:{port}/echo?q=1") as r:
    got = json.load(r)
    print(r.status, got["method"], got["path"])
request = urllib.request.Request("http://127.0.0.1:{port}/echo", data=b'{{"a": 1}}',
                                 headers={{"Content-Type": "application/json", "X-Mine": "yes"}})
with urllib.request.urlopen(request) as r:
    got = json.load(r)
    print(got["method"], got["body"], got["headers"]["X-Mine"])
connection = http.client.HTTPConnection("127.0.0.1", {port})
connection.request("PUT", "/echo", body=b"abc")
response = connection.getresponse()
print(response.status, json.loads(response.read())["body"])
connection.request("GET", "/missing")
response = connection.getresponse()
print(response.status, response.read())
with urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:{port}/big?n=12345", method="HEAD")) as r:
    print(r.status, r.headers["Content-Length"], r.read())
"#
    );
    let execution = run_ok_on(&code, rules(&[format!("127.0.0.1:{port}")]));
    assert_eq!(
        execution.stdout,
        "200 GET /echo?q=1\nPOST {\"a\": 1} yes\n200 abc\n404 b'not found'\n200 12345 b''\n"
    );
    let recorded: Vec<(String, String, Option<u16>)> = execution
        .requests
        .iter()
        .map(|r| (r.method.clone(), r.url.clone(), r.status))
        .collect();
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
    assert_eq!(
        recorded,
        vec![
            ("GET".into(), url("/echo"), Some(200)),
            ("POST".into(), url("/echo"), Some(200)),
            ("PUT".into(), url("/echo"), Some(200)),
            ("GET".into(), url("/missing"), Some(404)),
            ("HEAD".into(), url("/big"), Some(200)),
        ],
        "the audit record has no query"
    );
    assert!(execution
        .requests
        .iter()
        .all(|r| r.bytes_in > 0 && r.bytes_out > 0));
}

#[test]
fn network_boundary_hosts_ports_and_addresses_not_on_the_list_are_refused() {
    let server = Server::start(None);
    let port = server.port;
    let refused = [
        format!("http://127.0.0.2:{port}/echo"),       // another host
        format!("http://127.0.0.1:{}/echo", port + 1), // another port
        format!("http://2130706434:{port}/echo"),      // 127.0.0.2, decimal
        format!("http://0x7f.0.0.2:{port}/echo"),      // 127.0.0.2, hex
        format!("http://[::1]:{port}/echo"),           // IPv6 loopback
        format!("http://[::ffff:127.0.0.2]:{port}/echo"), // IPv4-mapped
        "http://169.254.169.254/latest/meta-data/".to_string(), // the metadata address
        format!("https://127.0.0.1:{port}/echo"),      // another scheme... same port
    ];
    let mut allow = vec![format!("127.0.0.1:{port}"), "*".to_string()];
    allow.push(format!("GET http://127.0.0.1:{port}/echo"));
    let execution = run_ok_on(&try_each(&refused), rules(&allow[..1]));
    let lines: Vec<&str> = execution.stdout.lines().collect();
    assert_eq!(lines.len(), refused.len(), "{}", execution.stdout);
    for line in &lines[..7] {
        assert!(
            line.starts_with("PermissionError") && line.contains("is not allowed"),
            "{line}"
        );
    }
    // https to the allowed port reaches the (plain http) server and fails its handshake.
    assert!(lines[7].starts_with("ConnectionError"), "{}", lines[7]);
    assert!(
        execution.stdout.contains("GET http://127.0.0.2:")
            && !execution.stdout.contains("2130706434"),
        "messages name the canonical address: {}",
        execution.stdout
    );
    // `*` is every host name, never an address given by number.
    let star = run_ok_on(&try_each(&refused[6..7]), rules(&allow[1..2]));
    assert!(
        star.stdout.starts_with("PermissionError"),
        "{}",
        star.stdout
    );
    // A method and URL pattern allows just that.
    let code = try_each(&[format!("http://127.0.0.1:{port}/echo")])
        + &format!(
            "try:\n    urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:{port}/echo', data=b'x'))\nexcept Exception as e:\n    print(type(e).__name__, e)\n"
        );
    let pattern = run_ok_on(&code, rules(&allow[2..]));
    assert_eq!(
        pattern.stdout,
        format!("ok 200\nPermissionError sandpy network: POST http://127.0.0.1:{port}/echo is not allowed by sandpy.network.allow\n")
    );
    assert_eq!(
        server.received().len(),
        1,
        "only the allowed request arrived"
    );
    assert_host_fine();
}

#[test]
fn network_boundary_redirects_are_checked_at_each_hop() {
    let server = Server::start(None);
    let port = server.port;
    let to_other = format!("http://127.0.0.1:{port}/redirect?to=http://127.0.0.2:{port}/echo");
    let to_metadata = format!("http://127.0.0.1:{port}/redirect?to=http://169.254.169.254/");
    let same_host = format!("http://127.0.0.1:{port}/redirect?to=/echo");
    let execution = run_ok_on(
        &try_each(&[to_other, to_metadata, same_host]),
        rules(&[format!("127.0.0.1:{port}")]),
    );
    let lines: Vec<&str> = execution.stdout.lines().collect();
    assert!(
        lines[0].contains("GET http://127.0.0.2:") && lines[0].starts_with("PermissionError"),
        "{lines:?}"
    );
    assert!(
        lines[1].contains("169.254.169.254") && lines[1].starts_with("PermissionError"),
        "{lines:?}"
    );
    assert_eq!(lines[2], "ok 200");
    let statuses: Vec<Option<u16>> = execution.requests.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [Some(302), None, Some(302), None, Some(302), Some(200)]
    );
}

#[test]
fn network_boundary_names_that_resolve_to_internal_addresses_are_refused() {
    let server = Server::start(None);
    let port = server.port;
    // DNS rebinding in its simplest form: an allowed name that answers 127.0.0.1.
    let by_name = run_ok_on(
        &try_each(&[format!("http://localhost:{port}/echo")]),
        rules(&[format!("localhost:{port}")]),
    );
    assert!(
        by_name.stdout.starts_with("PermissionError")
            && by_name.stdout.contains("localhost resolves to")
            && by_name.stdout.contains("refused by sandpy.network.allow"),
        "{}",
        by_name.stdout
    );
    assert!(server.received().is_empty());
    // Named by the operator as an address, it is reachable by name too.
    let named = run_ok_on(
        &try_each(&[format!("http://localhost:{port}/echo")]),
        rules(&[
            format!("localhost:{port}"),
            "127.0.0.1".into(),
            "[::1]".into(),
        ]),
    );
    assert_eq!(named.stdout, "ok 200\n");
}

#[test]
fn network_boundary_secrets_go_only_to_their_hosts_and_never_come_back() {
    let server = Server::start(None);
    let port = server.port;
    let mut rules = rules(&[format!("127.0.0.1:{port}"), format!("127.0.0.2:{port}")]);
    // Over plain http only because the entry says so (`allow_http`), to the port it names.
    let hosts = vec![AllowRule::parse(&format!("127.0.0.1:{port}")).unwrap()];
    let secret = Secret::new("API_TOKEN", SECRET.into(), hosts).unwrap();
    rules.secrets = vec![secret.allow_http(true)];
    let code = format!(
        r#"
import json, os, urllib.request
token = os.environ["API_TOKEN"]
print(token)
for host in ("127.0.0.1", "127.0.0.2"):
    request = urllib.request.Request(f"http://{{host}}:{port}/echo?token={{token}}",
                                     headers={{"Authorization": "Bearer " + token}})
    with urllib.request.urlopen(request) as r:
        body = r.read().decode()
        print(host, json.loads(body)["headers"]["Authorization"], r.headers["X-Echo-Auth"])
body
"#
    );
    let execution = run_ok_on(&code, rules);
    assert_eq!(
        execution.stdout,
        "sandpy-secret:API_TOKEN\n\
         127.0.0.1 Bearer sandpy-secret:API_TOKEN Bearer sandpy-secret:API_TOKEN\n\
         127.0.0.2 Bearer sandpy-secret:API_TOKEN Bearer sandpy-secret:API_TOKEN\n",
        "the echoed value is scrubbed from body and headers"
    );
    let received = server.received();
    let auth = |i: usize| {
        received[i]["headers"]["Authorization"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(
        auth(0),
        format!("Bearer {SECRET}"),
        "its own host gets the value"
    );
    assert_eq!(
        auth(1),
        "Bearer sandpy-secret:API_TOKEN",
        "another host gets the placeholder"
    );
    assert!(
        received[0]["path"]
            .as_str()
            .unwrap()
            .ends_with("token=sandpy-secret:API_TOKEN"),
        "only headers get the value, not the URL"
    );
    let everything = serde_json::to_string(&execution).unwrap();
    assert!(!everything.contains(SECRET), "{everything}");
}

#[test]
fn network_limit_large_endless_and_slow_responses_are_cut() {
    let server = Server::start(None);
    let port = server.port;
    let mut rules = rules(&[format!("127.0.0.1:{port}")]);
    rules.limits.max_bytes_in = 1 << 20;
    // Room for the whole answers on a busy machine; `/slow` sends a byte a second.
    rules.limits.request_timeout = Duration::from_millis(2000);
    rules.limits.max_requests = 5;
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
    let started = std::time::Instant::now();
    let execution = run_ok_on(
        &try_each(&[
            url("/big?n=5000000"),
            url("/endless"),
            url("/slow"),
            url("/big?n=1000"),
            url("/big?n=1000"),
            url("/big?n=1000"),
        ]),
        rules,
    );
    let lines: Vec<&str> = execution.stdout.lines().collect();
    assert!(
        lines[0].starts_with("PermissionError") && lines[0].contains("max_bytes_in"),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with("PermissionError") && lines[1].contains("max_bytes_in"),
        "{lines:?}"
    );
    assert!(
        lines[2].starts_with("TimeoutError") && lines[2].contains("2000 ms"),
        "{lines:?}"
    );
    assert_eq!(lines[3..5], ["ok 200", "ok 200"]);
    assert!(lines[5].contains("made its 5 requests"), "{lines:?}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        execution.requests.len(),
        6,
        "the first refusal by the count is recorded, later ones counted in it"
    );
}

/// A request to `server`'s `/slow` (which never answers in time) with a 60 s request
/// timeout, in a run whose own limit is 1.5 s.
pub(crate) fn slow_request_past_the_deadline(server: &Server) -> sandpy::Execution {
    let mut rules = rules(&[format!("127.0.0.1:{}", server.port)]);
    rules.limits.request_timeout = Duration::from_secs(60);
    let options = RunOptions {
        network: Some(Network::new(rules).unwrap()),
        limits: sandpy::Limits {
            timeout: Duration::from_millis(1500),
            ..sandpy::Limits::default()
        },
        ..RunOptions::default()
    };
    let code = try_each(&[format!("http://127.0.0.1:{}/slow", server.port)]);
    run_with(&code, &options)
}

#[test]
fn network_deadline_of_the_run_bounds_a_request() {
    let server = Server::start(None);
    let started = std::time::Instant::now();
    let execution = slow_request_past_the_deadline(&server);
    assert_eq!(execution.status, Status::Timeout, "{execution:#?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn network_policy_narrows_the_network_and_never_widens_it() {
    let server = Server::start(None);
    let port = server.port;
    let urls = [
        format!("http://127.0.0.1:{port}/echo"),
        format!("http://127.0.0.2:{port}/echo"),
    ];
    let policy = |entries: &[String]| Policy {
        network_allow: Some(
            entries
                .iter()
                .map(|e| AllowRule::parse(e).unwrap())
                .collect(),
        ),
        ..Policy::standard()
    };
    let options = |policy: Policy| RunOptions {
        network: Some(Network::new(rules(&[format!("127.0.0.1:{port}")])).unwrap()),
        policy: Some(policy),
        ..RunOptions::default()
    };
    let wider = run_with(
        &try_each(&urls),
        &options(policy(&["127.0.0.1".into(), "127.0.0.2".into()])),
    );
    let lines: Vec<&str> = wider.stdout.lines().collect();
    assert_eq!(lines[0], "ok 200");
    assert!(
        lines[1].contains("not allowed by sandpy.network.allow"),
        "{lines:?}"
    );
    let none = run_with(&try_each(&urls[..1]), &options(policy(&[])));
    assert!(
        none.stdout
            .contains("not allowed by the policy's `network_allow`"),
        "{}",
        none.stdout
    );
}

/// An https server with a certificate for `names` from a CA the test makes, and that CA
/// as the operator's `ca_file`.
pub(crate) struct TlsServer {
    pub(crate) server: Server,
    pub(crate) ca: sandpy::tls::CaFile,
    _dir: tempfile::TempDir,
}

impl TlsServer {
    pub(crate) fn start(names: &[&str]) -> TlsServer {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let dir = tempfile::tempdir().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let leaf_key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let leaf = CertificateParams::new(names)
            .unwrap()
            .signed_by(&leaf_key, &issuer)
            .unwrap();
        let (cert, key, ca_file) = (
            dir.path().join("cert.pem"),
            dir.path().join("key.pem"),
            dir.path().join("ca.pem"),
        );
        std::fs::write(&cert, leaf.pem()).unwrap();
        std::fs::write(&key, leaf_key.serialize_pem()).unwrap();
        std::fs::write(&ca_file, ca.pem()).unwrap();
        let server = Server::start(Some((&cert, &key)));
        let ca = sandpy::tls::CaFile::read(&ca_file).unwrap();
        TlsServer {
            server,
            ca,
            _dir: dir,
        }
    }
}

#[test]
fn https_is_done_by_the_host_with_the_operator_trust() {
    let tls = TlsServer::start(&["127.0.0.1"]);
    let server = &tls.server;
    let urls = [format!("https://127.0.0.1:{}/echo", server.port)];
    let allow = [format!("127.0.0.1:{}", server.port)];
    let untrusted = run_ok_on(&try_each(&urls), rules(&allow));
    assert!(
        untrusted.stdout.starts_with("ConnectionError")
            && untrusted.stdout.contains("unknown issuer"),
        "{}",
        untrusted.stdout
    );
    let mut trusted = rules(&allow);
    trusted.ca_file = Some(tls.ca.clone());
    let twice = [urls[0].clone(), urls[0].clone()];
    assert_eq!(
        run_ok_on(&try_each(&twice), trusted).stdout,
        "ok 200\nok 200\n"
    );
    let ports: Vec<u64> = server
        .received()
        .iter()
        .map(|r| r["client_port"].as_u64().unwrap())
        .collect();
    assert_eq!(ports.len(), 2, "{ports:?}");
    assert_eq!(
        ports[0], ports[1],
        "the second https request reuses the connection"
    );
}
