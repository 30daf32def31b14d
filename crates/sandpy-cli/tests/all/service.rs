//! `sandpy serve --http` run as a service: `/metrics` scraped and parsed by the official
//! Prometheus Python client after known runs, `/metrics` behind the token when the config
//! asks, `/readyz` waiting for required upstream servers, and the drain on SIGTERM (a run in flight answered, new sessions refused with 503,
//! a token tenant's session saved).

use crate::serve::{
    add_sandpy_section, exits_within, fake_upstream_config, http_server, raw_get, raw_post, signal,
    wait_for_text,
};
use crate::{mcp_client, mcp_python};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::Duration;

/// The samples of a scrape, parsed by `prometheus_client`'s OpenMetrics parser (which
/// rejects what the format does not allow): `name{labels}` -> value, labels sorted.
fn parse_metrics(text: &str) -> HashMap<String, f64> {
    let parser = "import sys, json\n\
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse\n\
out = {}\n\
for family in parse(sys.stdin.read()):\n    for s in family.samples:\n        \
labels = ','.join(f'{k}={v}' for k, v in sorted(s.labels.items()))\n        \
out[f'{s.name}{{{labels}}}'] = s.value\n\
print(json.dumps(out))";
    use std::io::Write;
    let mut child = std::process::Command::new(mcp_python())
        .args(["-c", parser])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("scrape");
    let out = child.wait_with_output().expect("parser");
    assert!(
        out.status.success(),
        "the scrape does not parse: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("parsed samples")
}

#[test]
fn metrics_count_known_runs_and_tool_calls_in_the_prometheus_format() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, _, _) = fake_upstream_config(dir.path());
    add_sandpy_section(
        &config,
        json!({"tenants": {"agent": {"token": "agent-token"}}}),
    );
    let (_server, url) = http_server(&["--config", &config]);
    let run = |code: &str| json!({"method": "call_tool", "name": "run_python", "arguments": {"code": code}});
    let requests = json!([
        run("call_mcp_tool('mcp__fake__ping', {})"),
        run("1/0"),
        {"method": "call_tool", "name": "run_python",
         "arguments": {"code": "x = 1", "session_id": "s1"}}
    ]);
    let (out, status, stderr) = mcp_client(&["http", &url, "agent-token"], &requests);
    assert_eq!(status, 0, "{out}\n{stderr}");
    let (status, text) = raw_get(&url, "/metrics");
    assert!(status.contains(" 200 "), "{status}");
    let samples = parse_metrics(&text);
    let value = |key: &str| {
        samples
            .get(key)
            .copied()
            .unwrap_or_else(|| panic!("no {key} in {text}"))
    };
    assert_eq!(value("sandpy_runs_total{status=ok,tier=wasm}"), 2.0);
    assert_eq!(value("sandpy_runs_total{status=error,tier=wasm}"), 1.0);
    assert_eq!(value("sandpy_run_duration_seconds_count{tier=wasm}"), 3.0);
    assert_eq!(
        value("sandpy_tool_calls_total{outcome=ok,tool=ping,upstream=fake}"),
        1.0
    );
    assert_eq!(
        value("sandpy_tool_call_duration_seconds_count{upstream=fake}"),
        1.0
    );
    assert_eq!(value("sandpy_upstream_up{upstream=fake}"), 1.0);
    // The open scrape labels the tenant by a keyed hash of its name, never the name.
    let tenants: Vec<f64> = samples
        .iter()
        .filter(|(key, _)| key.starts_with("sandpy_sessions_open{tenant=t-"))
        .map(|(_, open)| *open)
        .collect();
    assert_eq!(tenants, [1.0], "{text}");
    assert!(
        !text.contains("agent"),
        "a tenant's name in an open scrape: {text}"
    );
    assert_eq!(value("sandpy_runs_in_flight{}"), 0.0);
    assert!(value("sandpy_process_resident_memory_bytes{}") > 1e6);
    assert!(value("sandpy_mcp_sessions_open{}") <= 1.0);
}

#[test]
fn metrics_need_the_token_when_the_config_says() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("sandpy.json");
    let text = json!({"sandpy": {"metrics_require_token": true}}).to_string();
    std::fs::write(&config, text).expect("config");
    let config = config.display().to_string();
    let (_server, url) = http_server(&["--config", &config, "--token", "s3cret"]);
    let (status, _) = raw_get(&url, "/metrics");
    assert!(status.contains(" 401 "), "{status}");
    // The probes stay open.
    let (status, _) = raw_get(&url, "/readyz");
    assert!(status.contains(" 200 "), "{status}");
}

/// `/readyz` with `sandpy.ready_requires`: 503 naming each required upstream server that
/// is not up (a server that cannot start stays named), 200 once every required one is;
/// a name that is no server of `mcpServers` is refused when the config is read.
#[test]
fn readyz_waits_for_the_required_upstream_servers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, _, _) = fake_upstream_config(dir.path());
    let text = std::fs::read_to_string(&config).expect("config");
    let mut with_broken: Value = serde_json::from_str(&text).expect("config JSON");
    with_broken["mcpServers"]["broken"] = json!({"command": "false"});
    std::fs::write(&config, with_broken.to_string()).expect("config");
    let readyz_within = |url: &str, wanted: &dyn Fn(&str, &str) -> bool| {
        let until = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let (status, body) = raw_get(url, "/readyz");
            if wanted(&status, &body) {
                return (status, body);
            }
            assert!(std::time::Instant::now() < until, "{status} {body}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    add_sandpy_section(&config, json!({"ready_requires": ["fake", "broken"]}));
    let (server, url) = http_server(&["--config", &config]);
    let (status, body) = readyz_within(&url, &|_, body| !body.contains("fake"));
    assert!(status.contains(" 503 "), "{status}");
    assert!(
        body.contains("required upstream servers down: broken"),
        "{body}"
    );
    drop(server);

    add_sandpy_section(&config, json!({"ready_requires": ["fake"]}));
    let (_server, url) = http_server(&["--config", &config]);
    let (status, body) = readyz_within(&url, &|status, _| status.contains(" 200 "));
    assert_eq!(body, "ready\n", "{status}");

    add_sandpy_section(&config, json!({"ready_requires": ["fake", "nope"]}));
    let (code, _, stderr) = crate::run(&["run", "--config", &config, "-c", "1"]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("sandpy.ready_requires[1]") && stderr.contains("\"nope\" is not a server"),
        "{stderr}"
    );
}

/// SIGTERM during a 6 s run: the run completes and its client gets the answer; meanwhile
/// `/readyz` fails and a new MCP session is refused with 503; the token tenant's session
/// is saved to `save_dir` before the server exits (by itself, within the grace).
#[test]
fn sigterm_drains_runs_in_flight_and_saves_sessions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, _, _) = fake_upstream_config(dir.path());
    add_sandpy_section(
        &config,
        json!({"drain_grace_ms": 20000, "sessions": {"save_dir": "saved"},
               "tenants": {"agent": {"token": "agent-token"}}}),
    );
    let mut command = crate::sandpy();
    command.env("SANDPY_LOG", "sandpy_mcp=debug,rmcp=debug");
    let (mut serve, url, log) = crate::serve::http_server_with(command, &["--config", &config]);
    let keep = json!([{"method": "call_tool", "name": "run_python",
                       "arguments": {"code": "x = 41", "session_id": "keep"}}]);
    let (out, status, stderr) = mcp_client(&["http", &url, "agent-token"], &keep);
    assert_eq!(status, 0, "{out}\n{stderr}");
    let client = {
        let url = url.clone();
        std::thread::spawn(move || {
            let code =
                "call_mcp_tool('mcp__fake__ping', {})\nimport time\ntime.sleep(6)\n'finished'";
            let long = json!([{"method": "call_tool", "name": "run_python",
                               "arguments": {"code": code}}]);
            mcp_client(&["http", &url, "agent-token"], &long)
        })
    };
    wait_for_text(&dir.path().join("calls")); // the run is going: it called the tool
    signal(serve.0.id(), "TERM");
    // The signal is handled within a few seconds even on a busy machine; the run (6 s)
    // is still going.
    let until = std::time::Instant::now() + Duration::from_secs(4);
    let mut status = raw_get(&url, "/readyz").0;
    while !status.contains(" 503 ") && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
        status = raw_get(&url, "/readyz").0;
    }
    assert!(status.contains(" 503 "), "{status}");
    let refused = raw_post(&url, Some("Bearer agent-token"));
    assert!(refused.contains(" 503 "), "{refused}");
    let (out, status, stderr) = client.join().expect("client");
    let log = || log.lock().map(|l| l.clone()).unwrap_or_default();
    assert_eq!(status, 0, "{out}\n{stderr}\nserver: {}", log());
    let result: &Value = &out[0]["structuredContent"];
    assert_eq!(
        result["return_value"],
        "finished",
        "{out}\nserver: {}",
        log()
    );
    let status = exits_within(&mut serve.0, Duration::from_secs(15))
        .expect("sandpy serve still runs 15 s after its runs ended");
    assert!(status.success(), "{status}");
    let saved = dir.path().join("saved/agent/keep.session.json");
    let text = std::fs::read_to_string(&saved).expect("the session was saved on drain");
    assert!(text.contains("x = 41"), "{text}");
}
