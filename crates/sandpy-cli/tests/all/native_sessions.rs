//! Sessions on the native tier, through the MCP server as clients use them: one confined
//! process per session that keeps its interpreter and scratch folder between cells, with
//! the WebAssembly tier's limits, statuses, journal and snapshots; and the attacks on it.

use super::native::{assert_alike, native_venv, COMPAT_PROGRAMS};
use serde_json::{json, Value};
use std::path::Path;

/// A config file in `dir` for a server whose default tier is native (a request may name
/// either), with saved sessions under `dir`.
pub(super) fn server_config(dir: &Path) -> String {
    let file = json!({"sandpy": {
        "tier": "native",
        "native": {"venv": native_venv(), "preimport": ["numpy"], "per_run": true},
        "sessions": {"save_dir": dir.join("saved")},
    }});
    let path = dir.join("sessions.json");
    std::fs::write(&path, file.to_string()).expect("config");
    path.display().to_string()
}

/// Send `requests` to `sandpy serve --config config` over stdio: the answers, in order.
pub(super) fn serve(config: &str, requests: &Value) -> Vec<Value> {
    let target = [
        "stdio",
        env!("CARGO_BIN_EXE_sandpy"),
        "serve",
        "--config",
        config,
    ];
    let (out, status, stderr) = super::mcp_client(&target, requests);
    assert_eq!(status, 0, "{out}\n{stderr}");
    out.as_array().cloned().expect("a list of answers")
}

/// A `run_python` request.
pub(super) fn run(arguments: Value) -> Value {
    json!({"method": "call_tool", "name": "run_python", "arguments": arguments})
}

pub(super) fn result(answer: &Value) -> &Value {
    &answer["structuredContent"]
}

#[test]
fn native_sessions_keep_state_between_cells_and_save_restore_and_fork() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = server_config(dir.path());
    let first = "import numpy as np, os, sys\n\
                 x = np.arange(4)\n\
                 token = os.urandom(8).hex()\n\
                 open('/tmp/kept.txt', 'w').write('kept')\n\
                 open('/output/first.txt', 'w').write('1')\n\
                 sys.version_info[1]";
    let second = "[int(x.sum()), open('/tmp/kept.txt').read(), os.listdir('/output'), len(token)]";
    let answers = serve(
        &config,
        &json!([
            // Cell 1 has a three-second limit (its time counts the process's start): the
            // session's process must outlive it.
            run(json!({"code": first, "session_id": "s", "timeout_ms": 3000})),
            run(json!({"code": "import time\ntime.sleep(3.5)\n'x' in globals()"})),
            run(json!({"code": second, "session_id": "s"})),
            {"method": "call_tool", "name": "list_sessions", "arguments": {}},
            {"method": "call_tool", "name": "save_session",
             "arguments": {"session_id": "s", "name": "snap"}},
            {"method": "call_tool", "name": "restore_session",
             "arguments": {"session_id": "r", "name": "snap"}},
            run(json!({"code": "int(x.sum()), open('/tmp/kept.txt').read()", "session_id": "r"})),
            {"method": "call_tool", "name": "fork_session",
             "arguments": {"session_id": "s", "new_session_id": "f"}},
            run(json!({"code": "x = x * 10\nint(x.sum())", "session_id": "f"})),
            run(json!({"code": "int(x.sum())", "session_id": "s"})),
            run(json!({"code": "1", "session_id": "r", "tier": "wasm"})),
            run(json!({"code": "while True: pass", "session_id": "s", "timeout_ms": 1000})),
            run(json!({"code": "1", "session_id": "s"})),
        ]),
    );
    let one = result(&answers[0]);
    assert_eq!(one["status"], "ok", "{one}");
    assert!(
        one["return_value"].as_u64().is_some_and(|minor| minor < 14),
        "{one}"
    );
    assert_eq!(one["files"][0]["name"], "first.txt", "{one}");
    // A fresh run beside the session shares nothing with it.
    assert_eq!(result(&answers[1])["return_value"], false, "{}", answers[1]);
    // Globals, imports and the scratch folder stay; /output was emptied.
    let two = result(&answers[2]);
    assert_eq!(two["return_value"], json!([6, "kept", [], 16]), "{two}");
    assert_eq!(two["files"], Value::Null, "{two}");
    let listed = result(&answers[3]).to_string();
    assert!(listed.contains("\"runs\":2"), "{listed}");
    assert_eq!(result(&answers[4])["cells"], 2, "{}", answers[4]);
    assert_eq!(result(&answers[5])["restored"], true, "{}", answers[5]);
    // The replay rebuilt the state, files written by the cells included.
    assert_eq!(
        result(&answers[6])["return_value"],
        json!([6, "kept"]),
        "{}",
        answers[6]
    );
    assert_eq!(result(&answers[8])["return_value"], 60, "{}", answers[8]);
    assert_eq!(result(&answers[9])["return_value"], 6, "{}", answers[9]);
    let other_tier = answers[10].to_string();
    assert!(
        other_tier.contains("this session runs on the native tier"),
        "{other_tier}"
    );
    // A cell over its own limit ends with `timeout` and poisons its session.
    assert_eq!(result(&answers[11])["status"], "timeout", "{}", answers[11]);
    assert_eq!(
        result(&answers[12])["status"],
        "session_poisoned",
        "{}",
        answers[12]
    );
}

/// Each session is a process of its own, confined as a run is: it cannot reach another
/// session's files, open a socket, or lift the CPU time limit that the zygote moves as
/// each cell starts.
#[test]
fn process_boundary_native_sessions_are_confined_and_kept_apart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = server_config(dir.path());
    let burn = "import resource, time\n\
                start = time.process_time()\n\
                while time.process_time() - start < 1.2: pass";
    let check = "import resource, socket\n\
                 soft, hard = resource.getrlimit(resource.RLIMIT_CPU)\n\
                 usage = resource.getrusage(resource.RUSAGE_SELF)\n\
                 used = usage.ru_utime + usage.ru_stime\n\
                 try:\n\
                 \x20   resource.setrlimit(resource.RLIMIT_CPU, (soft + 1000, hard))\n\
                 \x20   lifted = 'allowed'\n\
                 except (OSError, ValueError) as e:\n\
                 \x20   lifted = type(e).__name__\n\
                 try:\n\
                 \x20   socket.socket()\n\
                 \x20   sock = 'allowed'\n\
                 except OSError as e:\n\
                 \x20   sock = type(e).__name__\n\
                 {'room': soft - used, 'lifted': lifted, 'socket': sock}";
    let answers = serve(
        &config,
        &json!([
            // The process starts with this first cell's CPU limit (3 s and one more).
            run(
                json!({"code": "open('/tmp/secret', 'w').write('a')", "session_id": "a",
                       "timeout_ms": 3000})
            ),
            run(json!({"code": "import os\nos.path.exists('/tmp/secret')", "session_id": "b"})),
            run(json!({"code": burn, "session_id": "a", "timeout_ms": 3000})),
            run(json!({"code": check, "session_id": "a", "timeout_ms": 3000})),
        ]),
    );
    assert_eq!(result(&answers[0])["status"], "ok", "{}", answers[0]);
    assert_eq!(result(&answers[1])["return_value"], false, "{}", answers[1]);
    assert_eq!(result(&answers[2])["status"], "ok", "{}", answers[2]);
    let found = &result(&answers[3])["return_value"];
    assert_eq!(result(&answers[3])["status"], "ok", "{}", answers[3]);
    // The cell has its whole limit of CPU time on top of what the earlier cells used
    // (a limit set once, at the process's start, would leave it less than 3 s).
    assert!(
        found["room"].as_f64().is_some_and(|room| room >= 3.0),
        "{found}"
    );
    // Under a hard limit of RLIM_INFINITY the kernel would let the soft one rise:
    // seccomp refuses it with EPERM, which Python's `resource` raises as a ValueError.
    assert_eq!(found["lifted"], "ValueError", "{found}");
    assert_eq!(found["socket"], "PermissionError", "{found}");
}

/// The compat programs as cells of one session per tier (each tier's session keeps the
/// earlier programs' globals) print and return the same.
#[test]
fn compat_programs_answer_alike_in_both_tiers_as_sessions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = server_config(dir.path());
    let requests: Vec<Value> = COMPAT_PROGRAMS
        .iter()
        .flat_map(|code| {
            [
                run(json!({"code": code, "session_id": "n"})),
                run(json!({"code": code, "session_id": "w", "tier": "wasm"})),
            ]
        })
        .collect();
    let answers = serve(&config, &Value::Array(requests));
    for (code, pair) in COMPAT_PROGRAMS.iter().zip(answers.chunks(2)) {
        assert_alike(code, result(&pair[0]), result(&pair[1]));
    }
}
