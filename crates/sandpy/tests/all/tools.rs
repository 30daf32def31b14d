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
    // The compact form: name, first description line, argument types, the bare Python
    // signature; no schema.
    let e = run_with("search_tools('sleeping', limit=5)", &options());
    assert_eq!(
        e.return_value,
        Some(
            json!([{"name": "mcp__local__sleepy", "description": "the sleepy tool", "arguments": {},
                     "signature": "# tools.local.sleepy\ndef sleepy() -> Any: ..."}])
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

#[test]
fn a_batch_whose_arguments_expand_on_the_host_is_refused_before_it_is_parsed() {
    // Each argument is under the 1000-byte cap, but `[[],[],...]` is 2 bytes of text per
    // list on the host: the batch's budget (16 times the cap) refuses the calls that
    // would pass it, before their arguments are parsed; the first ones still go.
    let options = RunOptions {
        limits: Limits {
            tool_result_bytes: 1000,
            ..Limits::default()
        },
        ..options()
    };
    let code = "import asyncio\nargs = {'a': [[] for _ in range(200)]}\n\
                async def one():\n    try:\n        return len((await call_mcp_tool('mcp__local__echo', args))['a'])\n\
                \x20   except ToolError as e:\n        return str(e)\n\
                await asyncio.gather(*(one() for _ in range(14)))";
    let e = run_with(code, &options);
    let v = e.return_value.expect("value");
    let answers = v.as_array().expect("a list");
    let passed = answers.iter().filter(|a| **a == json!(200)).count();
    // 200 lists, the outer list, the object and its key: 203 values of 32 bytes and
    // 600-800 bytes of text, so two calls fit in 16000 bytes and three do not.
    assert_eq!(passed, 2, "{v}");
    assert!(
        answers[2..].iter().all(|a| a
            .as_str()
            .unwrap_or_default()
            .starts_with("arguments of mcp__local__echo would take about ")),
        "{v}"
    );
    assert!(answers[passed]
        .as_str()
        .unwrap_or_default()
        .ends_with("of the batch's limit of 16000 bytes (16 times tool_result_bytes)"));
}

/// A host whose `wait` call does blocking work, moved off the run's thread as
/// [`ToolHost::call_tool`] asks: on a thread of its own, which waits until released (or
/// 20 s) and then counts itself finished.
struct BlockingTools {
    release: std::sync::Mutex<Vec<std::sync::mpsc::Sender<()>>>,
    finished: Arc<std::sync::atomic::AtomicUsize>,
}

impl ToolHost for BlockingTools {
    fn list_tools(&self) -> Vec<ToolInfo> {
        vec![ToolInfo {
            name: "mcp__blocking__wait".into(),
            description: "blocks a thread".into(),
            input_schema: json!({"type": "object"}),
        }]
    }

    fn call_tool(&self, _name: &str, _arguments: Value) -> ToolFuture {
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (answer, answered) = tokio::sync::oneshot::channel();
        if let Ok(mut senders) = self.release.lock() {
            senders.push(release);
        }
        let finished = self.finished.clone();
        std::thread::spawn(move || {
            let _ = released.recv_timeout(Duration::from_secs(20));
            finished.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = answer.send(json!("finished"));
        });
        Box::pin(async move { answered.await.map_err(|_| "no answer".into()) })
    }
}

#[test]
fn a_host_call_that_blocks_a_thread_ends_at_the_run_deadline_and_frees_the_slot() {
    let host = Arc::new(BlockingTools {
        release: std::sync::Mutex::new(Vec::new()),
        finished: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
    });
    let options = RunOptions {
        limits: Limits {
            timeout: Duration::from_millis(1500),
            tool_timeout: Duration::from_secs(60),
            ..Limits::default()
        },
        tools: Some(host.clone()),
        ..RunOptions::default()
    };
    // Two run slots, three runs: two wait on the tool until their deadline, the third gets
    // a slot when they end, not when the tool's threads do.
    let sandbox = crate::sandbox_with_two_run_slots();
    let waits =
        "try:\n    call_mcp_tool('mcp__blocking__wait')\nexcept ToolError:\n    pass\n'swallowed'";
    let started = std::time::Instant::now();
    let (first, second, third) = crate::block_on(async {
        let third = async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            sandbox.run_with("'third'", &RunOptions::default()).await
        };
        futures::join!(
            sandbox.run_with(waits, &options),
            sandbox.run_with(waits, &options),
            third
        )
    });
    let elapsed = started.elapsed();
    for e in [&first, &second] {
        assert_eq!(e.status, Status::Timeout, "{e:?}");
        assert_eq!(
            e.error.as_ref().map(|error| error.message.as_str()),
            Some("the run exceeded its wall-clock limit of 1500 ms while waiting for mcp__blocking__wait")
        );
    }
    assert_eq!(third.return_value, Some(json!("third")), "{third:?}");
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    // The tool's threads were still blocked when the runs ended; released, they finish and
    // their answers go nowhere.
    assert_eq!(host.finished.load(std::sync::atomic::Ordering::SeqCst), 0);
    host.release.lock().map(|mut s| s.clear()).ok();
}

/// One tool with typed arguments and an output schema: it answers with its arguments.
struct TypedTools;

impl ToolHost for TypedTools {
    fn list_tools(&self) -> Vec<ToolInfo> {
        vec![ToolInfo {
            name: "mcp__typed__get-weather".into(),
            description: "The weather of a city.".into(),
            input_schema: json!({"type": "object", "properties": {
                "city": {"enum": ["Paris", "Oslo"], "description": "which city"},
                "days": {"type": "integer"},
                "units": {"type": "string", "default": "c"}},
                "required": ["city"]}),
        }]
    }

    fn output_schema(&self, _name: &str) -> Option<Value> {
        Some(
            json!({"type": "object", "properties": {"temperature": {"type": "number"}},
                    "required": ["temperature"]}),
        )
    }

    fn call_tool(&self, _name: &str, arguments: Value) -> ToolFuture {
        Box::pin(async move { Ok(arguments) })
    }
}

#[test]
fn a_tool_carries_the_signature_the_model_read() {
    let options = RunOptions {
        tools: Some(Arc::new(TypedTools)),
        ..RunOptions::default()
    };
    let e = run_with(
        "import inspect\nf = tools.typed.get_weather\n\
         [str(inspect.signature(f)), f.__doc__.splitlines()[0], repr(f.__annotations__['return']),\n\
          f.__name__, f(city='Paris', days=None), get_tool_schema('mcp__typed__get-weather')['required'],\n\
          search_tools('weather')[0]['signature'].splitlines()[-1]]",
        &options,
    );
    let signature = "(*, city: Literal[\"Paris\", \"Oslo\"], days: int | None = None, units: str = 'c') -> GetWeatherResult";
    assert_eq!(
        e.return_value,
        Some(json!([
            signature,
            "# tools.typed.get_weather",
            "GetWeatherResult",
            "get_weather",
            {"city": "Paris"},
            ["city"],
            "def get_weather(*, city: Literal[\"Paris\", \"Oslo\"], days: int | None = None, units: str = \"c\") -> GetWeatherResult: ..."
        ])),
        "{e:?}"
    );
}
