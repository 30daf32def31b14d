//! Live runs: approval of tool calls, tool calls announced as they leave, cancellation.
//! Each boundary is tried: a call needing approval never reaches its tool without a yes
//! (declined, nobody to ask, the policy's own patterns), and a cancelled run stops at
//! once, in guest code and while it waits for a tool.

use super::run_with;
use sandpy::tools::{ApprovalFuture, ApprovalRequest, Decision, ToolFuture, ToolHost, ToolInfo};
use sandpy::{CancellationToken, Policy, RunOptions, Status};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Tools that record the calls that reached them: `write` answers at once, `wait`
/// after 10 s.
#[derive(Default)]
struct Recorder {
    reached: Mutex<Vec<String>>,
    decided: Mutex<Vec<(String, bool, String)>>,
}

impl ToolHost for Recorder {
    fn list_tools(&self) -> Vec<ToolInfo> {
        ["write", "read", "wait"]
            .iter()
            .map(|n| ToolInfo {
                name: format!("mcp__fs__{n}"),
                description: String::new(),
                input_schema: json!({"type": "object"}),
            })
            .collect()
    }

    fn call_tool(&self, name: &str, arguments: Value) -> ToolFuture {
        self.reached.lock().unwrap().push(name.to_string());
        let wait = name == "mcp__fs__wait";
        Box::pin(async move {
            if wait {
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
            Ok(arguments)
        })
    }

    fn decided(&self, name: &str, _arguments: &Value, decision: &Decision) {
        let entry = (name.to_string(), decision.approved, decision.by.clone());
        self.decided.lock().unwrap().push(entry);
    }
}

/// An approver that says yes to `path == "ok"` and records what it was shown.
fn approver(asked: Arc<Mutex<Vec<ApprovalRequest>>>) -> Arc<dyn sandpy::tools::Approver> {
    Arc::new(move |request: ApprovalRequest| -> ApprovalFuture {
        let yes = request.arguments["path"] == "ok";
        asked.lock().unwrap().push(request);
        Box::pin(async move {
            if yes {
                Decision::approve("test")
            } else {
                Decision::decline("test", None)
            }
        })
    })
}

const WRITE_TWICE: &str = "out = []
for path in ['ok', 'secret']:
    try:
        out.append(call_mcp_tool('mcp__fs__write', {'path': path}))
    except ToolError as e:
        out.append(str(e))
out.append(call_mcp_tool('mcp__fs__read', {}))
out";

#[test]
fn a_declined_call_never_reaches_its_tool_and_the_code_can_handle_it() {
    let tools = Arc::new(Recorder::default());
    let asked = Arc::new(Mutex::new(Vec::new()));
    let options = RunOptions {
        tools: Some(tools.clone()),
        approve: vec!["mcp__fs__write*".into()],
        approver: Some(approver(asked.clone())),
        ..RunOptions::default()
    };
    let e = run_with(WRITE_TWICE, &options);
    assert_eq!(e.status, Status::Ok, "{e:#?}");
    assert_eq!(
        e.return_value,
        Some(json!([{"path": "ok"}, "the user declined mcp__fs__write", {}]))
    );
    // The declined call did not reach the tool; the one not needing approval was not asked.
    assert_eq!(
        *tools.reached.lock().unwrap(),
        ["mcp__fs__write", "mcp__fs__read"]
    );
    let asked = asked.lock().unwrap();
    assert_eq!(asked.len(), 2);
    assert_eq!(asked[1].arguments, json!({"path": "secret"}));
    assert_eq!(
        *tools.decided.lock().unwrap(),
        [
            ("mcp__fs__write".to_string(), true, "test".to_string()),
            ("mcp__fs__write".to_string(), false, "test".to_string())
        ]
    );
}

#[test]
fn calls_needing_approval_are_refused_when_nobody_can_be_asked() {
    let tools = Arc::new(Recorder::default());
    // The policy's patterns count too, and gather'd calls are each decided.
    let policy = Policy {
        approve: vec!["mcp__fs__write".into()],
        ..Policy::standard()
    };
    let options = RunOptions {
        tools: Some(tools.clone()),
        policy: Some(policy),
        ..RunOptions::default()
    };
    let code = "import asyncio\n\
        r = await asyncio.gather(call_mcp_tool('mcp__fs__write', {}), call_mcp_tool('mcp__fs__read', {}), return_exceptions=True)\n\
        [str(x) if isinstance(x, Exception) else x for x in r]";
    let e = run_with(code, &options);
    let value = e.return_value.expect("a value");
    assert!(
        value[0].as_str().unwrap().contains("needs approval"),
        "{value}"
    );
    assert_eq!(value[1], json!({}));
    assert_eq!(*tools.reached.lock().unwrap(), ["mcp__fs__read"]);
    let decided = tools.decided.lock().unwrap();
    assert_eq!((decided[0].1, decided[0].2.as_str()), (false, "sandpy"));
}

#[test]
fn an_approval_that_never_comes_ends_the_run_at_its_limit_naming_it() {
    let tools = Arc::new(Recorder::default());
    let never: Arc<dyn sandpy::tools::Approver> =
        Arc::new(|_: ApprovalRequest| -> ApprovalFuture { Box::pin(std::future::pending()) });
    let options = RunOptions {
        tools: Some(tools.clone()),
        approve: vec!["mcp__fs__*".into()],
        approver: Some(never),
        limit_overrides: sandpy::LimitOverrides {
            timeout_ms: Some(2000),
            ..Default::default()
        },
        ..RunOptions::default()
    };
    let e = run_with("call_mcp_tool('mcp__fs__write', {})", &options);
    assert_eq!(e.status, Status::Timeout, "{e:#?}");
    let message = e.error.expect("an error").message;
    assert!(
        message.contains("the approval of mcp__fs__write"),
        "{message}"
    );
    assert!(tools.reached.lock().unwrap().is_empty());
}

#[test]
fn tool_calls_are_announced_in_order_as_they_leave() {
    let announced = Arc::new(Mutex::new(Vec::new()));
    let sink = {
        let announced = announced.clone();
        Arc::new(move |tool: &str| announced.lock().unwrap().push(tool.to_string()))
    };
    let options = RunOptions {
        tools: Some(Arc::new(Recorder::default())),
        on_tool_call: Some(sink),
        approve: vec!["mcp__fs__write".into()],
        ..RunOptions::default()
    };
    let e = run_with(WRITE_TWICE, &options);
    assert_eq!(e.status, Status::Ok, "{e:#?}");
    // Refused calls never left.
    assert_eq!(*announced.lock().unwrap(), ["mcp__fs__read"]);
}

/// An output sink that cancels `cancel` 300 ms after the program printed `before`.
fn cancel_after_before(cancel: &CancellationToken) -> sandpy::OutputSink {
    let cancel = cancel.clone();
    Arc::new(move |_, bytes: &[u8]| {
        if bytes.windows(6).any(|w| w == b"before") {
            let cancel = cancel.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                cancel.cancel();
            });
        }
    })
}

#[test]
fn a_cancelled_run_stops_at_once_with_what_it_made() {
    let made = "open('/output/made.txt', 'w').write('x')\nprint('before', flush=True)\n";
    for (rest, waiting) in [
        ("while True:\n    pass", None),
        ("call_mcp_tool('mcp__fs__wait', {})", Some("mcp__fs__wait")),
    ] {
        let cancel = CancellationToken::new();
        let options = RunOptions {
            tools: Some(Arc::new(Recorder::default())),
            cancel: Some(cancel.clone()),
            on_output: Some(cancel_after_before(&cancel)),
            ..RunOptions::default()
        };
        let started = Instant::now();
        let e = run_with(&format!("{made}{rest}"), &options);
        assert_eq!(e.status, Status::Cancelled, "{e:#?}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(e.stdout, "before\n");
        assert_eq!(e.files.len(), 1, "{:?}", e.files);
        let message = e.error.expect("an error").message;
        assert!(message.starts_with("the run was cancelled"), "{message}");
        if let Some(tool) = waiting {
            assert!(message.contains(tool), "{message}");
        }
    }
    // Cancelled before it starts: nothing runs.
    let cancel = CancellationToken::new();
    cancel.cancel();
    let options = RunOptions {
        cancel: Some(cancel),
        ..RunOptions::default()
    };
    let e = run_with("print('ran')", &options);
    assert_eq!((e.status, e.stdout.as_str()), (Status::Cancelled, ""));
    super::assert_host_fine();
}
