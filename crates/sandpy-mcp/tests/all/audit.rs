//! The audit log records executions and tool calls, line by line.

use crate::{block_on, config, sandbox};
use sandpy::RunOptions;
use sandpy_mcp::{AuditLog, Hub};

#[test]
fn one_line_per_execution_and_per_tool_call_without_argument_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("audit/log.jsonl");
    let audit = AuditLog::open(&path, false).expect("open");
    block_on(async {
        let text = format!(
            r#"{{"mcpServers": {{"everything": {{"command": "npx", "args": ["-y", "{}"]}}}}}}"#,
            crate::upstream::EVERYTHING_PKG
        );
        let hub = Hub::start(&config(&text)).await;
        let code = "call_mcp_tool('mcp__everything__echo', {'message': 'secret-value'})\ntry:\n    call_mcp_tool('mcp__everything__get-sum', {'a': 'bad'})\nexcept ToolError:\n    pass\n\
                    try:\n    call_mcp_tool('mcp__everything__nope')\nexcept ToolError:\n    pass";
        let options = RunOptions {
            tools: Some(hub.for_execution("x1".into(), Some(audit.clone()))),
            ..RunOptions::default()
        };
        let execution = sandbox().run_with(code, &options).await;
        audit.execution("x1", "tenant:agent-a", code, &options.limits, &execution);
        hub.shutdown().await;
    });
    let text = std::fs::read_to_string(&path).expect("log");
    assert!(
        !text.contains("secret-value"),
        "argument values are not recorded by default"
    );
    let records: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(records.len(), 4, "{text}");
    assert_eq!(records[0]["kind"], "tool_call");
    assert_eq!(records[0]["tool"], "mcp__everything__echo");
    assert_eq!(records[0]["outcome"], "ok");
    assert_eq!(records[1]["outcome"], "error");
    assert_eq!(
        (records[2]["tool"].as_str(), records[2]["outcome"].as_str()),
        (Some("mcp__everything__nope"), Some("refused"))
    );
    assert!(records[2]["reason"]
        .as_str()
        .expect("reason")
        .contains("unknown tool"));
    assert_eq!(records[3]["kind"], "execution");
    assert_eq!(records[3]["status"], "ok");
    assert_eq!(records[3]["tenant"], "tenant:agent-a");
    assert_eq!(records[3]["tool_calls"], 3);
    assert_eq!(records[3]["code_sha256"].as_str().map(str::len), Some(64));
    assert!(records.iter().all(|r| r["execution_id"] == "x1"));
}

#[test]
fn a_call_the_sandbox_stopped_waiting_for_is_recorded_as_abandoned() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log.jsonl");
    let audit = AuditLog::open(&path, false).expect("open");
    block_on(async {
        let text = format!(
            r#"{{"mcpServers": {{"everything": {{"command": "npx", "args": ["-y", "{}"]}}}},
                "sandpy": {{"limits": {{"tool_timeout_ms": 300}}}}}}"#,
            crate::upstream::EVERYTHING_PKG
        );
        let config = config(&text);
        let hub = Hub::start(&config).await;
        let code = "try:\n    call_mcp_tool('mcp__everything__trigger-long-running-operation', {'duration': 5, 'steps': 1})\n\
                    except ToolError as e:\n    print(e)";
        let options = RunOptions {
            tools: Some(hub.for_execution("x2".into(), Some(audit.clone()))),
            ..RunOptions::with_limits(config.settings.limits.clone())
        };
        let execution = sandbox().run_with(code, &options).await;
        assert!(
            execution.stdout.contains("timed out after 300 ms"),
            "{execution:?}"
        );
        hub.shutdown().await;
    });
    let text = std::fs::read_to_string(&path).expect("log");
    let records: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(records.len(), 1, "{text}");
    assert_eq!(records[0]["outcome"], "abandoned");
    assert_eq!(
        records[0]["tool"],
        "mcp__everything__trigger-long-running-operation"
    );
    let waited = records[0]["duration_ms"].as_f64().expect("duration");
    assert!((300.0..2_000.0).contains(&waited), "{waited}");
}

#[test]
fn each_request_of_a_run_is_recorded_without_its_query_or_headers() {
    use sandpy::network::{AllowRule, Network, NetworkRules};
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log.jsonl");
    let audit = AuditLog::open(&path, false).expect("open");
    let rules = NetworkRules {
        allow: vec![AllowRule::parse("127.0.0.1:9").expect("entry")],
        ..NetworkRules::default()
    };
    let options = RunOptions {
        network: Some(Network::new(rules).expect("network")),
        ..RunOptions::default()
    };
    let code = "import urllib.request\nfor url in ('http://127.0.0.1:9/a?key=hidden', 'http://10.0.0.1/b'):\n    try:\n        urllib.request.urlopen(urllib.request.Request(url, headers={'X-Key': 'hidden'}))\n    except OSError:\n        pass";
    let execution = block_on(sandbox().run_with(code, &options));
    audit.execution("x2", "local", code, &options.limits, &execution);
    let text = std::fs::read_to_string(&path).expect("log");
    assert!(!text.contains("hidden"), "{text}");
    let record: serde_json::Value = serde_json::from_str(text.trim()).expect("one record");
    let requests = record["requests"].as_array().expect("requests");
    assert_eq!(requests.len(), 2, "{text}");
    assert_eq!(requests[0]["url"], "http://127.0.0.1:9/a");
    assert!(
        requests[0]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("connect"),
        "{text}"
    );
    assert!(
        requests[1]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("not allowed"),
        "{text}"
    );
}
