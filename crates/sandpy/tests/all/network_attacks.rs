//! The network allowlist attacked from outside (issue 40, section 2), one test per break
//! and its siblings, named by the boundary each crosses: `egress_allowlist_` (what code
//! may reach), `egress_audit_` (what the record shows), `egress_sockets_` (the sandbox's
//! own sockets) and `secrets_` (values that must never come back). Servers are on
//! loopback only (`tests/fixtures/http_server.py`); TLS with a CA each test makes.

mod reflected;

use crate::network::{rules, run_ok_on, try_each, Server, TlsServer};
use crate::{assert_host_fine, run_with};
use sandpy::network::{AllowRule, Network, NetworkRules, Secret};
use sandpy::{Policy, RunOptions, Status};

/// A value with the characters encodings change (`+ / =`, a space).
const VALUE: &str = "tok+EN/val=ue never seen";

fn parse(entries: &[String]) -> Vec<AllowRule> {
    entries
        .iter()
        .map(|e| AllowRule::parse(e).unwrap())
        .collect()
}

fn with_policy(rules: NetworkRules, policy: &[String]) -> RunOptions {
    RunOptions {
        network: Some(Network::new(rules).expect("the network sets up")),
        policy: Some(Policy {
            network_allow: Some(parse(policy)),
            ..Policy::standard()
        }),
        ..RunOptions::default()
    }
}

fn lines(stdout: &str) -> Vec<&str> {
    stdout.lines().collect()
}

#[test]
fn egress_allowlist_an_address_and_port_entry_opens_that_port_only_to_names() {
    let (open, other) = (Server::start(None), Server::start(None));
    let url = |port: u16| format!("http://localhost:{port}/echo");
    for entry in [
        format!("127.0.0.1:{}", open.port),
        format!("[::1]:{}", open.port),
    ] {
        let execution = run_ok_on(
            &try_each(&[url(other.port)]),
            rules(&["*".into(), entry.clone()]),
        );
        assert!(
            execution.stdout.starts_with("PermissionError")
                && execution.stdout.contains("localhost resolves to"),
            "{entry}: {}",
            execution.stdout
        );
    }
    // The port it names is reached by name (the server listens on IPv4).
    let named = run_ok_on(
        &try_each(&[url(open.port)]),
        rules(&["*".into(), format!("127.0.0.1:{}", open.port)]),
    );
    assert_eq!(named.stdout, "ok 200\n");
    assert!(other.received().is_empty(), "{:?}", other.received());
    assert_host_fine();
}

#[test]
fn egress_allowlist_a_policy_narrows_names_that_resolve_to_internal_addresses() {
    let server = Server::start(None);
    let port = server.port;
    let operator = || rules(&["*".into(), format!("127.0.0.1:{port}")]);
    let code = try_each(&[format!("http://localhost:{port}/echo")]);
    let narrowed = run_with(&code, &with_policy(operator(), &["*".into()]));
    assert!(
        narrowed.stdout.starts_with("PermissionError")
            && narrowed
                .stdout
                .contains("refused by the policy's `network_allow`"),
        "{}",
        narrowed.stdout
    );
    assert!(server.received().is_empty(), "{:?}", server.received());
    // Where both lists name the address and port, it is reached.
    let both = [String::from("*"), format!("127.0.0.1:{port}")];
    let reached = run_with(&code, &with_policy(operator(), &both));
    assert_eq!(reached.stdout, "ok 200\n");
}

#[test]
fn egress_allowlist_a_kept_connection_never_serves_a_request_its_policy_refuses() {
    // An https connection to localhost is kept after a run without a policy; a run whose
    // policy refuses the address must not be served by it.
    let tls = TlsServer::start(&["localhost"]);
    let port = tls.server.port;
    let mut operator = rules(&["*".into(), format!("127.0.0.1:{port}")]);
    operator.ca_file = Some(tls.ca.clone());
    let network = Network::new(operator).expect("the network sets up");
    let code = try_each(&[format!("https://localhost:{port}/echo")]);
    let options = |policy: Option<&[String]>| RunOptions {
        network: Some(network.clone()),
        policy: policy.map(|p| Policy {
            network_allow: Some(parse(p)),
            ..Policy::standard()
        }),
        ..RunOptions::default()
    };
    assert_eq!(run_with(&code, &options(None)).stdout, "ok 200\n");
    let refused = run_with(&code, &options(Some(&["*".into()])));
    assert!(
        refused.stdout.starts_with("PermissionError"),
        "{}",
        refused.stdout
    );
    assert_eq!(
        tls.server.received().len(),
        1,
        "{:?}",
        tls.server.received()
    );
}

#[test]
fn egress_allowlist_url_patterns_confine_the_path() {
    let server = Server::start(None);
    let port = server.port;
    let base = format!("http://127.0.0.1:{port}");
    let attacks = [
        "/simple/..%2fadmin/secret.txt",
        "/simple/..%2Fadmin/secret.txt",
        "/simple/%2e%2e%2fadmin/secret.txt",
        "/simple/%2E%2e%2Fadmin/secret.txt",
        "/simple/..%5cadmin/secret.txt",
        "/simple/..%5Cadmin/secret.txt",
        "/simple/..;/admin/secret.txt",
        "/simple/%2e%2e;x/admin/secret.txt",
        "/simple/%252e%252e%252fadmin/secret.txt",
        "/simple/../admin/secret.txt",
        "/simple/%2e%2e/admin/secret.txt",
        "/simple/.%2e/admin/secret.txt",
    ];
    let mut urls: Vec<String> = attacks.iter().map(|p| format!("{base}{p}")).collect();
    urls.push(format!("{base}/simple/numpy/"));
    let execution = run_ok_on(
        &try_each(&urls),
        rules(&[format!("GET http://127.0.0.1:{port}/simple/*")]),
    );
    let lines = lines(&execution.stdout);
    assert_eq!(lines.len(), urls.len(), "{}", execution.stdout);
    for (line, attack) in lines.iter().zip(attacks) {
        assert!(
            line.starts_with("PermissionError") && line.contains("not allowed by"),
            "{attack}: {line}"
        );
    }
    // The plain path reaches the server (which has no such page).
    assert!(lines[attacks.len()].starts_with("HTTPError"), "{lines:?}");
    let paths: Vec<String> = server
        .received()
        .iter()
        .map(|r| r["path"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(paths, ["/simple/numpy/"]);
}

/// Rules allowing the https server with a secret `T` for it (and `extra` entries).
fn secret_rules(tls: &TlsServer, hosts: &str, extra: &[String]) -> NetworkRules {
    let port = tls.server.port;
    let mut allow = vec![format!("127.0.0.1:{port}")];
    allow.extend_from_slice(extra);
    let mut rules = rules(&allow);
    rules.ca_file = Some(tls.ca.clone());
    let hosts = vec![AllowRule::parse(hosts).unwrap()];
    rules.secrets = vec![Secret::new("T", VALUE.into(), hosts).unwrap()];
    rules
}

#[test]
fn secrets_never_come_back_compressed_or_in_ranges() {
    let tls = TlsServer::start(&["127.0.0.1"]);
    let port = tls.server.port;
    let code = format!(
        r#"
import gzip, os, urllib.request
for path, extra in (("/echo-encoded", {{"Accept-Encoding": "gzip"}}),
                    ("/echo-encoded", {{"Range": "bytes=40-60", "If-Range": "x"}}),
                    ("/echo-gzip", {{}})):
    headers = {{"Authorization": "Bearer " + os.environ["T"], **extra}}
    request = urllib.request.Request(f"https://127.0.0.1:{port}{{path}}", headers=headers)
    try:
        with urllib.request.urlopen(request) as r:
            body = r.read()
            if r.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            print(r.status, body.decode())
    except Exception as e:
        print(type(e).__name__, e)
"#
    );
    let rules = secret_rules(&tls, &format!("127.0.0.1:{port}"), &[]);
    let execution = run_ok_on(&code, rules);
    let lines = lines(&execution.stdout);
    assert!(
        lines[0].starts_with("200") && lines[0].contains("sandpy-secret:T"),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with("200") && lines[1].contains("sandpy-secret:T"),
        "the whole answer, not a slice: {lines:?}"
    );
    assert!(
        lines[2].starts_with("PermissionError") && lines[2].contains("Content-Encoding: gzip"),
        "{lines:?}"
    );
    let received = tls.server.received();
    assert_eq!(received.len(), 3);
    for request in &received {
        let headers = &request["headers"];
        assert_eq!(headers["Accept-Encoding"], "identity", "{request}");
        assert!(headers.get("Range").is_none() && headers.get("If-Range").is_none());
        assert_eq!(headers["Authorization"], format!("Bearer {VALUE}"));
    }
    let everything = serde_json::to_string(&execution).unwrap();
    assert!(!everything.contains("tok+EN"), "{everything}");
}

#[test]
fn secrets_are_scrubbed_in_their_common_encodings() {
    let tls = TlsServer::start(&["127.0.0.1"]);
    let port = tls.server.port;
    let forms = [
        "raw",
        "percent",
        "percent-lower",
        "form",
        "base64",
        "base64-in",
    ];
    let code = format!(
        r#"
import http.client, os
for form in {forms:?}:
    connection = http.client.HTTPSConnection("127.0.0.1", {port})
    connection.request("GET", "/reflect?as=" + form, headers={{"Authorization": os.environ["T"]}})
    response = connection.getresponse()
    print(form, response.getheader("Location"), response.read().decode())
"#
    );
    let rules = secret_rules(&tls, &format!("127.0.0.1:{port}"), &[]);
    let execution = run_ok_on(&code, rules);
    let lines = lines(&execution.stdout);
    assert_eq!(lines.len(), forms.len(), "{}", execution.stdout);
    for line in &lines {
        assert!(line.contains("sandpy-secret:T"), "{line}");
        for leaked in ["tok", "EN", "dG9r", "dG9rK0VO"] {
            assert!(!line.contains(leaked), "{leaked} in {line}");
        }
    }
}

#[test]
fn secrets_go_only_over_https_and_to_the_ports_their_entries_name() {
    let tls = TlsServer::start(&["127.0.0.1"]);
    let plain = Server::start(None);
    let (https_port, http_port) = (tls.server.port, plain.port);
    let code = |url: &str| {
        format!(
            r#"
import json, os, urllib.request
request = urllib.request.Request("{url}", headers={{"Authorization": os.environ["T"]}})
with urllib.request.urlopen(request) as r:
    print(r.status)
"#
        )
    };
    let https = format!("https://127.0.0.1:{https_port}/echo");
    let http = format!("http://127.0.0.1:{http_port}/echo");
    let extra = [format!("127.0.0.1:{http_port}")];
    // A bare host is port 443 only: another https port gets the placeholder.
    run_ok_on(&code(&https), secret_rules(&tls, "127.0.0.1", &extra));
    // The port named: the value.
    let named = format!("127.0.0.1:{https_port}");
    run_ok_on(&code(&https), secret_rules(&tls, &named, &extra));
    // Plain http to a named port: the placeholder, unless the entry allows http.
    let over_http = format!("127.0.0.1:{http_port}");
    run_ok_on(&code(&http), secret_rules(&tls, &over_http, &extra));
    let mut allowed = secret_rules(&tls, &over_http, &extra);
    allowed.secrets = allowed
        .secrets
        .into_iter()
        .map(|s| s.allow_http(true))
        .collect();
    run_ok_on(&code(&http), allowed);
    let auth = |server: &Server| -> Vec<String> {
        server
            .received()
            .iter()
            .map(|r| r["headers"]["Authorization"].as_str().unwrap_or("").into())
            .collect()
    };
    assert_eq!(auth(&tls.server), ["sandpy-secret:T", VALUE]);
    assert_eq!(auth(&plain), ["sandpy-secret:T", VALUE]);
}

#[test]
fn secrets_the_bytes_out_limit_does_not_tell_the_value_length() {
    let tls = TlsServer::start(&["127.0.0.1"]);
    let port = tls.server.port;
    let code = format!(
        r#"
import os, urllib.request
for host in ("127.0.0.1", "127.0.0.2"):
    request = urllib.request.Request(f"https://{{host}}:{port}/echo", data=b"x" * 400,
                                     headers={{"Authorization": os.environ["T"]}})
    try:
        urllib.request.urlopen(request)
    except PermissionError as e:
        print(str(e).split("would pass")[0].replace(host, "HOST"))
"#
    );
    let mut rules = secret_rules(
        &tls,
        &format!("127.0.0.1:{port}"),
        &[format!("127.0.0.2:{port}")],
    );
    rules.limits.max_bytes_out = 300;
    let execution = run_ok_on(&code, rules);
    let lines = lines(&execution.stdout);
    assert_eq!(lines.len(), 2, "{}", execution.stdout);
    assert_eq!(
        lines[0], lines[1],
        "the secret's host and another count the same"
    );
    assert!(tls.server.received().is_empty());
}

#[test]
fn egress_audit_a_request_cut_off_by_the_deadline_is_recorded() {
    let server = Server::start(None);
    let execution = crate::network::slow_request_past_the_deadline(&server);
    assert_eq!(execution.status, Status::Timeout, "{execution:#?}");
    assert_eq!(execution.requests.len(), 1, "{execution:#?}");
    let request = &execution.requests[0];
    assert_eq!(
        request.url,
        format!("http://127.0.0.1:{}/slow", server.port)
    );
    assert_eq!(request.status, None);
    assert!(request.bytes_out > 0, "{request:?}");
    assert!(
        request
            .error
            .as_deref()
            .is_some_and(|e| e.contains("did not complete")),
        "{request:?}"
    );
    assert_eq!(server.received().len(), 1, "the request reached the server");
}

#[test]
fn egress_allowlist_forwarding_headers_from_the_code_are_dropped() {
    let server = Server::start(None);
    let port = server.port;
    let dropped = [
        "X-Forwarded-Host",
        "X-Forwarded-For",
        "X-Forwarded-Proto",
        "X-Forwarded-Port",
        "Forwarded",
        "X-Original-URL",
        "X-Rewrite-URL",
        "X-HTTP-Method-Override",
        "X-Method-Override",
        "X-HTTP-Method",
        "X-Real-IP",
        "Host",
    ];
    let headers: String = dropped
        .iter()
        .map(|h| format!("{h:?}: 'evil.example', "))
        .collect();
    let code = format!(
        r#"
import urllib.request
request = urllib.request.Request("http://127.0.0.1:{port}/echo",
                                 headers={{{headers}"X-Mine": "kept"}})
with urllib.request.urlopen(request) as r:
    print(r.status)
"#
    );
    run_ok_on(&code, rules(&[format!("127.0.0.1:{port}")]));
    let received = server.received();
    let headers = received[0]["headers"].as_object().unwrap();
    assert_eq!(headers["X-Mine"], "kept");
    for name in dropped {
        let sent = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone());
        assert!(
            sent.is_none_or(|v| v != "evil.example"),
            "{name}: {headers:?}"
        );
    }
}

#[test]
fn egress_allowlist_refusals_are_permission_errors_that_name_the_rule() {
    let server = Server::start(None);
    let port = server.port;
    let code = format!(
        r#"
import urllib.request
for url in ("http://127.0.0.2:{port}/echo", "http://localhost:{port}/echo"):
    try:
        urllib.request.urlopen(url)
    except ConnectionError as e:
        print("transient", e)
    except PermissionError as e:
        print("refused", e)
"#
    );
    let execution = run_ok_on(&code, rules(&["*".into()]));
    let lines = lines(&execution.stdout);
    assert!(
        lines[0].starts_with("refused sandpy network: GET http://127.0.0.2:")
            && lines[0].ends_with("is not allowed by sandpy.network.allow"),
        "{lines:?}"
    );
    // A name that resolves to an internal address: refused by the rules, and it says so.
    assert!(
        lines[1].starts_with("refused sandpy network: GET http://localhost:")
            && lines[1].ends_with("refused by sandpy.network.allow"),
        "{lines:?}"
    );
    assert!(server.received().is_empty());
}

#[test]
fn egress_sockets_say_where_http_goes() {
    let code = r#"
import socket
def attempt(f):
    try:
        f()
        return "allowed"
    except socket.gaierror as e:
        return f"gaierror/{isinstance(e, PermissionError)}: {e}"
    except OSError as e:
        return f"{type(e).__name__}: {e}"
for f in (lambda: socket.socket(),
          lambda: socket.create_connection(("127.0.0.1", 80), timeout=1),
          lambda: socket.getaddrinfo("example.com", 80),
          lambda: socket.gethostbyname("example.com")):
    print(attempt(f))
"#;
    let execution = crate::run_ok(code);
    let said = "sandpy: no sockets; HTTP(S) to allowed hosts goes through urllib.request, \
                http.client, requests or httpx";
    let lines = lines(&execution.stdout);
    assert_eq!(lines.len(), 4, "{}", execution.stdout);
    for line in &lines {
        assert!(line.contains(said), "{line}");
    }
    assert!(lines[0].starts_with("PermissionError"), "{lines:?}");
    assert!(lines[2].starts_with("gaierror/True"), "{lines:?}");
}
