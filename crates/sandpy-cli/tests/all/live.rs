//! Live runs over MCP, with the official Python SDK as the client and the reference
//! `everything` server upstream: approval of tool calls through elicitation (accepted,
//! declined, cancelled, never answered, a client that cannot be asked), tool calls in the
//! progress stream, and cancellation (`notifications/cancelled`) of a running program.

use crate::{mcp_client_with, sandpy, EVERYTHING_PKG};
use serde_json::{json, Value};
use std::path::Path;

/// A config whose `echo` calls need approval, with an audit log; the config's path.
fn approving_config(dir: &Path) -> String {
    let path = dir.join("sandpy.json");
    let text = json!({
        "mcpServers": {"everything": {"command": "npx", "args": ["-y", EVERYTHING_PKG]}},
        "sandpy": {"approve": ["mcp__everything__echo", "mcp__everything__write_*"],
                   "audit_log": "audit.jsonl"}
    });
    std::fs::write(&path, text.to_string()).expect("config");
    path.display().to_string()
}

fn serve(config: &str) -> Vec<String> {
    let binary = env!("CARGO_BIN_EXE_sandpy").to_string();
    vec![
        "stdio".into(),
        binary,
        "serve".into(),
        "--config".into(),
        config.into(),
    ]
}

fn audit(dir: &Path, kind: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.join("audit.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|record| record["kind"] == kind)
        .collect()
}

const THREE_ECHOES: &str = "out = []
for word in ['one', 'two', 'three']:
    try:
        out.append(tools.everything.echo(message=word))
    except ToolError as e:
        out.append(str(e))
out.append(call_mcp_tool('mcp__everything__get-sum', {'a': 1, 'b': 2}))
out";

#[test]
fn approval_is_asked_of_the_clients_user_and_the_answer_is_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = approving_config(dir.path());
    let target = serve(&config);
    let target: Vec<&str> = target.iter().map(String::as_str).collect();
    let requests = json!([
        {"method": "call_tool", "name": "run_python", "progress": true,
         "arguments": {"code": THREE_ECHOES}},
        // Cancelled by the client while it sleeps: stopped at once, the server goes on.
        {"method": "call_tool", "name": "run_python", "cancel_after_s": 1.0,
         "arguments": {"code": "print('started', flush=True)\nimport time\ntime.sleep(60)"}},
        {"method": "call_tool", "name": "run_python", "arguments": {"code": "6 * 7"}}
    ]);
    let env = [("MCP_CLIENT_ELICIT", "accept,decline,cancel")];
    let (out, status, stderr) = mcp_client_with(&target, &requests, &env);
    assert_eq!(status, 0, "{out}\n{stderr}");
    let value = &out[0]["structuredContent"]["return_value"];
    assert!(value[0].to_string().contains("one"), "{out}");
    assert_eq!(value[1], "the user declined mcp__everything__echo", "{out}");
    assert_eq!(
        value[2], "the user cancelled the approval of mcp__everything__echo",
        "{out}"
    );
    assert!(value[3].to_string().contains('3'), "{out}");
    // The user was shown the tool and its arguments, once per call needing approval.
    let asked = out[0]["_elicitations"].as_array().expect("elicitations");
    assert_eq!(asked.len(), 3, "{out}");
    assert!(
        asked[1].as_str().unwrap().contains("mcp__everything__echo")
            && asked[1].as_str().unwrap().contains("two"),
        "{out}"
    );
    // The progress stream names the calls that left the sandbox, and only those.
    let streamed: Vec<&str> = out[0]["_progress"]
        .as_array()
        .expect("progress")
        .iter()
        .filter_map(|p| p["message"].as_str())
        .collect();
    assert_eq!(
        streamed,
        [
            "calling mcp__everything__echo",
            "calling mcp__everything__get-sum"
        ],
        "{out}"
    );
    assert_eq!(out[1], json!({"cancelled": true}), "{out}");
    assert_eq!(out[2]["structuredContent"]["return_value"], 42, "{out}");
    // Every decision is audited: the tool, a hash of the arguments, who decided.
    let decisions = audit(dir.path(), "approval");
    let summary: Vec<(&str, &str)> = decisions
        .iter()
        .map(|d| (d["decision"].as_str().unwrap(), d["by"].as_str().unwrap()))
        .collect();
    assert_eq!(
        summary,
        [
            ("approved", "elicitation"),
            ("declined", "elicitation"),
            ("declined", "elicitation")
        ]
    );
    assert!(decisions
        .iter()
        .all(|d| d["tool"] == "mcp__everything__echo"
            && d["arguments_sha256"].as_str().unwrap().len() == 64));
    // The cancelled run was stopped, not left to sleep out its minute.
    let executions = audit(dir.path(), "execution");
    let cancelled: Vec<&Value> = executions
        .iter()
        .filter(|e| e["status"] == "cancelled")
        .collect();
    assert_eq!(cancelled.len(), 1, "{executions:?}");
    assert!(cancelled[0]["duration_ms"].as_f64().unwrap() < 10_000.0);
}

#[test]
fn calls_needing_approval_are_refused_when_the_client_cannot_be_asked_or_never_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = approving_config(dir.path());
    let target = serve(&config);
    let target: Vec<&str> = target.iter().map(String::as_str).collect();
    let echo = "tools.everything.echo(message='hi')";
    // A client without elicitation: refused with the reason, never allowed.
    let requests = json!([{"method": "call_tool", "name": "run_python",
                           "arguments": {"code": echo}}]);
    let (out, status, stderr) = mcp_client_with(&target, &requests, &[]);
    assert_eq!(status, 0, "{out}\n{stderr}");
    let error = &out[0]["structuredContent"]["error"];
    assert_eq!(error["type"], "ToolError", "{out}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("does not support elicitation"),
        "{out}"
    );
    // A user who never answers: the run ends at its time limit, naming the approval. A
    // call needing no approval first, so that the upstream has started before the timed
    // run (on a loaded machine `npx` takes longer than the run's two seconds).
    let ready = "tools.everything.get_sum(a=1, b=2)";
    let requests = json!([{"method": "call_tool", "name": "run_python",
                           "arguments": {"code": ready}},
                          {"method": "call_tool", "name": "run_python",
                           "arguments": {"code": echo, "timeout_ms": 2000}}]);
    let env = [("MCP_CLIENT_ELICIT", "never")];
    let (out, status, stderr) = mcp_client_with(&target, &requests, &env);
    assert_eq!(status, 0, "{out}\n{stderr}");
    assert_eq!(out[0]["structuredContent"]["status"], "ok", "{out}");
    let result = &out[1]["structuredContent"];
    assert_eq!(result["status"], "timeout", "{out}");
    assert!(
        result["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the approval of mcp__everything__echo"),
        "{out}"
    );
}

/// The approval prompt attacked by the code: an argument padded past the prompt's size
/// that sorts first (the person once saw `[... 167 more bytes]` and approved an `a` they
/// never saw), and more argument names than a prompt can show (refused, not asked).
#[test]
fn approval_prompt_shows_every_argument_and_refuses_what_it_cannot_show() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = approving_config(dir.path());
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(
        &config,
        text.replace("mcp__everything__echo", "mcp__everything__get-sum"),
    )
    .expect("config");
    let target = serve(&config);
    let target: Vec<&str> = target.iter().map(String::as_str).collect();
    let code = "out = [call_mcp_tool('mcp__everything__get-sum', {'_note': 'harmless ' + ' ' * 2100, 'a': 1000000, 'b': 2})]
many = {f'k{i:04}': i for i in range(300)}
many.update(a=1, b=2)
try:
    out.append(call_mcp_tool('mcp__everything__get-sum', many))
except ToolError as e:
    out.append(str(e))
out";
    let requests = json!([{"method": "call_tool", "name": "run_python",
                           "arguments": {"code": code}}]);
    let env = [("MCP_CLIENT_ELICIT", "accept,accept")];
    let (out, status, stderr) = mcp_client_with(&target, &requests, &env);
    assert_eq!(status, 0, "{out}\n{stderr}");
    let asked = out[0]["_elicitations"].as_array().expect("elicitations");
    assert_eq!(asked.len(), 1, "the second call is not asked about: {out}");
    let prompt = asked[0].as_str().expect("text");
    assert!(prompt.contains("\"a\": 1000000\n"), "{prompt}");
    assert!(prompt.contains("\"b\": 2\n"), "{prompt}");
    assert!(prompt.contains("\"_note\": \"harmless"), "{prompt}");
    let value = &out[0]["structuredContent"]["return_value"];
    assert!(value[0].to_string().contains("1000002"), "{out}");
    let refusal = value[1].as_str().expect("a refusal");
    assert!(
        refusal.contains("its arguments cannot be shown to be approved"),
        "{refusal}"
    );
}

/// `sandpy run --approve` asks on the terminal; without one it refuses.
#[test]
fn run_asks_on_the_terminal_and_refuses_without_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = approving_config(dir.path());
    let code = "r = []\nfor w in ['a', 'b']:\n    try:\n        r.append(tools.everything.echo(message=w))\n    except ToolError as e:\n        r.append(str(e))\nprint(r)";
    let output = sandpy()
        .args(["run", "--config", &config, "--approve", "-c", code])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("sandpy run");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("stdin is not a terminal"), "{stdout}");
    // A pattern that matches no tool is reported at start.
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(r#"sandpy.approve pattern "mcp__everything__write_*" matches none"#),
        "{stderr}"
    );
    assert!(!stdout.contains("Echo: a"), "{stdout}");
    // Under a terminal (a pseudo-terminal from Python's `pty`): yes, then no.
    let output = std::process::Command::new("python3")
        .args(["-c", ANSWER_ON_A_TERMINAL, "y\nn\n"])
        .arg(env!("CARGO_BIN_EXE_sandpy"))
        .args(["run", "--config", &config, "--approve", "-c", code])
        .output()
        .expect("python3 with pty");
    let seen = String::from_utf8_lossy(&output.stdout);
    assert_eq!(seen.matches("Allow? [y/N]").count(), 2, "{seen}");
    assert!(seen.contains("\"message\": \"b\""), "{seen}");
    assert!(seen.contains("Echo: a"), "{seen}");
    assert!(
        seen.contains("the user declined mcp__everything__echo"),
        "{seen}"
    );
}

/// Runs argv[2:] on a pseudo-terminal, writes the lines of argv[1] one per prompt, and
/// prints everything the terminal showed.
const ANSWER_ON_A_TERMINAL: &str = r#"
import os, pty, sys, time
answers = sys.argv[1].splitlines(keepends=True)
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
seen = b""
deadline = time.time() + 120
while time.time() < deadline:
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    seen += chunk
    if answers and seen.count(b"Allow? [y/N]") > seen.count(b"\x00answered"):
        os.write(fd, answers.pop(0).encode())
        seen += b"\x00answered"
os.waitpid(pid, 0)
sys.stdout.write(seen.replace(b"\x00answered", b"").decode(errors="replace"))
"#;

/// 100 MB printed in a loop, streamed: the run stops at its output cap (1 MiB by default)
/// and the stream carries no more than that, in a bounded number of messages.
#[test]
fn a_flood_of_output_is_streamed_within_its_bounds() {
    let code = "line = 'x' * 9999\nfor _ in range(10_000):\n    print(line)";
    let requests = json!([{"method": "call_tool", "name": "run_python", "progress": true,
                           "arguments": {"code": code}}]);
    let binary = env!("CARGO_BIN_EXE_sandpy");
    let (out, status, stderr) = mcp_client_with(&["stdio", binary, "serve"], &requests, &[]);
    assert_eq!(status, 0, "{out}\n{stderr}");
    assert_eq!(
        out[0]["structuredContent"]["status"], "output_limit",
        "{out:.2000}"
    );
    let messages = out[0]["_progress"].as_array().expect("progress");
    let streamed: usize = messages
        .iter()
        .map(|m| m["message"].as_str().unwrap_or_default().len())
        .sum();
    assert!(streamed <= (1 << 20) + 4096, "{streamed} bytes streamed");
    assert!(streamed >= 64 << 10, "{streamed} bytes streamed");
    assert!(messages.len() <= 600, "{} messages", messages.len());
}
