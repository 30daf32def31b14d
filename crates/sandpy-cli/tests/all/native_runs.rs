//! What the native tier (`--tier native`) runs and how: numpy and pandas with the same
//! face as the WebAssembly tier, its venv and cache under `/tmp`, its limits, tools of
//! upstream servers, the operator's choice of tier, programs that answer alike in both
//! tiers, and a warm runner that keeps its zygote.

use super::native::{assert_alike, native_config, native_run, native_venv, COMPAT_PROGRAMS};
use super::{mcp_python, sandpy};
use serde_json::{json, Value};
use std::path::PathBuf;

#[test]
fn native_runs_numpy_and_pandas_with_the_same_face_as_the_wasm_tier() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &["numpy", "pandas"], json!({}));
    let code = "import numpy as np, pandas as pd, sys, random\n\
                df = pd.DataFrame({'a': np.arange(10), 'b': np.arange(10) ** 2})\n\
                print(df.b.sum())\n\
                open('/output/table.csv', 'w').write(df.to_csv(index=False))\n\
                open('/tmp/scratch.txt', 'w').write('scratch')\n\
                {'python': sys.version_info[:2], 'mean': float(df.a.mean()), \
                 'seeds': [np.random.randint(1 << 30), random.getrandbits(30)]}";
    let (exit, first) = native_run(&config, code, &[], "");
    assert_eq!(exit, 0, "{first}");
    assert_eq!(first["status"], "ok");
    assert_eq!(first["stdout"], "285\n");
    assert_eq!(first["return_value"]["mean"], 4.5);
    assert_eq!(first["files"][0]["name"], "table.csv");
    assert_eq!(first["files"][0]["mime_type"], "text/csv");
    assert!(
        first["memory_peak_bytes"].as_u64().unwrap_or(0) > 0,
        "{first}"
    );
    // Every run is reseeded: a fork must not repeat its siblings' random numbers.
    let (_, second) = native_run(&config, code, &[], "");
    assert_ne!(
        first["return_value"]["seeds"],
        second["return_value"]["seeds"]
    );

    // An exception: the same status, error and traceback shape as the WebAssembly tier.
    let (exit, failed) = native_run(&config, "import json\njson.loads('{')", &[], "");
    let (_, wasm) = {
        let out = sandpy()
            .args([
                "run",
                "--json",
                "--tier",
                "wasm",
                "-c",
                "import json\njson.loads('{')",
            ])
            .output()
            .expect("sandpy");
        (
            0,
            serde_json::from_slice::<Value>(&out.stdout).expect("json"),
        )
    };
    assert_eq!(exit, 1, "{failed}");
    assert_eq!(failed["status"], "error");
    assert_eq!(failed["error"]["type"], wasm["error"]["type"]);
    assert_eq!(failed["error"]["message"], wasm["error"]["message"]);
    let traceback = failed["error"]["traceback"].as_str().unwrap_or_default();
    assert!(
        traceback.contains("File \"<string>\", line 2"),
        "{traceback}"
    );
    assert!(!traceback.contains("sandpy_guest"), "{traceback}");

    // Input files and read-only mounts, as in the WebAssembly tier.
    let reference = dir.path().join("ref");
    std::fs::create_dir(&reference).expect("ref");
    std::fs::write(reference.join("a.csv"), "a,b\n1,2\n3,4\n").expect("a.csv");
    let input = dir.path().join("in.csv");
    std::fs::write(&input, "y\n5\n6\n").expect("in.csv");
    let (input, mount) = (
        input.display().to_string(),
        format!("{}:/ref", reference.display()),
    );
    let code = "import pandas as pd\n\
                try:\n\
                \x20   open('/ref/new', 'w')\n\
                except OSError as e:\n\
                \x20   refused = e.errno\n\
                [int(pd.read_csv('/ref/a.csv').b.sum()), int(pd.read_csv('in.csv').y.sum()), refused]";
    let (_, read) = native_run(&config, code, &["--file", &input, "--mount", &mount], "");
    assert_eq!(read["return_value"], json!([6, 11, 30]), "{read}");

    // A policy is enforced the same way.
    let (_, refused) = native_run(&config, "import subprocess", &["--policy", "strict"], "");
    assert_eq!(refused["status"], "policy_violation", "{refused}");
}

/// A venv, the packages in it and the cache folder (the guest code) under `/tmp` are
/// shown to the run at their own paths inside its private `/tmp`: what the zygote did not
/// import is still found (it was hidden beneath the run's `/tmp`, so the README's test
/// command failed on a checkout under `/tmp`). The host's other `/tmp` files stay out.
#[test]
fn native_venv_and_cache_under_tmp_are_shown_to_runs() {
    let dir = tempfile::Builder::new()
        .prefix("sandpy-native-tmp-")
        .tempdir_in("/tmp")
        .expect("tempdir under /tmp");
    let venv = dir.path().join("venv");
    let made = sandpy()
        .args(["build", "--native", "--output"])
        .arg(&venv)
        .output()
        .expect("sandpy build --native");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let site = std::fs::read_dir(venv.join("lib"))
        .expect("lib")
        .filter_map(Result::ok)
        .map(|entry| entry.path().join("site-packages"))
        .find(|path| path.is_dir())
        .expect("site-packages");
    // A package whose submodule is imported lazily, after the zygote's fork.
    std::fs::create_dir(site.join("lazy_pkg")).expect("lazy_pkg");
    std::fs::write(site.join("lazy_pkg/__init__.py"), "NAME = 'lazy'\n").expect("init");
    std::fs::write(site.join("lazy_pkg/sub.py"), "VALUE = 42\n").expect("sub");
    std::fs::write(dir.path().join("host-secret.txt"), "secret").expect("secret");
    let config = dir.path().join("native.json");
    let file = json!({"sandpy": {"tier": "native",
        "native": {"venv": venv, "preimport": ["lazy_pkg"]}}});
    std::fs::write(&config, file.to_string()).expect("config");
    let code = format!(
        "import os, lazy_pkg, lazy_pkg.sub\n\
         open('/tmp/mine.txt', 'w').write('x')\n\
         try:\n\
         \x20   open('{venv}/new.txt', 'w')\n\
         \x20   venv_write = 'allowed'\n\
         except OSError as e:\n\
         \x20   venv_write = e.errno\n\
         [lazy_pkg.NAME, lazy_pkg.sub.VALUE, os.path.exists('{secret}'), venv_write]",
        venv = venv.display(),
        secret = dir.path().join("host-secret.txt").display(),
    );
    let out = sandpy()
        .args(["run", "--json", "--config"])
        .arg(&config)
        .args(["-c", &code])
        .env("SANDPY_CACHE_DIR", dir.path().join("cache"))
        .output()
        .expect("sandpy");
    let execution: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    // 30: EROFS, the venv is read-only; the host's file beside it is not there.
    assert_eq!(
        execution["return_value"],
        json!(["lazy", 42, false, 30]),
        "{execution}"
    );
}

#[test]
fn native_limits_end_runs_with_their_statuses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &["numpy"], json!({}));
    let cases: [(&str, &[&str], &str); 7] = [
        ("while True: pass", &["--timeout-ms", "1000"], "timeout"),
        (
            "x = bytearray(4 << 30)",
            &["--memory-mb", "512"],
            "memory_limit",
        ),
        (
            "import numpy as np\nx = np.ones(1 << 30)",
            &["--memory-mb", "512"],
            "memory_limit",
        ),
        (
            "print('x' * 100_000)",
            &["--max-output-bytes", "1000"],
            "output_limit",
        ),
        (
            "open('/tmp/big', 'wb').write(b'x' * (8 << 20))",
            &["--disk-mb", "1"],
            "disk_limit",
        ),
        (
            "open('/output/big', 'wb').write(b'x' * (8 << 20))",
            &["--output-files-mb", "1"],
            "disk_limit",
        ),
        ("import sys\nsys.exit(3)", &[], "error"),
    ];
    for (code, args, status) in cases {
        let (_, execution) = native_run(&config, code, args, "");
        assert_eq!(execution["status"], status, "{code}: {execution}");
    }
    // The run's channel to the host (descriptor 3): a message without end is cut at the
    // host's limit, not held whole; bytes that are no message end the run as its error.
    let (_, flood) = native_run(
        &config,
        "import os\nwhile True: os.write(3, b'x' * 65536)",
        &[],
        "",
    );
    assert_eq!(flood["status"], "output_limit", "{flood}");
    let (_, garbage) = native_run(
        &config,
        "import os\nos.write(3, b'{nonsense\\n')\nimport time\ntime.sleep(5)",
        &[],
        "",
    );
    assert_eq!(garbage["status"], "error", "{garbage}");
    assert_eq!(garbage["error"]["type"], "ChannelError", "{garbage}");

    // The deadline holds while the run waits in a blocking call too.
    let (_, slept) = native_run(
        &config,
        "import time\ntime.sleep(60)",
        &["--timeout-ms", "500"],
        "",
    );
    assert_eq!(slept["status"], "timeout", "{slept}");
    assert!(
        slept["duration_ms"].as_f64().unwrap_or(1e9) < 5_000.0,
        "{slept}"
    );
    // stdin reaches the program.
    let input = dir.path().join("input.txt");
    std::fs::write(&input, "line one\n").expect("input");
    let input = input.display().to_string();
    let (_, read) = native_run(
        &config,
        "import sys\nsys.stdin.read()",
        &["--input", &input],
        "",
    );
    assert_eq!(read["return_value"], "line one\n", "{read}");
}

/// `sandpy run --tier native` never loads the WebAssembly runtime it does not use: on a
/// cold cache nothing is compiled (the cache folder gets no `.cwasm`, where loading the
/// runtime would write one).
#[test]
fn a_native_run_does_not_load_the_webassembly_runtime() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    let config = native_config(dir.path(), &[], json!({}));
    let compiled = || {
        std::fs::read_dir(&cache)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".cwasm"))
                    .count()
            })
            .unwrap_or(0)
    };
    let native = sandpy()
        .args([
            "run", "--json", "--config", &config, "--tier", "native", "-c", "6 * 7",
        ])
        .env("SANDPY_CACHE_DIR", &cache)
        .output()
        .expect("sandpy");
    let stdout = String::from_utf8_lossy(&native.stdout);
    assert!(stdout.contains("\"return_value\":42"), "{stdout}");
    assert_eq!(
        compiled(),
        0,
        "the native run compiled the WebAssembly runtime"
    );
}

#[test]
fn tools_reach_upstream_servers_from_the_native_tier() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &[], json!({}));
    let mut file: Value =
        serde_json::from_str(&std::fs::read_to_string(&config).expect("config")).expect("json");
    file["mcpServers"] = json!({"report": {
        "command": mcp_python(),
        "args": [PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/report_server.py"), "x"],
    }});
    std::fs::write(&config, file.to_string()).expect("config");
    let code = "import asyncio, json\n\
                a = call_mcp_tool('mcp__report__started')\n\
                b = tools.report.started()\n\
                async def both():\n\
                \x20   return await asyncio.gather(tools.report.started(), tools.report.started())\n\
                c = asyncio.run(both())\n\
                names = [t['name'] for t in discover_mcp_tools()]\n\
                try:\n\
                \x20   call_mcp_tool('mcp__report__missing')\n\
                except ToolError as e:\n\
                \x20   missing = str(e)\n\
                {'a': a, 'same': a == b == c[0] == c[1], 'names': names, 'missing': missing}";
    let (exit, execution) = native_run(&config, code, &[], "");
    assert_eq!(exit, 0, "{execution}");
    let value = &execution["return_value"];
    assert_eq!(value["a"]["argv"], json!(["x"]), "{execution}");
    assert_eq!(value["same"], true, "{execution}");
    assert_eq!(
        value["names"],
        json!(["mcp__report__started"]),
        "{execution}"
    );
    assert!(value["missing"]
        .as_str()
        .unwrap_or_default()
        .contains("missing"));
    assert_eq!(execution["tool_calls"], 5, "{execution}");
    // The call cap (set in the config) ends the run with its own status.
    let capped_config = native_config(dir.path(), &[], json!({"limits": {"max_tool_calls": 2}}));
    let mut file: Value =
        serde_json::from_str(&std::fs::read_to_string(&capped_config).expect("config"))
            .expect("json");
    file["mcpServers"] = json!({"report": {
        "command": mcp_python(),
        "args": [PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/report_server.py")],
    }});
    std::fs::write(&capped_config, file.to_string()).expect("config");
    let (_, capped) = native_run(
        &capped_config,
        "for _ in range(5): call_mcp_tool('mcp__report__started')",
        &[],
        "",
    );
    assert_eq!(capped["status"], "tool_call_limit", "{capped}");
}

#[test]
fn run_python_chooses_its_tier_only_where_the_operator_allows_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let version = "import sys\nsys.version_info[:2]";
    let requests = json!([
        {"method": "call_tool", "name": "run_python", "arguments": {"code": version}},
        {"method": "call_tool", "name": "run_python", "arguments": {"code": version, "tier": "native"}},
        {"method": "call_tool", "name": "run_python",
         "arguments": {"code": "import numpy\nint(numpy.arange(4).sum())", "tier": "native"}},
    ]);
    let serve = |config: &str| {
        super::mcp_client(
            &[
                "stdio",
                env!("CARGO_BIN_EXE_sandpy"),
                "serve",
                "--config",
                config,
            ],
            &requests,
        )
    };
    for per_run in [true, false] {
        let config = dir.path().join(format!("per-run-{per_run}.json"));
        let file = json!({"sandpy": {"native": {"venv": native_venv(), "per_run": per_run}}});
        std::fs::write(&config, file.to_string()).expect("config");
        let (out, status, _) = serve(&config.display().to_string());
        assert_eq!(status, 0, "{out}");
        // The config's tier (here the default, wasm) when the request names none.
        let first = &out[0]["structuredContent"]["return_value"];
        assert_eq!(first, &json!([3, 14]), "{out}");
        if per_run {
            let native = &out[1]["structuredContent"]["return_value"];
            assert!(native[1].as_u64().is_some_and(|minor| minor < 14), "{out}");
            assert_eq!(out[2]["structuredContent"]["return_value"], 6, "{out}");
        } else {
            // Without `per_run`, a request cannot pick the native tier.
            let refused = out[1].to_string();
            assert!(refused.contains("sandpy.native.per_run"), "{out}");
        }
    }
}

/// Programs of the language tests (`crates/sandpy/tests/all/language.rs`) print and return
/// the same in both tiers.
#[test]
fn compat_programs_answer_alike_in_both_tiers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = native_config(dir.path(), &[], json!({}));
    for code in COMPAT_PROGRAMS {
        let (_, native) = native_run(&config, code, &[], "");
        let out = sandpy()
            .args(["run", "--json", "--tier", "wasm", "-c", code])
            .output()
            .expect("sandpy");
        let wasm: Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_alike(code, &native, &wasm);
    }
}

/// `sandpy run --warm` on the native tier: the runner keeps its zygote, so a run skips
/// the zygote's start (numpy and pandas imported), and the zygote leaves with the runner.
#[test]
fn native_warm_runs_keep_the_zygote_and_it_leaves_with_the_runner() {
    let warm = crate::warm::Warm::new();
    let config = native_config(warm.cwd.path(), &["numpy", "pandas"], json!({}));
    let program = "import pandas as pd\nint(pd.Series([1, 2]).sum())";
    let out = warm.served("run", &["--config", &config, "--json", "-c", program]);
    let execution: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(execution["return_value"], 3, "{execution}");
    let runners = crate::warm::runner_pids(warm.xdg.path());
    let zygotes: Vec<i32> = runners
        .iter()
        .flat_map(|&runner| children(runner))
        .collect();
    assert!(!zygotes.is_empty(), "the runner {runners:?} has no zygote");
    crate::warm::kill_runners(warm.xdg.path());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while zygotes.iter().any(|&pid| is_alive(pid)) {
        assert!(
            std::time::Instant::now() < deadline,
            "zygotes {zygotes:?} outlived their runner"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The processes whose parent is `parent`.
fn children(parent: i32) -> Vec<i32> {
    let parent = Some(parent.to_string());
    let pids = crate::warm::pids().into_iter();
    pids.filter(|&pid| crate::warm::stat_field(pid, 1) == parent)
        .collect()
}

/// Whether `pid` runs (a zombie, waiting for a parent that may never reap it, does not).
fn is_alive(pid: i32) -> bool {
    crate::warm::stat_field(pid, 0).is_some_and(|state| state != "Z")
}
