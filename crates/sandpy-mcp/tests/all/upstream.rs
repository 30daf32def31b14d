//! The hub against the MCP reference servers (`npx`), through Python in the sandbox.

use crate::{block_on, config, run_with_hub};
use sandpy::{Limits, RunOptions, Status};
use sandpy_mcp::Hub;
use serde_json::json;
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

pub(crate) const EVERYTHING_PKG: &str = "@modelcontextprotocol/server-everything@2026.8.31";
pub(crate) const MEMORY_PKG: &str = "@modelcontextprotocol/server-memory@2026.8.31";
pub(crate) const FILESYSTEM_PKG: &str = "@modelcontextprotocol/server-filesystem@2026.8.31";

fn everything() -> String {
    everything_with("{}")
}

/// The `everything` server with this `sandpy` section.
fn everything_with(sandpy: &str) -> String {
    format!(
        r#"{{"mcpServers": {{"everything": {{"command": "npx", "args": ["-y", "{EVERYTHING_PKG}"]}}}}, "sandpy": {sandpy}}}"#
    )
}

#[test]
fn tools_are_named_listed_and_called_sync_async_and_by_namespace() {
    block_on(async {
        let hub = Hub::start(&config(&everything())).await;
        assert!(
            hub.servers()[0].status.starts_with("ready"),
            "{:?}",
            hub.servers()
        );
        let e = run_with_hub(
            &hub,
            "names = [t['name'] for t in discover_mcp_tools()]\n\
             def plain():\n    return call_mcp_tool('mcp__everything__echo', {'message': 'sync'})\n\
             a = plain()\nb = await call_mcp_tool('mcp__everything__get-sum', {'a': 2, 'b': 3})\n\
             c = await tools.everything.get_structured_content(location='New York')\n\
             [('mcp__everything__echo' in names), a, b, c, get_tool_schema('mcp__everything__echo')['required']]",
            RunOptions::default(),
        )
        .await;
        assert_eq!(e.status, Status::Ok, "{e:#?}");
        let v = e.return_value.expect("value");
        assert_eq!(v[0], json!(true));
        assert_eq!(v[1], json!("Echo: sync"));
        assert_eq!(v[2], json!("The sum of 2 and 3 is 5."));
        assert!(
            v[3].is_object(),
            "structuredContent is returned as is: {}",
            v[3]
        );
        assert_eq!(v[4], json!(["message"]));
        hub.shutdown().await;
    });
}

#[test]
fn a_tool_with_an_output_schema_carries_its_typed_signature_in_the_sandbox() {
    block_on(async {
        let hub = Hub::start(&config(&everything())).await;
        let e = run_with_hub(
            &hub,
            "import inspect\nf = tools.everything.get_structured_content\n\
             [str(inspect.signature(f)), f.__doc__, search_tools('structured content')[0]['signature']]",
            RunOptions::default(),
        )
        .await;
        assert_eq!(e.status, Status::Ok, "{e:#?}");
        let v = e.return_value.expect("value");
        let signature = v[0].as_str().expect("signature");
        assert!(
            signature.starts_with("(*, location: Literal[")
                && signature.ends_with("]) -> GetStructuredContentResult"),
            "{signature}"
        );
        let doc = v[1].as_str().expect("doc");
        assert!(
            doc.starts_with("# tools.everything.get_structured_content\nclass GetStructuredContentResult(TypedDict):\n")
                && doc.contains("    temperature: float"),
            "{doc}"
        );
        assert!(
            doc.contains(&format!("def get_structured_content{signature}:")),
            "{doc}"
        );
        let bare = v[2].as_str().expect("search result's signature");
        assert!(
            bare.ends_with("-> GetStructuredContentResult: ..."),
            "{bare}"
        );
        hub.shutdown().await;
    });
}

#[test]
fn gather_runs_upstream_calls_concurrently() {
    block_on(async {
        let hub = Hub::start(&config(&everything())).await;
        // Timed inside the run: its start, slow on a busy machine, is not in the figure.
        let code = "import asyncio, time\nstarted = time.monotonic()\n\
                    await asyncio.gather(*(call_mcp_tool('mcp__everything__trigger-long-running-operation', \
                    {'duration': 1, 'steps': 1}) for _ in range(8)))\ntime.monotonic() - started";
        let e = run_with_hub(&hub, code, RunOptions::default()).await;
        assert_eq!(e.status, Status::Ok, "{e:#?}");
        assert_eq!(e.tool_calls, 8);
        let took = e.return_value.and_then(|v| v.as_f64()).expect("seconds");
        assert!(took < 4.0, "eight 1 s calls took {took} s: not concurrent");
        hub.shutdown().await;
    });
}

#[test]
fn schema_violations_unknown_tools_and_allowlist_raise_tool_error() {
    block_on(async {
        let hub = Hub::start(&config(&everything())).await;
        let code = "out = []\nfor name, args in [('mcp__everything__get-sum', {'a': 'x'}), ('mcp__everything__nope', {}), ('mcp__everything__get-env', {})]:\n\
                    \x20   try:\n        call_mcp_tool(name, args)\n        out.append('called')\n\
                    \x20   except ToolError as e:\n        out.append(str(e))\n\
                    out + [[t['name'] for t in discover_mcp_tools()]]";
        let options = RunOptions {
            allowed_tools: Some(vec![
                "mcp__everything__get-sum".into(),
                "mcp__everything__nope".into(),
            ]),
            ..RunOptions::default()
        };
        let e = run_with_hub(&hub, code, options).await;
        let v = e.return_value.expect("value");
        let schema = v[0].as_str().unwrap();
        assert!(
            schema.contains("do not match its inputSchema")
                && schema.contains("at /a")
                && schema.contains("\"b\" is a required property"),
            "{schema}"
        );
        assert!(v[1].as_str().unwrap().contains("unknown tool"), "{}", v[1]);
        assert!(
            v[2].as_str()
                .unwrap()
                .contains("matches none of the allowed_tools patterns"),
            "{}",
            v[2]
        );
        assert_eq!(
            v[3],
            json!(["mcp__everything__get-sum"]),
            "discovery shows only allowed tools"
        );
        hub.shutdown().await;
    });
}

#[test]
fn config_allowlist_applies_to_every_run() {
    block_on(async {
        let hub = Hub::start(&config(&everything_with(
            r#"{"allowed_tools": ["mcp__everything__echo"]}"#,
        )))
        .await;
        let e = run_with_hub(&hub, "try:\n    call_mcp_tool('mcp__everything__get-env')\n    r = 'leaked'\nexcept ToolError as e:\n    r = str(e)\nr", RunOptions::default()).await;
        assert!(e
            .return_value
            .unwrap()
            .as_str()
            .unwrap()
            .contains("not allowed"));
        hub.shutdown().await;
    });
}

#[test]
fn a_hanging_tool_times_out_and_the_run_goes_on() {
    block_on(async {
        let config = config(&everything_with(r#"{"limits": {"tool_timeout_ms": 500}}"#));
        let hub = Hub::start(&config).await;
        let code = "try:\n    call_mcp_tool('mcp__everything__trigger-long-running-operation', {'duration': 30, 'steps': 1})\n    r = 'returned'\n\
                    except ToolError as e:\n    r = str(e)\n[r, call_mcp_tool('mcp__everything__echo', {'message': 'after'})]";
        let started = Instant::now();
        // The config's limits, the tool timeout among them, as the server and CLI pass them.
        let options = RunOptions::with_limits(config.settings.limits.clone());
        let e = run_with_hub(&hub, code, options).await;
        assert!(started.elapsed() < Duration::from_secs(10));
        let v = e.return_value.expect("value");
        assert_eq!(
            v[0],
            json!("tool mcp__everything__trigger-long-running-operation timed out after 500 ms (tool_timeout_ms)")
        );
        assert_eq!(v[1], json!("Echo: after"));
        hub.shutdown().await;
    });
}

#[test]
fn the_run_timeout_covers_slow_tools() {
    block_on(async {
        let hub = Hub::start(&config(&everything())).await;
        // The run's time counts its start, which a busy machine slows: 3 s leaves room.
        let options = RunOptions::with_limits(Limits {
            timeout: Duration::from_secs(3),
            ..Limits::default()
        });
        let e = run_with_hub(&hub, "call_mcp_tool('mcp__everything__trigger-long-running-operation', {'duration': 20, 'steps': 1})", options).await;
        assert_eq!(e.status, Status::Timeout);
        // The tool's own timeout (60 s by default) is longer than the run has: the run
        // ends, naming the tool it was waiting for.
        assert_eq!(
            e.error.expect("an error").message,
            "the run exceeded its wall-clock limit of 3000 ms while waiting for mcp__everything__trigger-long-running-operation"
        );
        hub.shutdown().await;
    });
}

#[test]
fn a_crashed_server_is_restarted_on_the_next_call() {
    block_on(async {
        // The real server, killed by `timeout` 6 s after each start: it dies mid-call.
        let text = format!(
            r#"{{"mcpServers": {{"flaky": {{"command": "timeout", "args": ["-s", "KILL", "6", "npx", "-y", "{EVERYTHING_PKG}"]}}}}}}"#
        );
        let hub = Hub::start(&config(&text)).await;
        let code = "first = call_mcp_tool('mcp__flaky__echo', {'message': 'one'})\n\
                    try:\n    call_mcp_tool('mcp__flaky__trigger-long-running-operation', {'duration': 30, 'steps': 1})\n    mid = 'returned'\n\
                    except ToolError as e:\n    mid = str(e)\n\
                    [first, mid, call_mcp_tool('mcp__flaky__echo', {'message': 'two'})]";
        let options = RunOptions::with_limits(Limits {
            timeout: Duration::from_secs(90),
            ..Limits::default()
        });
        let e = run_with_hub(&hub, code, options).await;
        let v = e.return_value.clone().unwrap_or_else(|| panic!("{e:#?}"));
        assert_eq!(v[0], json!("Echo: one"));
        assert!(v[1].as_str().unwrap().contains("will be restarted"), "{v}");
        assert_eq!(v[2], json!("Echo: two"), "restarted on the next call");
        hub.shutdown().await;
    });
}

#[test]
fn tool_call_limit_with_a_real_server() {
    block_on(async {
        let hub = Hub::start(&config(&everything())).await;
        let e = run_with_hub(&hub, "for i in range(1001):\n    call_mcp_tool('mcp__everything__echo', {'message': str(i)})", RunOptions::default()).await;
        assert_eq!(e.status, Status::ToolCallLimit, "{:?}", e.error);
        assert_eq!(e.tool_calls, 1000);
        hub.shutdown().await;
    });
}

#[test]
fn python_reads_from_one_tool_and_writes_to_another() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("people.csv"),
        "name,role\nAda,engineer\nGrace,admiral\n",
    )
    .expect("write");
    let root = dir
        .path()
        .canonicalize()
        .expect("canonical")
        .display()
        .to_string();
    block_on(async {
        let text = format!(
            r#"{{"mcpServers": {{"fs": {{"command": "npx", "args": ["-y", "{FILESYSTEM_PKG}", "{root}"]}},
                                 "memory": {{"command": "npx", "args": ["-y", "{MEMORY_PKG}"], "env": {{"MEMORY_FILE_PATH": "{root}/memory.jsonl"}}}}}}}}"#
        );
        let hub = Hub::start(&config(&text)).await;
        assert!(
            hub.servers().iter().all(|s| s.status.starts_with("ready")),
            "{:?}",
            hub.servers()
        );
        let code = format!(
            "import csv, io\n\
             text = call_mcp_tool('mcp__fs__read_text_file', {{'path': '{root}/people.csv'}})['content']\n\
             rows = list(csv.DictReader(io.StringIO(text)))\n\
             tools.memory.create_entities(entities=[{{'name': r['name'], 'entityType': 'person', 'observations': [r['role']]}} for r in rows])\n\
             graph = tools.memory.read_graph()\n\
             sorted(e['name'] for e in graph['entities'])"
        );
        let e = run_with_hub(&hub, &code, RunOptions::default()).await;
        assert_eq!(e.return_value, Some(json!(["Ada", "Grace"])), "{e:#?}");
        let e = run_with_hub(
            &hub,
            &format!("call_mcp_tool('mcp__fs__read_text_file', {{'path': '{root}/missing.txt'}})"),
            RunOptions::default(),
        )
        .await;
        assert_eq!(e.status, Status::Error);
        let error = e.error.expect("error");
        assert_eq!(error.kind, "ToolError");
        assert!(
            error.message.contains("missing.txt") || error.message.contains("ENOENT"),
            "the tool's own message: {}",
            error.message
        );
        hub.shutdown().await;
    });
}

#[test]
fn shutdown_leaves_no_server_running() {
    let marker = format!("sandpy-shutdown-{}", std::process::id());
    block_on(async {
        let text = format!(
            r#"{{"mcpServers": {{"everything": {{"command": "npx", "args": ["-y", "{EVERYTHING_PKG}"], "env": {{"SANDPY_MARKER": "{marker}"}}}}}}}}"#
        );
        let hub = Hub::start(&config(&text)).await;
        assert!(processes_with_env(&marker) > 0, "the server runs");
        hub.shutdown().await;
    });
    // Killed processes take a moment to go on a busy machine.
    let until = Instant::now() + Duration::from_secs(10);
    while processes_with_env(&marker) > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        processes_with_env(&marker),
        0,
        "every process of the server is gone"
    );
}

/// Processes whose environment holds `marker`.
fn processes_with_env(marker: &str) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read(e.path().join("environ"))
                .is_ok_and(|env| env.windows(marker.len()).any(|w| w == marker.as_bytes()))
        })
        .count()
}

#[test]
fn a_streamable_http_upstream_with_headers() {
    // The reference server over streamable HTTP, on a free loopback port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("port")
        .local_addr()
        .expect("addr")
        .port();
    let mut server = std::process::Command::new("npx")
        .args(["-y", EVERYTHING_PKG, "streamableHttp"])
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .expect("npx");
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the HTTP server did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = format!(
        r#"{{"mcpServers": {{"web": {{"type": "http", "url": "http://127.0.0.1:{port}/mcp", "headers": {{"X-Sandpy-Test": "1"}}}}}}}}"#
    );
    let value = block_on(async {
        let hub = Hub::start(&config(&text)).await;
        assert!(
            hub.servers()[0].status.starts_with("ready"),
            "{:?}",
            hub.servers()
        );
        let e = run_with_hub(
            &hub,
            "tools.web.echo(message='over http')",
            RunOptions::default(),
        )
        .await;
        hub.shutdown().await;
        e.return_value
    });
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", server.id())])
        .status();
    let _ = server.wait();
    assert_eq!(value, Some(json!("Echo: over http")));
}

/// `crates/sandpy/tests/fixtures/reference_tools.json`, the tool lists sandpy's search
/// relevance tests rank, is what the pinned reference servers list.
#[test]
fn the_search_fixture_is_what_the_reference_servers_list() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../sandpy/tests/fixtures/reference_tools.json"
    );
    let fixture: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("the fixture")).expect("JSON");
    let root = tempfile::tempdir().expect("tempdir");
    let packages = [
        ("fs", FILESYSTEM_PKG),
        ("memory", MEMORY_PKG),
        ("everything", EVERYTHING_PKG),
    ];
    let mut servers = serde_json::Map::new();
    for (name, package) in packages {
        assert_eq!(
            fixture["servers"][name]["package"],
            json!(package),
            "the fixture's pin"
        );
        let mut args = vec![json!("-y"), json!(package)];
        if name == "fs" {
            args.push(json!(root.path()));
        }
        servers.insert(name.into(), json!({"command": "npx", "args": args}));
    }
    block_on(async {
        let hub = Hub::start(&config(&json!({"mcpServers": servers}).to_string())).await;
        let mut live: Vec<serde_json::Value> = sandpy::tools::ToolHost::list_tools(&hub)
            .into_iter()
            .map(|t| json!({"name": t.name, "description": t.description, "inputSchema": t.input_schema}))
            .collect();
        hub.shutdown().await;
        let mut stored: Vec<serde_json::Value> = packages
            .iter()
            .flat_map(|(server, _)| {
                let tools = fixture["servers"][server]["tools"].as_array().expect("tools");
                tools.iter().map(move |t| {
                    let name = t["name"].as_str().expect("name");
                    json!({"name": format!("mcp__{server}__{name}"), "description": t["description"], "inputSchema": t["inputSchema"]})
                })
            })
            .collect();
        let by_name = |a: &serde_json::Value, b: &serde_json::Value| {
            a["name"].as_str().cmp(&b["name"].as_str())
        };
        live.sort_by(by_name);
        stored.sort_by(by_name);
        assert_eq!(live, stored);
    });
}

/// A config with one server, `fake`: `tests/fake_upstream.py` with `args`.
pub(crate) fn fake_upstream(args: &[&str]) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake_upstream.py");
    let args: Vec<&str> = std::iter::once(script)
        .chain(args.iter().copied())
        .collect();
    json!({"mcpServers": {"fake": {"command": "python3", "args": args}}}).to_string()
}

#[test]
fn a_server_that_failed_at_start_is_retried_when_code_uses_it() {
    block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let need = dir.path().join("need");
        let hub = Hub::start(&config(&fake_upstream(&[
            "--need",
            need.to_str().expect("utf-8"),
        ])))
        .await;
        assert!(
            hub.servers()[0].status.starts_with("unavailable"),
            "{:?}",
            hub.servers()
        );
        std::fs::write(&need, "").expect("need");
        // Past the first backoff (1 s): the next use starts it again and waits for it.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let e = run_with_hub(
            &hub,
            "call_mcp_tool('mcp__fake__ping', {})",
            RunOptions::default(),
        )
        .await;
        assert_eq!(e.status, Status::Ok, "{e:#?}");
        assert_eq!(e.return_value, Some(json!("pong")));
        assert!(hub.servers()[0].status.starts_with("ready"));
        hub.shutdown().await;
    });
}

#[test]
fn a_namespace_lookup_waits_for_a_server_still_starting() {
    block_on(async {
        let hub = Hub::launch(&config(&fake_upstream(&[])));
        let e = run_with_hub(&hub, "await tools.fake.ping()", RunOptions::default()).await;
        assert_eq!(e.status, Status::Ok, "{e:#?}");
        assert_eq!(e.return_value, Some(json!("pong")));
        hub.shutdown().await;
    });
}

#[test]
fn a_run_that_times_out_while_a_server_starts_names_what_it_waited_for() {
    block_on(async {
        // A server that never does the handshake (the hub gives it 15 s): a call, and a
        // namespace lookup, wait for it until the run ends.
        let hub = Hub::launch(&config(&fake_upstream(&["--silent"])));
        for (code, waited) in [
            (
                "call_mcp_tool('mcp__fake__ping', {})",
                "the server of mcp__fake__ping to start",
            ),
            ("await tools.fake.ping()", "the tool servers still starting"),
        ] {
            let options = RunOptions::with_limits(Limits {
                timeout: Duration::from_secs(3),
                ..Limits::default()
            });
            let e = run_with_hub(&hub, code, options).await;
            assert_eq!(e.status, Status::Timeout, "{e:#?}");
            assert_eq!(
                e.error.expect("an error").message,
                format!(
                    "the run exceeded its wall-clock limit of 3000 ms while waiting for {waited}"
                )
            );
        }
        hub.shutdown().await;
    });
}
