//! Attacks on what the native tier's host believes and bounds, one test per case of
//! issue 40 (points 3, 4 and 6), each named by the boundary it crosses:
//!
//! - `native_channel_*`: the run's code writes to the shim's channel (descriptor 3). What
//!   it writes is never authority: the files under `/output` and the memory peak come
//!   from the zygote, which reads them from the kernel; every field is checked.
//! - `native_session_*`: a session's process between cells (stopped), its idle TTL
//!   (reaped on time) and its tasks (bounded).
//! - `native_filesystem_*`: the devices the guide promises and the `sys.path` a run sees.

use super::native::{attacks, native_config, native_run, native_venv, output_names};
use super::native_sessions::{result, run, serve, server_config};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// Code that runs `prelude`, then writes `outcome` (a Python expression) to the channel
/// as the shim would, and waits to be ended.
fn forged(prelude: &str, outcome: &str) -> String {
    format!(
        "import json, os, time\n{prelude}\n\
         line = memoryview((json.dumps({{'outcome': {outcome}}}) + '\\n').encode())\n\
         while line: line = line[os.write(3, line):]\n\
         time.sleep(30)"
    )
}

/// The channel's outcome is refused when it names files or a memory peak: the run's
/// report of its `/output` was believed (names out of `/output`, absolute names, a file
/// past the 8 MiB cap) and so was its peak of 1 byte.
#[test]
fn native_channel_outcome_naming_files_or_a_peak_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &[], json!({}));
    let cases = [
        (
            "files out of /output",
            "{'value': {'Json': '1'}, 'error': None, 'violations': [], \
              'files': [{'name': '../../etc/cron.d/x', 'content_base64': 'eA=='}, \
                        {'name': '/etc/abs.txt', 'content_base64': 'eA=='}]}",
            "unknown field `files`",
        ),
        (
            "a file past the /output cap (12 MiB, base64)",
            "{'value': {'Json': '1'}, 'error': None, 'violations': [], \
              'files': [{'name': 'big.bin', 'content_base64': 'A' * (16 << 20)}]}",
            "unknown field `files`",
        ),
        (
            "a memory peak",
            "{'value': {'Json': '1'}, 'error': None, 'violations': [], 'max_rss_bytes': 1}",
            "unknown field `max_rss_bytes`",
        ),
    ];
    for (case, outcome, refusal) in cases {
        let (_, execution) = native_run(&config, &forged("", outcome), &[], "");
        assert_eq!(execution["status"], "error", "{case}: {execution}");
        assert_eq!(
            execution["error"]["type"], "ChannelError",
            "{case}: {execution}"
        );
        let message = execution["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(refusal), "{case}: {message}");
        assert_eq!(execution["files"], Value::Null, "{case}: {execution}");
    }
}

/// An outcome the run forges that the host accepts (it is only the code's value) still
/// gets the files the zygote read from the run's `/output` and the peak the kernel
/// counted: with the run's report believed, `files` was empty and the peak 0.
#[test]
fn native_channel_forged_outcome_gets_the_hosts_files_and_peak() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &[], json!({}));
    let prelude = "held = b'x' * (64 << 20)\n\
                   open('/output/real.txt', 'w').write('real')";
    let outcome = "{'value': {'Json': '7'}, 'error': None, 'violations': []}";
    let (_, execution) = native_run(&config, &forged(prelude, outcome), &[], "");
    assert_eq!(execution["status"], "ok", "{execution}");
    assert_eq!(execution["return_value"], 7, "{execution}");
    let names = output_names(&execution);
    assert_eq!(names, ["real.txt"], "{execution}");
    let peak = execution["memory_peak_bytes"].as_u64().unwrap_or_default();
    assert!(peak >= 64 << 20, "peak {peak}: {execution}");
}

/// Each field of the channel is hostile input: an error type that is not a dotted name
/// and a rule that is not a name are replaced, as the WebAssembly tier's are (one check,
/// `guest_report.rs`, with a note: the run keeps its value and files); a value of a kind
/// the shim never writes and a message the host does not know are refused.
#[test]
fn native_channel_fields_are_checked_as_hostile_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &[], json!({}));
    let error = |type_name: &str| {
        format!(
            "{{'value': None, 'violations': [], \
               'error': {{'type_name': {type_name}, 'message': 'm', 'traceback': ''}}}}"
        )
    };
    for type_name in ["'E' * 10000", "'ValueError: <script>'"] {
        let (_, execution) = native_run(&config, &forged("", &error(type_name)), &[], "");
        assert_eq!(execution["status"], "error", "{type_name}: {execution}");
        assert_eq!(execution["error"]["type"], "UnnamedError", "{execution}");
        let message = execution["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("not a plain dotted name"), "{message}");
    }
    let rule = "{'value': None, 'error': None, 'violations': \
                [{'line': 1, 'column': 0, 'rule': 'r' * 1000, 'message': 'm'}]}";
    let (_, execution) = native_run(&config, &forged("", rule), &[], "");
    assert_eq!(execution["status"], "policy_violation", "{execution}");
    assert_eq!(execution["violations"][0]["rule"], "unnamed", "{execution}");
    let cases = [
        (
            forged(
                "",
                "{'value': {'Bytes': '1'}, 'error': None, 'violations': []}",
            ),
            "unknown variant `Bytes`",
        ),
        (
            "import os, time\nos.write(3, b'{\"become_root\": true}\\n')\ntime.sleep(30)"
                .to_string(),
            "unknown variant `become_root`",
        ),
    ];
    for (code, refusal) in cases {
        let (_, execution) = native_run(&config, &code, &[], "");
        assert_eq!(
            execution["error"]["type"], "ChannelError",
            "{refusal}: {execution}"
        );
        let message = execution["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(refusal), "{refusal}: {message}");
    }
}

/// A cell that ignores `SIGXCPU` and leaves a thread spinning used the CPU without end
/// after it returned (the CPU limit is soft, and only counts during cells): the session's
/// process is stopped between cells, so the next cell finds its CPU time where the last
/// one left it. A run cannot send itself `SIGCONT` to undo the stop.
#[test]
fn native_session_process_is_stopped_between_cells() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = server_config(dir.path());
    let spin = "import signal, threading, time\n\
                signal.signal(signal.SIGXCPU, signal.SIG_IGN)\n\
                def spin():\n\
                \x20   while True: pass\n\
                threading.Thread(target=spin, daemon=True).start()\n\
                time.process_time()";
    let answers = serve(
        &config,
        &json!([
            run(json!({"code": spin, "session_id": "s"})),
            // Three seconds pass beside the session (a WebAssembly run, no other process).
            run(json!({"code": "import time\ntime.sleep(3)", "tier": "wasm"})),
            run(json!({"code": "import time\ntime.process_time()", "session_id": "s"})),
        ]),
    );
    let before = result(&answers[0])["return_value"].as_f64();
    let after = result(&answers[2])["return_value"].as_f64();
    let (Some(before), Some(after)) = (before, after) else {
        panic!("no CPU times: {answers:?}");
    };
    assert!(
        after - before < 1.0,
        "the session used {:.1} s of CPU between its cells",
        after - before
    );
}

/// `SIGCONT` would cancel the zygote's stop of a session's process: seccomp refuses it
/// in every way a run can send a signal to itself.
#[test]
fn native_session_sigcont_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &[], json!({}));
    let found = attacks(
        &config,
        r#"
import signal, threading
attempt("kill_sigcont", lambda: os.kill(os.getpid(), signal.SIGCONT))
attempt("tgkill_sigcont", lambda: signal.pthread_kill(threading.get_ident(), signal.SIGCONT))
attempt("kill_sigusr1_ignored", lambda: (signal.signal(signal.SIGUSR1, signal.SIG_IGN), os.kill(os.getpid(), signal.SIGUSR1))[1])
"#,
        "",
    );
    let refused = json!([
        "blocked",
        "PermissionError: [Errno 1] Operation not permitted"
    ]);
    assert_eq!(found["kill_sigcont"], refused, "{found:?}");
    assert_eq!(found["tgkill_sigcont"], refused, "{found:?}");
    // Other signals within the run still go.
    assert_eq!(found["kill_sigusr1_ignored"][0], "allowed", "{found:?}");
}

/// Code that starts threads until one is refused: how many it started, and the error.
const THREADS_UNTIL_REFUSED: &str = "import threading\n\
    try: held\n\
    except NameError: held = []\n\
    stop = threading.Event()\n\
    error = None\n\
    for _ in range(1000):\n\
    \x20   t = threading.Thread(target=stop.wait, daemon=True)\n\
    \x20   try: t.start()\n\
    \x20   except RuntimeError as e:\n\
    \x20       error = str(e)\n\
    \x20       break\n\
    \x20   held.append(t)\n\
    [len(held), error]";

/// The message a refused thread raises.
const THREAD_REFUSAL: &str =
    "can't start new thread (sandpy: a native run may have at most 128 threads at once)";

/// Threads were not bounded: three sessions held 14,034 host tasks. A run's tasks are
/// bounded (`RLIMIT_NPROC` in its own user namespace: 128 with its main thread), and the
/// error says so. (The memory cap is raised so that the threads' stacks fit in it: under
/// the default cap the address space bounds them first, and the error says that.)
#[test]
fn native_session_tasks_are_bounded_per_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &[], json!({}));
    let args = ["--memory-mb", "2048"];
    let (_, execution) = native_run(&config, THREADS_UNTIL_REFUSED, &args, "");
    assert_eq!(execution["status"], "ok", "{execution}");
    assert_eq!(
        execution["return_value"],
        json!([127, THREAD_REFUSAL]),
        "{execution}"
    );
}

/// The same bound holds across a session's cells: threads a cell left count against the
/// next cell's.
#[test]
fn native_session_tasks_are_bounded_across_cells() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("threads.json");
    let file = json!({"sandpy": {
        "tier": "native",
        "native": {"venv": native_venv()},
        "sessions": {"memory_mb": 2048},
    }});
    std::fs::write(&path, file.to_string()).expect("config");
    let config = path.display().to_string();
    let first = "import threading\n\
                 stop = threading.Event()\n\
                 held = [threading.Thread(target=stop.wait, daemon=True) for _ in range(100)]\n\
                 for t in held: t.start()\n\
                 len(held)";
    let answers = serve(
        &config,
        &json!([
            run(json!({"code": first, "session_id": "t"})),
            run(json!({"code": THREADS_UNTIL_REFUSED, "session_id": "t"})),
        ]),
    );
    assert_eq!(result(&answers[0])["return_value"], 100, "{}", answers[0]);
    assert_eq!(
        result(&answers[1])["return_value"],
        json!([127, THREAD_REFUSAL]),
        "{}",
        answers[1]
    );
}

/// The processes whose parent is `parent`.
fn children(parent: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        if after.split_whitespace().nth(1) == Some(parent.to_string().as_str()) {
            found.push(pid);
        }
    }
    found
}

/// The processes whose command line holds `needle`.
fn processes_with(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmdline)
                .contains(needle)
                .then_some(pid)
        })
        .collect()
}

/// Idle TTL was applied lazily: a session's process lived on past its TTL until the
/// sessions were next listed or run. The reaper ends it on time: here, with a 1.5 s TTL,
/// while the server is busy with another run and nothing touches the sessions.
#[test]
fn native_session_idle_ttl_ends_the_process_on_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ttl.json");
    let file = json!({"sandpy": {
        "tier": "native",
        "native": {"venv": native_venv(), "per_run": true},
        "sessions": {"idle_ttl_ms": 1500},
    }});
    std::fs::write(&path, file.to_string()).expect("config");
    let config = path.display().to_string();
    // Watch the server's zygote's children while the requests are served: the session's
    // process, and the next one made ahead (younger, `native_made_ahead.rs`).
    let watched = config.clone();
    let watcher = std::thread::spawn(move || {
        let started = Instant::now();
        let mut seen: Vec<(Duration, Vec<(u64, u32)>)> = Vec::new();
        while started.elapsed() < Duration::from_secs(60) {
            // The server is the child of the MCP client with our config in its command line.
            let zygote = processes_with(&watched)
                .into_iter()
                .flat_map(children)
                .find(|&pid| zygote_of(pid).is_some());
            if let Some(zygote) = zygote {
                let mut runs: Vec<(u64, u32)> = children(zygote)
                    .into_iter()
                    .filter_map(|pid| Some((start_time(pid)?, pid)))
                    .collect();
                runs.sort();
                seen.push((started.elapsed(), runs));
            } else if !seen.is_empty() {
                break; // the server has gone
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        seen
    });
    let answers = serve(
        &config,
        &json!([
            run(json!({"code": "1", "session_id": "idle"})),
            run(json!({"code": "import time\ntime.sleep(5)", "tier": "wasm"})),
        ]),
    );
    assert_eq!(result(&answers[0])["status"], "ok", "{}", answers[0]);
    let seen = watcher.join().expect("watcher");
    // The session's process: the zygote's oldest child when it first had one.
    let alive = seen.iter().position(|(_, runs)| !runs.is_empty());
    let Some(alive) = alive else {
        panic!("the session's process was never seen: {seen:?}");
    };
    let session = seen[alive].1[0];
    // Gone while the server still served the other run, about a TTL after the cell.
    let gone = seen[alive..]
        .iter()
        .find(|(_, runs)| !runs.contains(&session));
    let Some((at, _)) = gone else {
        panic!("the idle session's process outlived its TTL: {seen:?}");
    };
    assert!(*at - seen[alive].0 < Duration::from_secs(4), "{seen:?}");
}

/// When process `pid` started, in clock ticks after boot.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    // The 22nd field of the line, the 20th after the command.
    after.split_whitespace().nth(19)?.parse().ok()
}

/// `Some` when `pid` is a native tier's zygote.
fn zygote_of(pid: u32) -> Option<u32> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    String::from_utf8_lossy(&cmdline)
        .contains("__sandpy-native-zygote")
        .then_some(pid)
}

/// The guide says runs have `/dev/null`, `/dev/zero`, `/dev/random` and `/dev/urandom`;
/// they gave `EACCES` (bound `nodev`). Nothing else of `/dev` opens.
#[test]
fn native_filesystem_devices_open_as_documented() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &[], json!({}));
    let found = attacks(
        &config,
        r#"
attempt("null_write", lambda: open("/dev/null", "w").write("gone"))
attempt("null_read", lambda: open("/dev/null", "rb").read())
attempt("zero", lambda: open("/dev/zero", "rb").read(4))
attempt("urandom", lambda: len(open("/dev/urandom", "rb").read(16)))
attempt("random", lambda: len(open("/dev/random", "rb").read(16)))
attempt("subprocess_devnull", lambda: open(os.devnull, "w").close())
attempt("dev_listing", lambda: sorted(os.listdir("/dev")))
attempt("dev_new", lambda: open("/dev/new", "w"))
"#,
        "",
    );
    assert_eq!(found["null_write"], json!(["allowed", "4"]), "{found:?}");
    assert_eq!(found["null_read"], json!(["allowed", "b''"]), "{found:?}");
    assert_eq!(
        found["zero"],
        json!(["allowed", "b'\\x00\\x00\\x00\\x00'"]),
        "{found:?}"
    );
    assert_eq!(found["urandom"], json!(["allowed", "16"]), "{found:?}");
    assert_eq!(found["random"], json!(["allowed", "16"]), "{found:?}");
    assert_eq!(found["subprocess_devnull"][0], "allowed", "{found:?}");
    assert_eq!(
        found["dev_listing"],
        json!(["allowed", "['null', 'random', 'urandom', 'zero']"]),
        "{found:?}"
    );
    assert_eq!(found["dev_new"][0], "blocked", "{found:?}");
}

/// `sys.path` held the base interpreter's `site-packages` ahead of the venv (its
/// distributions importable, though `pyvenv.cfg` says no system site packages) and the
/// host's cache folder. Only the standard library and the venv are on it now, and the
/// distributions a run sees are the venv's.
#[test]
fn native_filesystem_sys_path_is_the_venv_and_the_standard_library() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &[], json!({}));
    let code = "import sys, sysconfig, importlib.metadata as m\n\
                [sys.path, sysconfig.get_paths()['stdlib'],\n\
                 sorted({d.metadata['Name'].lower() for d in m.distributions()})]";
    let (_, execution) = native_run(&config, code, &[], "");
    assert_eq!(execution["status"], "ok", "{execution}");
    let found = &execution["return_value"];
    let venv = native_venv()
        .canonicalize()
        .unwrap_or_else(|_| native_venv().clone());
    let stdlib = found[1].as_str().unwrap_or_default();
    let paths: Vec<&str> = found[0]
        .as_array()
        .unwrap_or_else(|| panic!("no sys.path: {found}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(!paths.is_empty(), "{found}");
    for path in &paths {
        let real = Path::new(path)
            .canonicalize()
            .unwrap_or_else(|_| Path::new(path).to_path_buf());
        let in_venv = real.starts_with(&venv) || Path::new(path).starts_with(native_venv());
        let in_stdlib = path.starts_with(stdlib) && !path.contains("-packages");
        let zip = path.ends_with(".zip") && !path.contains("-packages");
        assert!(in_venv || in_stdlib || zip, "{path} on sys.path: {paths:?}");
        assert!(!path.contains("native-guest"), "{path}: {paths:?}");
    }
    // The venv's own distributions, by the names of its `.dist-info` folders.
    let mut expected: Vec<String> = glob_dist_info(&venv);
    expected.sort();
    expected.dedup();
    let seen: Vec<String> = found[2]
        .as_array()
        .unwrap_or_else(|| panic!("no distributions: {found}"))
        .iter()
        .filter_map(|name| name.as_str().map(|n| n.replace('_', "-")))
        .collect();
    assert_eq!(seen, expected, "{found}");
}

/// The distribution names of the `.dist-info` folders under the venv's site-packages,
/// lower case, `-` for `_`.
fn glob_dist_info(venv: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for lib in std::fs::read_dir(venv.join("lib"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let site = lib.path().join("site-packages");
        for entry in std::fs::read_dir(site).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(stem) = name.strip_suffix(".dist-info") {
                if let Some((dist, _version)) = stem.rsplit_once('-') {
                    names.push(dist.to_lowercase().replace('_', "-"));
                }
            }
        }
    }
    names
}
