//! `requests` and `httpx` (sync and async) in the WebAssembly tier, against the network
//! tests' real server over http and https (a CA the test makes): what they do
//! (`tests/fixtures/http_libraries.py`, compared with `http_libraries.expected`, which the
//! native tier's test in sandpy-cli is held to as well), and the allowlist, secrets and
//! audit record attacked through them (and the run's bytes in, past which a streamed
//! body is cut).

use crate::network::{rules, run_on, Server, TlsServer, SECRET};
use sandpy::network::{AllowRule, Secret};
use sandpy::Status;
use std::path::Path;

/// The fixture program with its part and addresses put before it.
pub(crate) fn program(part: &str, names: &[(&str, String)]) -> String {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/http_libraries.py");
    let mut code = format!("PART = {part:?}\n");
    for (name, value) in names {
        code.push_str(&format!("{name} = {value:?}\n"));
    }
    code + &std::fs::read_to_string(fixture).expect("the fixture")
}

/// The lines `part` of the fixture prints, with `{NAME}`s filled in.
pub(crate) fn expected(part: &str, names: &[(&str, String)]) -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/http_libraries.expected"),
    )
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

/// The "use" part against `base`: every line as expected, and every request recorded.
fn uses(base: String, rules: sandpy::network::NetworkRules) {
    let names = [("BASE", base.clone())];
    let execution = run_on(&program("use", &names), rules);
    assert_eq!(execution.status, Status::Ok, "{execution:#?}");
    assert_eq!(execution.stdout, expected("use", &names));
    // requests 7 (a redirect is two), httpx 6, httpx async 8.
    assert_eq!(execution.requests.len(), 21, "{:#?}", execution.requests);
    let timed_out: Vec<&str> = execution
        .requests
        .iter()
        .filter_map(|r| r.error.as_deref())
        .collect();
    assert_eq!(timed_out.len(), 3, "{timed_out:?}");
    assert!(
        timed_out
            .iter()
            .all(|e| e.contains("within 1000 ms (the request's own timeout)")),
        "{timed_out:?}"
    );
    assert!(
        execution.requests.iter().all(|r| !r.url.contains('?')),
        "the audit record has no query"
    );
}

#[test]
fn requests_and_httpx_get_post_redirect_stream_and_time_out_over_http() {
    let server = Server::start(None);
    let allow = [format!("127.0.0.1:{}", server.port)];
    uses(format!("http://127.0.0.1:{}", server.port), rules(&allow));
}

#[test]
fn requests_and_httpx_get_post_redirect_stream_and_time_out_over_https() {
    let tls = TlsServer::start(&["127.0.0.1"]);
    let mut trusted = rules(&[format!("127.0.0.1:{}", tls.server.port)]);
    trusted.ca_file = Some(tls.ca.clone());
    uses(format!("https://127.0.0.1:{}", tls.server.port), trusted);
    assert!(!tls.server.received().is_empty());
}

#[test]
fn network_boundary_requests_and_httpx_meet_the_allowlist_and_secrets() {
    let server = Server::start(None);
    let port = server.port;
    let mut rules = rules(&[
        format!("127.0.0.2:{port}"),
        format!("127.0.0.4:{port}"),
        format!("localhost:{port}"),
    ]);
    let hosts = vec![AllowRule::parse(&format!("127.0.0.2:{port}")).unwrap()];
    let secret = Secret::new("API_TOKEN", SECRET.into(), hosts).unwrap();
    rules.secrets = vec![secret.allow_http(true)];
    rules.limits.max_bytes_in = 1 << 20;
    let names = [
        ("BASE", format!("http://127.0.0.2:{port}")),
        ("SECOND", format!("http://127.0.0.4:{port}")),
        ("REFUSED", format!("http://127.0.0.3:{port}")),
        ("PORT", port.to_string()),
    ];
    let execution = run_on(&program("attacks", &names), rules);
    assert_eq!(execution.status, Status::Ok, "{execution:#?}");
    assert_eq!(execution.stdout, expected("attacks", &names));
    // What reached the server, per library: the first hop of the redirect, the two
    // requests with the secret's placeholder and the two whose answers were cut; nothing
    // refused.
    let received: Vec<(String, String, String)> = server
        .received()
        .iter()
        .map(|r| {
            let field = |name: &str| r["headers"][name].as_str().unwrap_or("").to_string();
            let path = r["path"].as_str().unwrap_or("").to_string();
            (field("Host"), path, field("Authorization"))
        })
        .collect();
    let one_library = [
        (
            format!("127.0.0.2:{port}"),
            format!("/redirect?to=http://127.0.0.3:{port}/echo"),
            String::new(),
        ),
        (
            format!("127.0.0.2:{port}"),
            "/echo".to_string(),
            format!("Bearer {SECRET}"),
        ),
        (
            format!("127.0.0.4:{port}"),
            "/echo".to_string(),
            "Bearer sandpy-secret:API_TOKEN".to_string(),
        ),
        (
            format!("127.0.0.2:{port}"),
            "/big?n=2000000".to_string(),
            String::new(),
        ),
        (
            format!("127.0.0.2:{port}"),
            "/endless".to_string(),
            String::new(),
        ),
    ];
    let all_three: Vec<_> = (0..3).flat_map(|_| one_library.clone()).collect();
    assert_eq!(received, all_three);
    // Every request recorded, the refused ones with the refusal; the value nowhere.
    assert_eq!(
        execution.requests.len(),
        3 * 10,
        "{:#?}",
        execution.requests
    );
    let refused = execution
        .requests
        .iter()
        .filter(|r| r.status.is_none())
        .count();
    assert_eq!(refused, 3 * 7);
    let everything = serde_json::to_string(&execution).unwrap();
    assert!(!everything.contains(SECRET), "{everything}");
    crate::assert_host_fine();
}

#[test]
fn https_to_a_server_the_operator_does_not_trust_fails_in_each_library() {
    let tls = TlsServer::start(&["127.0.0.1"]);
    let url = format!("https://127.0.0.1:{}/echo", tls.server.port);
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
    // No `ca_file`: the test's CA is not the host's.
    let execution = run_on(&code, rules(&[format!("127.0.0.1:{}", tls.server.port)]));
    assert_eq!(execution.status, Status::Ok, "{execution:#?}");
    assert_eq!(
        execution.stdout,
        "SandpyFailed True True False True\n".repeat(3),
        "a failure that may pass: the library's connection error and ConnectionError, not a refusal"
    );
}

/// `tests/fixtures/http_gathered.py`'s `part` against `base`, run under `rules`: its JSON.
fn gathered(part: &str, base: &str, rules: sandpy::network::NetworkRules) -> serde_json::Value {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/http_gathered.py");
    let code = format!("PART = {part:?}\nBASE = {base:?}\n")
        + &std::fs::read_to_string(fixture).expect("the fixture");
    let execution = run_on(&code, rules);
    assert_eq!(execution.status, Status::Ok, "{execution:#?}");
    serde_json::from_str(&execution.stdout).expect("one JSON object")
}

/// Requests gathered on the event loop are made at once: four that each wait 300 ms take
/// well under four times one (a behaviour with a wide margin, not a speed figure).
#[test]
fn httpx_async_requests_gathered_on_the_event_loop_overlap() {
    let server = Server::start(None);
    let base = format!("http://127.0.0.1:{}", server.port);
    let got = gathered(
        "overlap",
        &base,
        rules(&[format!("127.0.0.1:{}", server.port)]),
    );
    let (one, four) = (got["one"].as_f64().unwrap(), got["four"].as_f64().unwrap());
    assert!(one >= 0.3, "{got}");
    assert!(
        four < 2.5 * one,
        "four gathered took {four} s, one {one} s: {got}"
    );
    let paths: Vec<String> = (0..4).map(|i| format!("/delay?ms=300&i={i}")).collect();
    assert_eq!(got["paths"], serde_json::json!(paths));
}

/// A run's gathered requests are read 8 at a time at most, and their answers together
/// never pass the run's bytes in: of three 400,000-byte answers where 1 MiB is left, two
/// are whole and one is refused.
#[test]
fn network_boundary_gathered_requests_stay_within_the_concurrency_cap_and_bytes_in() {
    let server = Server::start(None);
    let mut rules = rules(&[format!("127.0.0.1:{}", server.port)]);
    rules.limits.max_bytes_in = 1 << 20;
    let got = gathered(
        "bounded",
        &format!("http://127.0.0.1:{}", server.port),
        rules,
    );
    let in_flight = got["in_flight"].as_u64().unwrap();
    assert!((2..=8).contains(&in_flight), "{got}");
    assert_eq!(
        got["big"],
        serde_json::json!([
            "200 400000",
            "200 400000",
            "SandpyRefused: sandpy network: the response (N bytes or more) would pass the \
             run's 1048576 bytes in (sandpy.network.limits.max_bytes_in)"
        ]),
        "{got}"
    );
}

/// The run's deadline ends a batch still waiting, and its audit record holds every
/// request of it: the one answered with its status, the ones cut off as such.
#[test]
fn network_boundary_a_gathered_batch_ends_with_the_runs_deadline_and_is_recorded() {
    let server = Server::start(None);
    let base = format!("http://127.0.0.1:{}", server.port);
    let mut rules = rules(&[format!("127.0.0.1:{}", server.port)]);
    rules.limits.request_timeout = std::time::Duration::from_secs(60);
    let options = sandpy::RunOptions {
        network: Some(sandpy::network::Network::new(rules).unwrap()),
        limits: sandpy::Limits {
            timeout: std::time::Duration::from_millis(1500),
            ..sandpy::Limits::default()
        },
        ..sandpy::RunOptions::default()
    };
    let code = format!(
        r#"
import asyncio, httpx
async def main():
    async with httpx.AsyncClient(timeout=None) as client:
        await asyncio.gather(*(client.get({base:?} + path) for path in ("/delay?ms=0", "/slow", "/slow")))
asyncio.run(main())
"#
    );
    let started = std::time::Instant::now();
    let execution = crate::run_with(&code, &options);
    assert_eq!(execution.status, Status::Timeout, "{execution:#?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    let records: Vec<(String, Option<u16>, Option<String>)> = execution
        .requests
        .iter()
        .map(|r| (r.url.clone(), r.status, r.error.clone()))
        .collect();
    let cut = Some("did not complete: the run ended before the answer came".to_string());
    assert_eq!(
        records,
        [
            (format!("{base}/delay"), Some(200), None),
            (format!("{base}/slow"), None, cut.clone()),
            (format!("{base}/slow"), None, cut),
        ],
        "{execution:#?}"
    );
}
