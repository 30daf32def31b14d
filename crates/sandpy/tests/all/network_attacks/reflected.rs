//! A secret's own host reflecting the value (issue 60, section 5): in a header's name, in
//! an answer a coding hides (said so by any header, in any form), in wrapped base64, in a
//! trailer, or by its length; a placeholder that is the start of another's; and what the
//! record says of refusals (past `max_requests`, a name that resolves to internal
//! addresses). The https server (`tests/fixtures/http_server.py`) answers
//! `/reflect-in?at=...` with the request's `Authorization` in each place.

use crate::network::{rules, run_ok_on, try_each, Server, TlsServer};
use base64::Engine as _;
use sandpy::network::{AllowRule, NetworkRules, Secret};

/// A value that is a header name's token too (so it can come back as one).
const TOKEN: &str = "Tok3n-Value_0123456789abcXYZ";

/// Rules allowing the https server, with `secrets` (name, value) for it.
fn secret_rules(tls: &TlsServer, secrets: &[(&str, &str)]) -> NetworkRules {
    let port = tls.server.port;
    let mut rules = rules(&[format!("127.0.0.1:{port}")]);
    rules.ca_file = Some(tls.ca.clone());
    let hosts = vec![AllowRule::parse(&format!("127.0.0.1:{port}")).unwrap()];
    rules.secrets = secrets
        .iter()
        .map(|(name, value)| Secret::new(name, value.to_string(), hosts.clone()).unwrap())
        .collect();
    rules
}

/// A program that asks the https server for each path with `Authorization` set to `T`'s
/// placeholder and prints all the answer shows: status, reason, headers, body, and the
/// body un-gzipped and base64-decoded when it can be; or the exception.
fn show_each(port: u16, paths: &[&str]) -> String {
    format!(
        r#"
import base64, gzip, http.client, os
for path in {paths:?}:
    connection = http.client.HTTPSConnection("127.0.0.1", {port})
    try:
        connection.request("GET", path, headers={{"Authorization": os.environ["T"]}})
        response = connection.getresponse()
        body = response.read()
        shown = [response.status, response.reason, response.getheaders(), body]
        for undo in (gzip.decompress, lambda b: base64.b64decode(b"".join(b.split()))):
            try:
                shown.append(undo(body))
            except Exception:
                pass
        print(path, "answered", shown)
    except Exception as e:
        print(path, type(e).__name__, e)
"#
    )
}

/// Fails when `TOKEN`, in any case, or its base64 is anywhere in the execution.
fn assert_never_seen(execution: &sandpy::Execution) {
    let everything = serde_json::to_string(execution).unwrap();
    let joined = everything.replace("\\\\n", "").to_ascii_lowercase();
    assert!(
        !joined.contains(&TOKEN.to_ascii_lowercase()),
        "{everything}"
    );
    let encoded = base64::engine::general_purpose::STANDARD.encode(TOKEN);
    assert!(
        !everything.replace("\\\\n", "").contains(&encoded[..24]),
        "{everything}"
    );
}

#[test]
fn secrets_reflected_in_a_header_name_a_trailer_or_wrapped_base64_never_reach_the_code() {
    let tls = TlsServer::start(&["127.0.0.1"]);
    let paths = [
        "/reflect-in?at=name",
        "/reflect-in?at=trailer",
        "/reflect-in?at=base64-lines",
    ];
    let rules = secret_rules(&tls, &[("T", TOKEN)]);
    let execution = run_ok_on(&show_each(tls.server.port, &paths), rules);
    let lines: Vec<&str> = execution.stdout.lines().collect();
    assert_eq!(lines.len(), paths.len(), "{execution:#?}");
    for (line, path) in lines.iter().zip(paths) {
        assert!(line.starts_with(&format!("{path} answered")), "{line}");
    }
    // In a name, the placeholder's `:` is a `-`.
    assert!(lines[0].contains("x-sandpy-secret-T"), "{}", lines[0]);
    assert!(lines[2].contains("sandpy-secret:T"), "{}", lines[2]);
    assert_never_seen(&execution);
}

#[test]
fn secrets_answers_a_coding_hides_are_refused_whichever_header_says_so() {
    let tls = TlsServer::start(&["127.0.0.1"]);
    let paths = [
        "/reflect-in?at=identity-then-gzip",
        "/reflect-in?at=gzip-chunked",
    ];
    let rules = secret_rules(&tls, &[("T", TOKEN)]);
    let execution = run_ok_on(&show_each(tls.server.port, &paths), rules);
    let lines: Vec<&str> = execution.stdout.lines().collect();
    assert_eq!(lines.len(), paths.len(), "{}", execution.stdout);
    for (line, (path, header)) in lines.iter().zip(
        paths
            .iter()
            .zip(["Content-Encoding: gzip", "Transfer-Encoding: gzip"]),
    ) {
        assert!(
            line.starts_with(&format!("{path} PermissionError")) && line.contains(header),
            "{line}"
        );
    }
    assert_never_seen(&execution);
}

#[test]
fn secrets_placeholders_are_whole_names_never_the_start_of_one() {
    let tls = TlsServer::start(&["127.0.0.1"]);
    let port = tls.server.port;
    let code = format!(
        r#"
import http.client
for value in ("sandpy-secret:TOKL", "sandpy-secret:TOK_2", "sandpy-secret:TOK/x"):
    connection = http.client.HTTPSConnection("127.0.0.1", {port})
    connection.request("GET", "/echo", headers={{"Authorization": value}})
    print(connection.getresponse().status)
"#
    );
    run_ok_on(&code, secret_rules(&tls, &[("TOK", TOKEN)]));
    let sent: Vec<String> = tls
        .server
        .received()
        .iter()
        .map(|r| r["headers"]["Authorization"].as_str().unwrap_or("").into())
        .collect();
    assert_eq!(
        sent,
        [
            "sandpy-secret:TOKL".to_string(),
            "sandpy-secret:TOK_2".into(),
            format!("{TOKEN}/x"),
        ]
    );
}

#[test]
fn secrets_the_bytes_in_count_does_not_tell_the_value_length() {
    let paths = [
        "/echo",
        "/reflect?as=raw",
        "/reflect?as=percent",
        "/reflect?as=base64",
    ];
    // Lengths alike modulo 3: base64's padding is the same.
    let counts = |value: &str| -> Vec<u64> {
        let tls = TlsServer::start(&["127.0.0.1"]);
        let code = show_each(tls.server.port, &paths);
        let execution = run_ok_on(&code, secret_rules(&tls, &[("T", value)]));
        assert!(!execution.stdout.contains(value), "{}", execution.stdout);
        execution.requests.iter().map(|r| r.bytes_in).collect()
    };
    let short = counts("short-value-123456");
    let long = counts("a-much-longer-value-of-the-same-kind-xx");
    assert_eq!(short.len(), paths.len());
    assert_eq!(short, long, "bytes in, and so what is left of max_bytes_in");
}

#[test]
fn egress_audit_requests_refused_past_max_requests_are_recorded() {
    let server = Server::start(None);
    let port = server.port;
    let mut rules = rules(&[format!("127.0.0.1:{port}")]);
    rules.limits.max_requests = 2;
    let urls: Vec<String> = (0..5)
        .map(|i| format!("http://127.0.0.1:{port}/echo?i={i}"))
        .collect();
    let execution = run_ok_on(&try_each(&urls), rules);
    assert_eq!(execution.stdout.matches("made its 2 requests").count(), 3);
    assert_eq!(execution.requests.len(), 3, "{:#?}", execution.requests);
    let past = &execution.requests[2];
    assert_eq!(past.url, format!("http://127.0.0.1:{port}/echo"));
    let error = past.error.as_deref().unwrap_or("");
    assert!(
        error.contains("max_requests") && error.contains("the 2 requests after it"),
        "{error}"
    );
    assert_eq!(server.received().len(), 2);
}

#[test]
fn egress_audit_refusals_never_name_the_address_a_name_resolves_to() {
    let server = Server::start(None);
    let port = server.port;
    let rules = rules(&["*".to_string()]);
    let execution = run_ok_on(&try_each(&[format!("http://localhost:{port}/echo")]), rules);
    assert!(
        execution.stdout.starts_with("PermissionError")
            && execution
                .stdout
                .contains("localhost resolves to internal addresses only"),
        "{}",
        execution.stdout
    );
    let everything = serde_json::to_string(&execution).unwrap();
    assert!(
        !everything.contains("127.0.0.1") && !everything.contains("::1"),
        "{everything}"
    );
}
