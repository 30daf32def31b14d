//! The config file's `${VAR}` expansion, end to end: a stdio upstream (a tiny server on the
//! official MCP Python SDK) started with expanded `command`, `args` and `env`; and values
//! from the environment kept out of everything sandpy prints and logs.

use crate::serve::http_server_with;
use crate::{mcp_client, mcp_python, sandpy};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// What the tests put in the environment as a token; it must never come out.
const SECRET: &str = "sk-live-Zq7xW2pL9vR4tY8u";

fn write_config(dir: &Path, text: &str) -> String {
    let path = dir.join("sandpy.mcp.json");
    std::fs::write(&path, text).expect("config");
    path.display().to_string()
}

/// The report server, every field written with `${...}`.
const REPORT_CONFIG: &str = r#"{"mcpServers": {"report": {
    "command": "${SANDPY_TEST_PYTHON}",
    "args": ["${SANDPY_TEST_SCRIPT}", "--token=${SANDPY_TEST_TOKEN}", "--mode=${SANDPY_TEST_UNSET:-fallback}",
             "$HOME", "${}", "${SANDPY_TEST_UNSET:-}"],
    "env": {"REPORT_TOKEN": "pre-${SANDPY_TEST_TOKEN}-post"}}}}"#;

fn report_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/report_server.py")
}

#[test]
fn a_stdio_upstream_gets_its_command_args_and_env_expanded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), REPORT_CONFIG);
    let out = sandpy()
        .args(["run", "--json", "--config", &config, "-c"])
        .arg("call_mcp_tool('mcp__report__started')")
        .env("SANDPY_TEST_PYTHON", mcp_python())
        .env("SANDPY_TEST_SCRIPT", report_script())
        .env("SANDPY_TEST_TOKEN", "tok-123")
        .env_remove("SANDPY_TEST_UNSET")
        .output()
        .expect("sandpy");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let execution: Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(
        execution["return_value"],
        json!({
            "argv": ["--token=tok-123", "--mode=fallback", "$HOME", "${}", ""],
            "env": "pre-tok-123-post"
        }),
        "{execution}"
    );
}

#[test]
fn an_unset_variable_is_a_config_error_naming_the_key_and_the_variable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), REPORT_CONFIG);
    let out = sandpy()
        .args(["run", "--config", &config, "-c", "1"])
        .env("SANDPY_TEST_PYTHON", "python3")
        .env("SANDPY_TEST_SCRIPT", "x.py")
        .env_remove("SANDPY_TEST_TOKEN")
        .output()
        .expect("sandpy");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "error: config `{config}`: at `mcpServers.report.args[1]`: environment variable `SANDPY_TEST_TOKEN` is not set"
        )),
        "{stderr}"
    );
}

/// An HTTP upstream nobody listens on, with the secret in its URL and a header.
fn secret_config(dir: &Path) -> (String, String) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port(); // closed again: connecting is refused
    let text = format!(
        r#"{{"mcpServers": {{"remote": {{"url": "http://127.0.0.1:{port}/mcp?key=${{SANDPY_TEST_SECRET}}",
              "headers": {{"Authorization": "Bearer ${{SANDPY_TEST_SECRET}}"}}}}}},
            "sandpy": {{"audit_log": "audit.jsonl"}}}}"#
    );
    let written = format!("http://127.0.0.1:{port}/mcp?key=${{SANDPY_TEST_SECRET}}");
    (write_config(dir, &text), written)
}

#[test]
fn secrets_from_the_environment_stay_out_of_what_sandpy_run_prints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, written) = secret_config(dir.path());
    let out = sandpy()
        .args(["run", "--json", "--config", &config, "-c"])
        .arg("call_mcp_tool('mcp__remote__search')")
        .env("SANDPY_TEST_SECRET", SECRET)
        .output()
        .expect("sandpy");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "sandpy: MCP server `remote` is unavailable: cannot connect to {written}: "
        )),
        "the status shows the URL as written: {stderr}"
    );
    let execution: Value = serde_json::from_str(&stdout).expect("one JSON object");
    let message = execution["error"]["message"].as_str().expect("an error");
    assert!(
        message.contains(&format!("remote (unavailable: cannot connect to {written}")),
        "{message}"
    );
    assert!(
        !stdout.contains(SECRET) && !stderr.contains(SECRET),
        "a secret came out:\n{stdout}\n{stderr}"
    );
}

#[test]
fn secrets_from_the_environment_stay_out_of_what_sandpy_serve_says_and_logs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, written) = secret_config(dir.path());
    let mut command = sandpy();
    command.env("SANDPY_TEST_SECRET", SECRET);
    let (server, url, server_log) = http_server_with(command, &["--config", &config]);
    let (out, status, client_log) = mcp_client(
        &["http", &url],
        &json!([
            {"method": "list_tools"},
            {"method": "call_tool", "name": "run_python",
             "arguments": {"code": "call_mcp_tool('mcp__remote__search')"}}
        ]),
    );
    drop(server);
    assert_eq!(status, 0, "{out}\n{client_log}");
    let description = out[0]["tools"][0]["description"]
        .as_str()
        .expect("run_python's description");
    assert!(
        description.contains(&format!("remote (unavailable: cannot connect to {written}")),
        "{description}"
    );
    let message = out[1]["structuredContent"]["error"]["message"]
        .as_str()
        .expect("the run's error");
    assert!(
        message.contains(&format!("cannot connect to {written}")),
        "{message}"
    );
    let audit = std::fs::read_to_string(dir.path().join("audit.jsonl")).expect("audit log");
    assert!(
        audit.contains(r#""outcome":"refused""#) && audit.contains("unavailable: cannot connect"),
        "the refused call is logged with its reason: {audit}"
    );
    let server_log = server_log.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for (what, text) in [
        ("the client's answers", out.to_string()),
        ("the client's stderr", client_log),
        ("the server's stderr", server_log),
        ("the audit log", audit),
    ] {
        assert!(!text.contains(SECRET), "a secret in {what}: {text}");
    }
}

/// The keys of one section of docs/reference/config.md (the first column of the table under
/// its `` ## `section` `` heading).
fn documented_keys(section: &str) -> Vec<String> {
    let reference = include_str!("../../../../docs/reference/config.md");
    let heading = format!("## `{section}`");
    let body = reference
        .split("\n## ")
        .map(|part| format!("## {part}"))
        .find(|part| part.lines().next() == Some(heading.as_str()))
        .unwrap_or_else(|| panic!("no {heading} in docs/reference/config.md"));
    body.lines()
        .filter_map(|line| line.strip_prefix("| `")?.split_once('`'))
        .map(|(key, _)| key.to_string())
        .collect()
}

/// The key names in backticks after "expected" in serde's unknown-field message.
fn expected_keys(stderr: &str) -> Vec<String> {
    let (_, expected) = stderr
        .split_once("expected ")
        .unwrap_or_else(|| panic!("no list of keys in: {stderr}"));
    let expected = expected.split(" at line").next().unwrap_or_default();
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(String::from)
        .collect()
}

/// docs/reference/config.md lists exactly the keys each `sandpy` section reads (serde names
/// them when refusing an unknown one), and every key of a server entry it lists is read
/// (a wrong type for it is refused; server entries ignore unknown keys, which other
/// clients keep there).
#[test]
fn documented_config_keys_are_the_keys_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sections = [
        ("sandpy", json!({"sandpy": {"zz": 1}})),
        ("sandpy.limits", json!({"sandpy": {"limits": {"zz": 1}}})),
        (
            "sandpy.model_output",
            json!({"sandpy": {"model_output": {"zz": 1}}}),
        ),
        (
            "sandpy.sessions",
            json!({"sandpy": {"sessions": {"zz": 1}}}),
        ),
        (
            "sandpy.resources",
            json!({"sandpy": {"resources": {"zz": 1}}}),
        ),
        (
            "sandpy.tenants.<name>",
            json!({"sandpy": {"tenants": {"a": {"zz": 1}}}}),
        ),
        ("sandpy.native", json!({"sandpy": {"native": {"zz": 1}}})),
        ("sandpy.network", json!({"sandpy": {"network": {"zz": 1}}})),
        (
            "sandpy.network.limits",
            json!({"sandpy": {"network": {"limits": {"zz": 1}}}}),
        ),
        (
            "sandpy.network.secrets.<NAME>",
            json!({"sandpy": {"network": {"secrets": {"A": {"zz": 1}}}}}),
        ),
    ];
    for (section, config) in sections {
        let config = write_config(dir.path(), &config.to_string());
        let (code, _, stderr) = crate::run(&["run", "--config", &config, "-c", "1"]);
        assert_ne!(code, 0, "{section}: {stderr}");
        let mut read = expected_keys(&stderr);
        let mut documented = documented_keys(section);
        read.sort();
        documented.sort();
        assert_eq!(documented, read, "docs/reference/config.md, {section}");
    }
    for key in documented_keys("mcpServers.<name>") {
        // A nested list is no key's type (string, list of strings, object, bool).
        let config =
            json!({"mcpServers": {"s": {"url": "http://127.0.0.1:9/mcp", key.as_str(): [[1]]}}});
        let config = write_config(dir.path(), &config.to_string());
        let (code, _, stderr) = crate::run(&["run", "--config", &config, "-c", "1"]);
        assert_ne!(code, 0, "mcpServers.s.{key} was not read: {stderr}");
        assert!(
            stderr.contains(&format!("mcpServers.s.{key}")) && stderr.contains("invalid type"),
            "{key}: {stderr}"
        );
    }
}
