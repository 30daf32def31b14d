//! Attacks by an upstream server (`tests/hostile_upstream.py`, raw JSON-RPC over stdio):
//! odd tool names, schemas that are too deep, too big or loop, tool lists that never end,
//! answers too big to hold. Each test ends by calling `echo` through the same hub.

use crate::{block_on, config, run_with_hub};
use sandpy::tools::ToolHost;
use sandpy::{Limits, RunOptions, Status};
use sandpy_mcp::Hub;
use serde_json::json;
use std::time::Duration;

/// The hostile server in `mode` as the only upstream, named `bad`.
pub(crate) fn hostile(mode: &[&str]) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/hostile_upstream.py");
    let mut args = vec![json!(script)];
    args.extend(mode.iter().map(|m| json!(m)));
    json!({"mcpServers": {"bad": {"command": "python3", "args": args}}}).to_string()
}

/// 20 s for the run: an answer that were dropped would make it time out (the tool's own
/// timeout is 60 s), so `Status::Ok` means every refusal came back as an answer.
fn options() -> RunOptions {
    RunOptions::with_limits(Limits {
        timeout: Duration::from_secs(20),
        ..Limits::default()
    })
}

const ECHO: &str = "call_mcp_tool('mcp__bad__echo', {'message': 'still here'})";

#[test]
fn odd_names_and_bad_schemas_skip_those_tools_not_the_server() {
    block_on(async {
        let hub = Hub::start(&config(&hostile(&["odd-tools"]))).await;
        let status = &hub.servers()[0].status;
        assert_eq!(
            status, "ready (11 tools; 5 skipped for bad names or schemas)",
            "{status}"
        );
        let names: Vec<String> = hub.list_tools().into_iter().map(|t| t.name).collect();
        let expected = [
            "__class__",
            "__dict__",
            "_private",
            "a-b",
            "a.b",
            "blob",
            "cycle",
            "deep_result",
            "echo",
            "error_blob",
            "fail_blob",
        ];
        let expected: Vec<String> = expected.iter().map(|n| format!("mcp__bad__{n}")).collect();
        assert_eq!(names, expected);
        assert_eq!(
            hub.explain_missing("mcp__bad__deep_schema"),
            "tool \"mcp__bad__deep_schema\" of server bad was skipped when its tools were listed: its inputSchema is nested more than 64 levels deep"
        );
        let huge = hub.explain_missing("mcp__bad__huge_schema");
        assert!(
            huge.contains("its inputSchema is 3000")
                && huge.contains("over the limit of 262144 bytes"),
            "{huge}"
        );
        assert!(
            hub.explain_missing("mcp__bad__a\nb").ends_with(
                "its name holds '\\n'; tool names may hold only A-Z, a-z, 0-9, _, - and ."
            ),
            "{}",
            hub.explain_missing("mcp__bad__a\nb")
        );
        assert!(hub
            .explain_missing("mcp__bad__")
            .ends_with("its name is empty"));
        let long = format!("mcp__bad__{}", "x".repeat(5000));
        assert!(hub
            .explain_missing(&long)
            .ends_with("its name is 5000 characters long, over the limit of 128"));
        // Where the model looks: the schema lookup and the call say why.
        let code = format!(
            "out = []\nfor f in (lambda: get_tool_schema('mcp__bad__deep_schema'), lambda: call_mcp_tool('mcp__bad__deep_schema', {{}})):\n\
             \x20   try:\n        f()\n    except ToolError as e:\n        out.append(str(e))\nout + [{ECHO}]"
        );
        let e = run_with_hub(&hub, &code, options()).await;
        let skipped = "tool \"mcp__bad__deep_schema\" of server bad was skipped when its tools were listed: its inputSchema is nested more than 64 levels deep";
        assert_eq!(
            e.return_value,
            Some(json!([skipped, skipped, "still here"])),
            "{e:#?}"
        );
        hub.shutdown().await;
    });
}

#[test]
fn a_ref_cycle_in_a_schema_is_not_followed() {
    block_on(async {
        let hub = Hub::start(&config(&hostile(&["odd-tools"]))).await;
        // jsonschema would follow #/$defs/a -> #/$defs/b -> #/$defs/a without end (~4 GB/s);
        // the hub leaves the arguments to the server.
        let code = format!("[call_mcp_tool('mcp__bad__cycle', {{'x': 1}}), {ECHO}]");
        let e = run_with_hub(&hub, &code, options()).await;
        assert_eq!(
            e.return_value,
            Some(json!(["called cycle", "still here"])),
            "{e:#?}"
        );
        hub.shutdown().await;
    });
}

#[test]
fn oversized_answers_are_refused_as_they_arrive_naming_tool_size_and_limit() {
    block_on(async {
        let hub = Hub::start(&config(&hostile(&["odd-tools"]))).await;
        let code = format!(
            "import asyncio\n\
             async def attempt(name, **args):\n\
             \x20   try:\n        return await call_mcp_tool(name, args)\n    except ToolError as e:\n        return str(e)\n\
             gathered = await asyncio.gather(*(attempt('mcp__bad__blob', n=15 << 20) for _ in range(40)))\n\
             singles = [await attempt('mcp__bad__blob', n=20 << 20), await attempt('mcp__bad__blob', n=20 << 20, id_last=True),\n\
             \x20          await attempt('mcp__bad__fail_blob', n=15 << 20), await attempt('mcp__bad__error_blob', n=9 << 20),\n\
             \x20          await attempt('mcp__bad__deep_result', n=300), len(await attempt('mcp__bad__blob', n=1 << 20))]\n\
             [sorted(set(gathered)), len(gathered), singles, await {ECHO}]"
        );
        let e = run_with_hub(&hub, &code, options()).await;
        assert_eq!(e.status, Status::Ok, "{e:#?}");
        let v = e.return_value.clone().expect("a value");
        assert_eq!(
            v[0],
            json!(["the result of mcp__bad__blob is 15728642 bytes, over the limit of 8388608 bytes (max_tool_result_bytes)"]),
            "{e:#?}"
        );
        assert_eq!(v[1], json!(40));
        let limit = 2 * (8 << 20) + 64 * 1024;
        let tail = "bytes on a message from an upstream (twice max_tool_result_bytes, plus 64 KiB); nothing of it was kept";
        assert_eq!(
            v[2][0],
            json!(format!(
                "the answer of mcp__bad__blob is over the limit of {limit} {tail}"
            ))
        );
        let whole = r#"{"result": {"content": [{"type": "text", "text": ""}], "isError": false}, "jsonrpc": "2.0", "id": "#.len();
        let id_last = v[2][1].as_str().expect("text");
        assert!(
            id_last.starts_with("the answer of mcp__bad__blob is 209")
                && id_last.ends_with(&format!("bytes, over the limit of {limit} {tail}")),
            "{id_last}"
        );
        let size: usize = id_last["the answer of mcp__bad__blob is ".len()..]
            .split(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .expect("a size");
        assert!(
            (20 << 20) + whole < size && size < (20 << 20) + whole + 10,
            "{size}"
        );
        assert_eq!(
            v[2][2],
            json!("the error message of mcp__bad__fail_blob is 15728641 bytes, over the limit of 8388608 bytes (max_tool_result_bytes)")
        );
        assert_eq!(
            v[2][3],
            json!("the error message of mcp__bad__error_blob is 9437184 bytes, over the limit of 8388608 bytes (max_tool_result_bytes)")
        );
        assert_eq!(
            v[2][4],
            json!("the result of mcp__bad__deep_result is nested more than 100 levels deep")
        );
        assert_eq!(v[2][5], json!(1 << 20), "a result under the limit passes");
        assert_eq!(v[3], json!("still here"));
        hub.shutdown().await;
    });
}

#[test]
fn tools_namespace_exposes_only_tools_and_reports_collisions() {
    block_on(async {
        let hub = Hub::start(&config(&hostile(&["odd-tools"]))).await;
        let code = "def attempt(f):\n    try:\n        return repr(f())\n    except AttributeError as e:\n        return 'AttributeError: ' + str(e)\n\
                    [attempt(lambda: tools.bad.__class__), attempt(lambda: tools.bad.__dict__), attempt(lambda: tools.bad._private),\n\
                    \x20attempt(lambda: tools.__class__), attempt(lambda: tools.bad.echo.__globals__), attempt(lambda: tools.bad.a_b),\n\
                    \x20sorted(dir(tools.bad)), tools.bad.echo(message='by attribute'),\n\
                    \x20[call_mcp_tool(n) for n in ('mcp__bad__a-b', 'mcp__bad__a.b', 'mcp__bad____class__', 'mcp__bad___private')]]";
        let e = run_with_hub(&hub, code, options()).await;
        let v = e.return_value.clone().unwrap_or_else(|| panic!("{e:#?}"));
        for (i, attribute) in ["__class__", "__dict__", "_private"].iter().enumerate() {
            let text = v[i].as_str().expect("text");
            assert!(
                text.starts_with(&format!(
                    "AttributeError: server 'bad' has no allowed tool '{attribute}'; available: blob, cycle, deep_result, echo, error_blob, fail_blob"
                )),
                "{text}"
            );
        }
        assert!(
            v[3].as_str()
                .unwrap()
                .starts_with("AttributeError: no MCP server '__class__'"),
            "{}",
            v[3]
        );
        assert_eq!(
            v[4],
            json!("AttributeError: a tool has no attribute '__globals__'; call it")
        );
        assert_eq!(
            v[5],
            json!("AttributeError: tools.bad.a_b is ambiguous: tools mcp__bad__a-b, mcp__bad__a.b all map to it; call one by its full name, e.g. call_mcp_tool('mcp__bad__a-b', ...)")
        );
        assert_eq!(
            v[6],
            json!([
                "blob",
                "cycle",
                "deep_result",
                "echo",
                "error_blob",
                "fail_blob"
            ])
        );
        assert_eq!(v[7], json!("by attribute"));
        assert_eq!(
            v[8],
            json!([
                "called a-b",
                "called a.b",
                "called __class__",
                "called _private"
            ])
        );
        hub.shutdown().await;
    });
}

#[test]
fn a_tool_list_that_never_ends_stops_at_the_page_limit() {
    block_on(async {
        let hub = Hub::start(&config(&hostile(&["endless"]))).await;
        let status = &hub.servers()[0].status;
        assert_eq!(
            status,
            "ready (1001 tools; listing stopped after 100 pages, the server still listing more)"
        );
        let e = run_with_hub(&hub, ECHO, options()).await;
        assert_eq!(e.return_value, Some(json!("still here")), "{e:#?}");
        hub.shutdown().await;
    });
}

#[test]
fn ten_thousand_tools_are_listed_and_called_by_name() {
    block_on(async {
        let hub = Hub::start(&config(&hostile(&["many", "10000"]))).await;
        assert_eq!(hub.servers()[0].status, "ready (10000 tools)");
        let code = format!(
            "r = [tools.bad.tool_9998(i=1), call_mcp_tool('mcp__bad__tool_17'), get_tool_schema('mcp__bad__tool_5')['properties'], len(dir(tools.bad))]\n\
             try:\n    call_mcp_tool('mcp__bad__tool_5', {{'i': 'one'}})\nexcept ToolError as e:\n    r.append(str(e).splitlines()[0])\nr + [{ECHO}]"
        );
        let e = run_with_hub(&hub, &code, options()).await;
        assert_eq!(
            e.return_value,
            Some(json!([
                "called tool_9998",
                "called tool_17",
                {"i": {"type": "integer"}},
                10000,
                "arguments of mcp__bad__tool_5 do not match its inputSchema: at /i: \"one\" is not of type \"integer\"",
                "still here"
            ])),
            "{e:#?}"
        );
        hub.shutdown().await;
    });
}

#[test]
fn an_http_answer_over_the_limit_fails_its_call_at_once_and_the_server_still_answers() {
    block_on(async {
        let server = sandpy_mcp::test_server::TestServer::start(None, None)
            .await
            .expect("test server");
        let text = json!({"mcpServers": {"web": {"type": "http", "url": server.url()}},
                          "sandpy": {"limits": {"max_tool_result_bytes": 262144}}});
        let hub = Hub::start(&config(&text.to_string())).await;
        assert!(
            hub.servers()[0].status.starts_with("ready"),
            "{:?}",
            hub.servers()
        );
        let big = json!({"message": "x".repeat(1 << 20)});
        let refused = hub
            .call_tool("mcp__web__echo", big)
            .await
            .expect_err("over the limit");
        // rmcp's HTTP client refuses the body past the limit (2 x 256 KiB + 64 KiB) without
        // holding it, and closes the connection: the call fails at once, and the next call
        // reconnects. (The answer comes whole, as JSON, from an HTTP server that answers at
        // once, as sandpy's does; as an SSE stream the error said only "Transport closed".)
        let message = &refused.message;
        assert!(
            message.starts_with("server web failed during the call (")
                && message.contains("HTTP response body exceeded the maximum size of 589824 bytes")
                && message.ends_with("); it will be restarted on the next call"),
            "{message}"
        );
        let small = hub
            .call_tool("mcp__web__echo", json!({"message": "still here"}))
            .await;
        assert_eq!(small, Ok(json!("Echo: still here")));
        hub.shutdown().await;
        server.stop().await;
    });
}
