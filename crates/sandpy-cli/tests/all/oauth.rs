//! `sandpy serve --http` behind an OAuth issuer, end to end: the binary with `sandpy.auth`
//! in its config, an issuer in Python (`sandpy-mcp/tests/oauth_issuer.py`: its own RSA
//! key, OpenID Connect discovery only, tokens signed by PyJWT) and the official MCP Python
//! SDK as the client, with the issuer's access tokens as its bearer tokens.

use crate::mcp_client;
use crate::serve::{http_server, raw_get, raw_post};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

const AUDIENCE: &str = "https://sandpy.test/mcp";

/// The issuer's process, killed when dropped.
struct Issuer(Child);

impl Drop for Issuer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start the issuer; its URL and its tokens by name.
fn issuer() -> (Issuer, String, Value) {
    let script = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../sandpy-mcp/tests/oauth_issuer.py");
    let mut child = Command::new(crate::mcp_python())
        .arg(script)
        .arg(AUDIENCE)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the issuer");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the issuer's line");
    let started: Value = serde_json::from_str(&line).expect("the issuer's JSON");
    let url = started["issuer"].as_str().expect("issuer").to_string();
    (Issuer(child), url, started["tokens"].clone())
}

#[test]
fn the_official_sdk_runs_code_with_the_issuers_tokens_each_person_a_tenant() {
    let (_issuer, issuer_url, tokens) = issuer();
    let token = |name: &str| tokens[name].as_str().expect("token").to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let audit = dir.path().join("audit.jsonl");
    let config = dir.path().join("sandpy.json");
    let section = json!({"auth": {"issuer": issuer_url, "audience": AUDIENCE},
                         "audit_log": audit});
    std::fs::write(&config, json!({"sandpy": section}).to_string()).expect("config");
    let config = config.to_string_lossy().into_owned();
    let (_server, url) = http_server(&["--config", &config]);

    let alice = token("alice");
    let (out, status, _) = mcp_client(
        &["http", &url, &alice],
        &json!([
            {"method": "list_tools"},
            {"method": "call_tool", "name": "run_python",
             "arguments": {"code": "x = 41\nx + 1", "session_id": "main"}}
        ]),
    );
    assert_eq!(status, 0, "{out}");
    assert!(out[0].to_string().contains("run_python"), "{out}");
    assert_eq!(out[1]["structuredContent"]["return_value"], 42, "{out}");
    // Bob is a tenant of his own: Alice's session is not his.
    let (out, status, _) = mcp_client(
        &["http", &url, &token("bob")],
        &json!([{"method": "call_tool", "name": "run_python",
                 "arguments": {"code": "'x' in globals()", "session_id": "main"}}]),
    );
    assert_eq!(status, 0, "{out}");
    assert_eq!(out[0]["structuredContent"]["return_value"], false, "{out}");
    // Alice again, in a new MCP session: her session is there.
    let (out, _, _) = mcp_client(
        &["http", &url, &alice],
        &json!([{"method": "call_tool", "name": "run_python",
                 "arguments": {"code": "x", "session_id": "main"}}]),
    );
    assert_eq!(out[0]["structuredContent"]["return_value"], 41, "{out}");
    let audit = std::fs::read_to_string(&audit).expect("audit log");
    assert_eq!(
        audit.matches(r#""tenant":"oauth:alice""#).count(),
        2,
        "{audit}"
    );
    assert_eq!(
        audit.matches(r#""tenant":"oauth:bob""#).count(),
        1,
        "{audit}"
    );

    // Refused tokens do not connect; without one, the 401 says where to get one.
    for refused in ["expired", "other_audience"] {
        let (out, status, _) = mcp_client(
            &["http", &url, &token(refused)],
            &json!([{"method": "list_tools"}]),
        );
        assert_eq!(status, 3, "{refused} must not connect: {out}");
    }
    assert!(raw_post(&url, None).starts_with("HTTP/1.1 401"));
    let (status, body) = raw_get(&url, "/.well-known/oauth-protected-resource/mcp");
    assert!(status.contains(" 200 "), "{status}");
    let metadata: Value = serde_json::from_str(&body).expect("metadata JSON");
    assert_eq!(metadata["resource"], AUDIENCE);
    assert_eq!(metadata["authorization_servers"], json!([issuer_url]));
}
