//! Traces by OTLP, over http/protobuf and over gRPC, received by a real receiver
//! (`sandpy-mcp/tests/otlp_receiver.py`, which decodes the protobuf with the official
//! `opentelemetry-proto` package and serves gRPC with `grpcio`): the span tree of a
//! `run_python` joined to the client's `traceparent`, and the trace passed on to the
//! upstream in `_meta`.

use crate::{mcp_client_with, mcp_python};
use serde_json::{json, Value};
use std::io::BufRead;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The client's trace: a W3C `traceparent` with a known trace and span id.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

struct Receiver(std::process::Child);

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start the receiver (over `protocol`: `http/protobuf` or `grpc`) writing spans to
/// `file`; its port.
fn receiver(file: &std::path::Path, protocol: &str) -> (Receiver, u16) {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sandpy-mcp/tests/otlp_receiver.py");
    let mut command = std::process::Command::new(mcp_python());
    command.arg(script).arg(file);
    if protocol == "grpc" {
        command.arg("--grpc");
    }
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("receiver");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .expect("port");
    let port = line.trim().parse().expect("a port");
    (Receiver(child), port)
}

fn spans(file: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

#[test]
fn runs_are_traced_by_otlp_joined_to_the_clients_trace() {
    traced_run("http/protobuf");
}

#[test]
fn runs_are_traced_by_otlp_over_grpc() {
    traced_run("grpc");
}

/// A run through `sandpy serve` with traces exported over `protocol`: the span tree as
/// received, joined to the client's trace, and the trace passed on to the upstream.
fn traced_run(protocol: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("spans.jsonl");
    let (_receiver, port) = receiver(&file, protocol);
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sandpy-mcp/tests/fake_upstream.py");
    let traces = dir.path().join("traces");
    let config = dir.path().join("sandpy.json");
    let text = json!({"mcpServers": {"fake": {"command": "python3",
                                               "args": [script, "--traces", traces]}}});
    std::fs::write(&config, text.to_string()).expect("config");
    let config = config.display().to_string();
    let traceparent = format!("00-{TRACE_ID}-{CLIENT_SPAN}-01");
    let requests = json!([{"method": "call_tool", "name": "run_python",
        "meta": {"traceparent": traceparent},
        "arguments": {"code": "call_mcp_tool('mcp__fake__ping', {})"}}]);
    let endpoint = format!("http://127.0.0.1:{port}");
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
    ];
    let binary = env!("CARGO_BIN_EXE_sandpy");
    let target = ["stdio", binary, "serve", "--config", &config];
    let (out, status, stderr) = mcp_client_with(&target, &requests, &env);
    assert_eq!(status, 0, "{out}\n{stderr}");
    assert_eq!(out[0]["structuredContent"]["status"], "ok", "{out}");
    // The server flushes its spans as it exits (the client closed stdio).
    let until = Instant::now() + Duration::from_secs(20);
    let mut got = spans(&file);
    while !got.iter().any(|s| s["name"] == "run_python") && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
        got = spans(&file);
    }
    let named = |name: &str| {
        got.iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no {name} span in {got:#?}"))
    };
    let run = named("run_python");
    assert_eq!(run["trace_id"], TRACE_ID, "{run}");
    assert_eq!(run["parent_span_id"], CLIENT_SPAN, "{run}");
    assert_eq!(run["service"], "sandpy");
    assert_eq!(run["attributes"]["status"], "ok", "{run}");
    assert_eq!(run["attributes"]["tenant"], "local", "{run}");
    assert_eq!(run["attributes"]["tier"], "wasm", "{run}");
    let child_of = |span: &Value, parent: &Value| {
        span["trace_id"] == TRACE_ID && span["parent_span_id"] == parent["span_id"]
    };
    let sandbox_run = named("sandbox_run");
    assert!(child_of(sandbox_run, run), "{got:#?}");
    assert_eq!(sandbox_run["attributes"]["status"], "ok", "{sandbox_run}");
    assert!(child_of(named("admission"), sandbox_run), "{got:#?}");
    let execute = named("execute");
    assert!(child_of(named("instantiate"), sandbox_run), "{got:#?}");
    assert!(child_of(execute, sandbox_run), "{got:#?}");
    let call = named("tool_call");
    assert!(child_of(call, execute), "{got:#?}");
    assert_eq!(call["attributes"]["tool"], "mcp__fake__ping", "{call}");
    assert_eq!(call["attributes"]["status"], "ok", "{call}");
    assert!(
        call["attributes"]["bytes"].as_i64().unwrap_or_default() > 0,
        "{call}"
    );
    // The upstream got the trace, with the tool call's span as the parent.
    let passed = std::fs::read_to_string(&traces).expect("traces file");
    let expected = format!("00-{TRACE_ID}-{}-01", call["span_id"].as_str().unwrap());
    assert_eq!(passed.trim(), expected);
}

/// A dead collector never holds up runs: the spans are dropped, the answer comes.
#[test]
fn a_dead_collector_does_not_slow_runs() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener); // nothing listens there now
    let endpoint = format!("http://127.0.0.1:{port}");
    let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str())];
    let requests: Vec<Value> = (0..20)
        .map(|i| {
            json!({"method": "call_tool", "name": "run_python",
                        "arguments": {"code": format!("{i} + 1")}})
        })
        .collect();
    let started = Instant::now();
    let binary = env!("CARGO_BIN_EXE_sandpy");
    let (out, status, stderr) =
        mcp_client_with(&["stdio", binary, "serve"], &json!(requests), &env);
    assert_eq!(status, 0, "{out}\n{stderr}");
    assert_eq!(out[19]["structuredContent"]["return_value"], 20, "{out}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}

/// A protocol sandpy does not export with is refused at start, naming the two that work.
#[test]
fn an_unknown_otlp_protocol_is_refused_with_the_ones_that_work() {
    let out = crate::sandpy()
        .args(["run", "-c", "1"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .output()
        .expect("sandpy");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL=\"http/json\"")
            && stderr.contains("http/protobuf")
            && stderr.contains("grpc"),
        "{stderr}"
    );
}
