//! `sandpy serve` driven by the official MCP Python SDK, over stdio and streamable HTTP,
//! with the reference `everything` server upstream.

use crate::{mcp_client, sandpy, EVERYTHING_PKG};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn config_file(dir: &std::path::Path, marker: &str) -> String {
    let path = dir.join("sandpy.mcp.json");
    let text = format!(
        r#"{{"mcpServers": {{"everything": {{"command": "npx", "args": ["-y", "{EVERYTHING_PKG}"], "env": {{"SANDPY_MARKER": "{marker}"}}}}}},
            "sandpy": {{"audit_log": "audit.jsonl", "sessions": {{"save_dir": "saved"}},
                        "tenants": {{"agent": {{"token": "agent-token"}}}}}}}}"#
    );
    std::fs::write(&path, text).expect("config");
    path.display().to_string()
}

fn requests() -> Value {
    json!([
        {"method": "list_tools"},
        {"method": "call_tool", "name": "run_python", "arguments": {"code":
            "import asyncio\nr = await asyncio.gather(tools.everything.echo(message='a'), call_mcp_tool('mcp__everything__get-sum', {'a': 1, 'b': 2}))\nprint('printed')\nr"}},
        {"method": "call_tool", "name": "run_python", "arguments": {"code": "def f():\n    1/0\nf()"}},
        {"method": "call_tool", "name": "run_python", "arguments": {"code": "while True: pass", "timeout_ms": 300}},
        {"method": "call_tool", "name": "run_python", "arguments": {"code": "call_mcp_tool('mcp__everything__get-env', {})", "allowed_tools": ["mcp__everything__echo"]}},
        {"method": "call_tool", "name": "search_tools", "arguments": {"query": "sum", "limit": 1}},
        {"method": "call_tool", "name": "get_tool_schema", "arguments": {"name": "mcp__everything__echo"}},
        {"method": "call_tool", "name": "call_python_function", "arguments": {"code": "def score(a, b):\n    return a == b", "function": "score", "arguments": [1, 1]}},
        {"method": "call_tool", "name": "run_python", "arguments": {}},
        {"method": "call_tool", "name": "run_python", "arguments": {"code": "x = 41", "session_id": "s1"}},
        {"method": "call_tool", "name": "run_python", "arguments": {"code": "x + 1", "session_id": "s1"}},
        {"method": "call_tool", "name": "list_sessions", "arguments": {}},
        {"method": "call_tool", "name": "close_session", "arguments": {"session_id": "s1"}},
        {"method": "call_tool", "name": "reset_session", "arguments": {"session_id": "s1"}},
        {"method": "call_tool", "name": "run_python", "arguments": {"code": "'x' in globals()", "session_id": "s1"}},
        {"method": "call_tool", "name": "run_python", "arguments": {"code": "y = tools.everything.echo(message='kept')", "session_id": "s2"}},
        {"method": "call_tool", "name": "save_session", "arguments": {"session_id": "s2", "name": "nb"}},
        {"method": "call_tool", "name": "restore_session", "arguments": {"name": "nb", "session_id": "s3"}},
        {"method": "call_tool", "name": "run_python", "arguments": {"code": "y", "session_id": "s3"}},
        {"method": "call_tool", "name": "fork_session", "arguments": {"session_id": "s3", "new_session_id": "s4"}},
        {"method": "call_tool", "name": "run_python", "arguments": {"code": "y", "session_id": "s4"}},
        {"method": "call_tool", "name": "save_session", "arguments": {"session_id": "s2", "name": "../escape"}},
        {"method": "call_tool", "name": "run_python", "arguments": {"code":
            "import base64\nopen('/output/report.txt', 'w').write(open('in.csv').read().upper())\n\
             open('/output/dot.png', 'wb').write(open('img/dot.png', 'rb').read())",
            "files": [{"path": "in.csv", "text": "a,b"}, {"path": "img/dot.png", "content_base64": "iVBORw0KGgo="}]}},
        {"method": "call_tool", "name": "run_python", "arguments": {"code": "1", "files": [{"path": "../x", "text": "a"}]}},
        {"method": "call_tool", "name": "run_python", "arguments": {"code": "1", "files": [{"path": "x"}]}}
    ])
}

fn check_responses(out: &Value) {
    let tools: Vec<&str> = out[0]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    // The list itself (names, order, schemas) is sandpy-mcp's snapshot test; here, that
    // the real client sees it all, running first.
    assert_eq!((tools.len(), tools.first()), (10, Some(&"run_python")));
    let description = out[0]["tools"][0]["description"]
        .as_str()
        .expect("description");
    assert!(
        description.contains("call_mcp_tool") && description.contains("everything (ready"),
        "{description}"
    );
    // The tools as Python signatures (issue 64): a tool with an outputSchema shows its
    // arguments with their types, and its return type.
    assert!(
        description.contains("# tools.everything.get_structured_content\n")
            && description.contains("def get_structured_content(*, location: Literal[")
            && description.contains("]) -> GetStructuredContentResult:")
            && description.contains("class GetStructuredContentResult(TypedDict):\n")
            && description.contains("    temperature: float")
            && description.contains("def get_sum(*, a: float, b: float) -> Any:"),
        "{description}"
    );

    let ok = &out[1];
    assert_eq!(ok["isError"], false, "{ok}");
    assert_eq!(ok["structuredContent"]["status"], "ok");
    assert_eq!(
        ok["structuredContent"]["return_value"],
        json!(["Echo: a", "The sum of 1 and 2 is 3."])
    );
    assert!(ok["content"][0]["text"]
        .as_str()
        .expect("text")
        .contains("printed"));

    let error = &out[2];
    assert_eq!(
        error["isError"], true,
        "a Python error is a tool result, not a protocol error"
    );
    assert_eq!(
        error["structuredContent"]["error"]["type"],
        "ZeroDivisionError"
    );
    assert!(error["content"][0]["text"]
        .as_str()
        .expect("text")
        .contains("line 2, in f"));

    assert_eq!(out[3]["structuredContent"]["status"], "timeout");
    let refused = out[4]["structuredContent"]["error"]["message"]
        .as_str()
        .expect("message");
    assert!(refused.contains("allowed_tools"), "{refused}");
    assert_eq!(
        out[5]["structuredContent"]["tools"][0]["name"],
        "mcp__everything__get-sum"
    );
    assert_eq!(
        out[6]["structuredContent"]["inputSchema"]["required"],
        json!(["message"])
    );
    let signature = out[6]["structuredContent"]["signature"].as_str();
    assert!(
        signature.is_some_and(|s| s.contains("def echo(*, message: str) -> Any:")),
        "{}",
        out[6]
    );
    assert_eq!(out[7]["structuredContent"]["return_value"], true);
    // A missing argument is a tool error the model can correct (SEP-1303), naming it.
    assert_eq!(out[8]["isError"], true, "{}", out[8]);
    invalid_input(&out[8], "missing field `code`");

    assert_eq!(
        out[10]["structuredContent"]["return_value"], 42,
        "a session keeps globals: {}",
        out[10]
    );
    assert_eq!(out[11]["structuredContent"]["sessions"][0]["id"], "s1");
    assert_eq!(out[12]["structuredContent"]["closed"], true);
    assert_eq!(out[13]["isError"], true, "no session left to reset");
    assert_eq!(
        out[14]["structuredContent"]["return_value"], false,
        "a closed session starts afresh"
    );
    assert!(
        out[16]["structuredContent"]["bytes"]
            .as_u64()
            .expect("saved bytes")
            > 0,
        "{}",
        out[16]
    );
    assert_eq!(
        out[17]["structuredContent"]["restored"], true,
        "{}",
        out[17]
    );
    assert_eq!(
        out[18]["structuredContent"]["return_value"], "Echo: kept",
        "restored state: {}",
        out[18]
    );
    assert_eq!(
        out[20]["structuredContent"]["return_value"], "Echo: kept",
        "forked state: {}",
        out[20]
    );
    assert!(
        out[21]["error"]
            .as_str()
            .expect("a refused name")
            .contains("`name` may use"),
        "{}",
        out[21]
    );

    let files = &out[22];
    assert_eq!(files["isError"], false, "{files}");
    assert_eq!(
        files["content"][1]["type"], "image",
        "PNG output comes back as an image: {files}"
    );
    assert_eq!(files["content"][1]["data"], "iVBORw0KGgo=");
    assert_eq!(
        files["content"][2]["resource"]["text"], "A,B",
        "text output as an embedded resource: {files}"
    );
    // Kept as resources of the MCP session: `sandpy://runs/<run-id>/files/<path>`, each
    // linked after the inline items.
    let uri = files["content"][2]["resource"]["uri"]
        .as_str()
        .expect("uri");
    assert!(
        uri.starts_with("sandpy://runs/") && uri.ends_with("/files/report.txt"),
        "{files}"
    );
    assert_eq!(files["content"][4]["type"], "resource_link", "{files}");
    assert_eq!(files["content"][4]["uri"], uri, "{files}");
    assert!(files["content"][0]["text"]
        .as_str()
        .expect("summary")
        .contains("/output/report.txt (text/plain, 3 bytes)"));
    invalid_input(&out[23], "");
    // A file with both `text` and `content_base64`: a tool error naming the rule.
    invalid_input(&out[24], "exactly one of");
}

/// `result` is an `invalid_input` run whose error message says `says`.
fn invalid_input(result: &Value, says: &str) {
    let execution = &result["structuredContent"];
    assert_eq!(execution["status"], "invalid_input", "{result}");
    let message = execution["error"]["message"].as_str();
    assert!(message.is_some_and(|m| m.contains(says)), "{result}");
}

/// The first `Some` of `found`, asked every 50 ms for `limit` (and once more at its end);
/// `None` when it never came.
pub(crate) fn within<T>(limit: Duration, mut found: impl FnMut() -> Option<T>) -> Option<T> {
    let until = Instant::now() + limit;
    loop {
        if let Some(value) = found() {
            return Some(value);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`processes_with_env`] once none is left, or after 10 s (killed processes take a
/// moment to go on a busy machine).
fn processes_with_env_after_exit(marker: &str) -> usize {
    let none = || (processes_with_env(marker) == 0).then_some(0);
    within(Duration::from_secs(10), none).unwrap_or_else(|| processes_with_env(marker))
}

fn processes_with_env(marker: &str) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read(e.path().join("environ"))
                .is_ok_and(|env| env.windows(marker.len()).any(|w| w == marker.as_bytes()))
        })
        .count()
}

#[test]
fn stdio_serves_a_real_client_and_stops_its_upstreams() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = format!("sandpy-stdio-{}", std::process::id());
    let config = config_file(dir.path(), &marker);
    let (out, status, _) = mcp_client(
        &[
            "stdio",
            env!("CARGO_BIN_EXE_sandpy"),
            "serve",
            "--config",
            &config,
        ],
        &requests(),
    );
    assert_eq!(status, 0, "{out}");
    check_responses(&out);
    assert_eq!(
        processes_with_env_after_exit(&marker),
        0,
        "upstream servers were left running"
    );
    let audit = std::fs::read_to_string(dir.path().join("audit.jsonl")).expect("audit log");
    assert!(
        audit
            .lines()
            .filter(|l| l.contains("\"kind\":\"execution\""))
            .count()
            >= 5,
        "{audit}"
    );
}

pub(crate) struct Server(pub std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `sandpy serve --http 127.0.0.1:0`; returns the child and its URL.
/// Wait until the server at `url` lists its upstream servers as ready: on a loaded
/// machine `npx` may take longer to start one than `list_tools` waits (5 s).
fn wait_for_upstreams(url: &str, token: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let (out, _, _) = mcp_client(&["http", url, token], &json!([{"method": "list_tools"}]));
        let description = out[0]["tools"][0]["description"]
            .as_str()
            .unwrap_or_default();
        if !description.contains("(starting)") {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "upstreams never started: {description}"
        );
    }
}

pub(crate) fn http_server(extra: &[&str]) -> (Server, String) {
    let (server, url, _) = http_server_with(sandpy(), extra);
    (server, url)
}

/// An [`http_server`] with no upstream servers (an empty config of its own, in the returned
/// folder, kept while it runs) and the address it listens on, for a proxy in front of it.
pub(crate) fn http_server_without_upstreams() -> (tempfile::TempDir, Server, std::net::SocketAddr) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config.json");
    std::fs::write(&config, r#"{"mcpServers": {}}"#).expect("config");
    let (server, url) = http_server(&["--config", &config.display().to_string()]);
    let address = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .parse()
        .expect("the server's address");
    (dir, server, address)
}

/// [`http_server`] from `command` (a `sandpy()` with its environment set); also returns
/// everything the server writes to stderr, as it comes.
pub(crate) fn http_server_with(
    mut command: std::process::Command,
    extra: &[&str],
) -> (Server, String, Arc<Mutex<String>>) {
    let mut child = command
        .args(["serve", "--http", "127.0.0.1:0"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sandpy serve");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let log = Arc::new(Mutex::new(String::new()));
    let keep = |log: &Mutex<String>, line: &str| {
        let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
        log.push_str(line);
        log.push('\n');
    };
    let url = loop {
        let line = lines
            .next()
            .expect("sandpy serve exited early")
            .expect("stderr line");
        keep(&log, &line);
        if let Some(url) = line.strip_prefix("sandpy: serving MCP at ") {
            break url.to_string();
        }
    };
    let kept = log.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            keep(&kept, &line);
        }
    });
    (Server(child), url, log)
}

#[test]
fn http_serves_a_real_client_with_a_bearer_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = format!("sandpy-http-{}", std::process::id());
    let config = config_file(dir.path(), &marker);
    let (mut server, url) = http_server(&["--config", &config, "--token", "s3cret"]);
    wait_for_upstreams(&url, "agent-token");
    // A configured tenant's token: sessions, saves (in the tenant's folder) and all.
    let (out, status, stderr) = mcp_client(&["http", &url, "agent-token"], &requests());
    assert_eq!(status, 0, "{out}");
    check_responses(&out);
    assert!(
        !stderr.contains("Session termination failed"),
        "the session's DELETE must answer 200 or 204: {stderr}"
    );
    assert!(dir.path().join("saved/agent/nb.session.json").is_file());
    // The single token lets a client in as a tenant of its own (its MCP session): it sees
    // none of the agent's sessions, and cannot save (a save would outlive its owner).
    let (out, status, _) = mcp_client(
        &["http", &url, "s3cret"],
        &json!([
            {"method": "call_tool", "name": "list_sessions", "arguments": {}},
            {"method": "call_tool", "name": "run_python", "arguments": {"code": "'y' in globals()", "session_id": "s4"}},
            {"method": "call_tool", "name": "save_session", "arguments": {"session_id": "s4", "name": "nb"}}
        ]),
    );
    assert_eq!(status, 0, "{out}");
    assert_eq!(out[0]["structuredContent"]["sessions"], json!([]), "{out}");
    assert_eq!(out[1]["structuredContent"]["return_value"], false, "{out}");
    assert!(
        out[2]["error"]
            .as_str()
            .is_some_and(|e| e.contains("sandpy.tenants")),
        "{out}"
    );
    let audit = std::fs::read_to_string(dir.path().join("audit.jsonl")).expect("audit log");
    assert!(audit.contains(r#""tenant":"tenant:agent""#), "{audit}");
    assert!(audit.contains(r#""tenant":"client-"#), "{audit}");
    let (out, status, _) = mcp_client(&["http", &url, "wrong"], &json!([{"method": "list_tools"}]));
    assert_eq!(status, 3, "a wrong token must not connect: {out}");
    let (out, status, _) = mcp_client(&["http", &url], &json!([{"method": "list_tools"}]));
    assert_eq!(status, 3, "no token must not connect: {out}");
    for authorization in [
        None,
        Some("Bearer wrong"),
        Some("Bearer s3cret-but-longer"),
        Some("s3cret"),
        Some("bearer wrong"),
        Some("BEARER wrong"),
        Some("Basic s3cret"),
    ] {
        assert!(
            raw_post(&url, authorization).starts_with("HTTP/1.1 401"),
            "{authorization:?} got in"
        );
    }
    for authorization in ["Bearer s3cret", "bearer s3cret", "BEARER s3cret"] {
        let answer = raw_post(&url, Some(authorization));
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "the scheme is case-insensitive: {authorization:?} got {answer}"
        );
    }

    // SIGTERM: a clean shutdown that stops the upstream servers too.
    assert!(processes_with_env(&marker) > 0);
    signal(server.0.id(), "TERM");
    let status = server.0.wait().expect("wait");
    assert!(
        status.success(),
        "sandpy serve exits 0 on SIGTERM: {status}"
    );
    assert_eq!(
        processes_with_env_after_exit(&marker),
        0,
        "upstream servers were left running"
    );
}

/// A connection to `address` that has sent `request`, its answer waited for 10 s at most.
fn sent(address: &str, request: &str) -> std::net::TcpStream {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream.write_all(request.as_bytes()).expect("send");
    stream
}

/// A bare `initialize` POST, to read the status line the server answers with.
pub(crate) fn raw_post(url: &str, authorization: Option<&str>) -> String {
    use std::io::Read;
    let address = url.trim_start_matches("http://").trim_end_matches("/mcp");
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = sent(address, &request);
    let mut response = vec![0u8; 64];
    let n = stream.read(&mut response).expect("read");
    String::from_utf8_lossy(&response[..n]).into_owned()
}

#[test]
fn http_beyond_loopback_requires_a_token() {
    let out = sandpy()
        .args(["serve", "--http", "0.0.0.0:0"])
        .output()
        .expect("sandpy");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("not a loopback address") && stderr.contains("token"),
        "{stderr}"
    );
}

/// A config whose one server, `fake`, is `sandpy-mcp/tests/fake_upstream.py` started with a
/// background child: returns the config's path and the files the server and its child
/// write their pids to (it also writes each tool called to `calls` in `dir`).
pub(crate) fn fake_upstream_config(dir: &std::path::Path) -> (String, PathBuf, PathBuf) {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sandpy-mcp/tests/fake_upstream.py");
    let (server, child) = (dir.join("server.pid"), dir.join("child.pid"));
    let calls = dir.join("calls");
    let config = json!({"mcpServers": {"fake": {"command": "python3", "args": [
        script, "--pidfile", server, "--grandchild", child, "--calls", calls]}}});
    let path = dir.join("fake.mcp.json");
    std::fs::write(&path, config.to_string()).expect("config");
    (path.to_string_lossy().into_owned(), server, child)
}

/// The pid written to `path`, waiting for it.
pub(crate) fn read_pid(path: &std::path::Path) -> u32 {
    let pid = || std::fs::read_to_string(path).ok()?.parse().ok();
    within(Duration::from_secs(60), pid).unwrap_or_else(|| panic!("no pid in {}", path.display()))
}

/// Wait for `path` to have some text.
pub(crate) fn wait_for_text(path: &std::path::Path) {
    let text = || {
        std::fs::read_to_string(path)
            .is_ok_and(|t| !t.is_empty())
            .then_some(())
    };
    within(Duration::from_secs(60), text)
        .unwrap_or_else(|| panic!("nothing in {}", path.display()));
}

/// Whether `pid` runs (a zombie does not).
pub(crate) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(") ")
                .map(|(_, rest)| !rest.starts_with('Z'))
        })
        .unwrap_or(false)
}

pub(crate) fn signal(pid: u32, name: &str) {
    let sent = std::process::Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
}

/// Wait for `child` to exit, at most `limit`.
pub(crate) fn exits_within(
    child: &mut std::process::Child,
    limit: Duration,
) -> Option<std::process::ExitStatus> {
    within(limit, || child.try_wait().expect("try_wait"))
}

/// Whether none of `pids` runs, waiting up to 5 s for them to go.
pub(crate) fn none_left(pids: &[u32]) -> bool {
    let gone = || (!pids.iter().any(|pid| alive(*pid))).then_some(());
    within(Duration::from_secs(5), gone).is_some()
}

#[test]
fn sigterm_ends_stdio_serve_with_stdin_open_and_kills_the_upstream_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, server_pid, child_pid) = fake_upstream_config(dir.path());
    let mut serve = Server(
        sandpy()
            .args(["serve", "--config", &config])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sandpy serve"),
    );
    let stdin = serve.0.stdin.take(); // kept open: the client has not gone
    let pids = [read_pid(&server_pid), read_pid(&child_pid)];
    assert!(pids.iter().all(|pid| alive(*pid)));
    signal(serve.0.id(), "TERM");
    let status = exits_within(&mut serve.0, Duration::from_secs(10))
        .expect("sandpy serve still runs 10 s after SIGTERM with its stdin open");
    assert!(status.success(), "{status}");
    assert!(
        none_left(&pids),
        "the upstream or its child outlived the server: {pids:?}"
    );
    drop(stdin);
}

/// Over HTTP the first signal drains (runs in flight get their grace) and a second one
/// ends the server at once, killing the upstream's process group all the same.
#[test]
fn a_second_signal_ends_a_draining_http_serve_at_once_and_kills_the_upstream_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, server_pid, child_pid) = fake_upstream_config(dir.path());
    add_sandpy_section(&config, json!({"drain_grace_ms": 60000}));
    let (mut serve, url) = http_server(&["--config", &config]);
    let pids = [read_pid(&server_pid), read_pid(&child_pid)];
    let client = std::thread::spawn(move || {
        let code = "call_mcp_tool('mcp__fake__ping', {})\nimport time\ntime.sleep(120)";
        let long = json!([{"method": "call_tool", "name": "run_python",
                           "arguments": {"code": code}}]);
        mcp_client(&["http", &url], &long)
    });
    wait_for_text(&dir.path().join("calls")); // the run is going: it called the tool
    signal(serve.0.id(), "INT");
    // Draining: the run may go on for its grace.
    assert!(exits_within(&mut serve.0, Duration::from_secs(1)).is_none());
    signal(serve.0.id(), "INT");
    let status = exits_within(&mut serve.0, Duration::from_secs(10))
        .expect("sandpy serve --http still runs 10 s after a second SIGINT");
    assert_eq!(status.code(), Some(130), "{status}");
    assert!(
        none_left(&pids),
        "the upstream or its child outlived the server: {pids:?}"
    );
    let (out, _, _) = client.join().expect("client");
    assert!(
        !out.to_string().contains(r#""status":"ok""#),
        "the run was cut short, not answered: {out}"
    );
}

/// Put `sandpy` as the `sandpy` section of the config file at `path`.
pub(crate) fn add_sandpy_section(path: &str, sandpy: Value) {
    let text = std::fs::read_to_string(path).expect("config");
    let mut config: Value = serde_json::from_str(&text).expect("config JSON");
    config["sandpy"] = sandpy;
    std::fs::write(path, config.to_string()).expect("config");
}

/// A `run_python` call that carries a `progressToken` (the official SDK's
/// `progress_callback`) gets the program's output as `notifications/progress` while it
/// runs: the first line arrives while the program still sleeps. Without a token nothing is
/// sent, and the result is the same either way.
#[test]
fn run_python_streams_output_as_progress_when_asked() {
    let code = "import time\nprint('first')\ntime.sleep(1.5)\nprint('second')\n42";
    let call = |progress: bool| {
        json!({"method": "call_tool", "name": "run_python", "progress": progress,
               "arguments": {"code": code}})
    };
    let (out, status, stderr) = mcp_client(
        &["stdio", env!("CARGO_BIN_EXE_sandpy"), "serve"],
        &json!([call(true), call(false)]),
    );
    assert_eq!(status, 0, "{out}\n{stderr}");
    for result in out.as_array().expect("results") {
        assert_eq!(
            result["structuredContent"]["stdout"], "first\nsecond\n",
            "{out}"
        );
        assert_eq!(result["structuredContent"]["return_value"], 42, "{out}");
    }
    let progress = out[0]["_progress"].as_array().expect("progress");
    let streamed: String = progress
        .iter()
        .map(|p| p["message"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(streamed, "first\nsecond\n", "{out}");
    let first = progress[0]["before_result_s"].as_f64().unwrap_or_default();
    assert!(
        first > 1.0,
        "the first line came {first} s before the result: {out}"
    );
    assert_eq!(out[1]["_progress"], Value::Null, "{out}");
}

/// `GET` `path` on the server of `url`: the status line and the body.
pub(crate) fn raw_get(url: &str, path: &str) -> (String, String) {
    use std::io::Read;
    let address = url.trim_start_matches("http://").trim_end_matches("/mcp");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    let mut stream = sent(address, &request);
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let status = response.lines().next().unwrap_or_default().to_string();
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default();
    (status, body)
}

/// An orchestrator's probes answer without the bearer token that `/mcp` requires:
/// `/healthz` (the process answers) and `/readyz` (it takes new work).
#[test]
fn http_health_and_readiness_probes_answer_without_a_token() {
    let (_server, url) = http_server(&["--token", "s3cret"]);
    let (status, body) = raw_get(&url, "/healthz");
    assert!(status.contains(" 200 "), "{status}");
    assert!(body.contains("ok"), "{body}");
    let (status, body) = raw_get(&url, "/readyz");
    assert!(status.contains(" 200 "), "{status}");
    assert!(body.contains("ready"), "{body}");
    // The MCP endpoint itself still wants the token.
    assert!(raw_post(&url, None).contains(" 401 "));
}
