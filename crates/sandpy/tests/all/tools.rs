//! Tools through the library API: batching, allowlist, limits (MCP tests live in sandpy-mcp).

use crate::run_with;
use sandpy::tools::{ToolFuture, ToolHost, ToolInfo};
use sandpy::{Limits, RunOptions, Status};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// Real in-process tools: `echo` returns its arguments, `slow` sleeps 100 ms, `sleepy`
/// sleeps 10 s, `fail` errors.
struct LocalTools;

impl ToolHost for LocalTools {
    fn list_tools(&self) -> Vec<ToolInfo> {
        ["echo", "slow", "sleepy", "fail", "big"]
            .iter()
            .map(|n| ToolInfo {
                name: format!("mcp__local__{n}"),
                description: format!("the {n} tool"),
                input_schema: json!({"type": "object"}),
            })
            .collect()
    }

    fn call_tool(&self, name: &str, arguments: Value) -> ToolFuture {
        let name = name.to_string();
        Box::pin(async move {
            match name.as_str() {
                "mcp__local__echo" => Ok(arguments),
                "mcp__local__big" => Ok(json!("x".repeat(5000))),
                "mcp__local__slow" => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Ok(json!("slept"))
                }
                "mcp__local__sleepy" => {
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    Ok(json!("woke up"))
                }
                _ => Err("the tool failed on purpose".into()),
            }
        })
    }
}

fn options() -> RunOptions {
    RunOptions {
        tools: Some(Arc::new(LocalTools)),
        ..RunOptions::default()
    }
}

#[test]
fn sync_and_async_calls_and_namespace() {
    let e = run_with(
        "def helper():\n    return call_mcp_tool('mcp__local__echo', {'x': 1})\n\
         a = helper()\nb = await call_mcp_tool('mcp__local__echo', y=2)\nc = await tools.local.echo(z=3)\n\
         pending = call_mcp_tool('mcp__local__echo', {})\n[a, b, c, type(pending).__name__, await pending]",
        &options(),
    );
    assert_eq!(
        e.return_value,
        Some(json!([{"x": 1}, {"y": 2}, {"z": 3}, "Future", {}])),
        "{e:?}"
    );
    assert_eq!(e.tool_calls, 4);
    let e = run_with(
        "[call_mcp_tool('mcp__local__echo', {'x': 1}), tools.local.echo({'y': 2})]",
        &options(),
    );
    assert_eq!(e.return_value, Some(json!([{"x": 1}, {"y": 2}])), "{e:?}");
}

#[test]
fn gather_runs_a_batch_concurrently() {
    // Timed inside the run: one after another, ten 100 ms calls take a second or more;
    // the run's start, slow on a busy machine, is not in the figure.
    let e = run_with(
        "import asyncio, time\nstarted = time.monotonic()\n\
         r = await asyncio.gather(*(call_mcp_tool('mcp__local__slow') for _ in range(10)))\n\
         [r, time.monotonic() - started]",
        &options(),
    );
    let value = e.return_value.clone().expect("a value");
    assert_eq!(value[0], json!(vec!["slept"; 10]), "{e:?}");
    let seconds = value[1].as_f64().expect("seconds");
    assert!(seconds < 0.9, "the ten calls took {seconds} s");
}

#[test]
fn failing_tool_raises_tool_error_with_its_message() {
    let e = run_with("try:\n    call_mcp_tool('mcp__local__fail')\nexcept ToolError as e:\n    err = [e.tool, str(e)]\nerr", &options());
    assert_eq!(
        e.return_value,
        Some(json!(["mcp__local__fail", "the tool failed on purpose"]))
    );
    let e = run_with("call_mcp_tool('mcp__local__fail')", &options());
    let error = e.error.expect("an error");
    assert_eq!(
        (error.kind.as_str(), error.message.as_str()),
        ("ToolError", "the tool failed on purpose")
    );
}

#[test]
fn allowlist_hides_and_refuses() {
    let options = RunOptions {
        allowed_tools: Some(vec!["mcp__local__e*".into()]),
        ..options()
    };
    let e = run_with(
        "names = [t['name'] for t in discover_mcp_tools()]\ntry:\n    call_mcp_tool('mcp__local__slow')\nexcept ToolError as e:\n    err = str(e)\n[names, err]",
        &options,
    );
    let value = e.return_value.expect("value");
    assert_eq!(value[0], json!(["mcp__local__echo"]));
    assert!(
        value[1].as_str().unwrap().contains("mcp__local__e*"),
        "{value}"
    );
}

#[test]
fn unknown_tools_and_search() {
    let e = run_with(
        "try:\n    call_mcp_tool('mcp__local__nope')\nexcept ToolError as e:\n    err = str(e)\n[err, [t['name'] for t in search_tools('slow')], get_tool_schema('mcp__local__echo')]",
        &options(),
    );
    let value = e.return_value.expect("value");
    assert!(value[0].as_str().unwrap().contains("unknown tool"));
    assert_eq!(value[1], json!(["mcp__local__slow"]));
    assert_eq!(value[2], json!({"type": "object"}));
    // The compact form: name, first description line, argument types; no schema.
    let e = run_with("search_tools('sleeping', limit=5)", &options());
    assert_eq!(
        e.return_value,
        Some(
            json!([{"name": "mcp__local__sleepy", "description": "the sleepy tool", "arguments": {}}])
        ),
        "{e:?}"
    );
}

#[test]
fn tool_call_limit_ends_the_run() {
    let options = RunOptions {
        limits: Limits {
            tool_calls: 5,
            ..Limits::default()
        },
        ..options()
    };
    let e = run_with(
        "for i in range(6):\n    call_mcp_tool('mcp__local__echo', {'i': i})",
        &options,
    );
    assert_eq!(e.status, Status::ToolCallLimit, "{e:?}");
    assert_eq!(e.tool_calls, 5);
}

#[test]
fn timeout_covers_tool_time() {
    let options = RunOptions {
        limits: Limits {
            timeout: Duration::from_millis(250),
            ..Limits::default()
        },
        ..options()
    };
    let e = run_with(
        "for _ in range(10):\n    call_mcp_tool('mcp__local__slow')",
        &options,
    );
    assert_eq!(e.status, Status::Timeout);
}

/// Options with these run and tool-call time limits.
fn timed(timeout_ms: u64, tool_timeout_ms: u64) -> RunOptions {
    RunOptions {
        limits: Limits {
            timeout: Duration::from_millis(timeout_ms),
            tool_timeout: Duration::from_millis(tool_timeout_ms),
            ..Limits::default()
        },
        ..options()
    }
}

#[test]
fn a_slow_tool_fails_with_tool_error_while_the_run_has_time_left() {
    let e = run_with(
        "try:\n    call_mcp_tool('mcp__local__sleepy')\nexcept ToolError as e:\n    err = str(e)\n\
         [err, call_mcp_tool('mcp__local__echo', {'after': 1})]",
        &timed(5_000, 200),
    );
    assert_eq!(e.status, Status::Ok, "{e:?}");
    assert_eq!(
        e.return_value,
        Some(json!([
            "tool mcp__local__sleepy timed out after 200 ms (tool_timeout_ms)",
            {"after": 1}
        ]))
    );
    assert!(e.duration_ms < 3_000.0, "{} ms", e.duration_ms);
}

#[test]
fn a_run_whose_time_ends_during_a_tool_call_names_the_tool() {
    // The tool's own timeout (60 s) is longer than the run has: the run ends, naming the
    // tool, and the code gets no ToolError to swallow. The run's time counts its start,
    // which a busy machine slows: 1.5 s leaves room for it before the calls.
    let e = run_with(
        "try:\n    call_mcp_tool('mcp__local__sleepy')\nexcept ToolError:\n    pass\n'swallowed'",
        &timed(1500, 60_000),
    );
    assert_eq!(e.status, Status::Timeout, "{e:?}");
    assert_eq!(e.return_value, None);
    assert_eq!(
        e.error.expect("an error").message,
        "the run exceeded its wall-clock limit of 1500 ms while waiting for mcp__local__sleepy"
    );
    assert!(e.duration_ms < 5_000.0, "{} ms", e.duration_ms);

    // Only the calls still out are named: `slow` answered after 100 ms.
    let e = run_with(
        "import asyncio\nawait asyncio.gather(call_mcp_tool('mcp__local__slow'), \
         call_mcp_tool('mcp__local__sleepy'), call_mcp_tool('mcp__local__sleepy'))",
        &timed(1500, 60_000),
    );
    assert_eq!(
        e.error.expect("an error").message,
        "the run exceeded its wall-clock limit of 1500 ms while waiting for mcp__local__sleepy (2 calls)"
    );

    // A run that times out outside a tool call names none, even after calling tools.
    let e = run_with(
        "call_mcp_tool('mcp__local__slow')\nwhile True: pass",
        &timed(1500, 60_000),
    );
    assert_eq!(
        e.error.expect("an error").message,
        "the run exceeded its wall-clock limit of 1500 ms"
    );
}

#[test]
fn the_tool_timeout_is_cut_to_what_the_run_has_left() {
    // 1.5 s of tool timeout, but after sleeping 0.75 s the run has only ~0.75 s left (less
    // its start): the second call is cut by the run's deadline, not failed by the tool
    // timeout.
    let e = run_with(
        "import time\ntry:\n    call_mcp_tool('mcp__local__sleepy')\nexcept ToolError as e:\n    print(e)\n\
         time.sleep(0.75)\ntry:\n    call_mcp_tool('mcp__local__sleepy')\nexcept ToolError as e:\n    print('second', e)",
        &timed(3000, 1500),
    );
    assert_eq!(e.status, Status::Timeout, "{e:?}");
    assert_eq!(
        e.stdout,
        "tool mcp__local__sleepy timed out after 1500 ms (tool_timeout_ms)\n"
    );
    assert_eq!(
        e.error.expect("an error").message,
        "the run exceeded its wall-clock limit of 3000 ms while waiting for mcp__local__sleepy"
    );
}

#[test]
fn no_tools_configured() {
    let e = run_with(
        "try:\n    call_mcp_tool('mcp__x__y')\nexcept ToolError as e:\n    err = str(e)\nerr",
        &RunOptions::default(),
    );
    assert!(e
        .return_value
        .unwrap()
        .as_str()
        .unwrap()
        .contains("no tools"));
}

#[test]
fn tool_results_and_arguments_have_a_size_cap() {
    let options = RunOptions {
        limits: Limits {
            tool_result_bytes: 1000,
            ..Limits::default()
        },
        ..options()
    };
    let code = "out = []\nfor name, args in [('mcp__local__big', {}), ('mcp__local__echo', {'a': 'y' * 2000}), ('mcp__local__echo', {'a': 'ok'})]:\n\
                \x20   try:\n        out.append(call_mcp_tool(name, args))\n    except ToolError as e:\n        out.append(str(e))\nout";
    let e = run_with(code, &options);
    let v = e.return_value.expect("value");
    assert_eq!(
        v[0],
        json!("result of mcp__local__big is 5002 bytes, over the limit of 1000 bytes")
    );
    assert!(
        v[1].as_str().unwrap().starts_with(
            "arguments of mcp__local__echo are 2009 bytes, over the limit of 1000 bytes"
        ),
        "{v}"
    );
    assert_eq!(v[2], json!({"a": "ok"}));
}
