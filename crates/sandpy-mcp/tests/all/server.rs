//! `SandpyServer` through a real rmcp client, in process (over `tokio::io::duplex`), with
//! no upstream servers: the tool list (snapshot), every tool, and malformed requests.

use crate::{block_on, config, sandbox, text};
use rmcp::model::ErrorCode;
use rmcp::service::RunningService;
use rmcp::{ErrorData, RoleClient, ServiceExt};
use sandpy_mcp::{Hub, SandpyServer};
use serde_json::{json, Value};

/// A client connected to a fresh server, and the folder its sessions are saved in.
struct Connection {
    client: RunningService<RoleClient, ()>,
    _saved: tempfile::TempDir,
}

/// `error` is a protocol error `invalid_params` (-32602) whose message says `says`.
fn assert_invalid_params(error: &ErrorData, says: &str) {
    assert_eq!(error.code, ErrorCode::INVALID_PARAMS, "{error:?}");
    assert!(error.message.contains(says), "{error:?}");
}

impl Connection {
    /// Start a server without upstream servers (saving sessions in a temporary folder)
    /// and connect a client to it.
    async fn open() -> Connection {
        Connection::open_with(json!({})).await
    }

    /// The same, with these keys in the config's `sandpy` section too.
    async fn open_with(sandpy: Value) -> Connection {
        let saved = tempfile::tempdir().expect("tempdir");
        let mut section = json!({"sessions": {"save_dir": saved.path()}});
        if let (Value::Object(section), Value::Object(extra)) = (&mut section, sandpy) {
            section.extend(extra);
        }
        let text = json!({"mcpServers": {}, "sandpy": section});
        let config = config(&text.to_string());
        let hub = Hub::start(&config).await;
        let resolved = config.settings.resolve(None).expect("no policy to resolve");
        let server = SandpyServer::new(sandbox().clone(), hub, &resolved).expect("server");
        let (server_io, client_io) = tokio::io::duplex(1 << 16);
        tokio::spawn(async move {
            let running = server.serve(server_io).await.expect("server starts");
            let _ = running.waiting().await;
        });
        let client = ().serve(client_io).await.expect("client connects");
        Connection {
            client,
            _saved: saved,
        }
    }

    /// Call `tool`; the result as the JSON a client reads, or the protocol error.
    async fn call(&self, tool: &str, arguments: Value) -> Result<Value, ErrorData> {
        crate::call_tool(&self.client, tool, arguments).await
    }

    /// Call `tool`, which must answer with a result (error or not).
    async fn result(&self, tool: &str, arguments: Value) -> Value {
        crate::tool_result(&self.client, tool, arguments).await
    }

    /// `run_python` with `code` alone: its result.
    async fn run(&self, code: &str) -> Value {
        self.result("run_python", json!({"code": code})).await
    }

    /// `run_python` with `code` in session `session`: its result.
    async fn run_in(&self, session: &str, code: &str) -> Value {
        let arguments = json!({"code": code, "session_id": session});
        self.result("run_python", arguments).await
    }

    /// Call `tool`, which must refuse the request as malformed; the error message. Unknown
    /// tools are protocol errors (`invalid_params`); arguments that do not fit a tool are
    /// tool errors the model can correct (`isError`, an `invalid_input` run for the tools
    /// that run code).
    async fn invalid(&self, tool: &str, arguments: Value) -> String {
        match self.call(tool, arguments.clone()).await {
            Err(error) if error.code == ErrorCode::INVALID_PARAMS => error.message.into_owned(),
            Ok(result) if result["isError"] == true => {
                if let Some(execution) = result.get("structuredContent") {
                    assert_eq!(execution["status"], "invalid_input", "{result}");
                    return execution["error"]["message"]
                        .as_str()
                        .unwrap_or_default()
                        .into();
                }
                result["content"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .into()
            }
            other => panic!("{tool} {arguments}: not refused as malformed but {other:?}"),
        }
    }

    /// [`Connection::invalid`] that must be a tool error, not a protocol error.
    async fn tool_error(&self, tool: &str, arguments: Value) -> String {
        let result = self.call(tool, arguments.clone()).await;
        assert!(
            result.is_ok(),
            "{tool} {arguments}: a protocol error {result:?}"
        );
        self.invalid(tool, arguments).await
    }
}

#[test]
fn tool_list_is_declared_by_types() {
    block_on(async {
        let connection = Connection::open().await;
        let info = connection.client.peer_info().expect("initialised");
        let server = info.server_info.as_ref().map(|s| s.name.as_str());
        assert_eq!(server, Some("sandpy"));
        assert!(
            info.instructions
                .as_deref()
                .is_some_and(|i| i.contains("use run_python; find tools with search_tools.")),
            "{info:?}"
        );
        let tools = connection.client.list_tools(None).await.expect("tools");
        let names: Vec<&str> = tools.tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "run_python",
                "call_python_function",
                "search_tools",
                "get_tool_schema",
                "list_sessions",
                "reset_session",
                "close_session",
                "save_session",
                "restore_session",
                "fork_session"
            ],
            "listed running first, then discovery, then sessions"
        );
        let description = tools.tools[0].description.as_deref().unwrap_or_default();
        assert!(
            description.contains("call_mcp_tool")
                && description.ends_with("\nAvailable servers: none configured."),
            "{description}"
        );
        insta::assert_json_snapshot!("tools", tools.tools);
        // One page holds every tool; a cursor the server never gave is invalid (-32602).
        let paged = rmcp::model::PaginatedRequestParams::default().with_cursor(Some("zzz".into()));
        match connection.client.list_tools(Some(paged)).await {
            Err(rmcp::ServiceError::McpError(error)) => {
                assert_invalid_params(&error, "invalid cursor \"zzz\"")
            }
            other => panic!("a made-up cursor: {other:?}"),
        }
    });
}

#[test]
fn run_python_results_are_tool_results_even_when_python_fails() {
    block_on(async {
        let connection = Connection::open().await;
        let ok = connection.run("print('printed')\n6 * 7").await;
        assert_eq!(ok["isError"], false, "{ok}");
        assert_eq!(ok["structuredContent"]["status"], "ok");
        assert_eq!(ok["structuredContent"]["return_value"], 42);
        assert!(text(&ok).contains("printed"), "{ok}");

        let error = connection.run("def f():\n    1/0\nf()").await;
        assert_eq!(error["isError"], true, "a Python error is a tool result");
        assert_eq!(
            error["structuredContent"]["error"]["type"],
            "ZeroDivisionError"
        );
        assert!(text(&error).contains("line 2, in f"), "{error}");

        let timeout = connection
            .result(
                "run_python",
                json!({"code": "while True: pass", "timeout_ms": 300}),
            )
            .await;
        assert_eq!(timeout["isError"], true, "{timeout}");
        assert_eq!(timeout["structuredContent"]["status"], "timeout");

        let refused = connection
            .result(
                "run_python",
                json!({"code": "call_mcp_tool('mcp__x__y', {})", "allowed_tools": ["mcp__x__z"]}),
            )
            .await;
        assert_eq!(refused["isError"], true, "{refused}");
        let message = refused["structuredContent"]["error"]["message"]
            .as_str()
            .expect("message");
        assert!(message.contains("allowed_tools"), "{message}");

        let nulls = connection
            .result(
                "run_python",
                json!({"code": "1", "timeout_ms": null, "allowed_tools": null, "session_id": null, "files": null}),
            )
            .await;
        assert_eq!(nulls["structuredContent"]["status"], "ok", "null is absent");
    });
}

#[test]
fn run_python_takes_files_and_returns_output_files() {
    block_on(async {
        let connection = Connection::open().await;
        let files = connection
            .result(
                "run_python",
                json!({"code": "open('/output/report.txt', 'w').write(open('in.csv').read().upper())\n\
                                open('/output/dot.png', 'wb').write(open('img/dot.png', 'rb').read())",
                       "files": [{"path": "in.csv", "text": "a,b"}, {"path": "img/dot.png", "content_base64": "iVBORw0KGgo="}]}),
            )
            .await;
        assert_eq!(files["isError"], false, "{files}");
        assert_eq!(files["content"][1]["type"], "image", "{files}");
        assert_eq!(files["content"][1]["data"], "iVBORw0KGgo=");
        assert_eq!(files["content"][2]["resource"]["text"], "A,B", "{files}");
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
        assert!(
            text(&files).contains("/output/report.txt (text/plain, 3 bytes)"),
            "{files}"
        );

        let outside = connection
            .result(
                "run_python",
                json!({"code": "1", "files": [{"path": "../x", "text": "a"}]}),
            )
            .await;
        assert_eq!(outside["isError"], true, "{outside}");
        assert_eq!(outside["structuredContent"]["status"], "invalid_input");
    });
}

#[test]
fn long_results_are_cut_and_marked_in_text_and_structured_content() {
    block_on(async {
        let connection = Connection::open().await;
        let code = "print('x' * 50_000)\n[{'customer': f'c{i}', 'total': i} for i in range(5000)]";
        let big = connection.run(code).await;
        let structured = &big["structuredContent"];
        assert_eq!(structured["status"], "ok", "{structured}");
        let stdout = format!("{}[... 30001 more bytes]", "x".repeat(20_000));
        assert_eq!(structured["stdout"], json!(stdout));
        let value: Vec<Value> = (0..5000)
            .map(|i| json!({"customer": format!("c{i}"), "total": i}))
            .collect();
        let full = Value::Array(value).to_string();
        let cut = format!(
            "{}[... {} more bytes]",
            &full[..20_000],
            full.len() - 20_000
        );
        assert_eq!(structured["return_value"], json!(cut));
        assert_eq!(
            structured["truncated"],
            json!({"stdout": 50_001, "return_value": full.len()})
        );
        let text = text(&big);
        assert!(
            text.contains(&format!("--- stdout ---\n{stdout}\n")),
            "{text:.300}"
        );
        assert!(text.contains(&format!("--- return value ---\n{cut}\n")));
        let size = big.to_string().len();
        assert!(size < 90_000, "the whole result is {size} bytes");

        // An output_limit run: a megabyte captured, 20,000 bytes shown.
        let flood = connection.run("print('y' * 2_000_000)").await;
        let structured = &flood["structuredContent"];
        assert_eq!(structured["status"], "output_limit");
        let captured = (1 << 20) + "\n[sandpy: output truncated: limit reached]\n".len();
        assert_eq!(
            structured["stdout"],
            json!(format!(
                "{}[... {} more bytes]",
                "y".repeat(20_000),
                captured - 20_000
            ))
        );
        assert_eq!(structured["truncated"], json!({"stdout": captured}));
        let size = flood.to_string().len();
        assert!(size < 50_000, "the whole result is {size} bytes");

        // Output files come as their own content; structured content keeps their names.
        let files = connection
            .result(
                "run_python",
                json!({"code": "open('/output/a.txt', 'w').write('hello')"}),
            )
            .await;
        assert_eq!(files["content"][1]["resource"]["text"], "hello", "{files}");
        let structured = &files["structuredContent"];
        assert_eq!(structured["files"][0]["name"], "a.txt");
        assert_eq!(structured["files"][0]["content_base64"], "");
        assert_eq!(
            structured["truncated"],
            json!({"files[0].content_base64": 8})
        );

        // Short results are whole, with no `truncated`.
        let short = connection.run("'a' * 100").await;
        assert_eq!(
            short["structuredContent"]["return_value"],
            json!("a".repeat(100))
        );
        assert!(
            short["structuredContent"].get("truncated").is_none(),
            "{short}"
        );
    });
}

#[test]
fn the_config_sets_how_much_the_model_is_shown() {
    block_on(async {
        let connection = Connection::open_with(json!({"model_output": {"text_bytes": 100}})).await;
        let error = connection.run("raise ValueError('e' * 300)").await;
        let structured = &error["structuredContent"];
        assert_eq!(structured["error"]["type"], "ValueError");
        let message = format!("{}[... 200 more bytes]", "e".repeat(100));
        assert_eq!(structured["error"]["message"], json!(message));
        let truncated = structured["truncated"].as_object().expect("truncated");
        assert_eq!(truncated["error.message"], 300);
        assert!(truncated.contains_key("stderr") && truncated.contains_key("error.traceback"));
        // stderr was cut before the traceback's last line: the message is shown apart.
        assert!(
            text(&error).contains(&format!("--- ValueError ---\n{message}\n")),
            "{error}"
        );

        let called = connection
            .result(
                "call_python_function",
                json!({"code": "def f(n):\n    return 'z' * n", "function": "f", "arguments": [150]}),
            )
            .await;
        assert_eq!(
            called["structuredContent"]["return_value"],
            json!(format!("\"{}[... 52 more bytes]", "z".repeat(99))),
            "{called}"
        );
        assert_eq!(
            called["structuredContent"]["truncated"],
            json!({"return_value": 152})
        );
    });
}

#[test]
fn call_python_function_takes_a_list_an_object_or_nothing() {
    block_on(async {
        let connection = Connection::open().await;
        let code = "def score(a, b=0):\n    return a - b\ndef zero():\n    return 0";
        for (arguments, expected) in [
            (json!({"function": "score", "arguments": [5, 2]}), json!(3)),
            (
                json!({"function": "score", "arguments": {"b": 2, "a": 7}}),
                json!(5),
            ),
            (json!({"function": "zero"}), json!(0)),
        ] {
            let mut request = arguments.clone();
            request["code"] = json!(code);
            let result = connection.result("call_python_function", request).await;
            assert_eq!(result["isError"], false, "{arguments}: {result}");
            assert_eq!(result["structuredContent"]["return_value"], expected);
        }
        let error = connection
            .result(
                "call_python_function",
                json!({"code": code, "function": "score", "arguments": [1, 2, 3]}),
            )
            .await;
        assert_eq!(error["isError"], true, "{error}");
        assert_eq!(error["structuredContent"]["error"]["type"], "TypeError");
    });
}

#[test]
fn discovery_without_upstream_servers_finds_nothing() {
    block_on(async {
        let connection = Connection::open().await;
        let found = connection
            .result("search_tools", json!({"query": "sum", "limit": 1}))
            .await;
        assert_eq!(found["isError"], false, "{found}");
        assert_eq!(found["structuredContent"], json!({"tools": []}));

        let unknown = connection
            .result("get_tool_schema", json!({"name": "mcp__everything__echo"}))
            .await;
        assert_eq!(unknown["isError"], true, "{unknown}");
        assert!(
            text(&unknown).contains("no allowed tool named \"mcp__everything__echo\""),
            "{unknown}"
        );
    });
}

#[test]
fn sessions_keep_globals_until_reset_or_closed() {
    block_on(async {
        let connection = Connection::open().await;
        let value = |result: Value| result["structuredContent"]["return_value"].clone();
        connection.run_in("s1", "x = 41").await;
        assert_eq!(
            value(connection.run_in("s1", "x + 1").await),
            42,
            "globals persist"
        );
        assert_eq!(
            value(connection.run_in("other", "'x' in globals()").await),
            false,
            "sessions are apart"
        );

        let listed = connection.result("list_sessions", json!({})).await;
        let mut ids: Vec<&str> = listed["structuredContent"]["sessions"]
            .as_array()
            .expect("sessions")
            .iter()
            .filter_map(|s| s["id"].as_str())
            .collect();
        ids.sort();
        assert_eq!(ids, ["other", "s1"], "{listed}");

        let reset = connection
            .result("reset_session", json!({"session_id": "s1"}))
            .await;
        assert_eq!(
            reset["structuredContent"],
            json!({"session_id": "s1", "reset": true})
        );
        assert_eq!(
            value(connection.run_in("s1", "'x' in globals()").await),
            false
        );

        let closed = connection
            .result("close_session", json!({"session_id": "s1"}))
            .await;
        assert_eq!(
            closed["structuredContent"],
            json!({"session_id": "s1", "closed": true})
        );
        for tool in ["close_session", "reset_session"] {
            let gone = connection.result(tool, json!({"session_id": "s1"})).await;
            assert_eq!(gone["isError"], true, "{tool}: {gone}");
            assert_eq!(text(&gone), "no session \"s1\"");
        }
    });
}

#[test]
fn sessions_are_saved_restored_and_forked() {
    block_on(async {
        let connection = Connection::open().await;
        connection.run_in("s2", "y = 'kept'").await;
        let saved = connection
            .result("save_session", json!({"session_id": "s2", "name": "nb"}))
            .await;
        assert!(
            saved["structuredContent"]["bytes"].as_u64() > Some(0),
            "{saved}"
        );
        let restored = connection
            .result("restore_session", json!({"name": "nb", "session_id": "s3"}))
            .await;
        assert_eq!(
            restored["structuredContent"]["restored"], true,
            "{restored}"
        );
        let forked = connection
            .result(
                "fork_session",
                json!({"session_id": "s3", "new_session_id": "s4"}),
            )
            .await;
        assert_eq!(
            forked["structuredContent"],
            json!({"session_id": "s4", "forked_from": "s3"})
        );
        for session in ["s3", "s4"] {
            let y = connection.run_in(session, "y").await;
            assert_eq!(y["structuredContent"]["return_value"], "kept", "{y}");
        }

        let missing = connection
            .result("save_session", json!({"session_id": "nope", "name": "x"}))
            .await;
        assert_eq!(missing["isError"], true, "{missing}");
        let unsaved = connection
            .result(
                "restore_session",
                json!({"name": "never-saved", "session_id": "s5"}),
            )
            .await;
        assert_eq!(unsaved["isError"], true, "{unsaved}");
        let escape = connection
            .invalid(
                "save_session",
                json!({"session_id": "s2", "name": "../escape"}),
            )
            .await;
        assert!(escape.contains("`name` may use"), "{escape}");
    });
}

#[test]
fn malformed_arguments_are_tool_errors_naming_the_field_and_unknown_tools_protocol_errors() {
    block_on(async {
        let connection = Connection::open().await;
        for (tool, arguments, names) in [
            ("run_python", json!({}), "missing field `code`"),
            ("run_python", json!({"code": 5}), "at /code"),
            (
                "run_python",
                json!({"code": "1", "timeout_ms": 0}),
                "at /timeout_ms",
            ),
            (
                "run_python",
                json!({"code": "1", "timeout_ms": -1}),
                "at /timeout_ms",
            ),
            (
                "run_python",
                json!({"code": "1", "allowed_tools": "a"}),
                "at /allowed_tools",
            ),
            (
                "run_python",
                json!({"code": "1", "files": [{"text": "a"}]}),
                "at /files/0",
            ),
            (
                "run_python",
                json!({"code": "1", "files": [{"path": "x", "text": "a", "content_base64": "YQ=="}]}),
                "`files[0]` needs exactly one of `text` and `content_base64`",
            ),
            (
                "run_python",
                json!({"code": "1", "files": [{"path": "x", "text": "a"}, {"path": "y"}]}),
                "`files[1]` needs exactly one of",
            ),
            (
                "run_python",
                json!({"code": "1", "files": [{"path": "x", "content_base64": "not base64!"}]}),
                "`files[0].content_base64` is not base64",
            ),
            (
                "call_python_function",
                json!({"code": "1", "function": "f", "arguments": 5}),
                "at /arguments",
            ),
            (
                "call_python_function",
                json!({"code": "1"}),
                "missing field `function`",
            ),
            (
                "search_tools",
                json!({"query": "x", "limit": 0}),
                "at /limit",
            ),
            ("search_tools", json!({}), "missing field `query`"),
            ("get_tool_schema", json!({}), "missing field `name`"),
            ("reset_session", json!({}), "missing field `session_id`"),
            (
                "fork_session",
                json!({"session_id": "a"}),
                "missing field `new_session_id`",
            ),
        ] {
            let message = connection.tool_error(tool, arguments.clone()).await;
            assert!(message.contains(names), "{tool} {arguments}: {message}");
        }
        match connection.call("no_such_tool", json!({})).await {
            Err(error) => assert_invalid_params(&error, "unknown tool \"no_such_tool\""),
            Ok(result) => panic!("an unknown tool: not invalid_params but {result}"),
        }
        // The whole message: the tool, where, what was found and what was expected.
        assert_eq!(
            connection
                .tool_error("run_python", json!({"code": "1", "files": [{"path": 3, "text": "a"}]}))
                .await,
            "arguments of run_python do not fit its inputSchema: at /files/0/path: invalid type: integer `3`, expected a string"
        );
    });
}

/// `tier` is in the run tools' `inputSchema` only where the operator lets requests choose
/// it (`sandpy.native.per_run`); elsewhere a request that names one, whatever its value,
/// gets a tool error saying why (the model can correct its call), not a protocol error.
#[test]
fn tier_is_offered_only_where_the_operator_lets_requests_choose_it() {
    block_on(async {
        let tier_in_schemas = |tools: &[rmcp::model::Tool]| -> Vec<Option<Value>> {
            ["run_python", "call_python_function"]
                .iter()
                .map(|name| {
                    let tool = tools.iter().find(|t| t.name == *name).expect("listed");
                    tool.input_schema["properties"].get("tier").cloned()
                })
                .collect()
        };
        let fixed = Connection::open().await;
        let tools = fixed.client.list_tools(None).await.expect("tools").tools;
        assert_eq!(tier_in_schemas(&tools), [None, None]);
        for (tool, arguments) in [
            ("run_python", json!({"code": "1", "tier": "native"})),
            ("run_python", json!({"code": "1", "tier": "wasm"})),
            ("run_python", json!({"code": "1", "tier": "gpu"})),
            (
                "call_python_function",
                json!({"code": "def f(): return 1", "function": "f", "tier": "native"}),
            ),
        ] {
            let message = fixed.tool_error(tool, arguments.clone()).await;
            assert_eq!(
                message,
                "`tier` refused: this server does not let requests choose their tier (sandpy.native.per_run): leave out `tier`",
                "{tool} {arguments}"
            );
        }
        let ran = fixed
            .result("run_python", json!({"code": "6 * 7", "tier": null}))
            .await;
        assert_eq!(ran["structuredContent"]["return_value"], 42, "{ran}");

        let chosen = Connection::open_with(json!({"native": {"per_run": true}})).await;
        let tools = chosen.client.list_tools(None).await.expect("tools").tools;
        for tier in tier_in_schemas(&tools) {
            let tier = tier.expect("offered");
            assert_eq!(tier["enum"], json!(["wasm", "native", null]), "{tier}");
        }
        let message = chosen
            .tool_error("run_python", json!({"code": "1", "tier": "gpu"}))
            .await;
        assert!(
            message.contains("at /tier: unknown variant `gpu`"),
            "{message}"
        );
        let ran = chosen
            .result("run_python", json!({"code": "6 * 7", "tier": "wasm"}))
            .await;
        assert_eq!(ran["structuredContent"]["return_value"], 42, "{ran}");
    });
}
