//! What an `Execution` reports: values, errors, tracebacks, streams.

use crate::{run, run_ok, run_with};
use sandpy::Status;
use serde_json::json;

#[test]
fn final_expression_is_the_return_value() {
    assert_eq!(run_ok("x = 20\nx + 22").return_value, Some(json!(42)));
    assert_eq!(
        run_ok("{'a': [1, 'b', None, True]}").return_value,
        Some(json!({"a": [1, "b", null, true]}))
    );
    assert_eq!(run_ok("print('no value')").return_value, None);
    assert_eq!(run_ok("x = 1").return_value, None);
    let e = run_ok("{1, 2}");
    assert_eq!(e.return_value, Some(json!("{1, 2}")));
    assert!(e.return_value_is_repr);
    let e = run_ok("float('nan')");
    assert_eq!(e.return_value, Some(json!("nan")));
    assert!(e.return_value_is_repr);
}

#[test]
fn stdout_and_stderr_are_kept_apart() {
    let e = run_ok(
        "import sys, os\nprint('out')\nprint('err', file=sys.stderr)\nos.write(1, b'raw\\n')",
    );
    assert_eq!(e.stdout, "out\nraw\n");
    assert_eq!(e.stderr, "err\n");
}

/// `RunOptions::on_output` gets every write as it happens, in order across the two
/// streams, and only what the output cap lets through; the execution still has it all.
#[test]
fn output_goes_to_the_sink_as_it_is_written() {
    use sandpy::{RunOptions, Stream};
    use std::sync::{Arc, Mutex};
    let seen: Arc<Mutex<Vec<(Stream, String)>>> = Arc::default();
    let sink = seen.clone();
    let options = RunOptions {
        on_output: Some(Arc::new(move |stream, bytes| {
            let text = String::from_utf8_lossy(bytes).into_owned();
            sink.lock().expect("lock").push((stream, text));
        })),
        ..RunOptions::default()
    };
    let code = "import sys\nprint('a')\nprint('b', file=sys.stderr)\nprint('c')";
    let e = run_with(code, &options);
    assert_eq!((e.stdout.as_str(), e.stderr.as_str()), ("a\nc\n", "b\n"));
    // Each write arrives as written (`print` writes the text and the newline apart);
    // joined run by run, the streams interleave as the program wrote them.
    let mut runs: Vec<(Stream, String)> = Vec::new();
    for (stream, text) in seen.lock().expect("lock").iter() {
        match runs.last_mut() {
            Some((last, joined)) if last == stream => joined.push_str(text),
            _ => runs.push((*stream, text.clone())),
        }
    }
    assert_eq!(
        runs,
        [
            (Stream::Stdout, "a\n".to_string()),
            (Stream::Stderr, "b\n".to_string()),
            (Stream::Stdout, "c\n".to_string()),
        ]
    );

    // The cap holds for the sink too: it gets what is kept, no more.
    seen.lock().expect("lock").clear();
    let capped = RunOptions {
        limits: sandpy::Limits {
            output_bytes: 100,
            ..sandpy::Limits::default()
        },
        ..options
    };
    let e = run_with("print('x' * 5000)", &capped);
    assert_eq!(e.status, Status::OutputLimit, "{e:#?}");
    let streamed: usize = seen
        .lock()
        .expect("lock")
        .iter()
        .map(|(_, t)| t.len())
        .sum();
    assert_eq!(streamed, 100);
}

#[test]
fn large_writes_arrive_whole() {
    let e = run_ok("import sys, os\nprint('a' * 300_000)\nsys.stderr.write('b' * 200_000)\nos.write(1, b'c' * 100_000)");
    assert_eq!(
        e.stdout.len(),
        400_001,
        "a write over 64 KiB is not cut short"
    );
    assert_eq!(e.stderr.len(), 200_000);
    assert!(!e.output_truncated);
}

#[test]
fn python_error_has_type_message_and_user_traceback() {
    let e = run("def f(x):\n    return 1 / x\n\nf(0)\n");
    assert_eq!(e.status, Status::Error);
    let error = e.error.expect("an error");
    assert_eq!(error.kind, "ZeroDivisionError");
    assert_eq!(error.message, "division by zero");
    let tb = error.traceback.expect("a traceback");
    assert!(
        tb.contains("File \"<sandbox>\", line 4, in <module>"),
        "{tb}"
    );
    assert!(
        tb.contains("File \"<sandbox>\", line 2, in f\n    return 1 / x"),
        "source lines shown: {tb}"
    );
    assert!(
        !tb.contains("sandpy_guest") && !tb.contains("app.py"),
        "guest frames leaked: {tb}"
    );
    assert!(
        e.stderr.contains("ZeroDivisionError: division by zero"),
        "stderr: {}",
        e.stderr
    );
}

#[test]
fn qualified_exception_names_and_syntax_errors() {
    let e = run("import json\njson.loads('{')");
    assert_eq!(e.error.unwrap().kind, "json.decoder.JSONDecodeError");
    let e = run("x = 1\ndef broken(:\n");
    assert_eq!(e.status, Status::Error);
    let error = e.error.unwrap();
    assert_eq!(error.kind, "SyntaxError");
    assert!(error.traceback.unwrap().contains("line 2"));
}

#[test]
fn sys_exit_codes() {
    assert_eq!(
        run("import sys\nprint('bye')\nsys.exit(0)").status,
        Status::Ok
    );
    let e = run("import sys\nsys.exit(3)");
    assert_eq!(e.status, Status::Error);
    assert_eq!(e.error.unwrap().kind, "SystemExit");
    assert_eq!(run("import os\nos._exit(0)").status, Status::Ok);
    assert_eq!(run("import os\nos._exit(5)").status, Status::Error);
}

#[test]
fn exception_groups_and_chains_keep_user_frames_only() {
    let e =
        run("try:\n    {}['k']\nexcept KeyError as e:\n    raise ValueError('wrapped') from e\n");
    let tb = e.error.unwrap().traceback.unwrap();
    assert!(
        tb.contains("KeyError") && tb.contains("ValueError: wrapped"),
        "{tb}"
    );
    assert!(tb.contains("direct cause"), "{tb}");
}

#[test]
fn duration_and_memory_are_reported() {
    let e = run_ok("x = bytearray(50 * 1024 * 1024)");
    assert!(e.duration_ms > 0.0);
    assert!(
        e.memory_peak_bytes >= 50 << 20,
        "peak {}",
        e.memory_peak_bytes
    );
    let json = serde_json::to_value(&e).unwrap();
    for field in [
        "status",
        "stdout",
        "stderr",
        "return_value",
        "error",
        "duration_ms",
        "memory_peak_bytes",
    ] {
        assert!(json.get(field).is_some(), "{field} missing in {json}");
    }
}

#[test]
fn call_function_with_positional_and_keyword_arguments() {
    let code =
        "def score(pred, gold, weight=1.0):\n    return {'match': pred == gold, 'w': weight}\n";
    let options = sandpy::RunOptions::default();
    let e = crate::block_on(crate::sandbox().call_function(
        code,
        "score",
        &json!(["a", "a"]),
        &options,
    ));
    assert_eq!(e.return_value, Some(json!({"match": true, "w": 1.0})));
    let e = crate::block_on(crate::sandbox().call_function(
        code,
        "score",
        &json!({"pred": 1, "gold": 2, "weight": 3}),
        &options,
    ));
    assert_eq!(e.return_value, Some(json!({"match": false, "w": 3})));
    let e = crate::block_on(crate::sandbox().call_function(
        "def f(): return {1}",
        "f",
        &json!([]),
        &options,
    ));
    assert_eq!(e.status, Status::Error);
    assert!(e.error.unwrap().message.contains("not JSON-serialisable"));
    let e =
        crate::block_on(crate::sandbox().call_function("x = 1", "missing", &json!([]), &options));
    assert_eq!(e.error.unwrap().kind, "NameError");
    let e =
        crate::block_on(crate::sandbox().call_function("def f(): pass", "f", &json!(3), &options));
    assert_eq!(e.status, Status::InvalidInput);
}

#[test]
fn call_function_with_every_kind_of_argument_and_result() {
    let code = "def echo(*args, **kwargs):\n    return {'args': args, 'kwargs': kwargs}\n\
                def none():\n    return None\n\
                def tuple_():\n    return (1, 'two', [3.5, None, True])\n\
                def nan():\n    return float('nan')\n\
                async def coro(x):\n    import asyncio\n    await asyncio.sleep(0)\n    return x * 2\n";
    let call = |function: &str, arguments: serde_json::Value| {
        crate::block_on(crate::sandbox().call_function(
            code,
            function,
            &arguments,
            &sandpy::RunOptions::default(),
        ))
    };
    let nested = json!([{"a": [1, 2, {"b": null}]}, "ünïcødé ✓", -7, 2.5, true, null, [], {}]);
    let e = call("echo", nested.clone());
    assert_eq!(e.return_value, Some(json!({"args": nested, "kwargs": {}})));
    let e = call("echo", json!({"k": [1], "big": 12345678901234567890u64}));
    assert_eq!(
        e.return_value,
        Some(json!({"args": [], "kwargs": {"k": [1], "big": 12345678901234567890u64}}))
    );
    assert_eq!(call("none", json!([])).return_value, Some(json!(null)));
    assert_eq!(
        call("tuple_", json!([])).return_value,
        Some(json!([1, "two", [3.5, null, true]]))
    );
    assert_eq!(call("coro", json!([21])).return_value, Some(json!(42)));
    let e = call("nan", json!([]));
    assert_eq!(e.status, Status::Error);
    assert!(e.error.unwrap().message.contains("not JSON-serialisable"));
    let e = call("echo", json!({"not an identifier": 1}));
    assert_eq!(
        e.status,
        Status::Ok,
        "any string key is a valid keyword for **kwargs"
    );
    let e = call("none", json!([1]));
    assert_eq!(e.error.unwrap().kind, "TypeError");
}

/// `display()` and the final value come back as MIME bundles in order (issue 43); a
/// failing `_repr_*_` method leaves its format out and says why; the bundles are bounded.
#[test]
fn rich_outputs_are_mime_bundles_in_order_and_bounded() {
    use sandpy::{RichOutputKind, RunOptions};
    let e = run_ok(
        "class Table:\n\
         \x20   def _repr_html_(self): return '<table><td>7</td></table>'\n\
         \x20   def _repr_json_(self): return {'cells': [7]}\n\
         \x20   def _repr_svg_(self): raise ValueError('no')\n\
         \x20   def __repr__(self): return 'Table(7)'\n\
         display(Table())\n\
         print('printed')\n\
         Table",
    );
    assert_eq!(e.stdout, "printed\n");
    assert_eq!(e.outputs.len(), 2, "{:#?}", e.outputs);
    let table = &e.outputs[0];
    assert_eq!(table.kind, RichOutputKind::Display);
    assert_eq!(table.text(), "Table(7)");
    assert_eq!(table.get("text/html"), Some("<table><td>7</td></table>"));
    assert_eq!(table.get("application/json"), Some(r#"{"cells": [7]}"#));
    assert_eq!(
        table.omitted.get("image/svg+xml").map(String::as_str),
        Some("_repr_svg_ raised ValueError")
    );
    // The class itself (not an instance): only its repr, as IPython shows a class.
    assert_eq!(e.outputs[1].kind, RichOutputKind::Result);
    assert_eq!(e.outputs[1].data.len(), 1);
    assert_eq!(e.return_value, Some(json!("<class '__main__.Table'>")));

    let options = RunOptions {
        limits: sandpy::Limits {
            // Room for 100 plain outputs with their keys and reasons (counted since issue
            // 60), never for one 20,000-byte HTML.
            output_files_bytes: 19_000,
            ..sandpy::Limits::default()
        },
        ..RunOptions::default()
    };
    let e = run_with(
        "class Big:\n\
         \x20   def _repr_html_(self): return 'h' * 20_000\n\
         for _ in range(1_000):\n\
         \x20   display(Big())",
        &options,
    );
    assert_eq!(e.status, Status::Ok, "{e:#?}");
    let kept: usize = e
        .outputs
        .iter()
        .flat_map(|o| o.data.values())
        .map(String::len)
        .sum();
    assert!(kept <= 19_000, "{kept}");
    assert!(e.outputs.iter().all(|o| o.get("text/html").is_none()));
    assert_eq!(e.outputs.len() as u64 + e.outputs_dropped, 1_000);
    assert_eq!(e.outputs.len(), sandpy::MAX_RICH_OUTPUTS as usize);
}
