//! `sandpy run`: output, exit codes per status, JSON, inputs, errors a person can act on.

use crate::{run, sandpy, sandpy_with_stdin};
use serde_json::{json, Value};

#[test]
fn prints_like_python_and_exits_zero() {
    let (code, stdout, stderr) = run(&[
        "run",
        "-c",
        "import sys\nprint('out')\nprint('err', file=sys.stderr)",
    ]);
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (0, "out\n", "err\n")
    );
}

/// Without `--json`, what the program writes reaches the terminal as it is written: the
/// first line is there while the program still sleeps.
#[test]
fn run_streams_output_as_it_is_written() {
    use std::io::{BufRead, Read};
    let mut child = crate::sandpy()
        .args([
            "run",
            "-c",
            "import sys, time\nprint('first')\nprint('to stderr', file=sys.stderr)\n\
             time.sleep(3)\nprint('second')",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn sandpy");
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("a line");
    assert_eq!(line, "first\n");
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "the first line came only when the program ended"
    );
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).expect("the rest");
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("stderr");
    assert!(child.wait().expect("wait").success());
    assert_eq!(
        (rest.as_str(), stderr.as_str()),
        ("second\n", "to stderr\n")
    );
}

/// Streamed output keeps the output cap: what passes the cap is never written, and the
/// cut is marked once at the end.
#[test]
fn run_streamed_output_keeps_the_output_cap() {
    let (code, stdout, stderr) = run(&[
        "run",
        "--max-output-bytes",
        "100",
        "-c",
        "print('x' * 5000)",
    ]);
    assert_eq!(code, 5, "{stderr}");
    assert_eq!(stdout, "x".repeat(100));
    assert!(
        stderr.starts_with("\n[sandpy: output truncated: limit reached]\n"),
        "{stderr}"
    );
}

#[test]
fn each_status_has_its_exit_code() {
    for (code, args) in [
        (1, vec!["run", "-c", "1/0"]),
        (
            3,
            vec!["run", "--timeout-ms", "200", "-c", "while True: pass"],
        ),
        (
            4,
            vec![
                "run",
                "--memory-mb",
                "64",
                "-c",
                "x = bytearray(200 * 2**20)",
            ],
        ),
        (
            5,
            vec![
                "run",
                "--max-output-bytes",
                "100",
                "-c",
                "print('x' * 1000)",
            ],
        ),
    ] {
        let (got, _, stderr) = run(&args);
        assert_eq!(got, code, "{args:?}: {stderr}");
    }
}

#[test]
fn python_errors_print_the_traceback_with_the_file_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("prog.py");
    std::fs::write(&file, "x = 1\nraise ValueError('bad value')\n").expect("write");
    let (code, _, stderr) = run(&["run", file.to_str().expect("utf-8 path")]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains(&format!("File \"{}\", line 2", file.display())),
        "{stderr}"
    );
    assert!(stderr.ends_with("ValueError: bad value\n"), "{stderr}");
}

#[test]
fn json_has_every_field() {
    let (code, stdout, _) = run(&["run", "--json", "-c", "print('hi')\n21 * 2"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(v["status"], "ok");
    assert_eq!(v["stdout"], "hi\n");
    assert_eq!(v["return_value"], 42);
    assert!(v["error"].is_null());
    assert!(v["duration_ms"].as_f64().expect("duration") > 0.0);
    assert!(v["memory_peak_bytes"].as_u64().expect("memory") > 0);
    let (code, stdout, _) = run(&[
        "run",
        "--json",
        "--timeout-ms",
        "100",
        "-c",
        "import time\ntime.sleep(5)",
    ]);
    assert_eq!(code, 3);
    let v: Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(v["status"], "timeout");
    assert_eq!(v["error"]["type"], "Timeout");
}

#[test]
fn program_from_stdin_and_input_from_a_file() {
    let out = sandpy_with_stdin(&["run", "-"], b"print('from stdin')");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from stdin\n");
    let dir = tempfile::tempdir().expect("tempdir");
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "a\nb\n").expect("write");
    let (code, stdout, _) = run(&[
        "run",
        "--input",
        input.to_str().expect("path"),
        "-c",
        "import sys\nprint(len(sys.stdin.read().split()))",
    ]);
    assert_eq!((code, stdout.as_str()), (0, "2\n"));
}

/// The one JSON `Execution` that `--json` prints, with the exit code.
fn json_execution(code: i32, stdout: &str, stderr: &str) -> (i32, Value) {
    let execution = serde_json::from_str(stdout)
        .unwrap_or_else(|e| panic!("one JSON object ({e}): {stdout:?}, stderr {stderr:?}"));
    (code, execution)
}

#[test]
fn a_program_that_is_not_utf8_is_invalid_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let binary = dir.path().join("bin.py");
    std::fs::write(&binary, b"def f():\n    return 1\xff\xfe").expect("write");
    let path = binary.to_str().expect("path");
    let (code, stdout, stderr) = run(&["run", "--json", path]);
    let (code, execution) = json_execution(code, &stdout, &stderr);
    assert_eq!(code, 8, "{stderr}");
    assert_eq!(execution["status"], "invalid_input");
    assert_eq!(execution["error"]["type"], "InvalidInput");
    assert_eq!(
        execution["error"]["message"],
        format!("`{path}` is not UTF-8 text (invalid byte at offset 21)")
    );
    assert_eq!(stderr, "", "nothing but the JSON");

    let out = sandpy_with_stdin(&["run", "--json", "-"], b"print('\xe9')");
    let (code, execution) = json_execution(
        out.status.code().unwrap_or(-1),
        &String::from_utf8_lossy(&out.stdout),
        &String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(
        (code, execution["error"]["message"].as_str()),
        (
            8,
            Some("`<stdin>` is not UTF-8 text (invalid byte at offset 7)")
        )
    );

    let (code, stdout, stderr) = run(&["run", path]);
    assert_eq!((code, stdout.as_str()), (8, ""));
    assert_eq!(
        stderr,
        format!("sandpy: invalid_input: `{path}` is not UTF-8 text (invalid byte at offset 21)\n")
    );

    let (code, stdout, stderr) = run(&["call", "--json", path, "f"]);
    let (code, execution) = json_execution(code, &stdout, &stderr);
    assert_eq!((code, &execution["status"]), (8, &json!("invalid_input")));

    let inputs = dir.path().join("inputs.jsonl");
    std::fs::write(&inputs, "[]\n[]\n").expect("write");
    let (code, stdout, _) = run(&[
        "call",
        path,
        "f",
        "--args-file",
        inputs.to_str().expect("path"),
    ]);
    assert_eq!(code, 1);
    let lines = json_lines(&stdout);
    assert_eq!(lines.len(), 2, "one result per input line: {stdout}");
    assert!(
        lines.iter().all(|l| l["status"] == "invalid_input"
            && l["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("is not UTF-8"))),
        "{stdout}"
    );

    let (code, _, stderr) = run(&["check", path]);
    assert_eq!(code, 2, "`check` runs nothing: a usage error");
    assert!(
        stderr.starts_with("error: `") && stderr.contains("is not UTF-8"),
        "{stderr}"
    );
}

/// Each line of a batch's `stdout`, parsed: one JSON result per line.
fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// `--warm` does not apply to a batch: it says so on stderr, and the lines run as usual.
/// A batch's files in a folder of its own: a module and its `--args-file`.
struct Batch {
    dir: tempfile::TempDir,
    module: String,
    inputs: String,
}

impl Batch {
    /// `source` as the module `scorer.py`, `lines` as its input lines.
    fn new(source: &str, lines: &[String]) -> Batch {
        Batch::with_inputs(source, (lines.join("\n") + "\n").as_bytes())
    }

    /// The same with the input file's bytes as they are (a line need not be UTF-8).
    fn with_inputs(source: &str, inputs: &[u8]) -> Batch {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = |name: &str| dir.path().join(name).to_str().expect("path").to_string();
        let (module, inputs_path) = (path("scorer.py"), path("inputs.jsonl"));
        std::fs::write(&module, source).expect("write");
        std::fs::write(&inputs_path, inputs).expect("write");
        Batch {
            dir,
            module,
            inputs: inputs_path,
        }
    }

    /// `call MODULE score FLAGS... --args-file INPUTS`: the arguments of the batch.
    fn call<'a>(&'a self, flags: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec!["call", self.module.as_str(), "score"];
        args.extend(flags);
        args.extend(["--args-file", self.inputs.as_str()]);
        args
    }
}

/// `[0]`, `[1]`, ... as `n` input lines: one argument each.
fn numbered_lines(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("[{i}]")).collect()
}

#[test]
fn a_batch_says_that_warm_is_for_a_single_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("double.py");
    std::fs::write(&file, "def double(x):\n    return 2 * x\n").expect("write");
    let inputs = dir.path().join("inputs.jsonl");
    std::fs::write(&inputs, "[1]\n[2]\n").expect("write");
    let (code, stdout, stderr) = run(&[
        "call",
        file.to_str().expect("path"),
        "double",
        "--args-file",
        inputs.to_str().expect("path"),
        "--warm",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let results = json_lines(&stdout);
    let doubled: Vec<&Value> = results.iter().map(|r| &r["result"]).collect();
    assert_eq!(doubled, [&json!(2), &json!(4)], "{stdout}");
    assert!(
        stderr.contains("--warm (or SANDPY_WARM) is for a single call"),
        "{stderr}"
    );
}

#[test]
fn bad_input_gets_a_clear_error() {
    let (code, _, stderr) = run(&["run", "--json", "/nonexistent/x.py"]);
    assert_eq!(code, 2);
    assert!(
        stderr.starts_with("error: cannot read `/nonexistent/x.py`"),
        "{stderr}"
    );
    let (code, _, stderr) = run(&["run", "--json", "--input", "/nonexistent/in", "-c", "1"]);
    assert_eq!(code, 2, "an unreadable --input is a usage error: {stderr}");
    assert!(stderr.starts_with("error: cannot read input"), "{stderr}");
    let (code, _, stderr) = run(&["run", "--timeout-ms", "0", "-c", "1"]);
    assert_eq!(code, 2, "{stderr}");
    let (code, _, _) = run(&["run"]);
    assert_eq!(code, 2);
}

#[test]
fn list_modules_help_and_version() {
    let (code, stdout, _) = run(&["run", "--list-modules"]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("stdlib modules available") && stdout.contains("tkinter"),
        "{stdout}"
    );
    assert!(stdout.contains("Third-party packages: attr, attrs, certifi, charset_normalizer, dateutil, httpx, idna, jinja2, markupsafe, requests, six, tabulate, urllib3, yaml"), "{stdout}");
    let (code, stdout, _) = run(&["--help"]);
    assert_eq!(code, 0);
    for command in ["run", "serve", "demo", "warmup", "bench", "build"] {
        assert!(stdout.contains(command), "{command} missing in help");
    }
    let (code, stdout, _) = run(&["--version"]);
    assert_eq!(
        (code, stdout.trim()),
        (0, concat!("sandpy ", env!("CARGO_PKG_VERSION")))
    );
}

#[test]
fn bad_config_names_file_and_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("bad.json");
    std::fs::write(
        &config,
        r#"{"mcpServers": {"x": {"command": "a", "url": "http://b"}}}"#,
    )
    .expect("write");
    let (code, _, stderr) = run(&["run", "--config", config.to_str().expect("path"), "-c", "1"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("bad.json")
            && stderr.contains("mcpServers.x")
            && stderr.contains("not both"),
        "{stderr}"
    );
}

#[test]
fn check_reports_violations_and_exits_by_result() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.py");
    std::fs::write(&bad, "import json\nimport socket\nx = eval('1')\n").expect("write");
    let bad = bad.to_str().expect("path");
    let (code, stdout, _) = run(&["check", bad, "--policy", "strict"]);
    assert_eq!(code, 1);
    assert_eq!(
        stdout,
        format!(
            "{bad}:2:1: import: import of 'socket' is not allowed (allowed_modules of policy 'strict' does not include 'socket')\n\
             {bad}:3:5: builtin: builtin 'eval' is denied by policy 'strict'\n"
        )
    );
    let (code, stdout, _) = run(&["check", bad, "--policy", "strict", "--json"]);
    assert_eq!(code, 1);
    let report: Value = serde_json::from_str(&stdout).expect("json");
    assert_eq!(report["violations"].as_array().map(Vec::len), Some(2));
    let (code, stdout, _) = run(&["check", bad]);
    assert_eq!(
        (code, stdout.as_str()),
        (0, ""),
        "the default policy allows the whole stdlib"
    );
    let (code, _, stderr) = run(&["check", bad, "--policy", "nope"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("unknown policy \"nope\""), "{stderr}");
    let (code, _, stderr) = run(&["run", "--policy", "strict", "-c", "import os"]);
    assert_eq!(code, 9, "{stderr}");
    assert!(stderr.contains("<string>:1:1: import"), "{stderr}");
}

const SCORER: &str = "def score(pred, gold, weight=1):\n    if pred is None:\n        raise ValueError('no prediction')\n    return {'match': pred == gold, 'w': weight}\n";

#[test]
fn call_a_function_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("scorer.py");
    std::fs::write(&file, SCORER).expect("write");
    let file = file.to_str().expect("path");
    let (code, stdout, _) = run(&[
        "call",
        file,
        "score",
        "--args",
        r#"["a", "a"]"#,
        "--policy",
        "strict",
    ]);
    assert_eq!((code, stdout.as_str()), (0, "{\"match\":true,\"w\":1}\n"));
    let (code, stdout, _) = run(&[
        "call",
        file,
        "score",
        "--args",
        r#"{"pred": 1, "gold": 2, "weight": 0.5}"#,
    ]);
    assert_eq!(
        (code, stdout.as_str()),
        (0, "{\"match\":false,\"w\":0.5}\n")
    );
    let (code, _, stderr) = run(&["call", file, "score", "--args", "[null, 1]"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("ValueError: no prediction"), "{stderr}");
    for (arguments, expected) in [
        ("{bad", "--args: not valid JSON: "),
        (
            "3",
            "--args: arguments must be a JSON list (positional) or object (keywords)",
        ),
    ] {
        let (code, stdout, stderr) = run(&["call", "--json", file, "score", "--args", arguments]);
        let (code, execution) = json_execution(code, &stdout, &stderr);
        assert_eq!(code, 8, "bad arguments are the run's input: {stderr}");
        assert_eq!(execution["status"], "invalid_input");
        assert!(
            execution["error"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(expected)),
            "{execution}"
        );
    }
    let (code, _, stderr) = run(&["call", file, "score", "--args", "{bad"]);
    assert_eq!(code, 8);
    assert!(
        stderr.starts_with("sandpy: invalid_input: --args: not valid JSON"),
        "{stderr}"
    );
}

#[test]
fn call_a_batch_with_bad_lines_in_the_middle() {
    let mut lines: Vec<String> = (0..30).map(|i| format!("[{i}, {}]", i % 3)).collect();
    lines[5] = "not json".into();
    lines[12] = "[null, 1]".into();
    lines[20] = "42".into();
    let mut bytes = (lines.join("\n") + "\n").into_bytes();
    // Line 26 is not UTF-8: that line fails, the batch goes on.
    let at = bytes
        .windows(7)
        .position(|w| w == b"[25, 1]")
        .expect("line 26");
    bytes[at + 1] = 0xff;
    let batch = Batch::with_inputs(SCORER, &bytes);
    let (code, stdout, _) = run(&batch.call(&["--jobs", "4"]));
    assert_eq!(code, 1, "some lines failed");
    let results = json_lines(&stdout);
    assert_eq!(results.len(), 30, "one result per input line");
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["line"], i + 1, "in input order");
        match i {
            5 | 20 => assert_eq!(r["status"], "invalid_input"),
            25 => assert_eq!(
                (r["status"].as_str(), r["error"]["message"].as_str()),
                (
                    Some("invalid_input"),
                    Some("not UTF-8 text (invalid byte at offset 1)")
                ),
                "{r}"
            ),
            12 => assert_eq!(
                (r["status"].as_str(), r["error"]["type"].as_str()),
                (Some("error"), Some("ValueError"))
            ),
            _ => assert_eq!(r["result"]["match"], json!(i % 3 == i), "{r}"),
        }
    }
}

/// Each line of a batch is a fresh instance, in worker processes and on threads alike,
/// however many lines one worker answers: a line sees no global, builtin, module
/// attribute or scratch file that an earlier line left.
#[test]
fn a_batch_line_sees_nothing_an_earlier_line_left() {
    let batch = Batch::new(
        "import builtins, json, os\n\
         COUNT = []\n\
         def score(i):\n    \
             seen = [len(COUNT), getattr(builtins, 'left', None), getattr(json, 'left', None), sorted(os.listdir('.'))]\n    \
             COUNT.append(i)\n    \
             builtins.left = json.left = i\n    \
             open(f'left-{i}', 'w').write('x')\n    \
             return seen\n",
        &numbered_lines(40),
    );
    for extra in [None, Some("--in-process")] {
        let mut flags = vec!["--jobs", "2"];
        flags.extend(extra);
        let (code, stdout, stderr) = run(&batch.call(&flags));
        assert_eq!(code, 0, "{extra:?}: {stderr}");
        let results = json_lines(&stdout);
        assert_eq!(results.len(), 40, "{stdout}");
        for r in &results {
            assert_eq!(
                (&r["status"], &r["result"]),
                (&json!("ok"), &json!([0, null, null, []])),
                "{extra:?}: {r}"
            );
        }
    }
}

/// A batch's module is checked and compiled once, but its top level runs in each line's
/// fresh instance, in worker processes and on threads alike: a value it draws at random
/// differs from line to line, and a line under a policy is still refused what the check
/// cannot see.
#[test]
fn a_batch_line_runs_the_modules_top_level_itself() {
    let lines: Vec<String> = (0..20)
        .map(|i| if i == 7 { r#"["os"]"# } else { r#"["json"]"# }.to_string())
        .collect();
    let batch = Batch::new(
        "import random, importlib\n\
         TOKEN = random.random()\n\
         def score(name):\n    \
             return [TOKEN, importlib.import_module(name).__name__]\n",
        &lines,
    );
    let config = batch.dir.path().join("config.json");
    std::fs::write(
        &config,
        r#"{"mcpServers": {}, "sandpy": {"policies": {"no-os": {"allowed_modules": ["random", "importlib", "json"]}}}}"#,
    )
    .expect("write");
    let config = config.to_str().expect("path");
    for extra in [None, Some("--in-process")] {
        let mut flags = vec!["--config", config, "--policy", "no-os", "--jobs", "2"];
        flags.extend(extra);
        let (code, stdout, stderr) = run(&batch.call(&flags));
        assert_eq!(code, 1, "{extra:?}: line 8 is refused: {stderr}");
        let results = json_lines(&stdout);
        assert_eq!(results.len(), 20, "{stdout}");
        let mut tokens = Vec::new();
        for (i, r) in results.iter().enumerate() {
            if i == 7 {
                assert_eq!(r["status"], "policy_violation", "{extra:?}: {r}");
                continue;
            }
            assert_eq!(r["status"], "ok", "{extra:?}: {r}");
            assert_eq!(r["result"][1], "json", "{extra:?}: {r}");
            tokens.push(r["result"][0].to_string());
        }
        tokens.sort();
        tokens.dedup();
        assert_eq!(
            tokens.len(),
            19,
            "{extra:?}: the top level ran once for several lines"
        );
    }
}

#[test]
fn files_go_in_by_flag_and_come_out_into_a_folder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    std::fs::create_dir(&data).expect("mkdir");
    std::fs::write(data.join("rows.csv"), "n\n1\n2\n3\n").expect("write");
    std::fs::write(dir.path().join("local.txt"), "from the host").expect("write");
    let out = dir.path().join("out");
    let mount = format!("{}:/data", data.display());
    let file = format!("{}:inputs/note.txt", dir.path().join("local.txt").display());
    let code = "import csv\ntotal = sum(int(r['n']) for r in csv.DictReader(open('/data/rows.csv')))\n\
                open('/output/summary.txt', 'w').write(f'{total} {open(\"inputs/note.txt\").read()}')";
    let (status, _, stderr) = run(&[
        "run",
        "--mount",
        &mount,
        "--file",
        &file,
        "--output-dir",
        out.to_str().unwrap(),
        "-c",
        code,
    ]);
    assert_eq!(status, 0, "{stderr}");
    assert_eq!(
        std::fs::read_to_string(out.join("summary.txt")).expect("saved"),
        "6 from the host"
    );
    assert!(
        stderr.contains("saved") && stderr.contains("summary.txt"),
        "{stderr}"
    );
    // Without --output-dir the program's files are announced, not lost silently.
    let (_, _, stderr) = run(&["run", "-c", "open('/output/x', 'w').write('x')"]);
    assert!(stderr.contains("--output-dir"), "{stderr}");
    let (status, _, stderr) = run(&[
        "run",
        "--disk-mb",
        "1",
        "-c",
        "open('big', 'wb').write(b'x' * (2 << 20))",
    ]);
    assert_eq!(status, 13, "disk_limit has its exit code: {stderr}");
    for (args, expected) in [
        (
            vec!["run", "--mount", "/nonexistent:/d", "-c", "1"],
            "cannot open",
        ),
        (vec!["run", "--mount", "nocolon", "-c", "1"], "HOST:GUEST"),
        (
            vec!["run", "--file", "/nonexistent/file.csv", "-c", "1"],
            "cannot read",
        ),
    ] {
        let (status, _, stderr) = run(&args);
        assert_eq!(status, 2, "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

/// `sandpy run` compiles the guest without interruption checks: a busy loop past its time
/// is ended with the process, which still reports the timeout as any run would (what was
/// printed, the status, the exit code, the JSON), and leaves no run folder behind.
#[test]
fn time_limit_a_busy_loop_ends_with_the_process_and_reports_its_timeout() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let busy = "print('started', flush=True)\nwhile True: pass";
    for json in [false, true] {
        // Time for the start of a process on a busy machine, which the run's time counts.
        let mut args = vec!["run", "--timeout-ms", "1000"];
        if json {
            args.push("--json");
        }
        args.extend(["-c", busy]);
        let mut child = crate::sandpy()
            .env("SANDPY_SCRATCH_DIR", scratch.path())
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("sandpy");
        // A run nothing stops would spin forever: give up (and fail) after 60 s.
        let started = std::time::Instant::now();
        while child.try_wait().expect("try_wait").is_none() {
            if started.elapsed() > std::time::Duration::from_secs(60) {
                let _ = child.kill();
                panic!("the busy loop was not stopped within 60 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let out = child.wait_with_output().expect("output");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.code(), Some(3), "{stdout} {stderr}");
        if json {
            let v: Value = serde_json::from_str(&stdout).expect("one JSON object");
            assert_eq!(v["status"], "timeout");
            assert_eq!(v["stdout"], "started\n");
            assert_eq!(
                v["error"]["message"],
                "the run exceeded its wall-clock limit of 1000 ms"
            );
            assert!(v["duration_ms"].as_f64().expect("duration") >= 1000.0);
        } else {
            assert_eq!(stdout, "started\n");
            assert!(
                stderr.contains("timeout: the run exceeded its wall-clock limit of 1000 ms"),
                "{stderr}"
            );
        }
        let left = entries(scratch.path());
        assert!(left.is_empty(), "left behind: {left:?}");
    }
}

/// A one-shot command leaves its compiled code and engine to the process's exit, but its
/// run folders (the run's `/tmp` and `/output`, the guest's `/` for its mounts) go first:
/// after `sandpy run` and a single `sandpy call`, with an input file and a mount, the
/// scratch folder is empty.
#[test]
fn one_shot_commands_leave_no_run_folder_behind() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let host = tempfile::tempdir().expect("tempdir");
    std::fs::write(host.path().join("data.txt"), "mounted").expect("write");
    std::fs::write(host.path().join("f.py"), "def f(x):\n    return x + 1\n").expect("write");
    let mount = format!("{}:/data", host.path().display());
    let input = format!("{}:in.txt", host.path().join("data.txt").display());
    let commands: [Vec<&str>; 2] = [
        vec![
            "run", "--mount", &mount, "--file", &input, "-c",
            "open('/output/o.txt', 'w').write(open('/data/data.txt').read() + open('in.txt').read())",
        ],
        vec!["call", "--mount", &mount, "f.py", "f", "--args", "[41]"],
    ];
    for args in commands {
        let out = crate::sandpy()
            .env("SANDPY_SCRATCH_DIR", scratch.path())
            .current_dir(host.path())
            .args(&args)
            .output()
            .expect("sandpy");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let left = entries(scratch.path());
        assert!(left.is_empty(), "{args:?} left behind: {left:?}");
    }
}

/// The names in `dir`.
fn entries(dir: &std::path::Path) -> Vec<std::ffi::OsString> {
    std::fs::read_dir(dir)
        .expect("scratch")
        .flatten()
        .map(|e| e.file_name())
        .collect()
}

/// An `--args-file` batch runs in worker processes on code without interruption checks:
/// a line that loops past its time ends its worker and is answered `timeout`, the lines
/// after it are answered by new workers, all in input order, the same as on threads
/// (`--in-process`, code with checks).
#[test]
fn time_limit_a_busy_line_of_a_batch_ends_only_its_worker() {
    let batch = Batch::new(
        "def score(n):\n    if n % 7 == 3:\n        while True:\n            pass\n    return n * 2\n",
        &numbered_lines(20),
    );
    let mut answers = Vec::new();
    for extra in [None, Some("--in-process")] {
        // Each line's time counts its instance's start; a busy machine slows it.
        let mut flags = vec!["--timeout-ms", "1500", "--jobs", "2"];
        flags.extend(extra);
        let (code, stdout, stderr) = run(&batch.call(&flags));
        assert_eq!(code, 1, "{stderr}");
        let results = json_lines(&stdout);
        assert_eq!(results.len(), 20, "{stdout} {stderr}");
        for (i, r) in results.iter().enumerate() {
            assert_eq!(r["line"], i + 1, "in input order: {r}");
            if i % 7 == 3 {
                assert_eq!(r["status"], "timeout", "{r}");
                assert_eq!(
                    r["error"]["message"],
                    "the run exceeded its wall-clock limit of 1500 ms"
                );
            } else {
                assert_eq!(
                    (&r["status"], &r["result"]),
                    (&json!("ok"), &json!(i * 2)),
                    "{r}"
                );
            }
        }
        answers.push(
            results
                .iter()
                .map(|r| (r["status"].clone(), r["result"].clone(), r["error"].clone()))
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(answers[0], answers[1], "workers and threads answer alike");
}

/// Threads keep as many lines waiting for a slot as run: when each line takes its whole
/// time limit, a waiting line waits as long as a run takes, and more; it is still answered
/// `timeout` for its own run, never `busy` for the wait.
#[test]
fn time_limit_lines_waiting_behind_lines_that_take_their_whole_time_are_not_busy() {
    let batch = Batch::new(
        "def score(n):\n    while True:\n        pass\n",
        &numbered_lines(5),
    );
    let (code, stdout, stderr) =
        run(&batch.call(&["--in-process", "--jobs", "1", "--timeout-ms", "400"]));
    assert_eq!(code, 1, "{stderr}");
    let results = json_lines(&stdout);
    assert_eq!(results.len(), 5, "{stdout} {stderr}");
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["line"], i + 1, "in input order: {r}");
        assert_eq!(r["status"], "timeout", "{r}");
    }
}

/// A worker process killed in the middle of a line (here by the test, as the OOM killer
/// or an operator might): that line is answered `internal_error` naming the signal, the
/// other lines are answered by the remaining and new workers, in order.
#[test]
fn a_killed_batch_worker_loses_no_line() {
    let files = Batch::new(
        "import time\ndef score(n):\n    time.sleep(3)\n    return n\n",
        &numbered_lines(6),
    );
    let batch = crate::sandpy()
        .args(files.call(&["--jobs", "2"]))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("sandpy");
    // Wait for the workers (children of the batch process), then kill one mid-line.
    let children = format!("/proc/{0}/task/{0}/children", batch.id());
    let started = std::time::Instant::now();
    let worker = loop {
        let listed = std::fs::read_to_string(&children).unwrap_or_default();
        if let Some(pid) = listed.split_whitespace().next() {
            break pid.to_string();
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "no worker started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // Well inside its first line, even when a busy machine slowed the worker's start.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let killed = std::process::Command::new("kill")
        .args(["-9", &worker])
        .status()
        .expect("kill");
    assert!(killed.success());
    let out = batch.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let results = json_lines(&stdout);
    assert_eq!(results.len(), 6, "{stdout}");
    let mut lost = 0;
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["line"], i + 1, "in input order: {r}");
        if r["status"] == "internal_error" {
            lost += 1;
            let message = r["error"]["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("worker process ended without an answer")
                    && message.contains("SIGKILL"),
                "{r}"
            );
        } else {
            assert_eq!(
                (&r["status"], &r["result"]),
                (&json!("ok"), &json!(i)),
                "{r}"
            );
        }
    }
    assert_eq!(lost, 1, "exactly the killed worker's line: {stdout}");
}

/// `sandpy ... | head`: whoever reads stdout is gone before the command writes. The command
/// ends quietly (no panic, no backtrace, no `error:`), as other Unix tools do.
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let lines: Vec<String> = (0..400).map(|i| format!("[{i}, 1]")).collect();
    let batch = Batch::new(SCORER, &lines);
    let many_lines = "for i in range(20000): print(i)\n[0] * 1000";
    let commands: [&[&str]; 4] = [
        &["run", "-c", many_lines],
        &["run", "--json", "-c", many_lines],
        &["call", &batch.module, "score", "--args", "[1, 1]"],
        &batch.call(&[]),
    ];
    for args in commands {
        let mut child = sandpy()
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("sandpy");
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(quiet(&stderr), "{args:?}: {stderr}");
        assert!(
            matches!(out.status.code(), Some(0 | 141)),
            "{args:?}: ended by {:?}, {stderr}",
            out.status
        );
    }
    // `serve` on stdio whose client stops reading: its first answer finds stdout closed
    // (stdin kept open meanwhile, so that the server has no other reason to end).
    let mut server = sandpy()
        .arg("serve")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("sandpy serve");
    drop(server.stdout.take());
    let mut stdin = server.stdin.take().expect("stdin");
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;
    std::io::Write::write_all(&mut stdin, format!("{initialize}\n").as_bytes()).expect("send");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while server.try_wait().expect("wait").is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    drop(stdin);
    let out = server.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(quiet(&stderr), "serve: {stderr}");
    assert_eq!(out.status.code(), Some(141), "serve: {stderr}");
}

/// Whether `stderr` says nothing of a closed stdout: no panic, no `Broken pipe`, no `error:`.
fn quiet(stderr: &str) -> bool {
    !stderr.contains("panicked") && !stderr.contains("Broken pipe") && !stderr.contains("error:")
}

/// Logs written to a file or a pipe carry no colour codes (a collector reads them as
/// text); `NO_COLOR` is honoured too.
#[test]
fn logs_off_a_terminal_carry_no_colour_codes() {
    let out = sandpy()
        .env("SANDPY_LOG", "debug")
        .args(["run", "-c", "1"])
        .output()
        .expect("sandpy");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("DEBUG"), "some log lines: {stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes in a pipe: {stderr:?}"
    );
}
