//! What the native tier's tests share (`--tier native`: real CPython with numpy and pandas,
//! confined by the kernel): the test venv, a config for it, a run, and the attack prelude
//! whose `attempt()` records the exact exception each attack met. The tests are by
//! boundary: `native_runs.rs` (what it runs, its limits), `native_files.rs`,
//! `native_network.rs`, `native_processes.rs`, `native_kernel.rs` (the kernel interface
//! and each confinement layer), `native_sessions.rs` and `native_attacks.rs`.

use super::sandpy;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The packages of the tests' native venv, pinned: numpy and pandas, and the HTTP
/// clients the host makes requests for (the guest's pins, `crates/sandpy/curated.rs`).
const PACKAGES: [&str; 4] = [
    "numpy==2.4.6",
    "pandas==3.1.1",
    "requests==2.34.2",
    "httpx==0.28.1",
];

/// A venv with those packages, made once under `target/` by `sandpy build --native`.
pub(super) fn native_venv() -> &'static PathBuf {
    static VENV: OnceLock<PathBuf> = OnceLock::new();
    VENV.get_or_init(|| built_venv("native-test-venv", &PACKAGES))
}

/// The venv `target/<name>` with `packages`, made by `sandpy build --native` unless the
/// one there was made with the same list.
pub(super) fn built_venv(name: &str, packages: &[&str]) -> PathBuf {
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target")
        .join(name);
    let marker = venv.join(".installed");
    let wanted = packages.join(" ");
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(wanted.as_str()) {
        let _ = std::fs::remove_dir_all(&venv);
        let mut build = sandpy();
        build.args(["build", "--native", "--output"]).arg(&venv);
        for package in packages {
            build.args(["--with", package]);
        }
        let out = build.output().expect("sandpy build --native");
        assert!(
            out.status.success(),
            "sandpy build --native: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(&marker, wanted).expect("marker");
    }
    venv
}

/// A config file in `dir` for the native tier with the test venv and `extra` keys of
/// the `sandpy` section.
pub(super) fn native_config(dir: &Path, preimport: &[&str], extra: Value) -> String {
    let mut sandpy = json!({
        "tier": "native",
        "native": {"venv": native_venv(), "preimport": preimport},
    });
    if let (Some(section), Value::Object(extra)) = (sandpy.as_object_mut(), extra) {
        section.extend(extra);
    }
    let path = dir.join("native.json");
    std::fs::write(&path, json!({ "sandpy": sandpy }).to_string()).expect("config");
    path.display().to_string()
}

/// The names of the files an execution (as `sandpy run --json` prints it) brought back.
pub(super) fn output_names(execution: &Value) -> Vec<&str> {
    execution["files"]
        .as_array()
        .unwrap_or_else(|| panic!("no files: {execution}"))
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect()
}

/// Run `code` in the native tier with `args` and `layers_off`: exit code and execution.
pub(super) fn native_run(
    config: &str,
    code: &str,
    args: &[&str],
    layers_off: &str,
) -> (i32, Value) {
    let out = sandpy()
        .args(["run", "--json", "--config", config])
        .args(args)
        .args(["-c", code])
        .env("SANDPY_TEST_NATIVE_LAYERS_OFF", layers_off)
        .output()
        .expect("sandpy");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let execution = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not one JSON object ({e}):\n{stdout}\n{stderr}"));
    (out.status.code().unwrap_or(-1), execution)
}

/// A prelude for attack programs: `attempt(name, f)` records whether `f()` was allowed
/// or blocked (with the exception), and the program's value is the record.
const ATTEMPT: &str = r#"
import ctypes, errno, json, os, socket, subprocess, sys
found = {}
def attempt(name, f):
    try:
        found[name] = ["allowed", repr(f())[:200]]
    except BaseException as e:
        found[name] = ["blocked", f"{type(e).__name__}: {e}"[:200]]
libc = ctypes.CDLL(None, use_errno=True)
def raw(number, *args):
    result = libc.syscall(number, *args)
    if result == -1:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result
"#;

/// What the attack prelude imports: pre-imported by the zygote, because with the run's
/// own root switched off the runs cannot read a Python installed under a private folder.
pub(super) const ATTACK_MODULES: &[&str] = &["ctypes", "errno", "json", "socket", "subprocess"];

pub(super) fn attacks(
    config: &str,
    body: &str,
    layers_off: &str,
) -> serde_json::Map<String, Value> {
    let code = format!("{ATTEMPT}\n{body}\nfound");
    let (exit, execution) = native_run(config, &code, &[], layers_off);
    assert_eq!(exit, 0, "{execution}");
    execution["return_value"]
        .as_object()
        .cloned()
        .unwrap_or_else(|| panic!("no record: {execution}"))
}

pub(super) fn assert_blocked(found: &serde_json::Map<String, Value>, names: &[&str]) {
    for name in names {
        assert_eq!(
            found[*name][0], "blocked",
            "{name} got through: {}",
            found[*name]
        );
    }
}

/// The pids of processes named `name` (their `comm`, which a run may set for itself).
fn named_processes(name: &str) -> Vec<String> {
    let out = Command::new("pgrep")
        .args(["-x", name])
        .output()
        .expect("pgrep");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// [`named_processes`] once some are there (`present`) or none are, or after 10 s: killed
/// processes take a moment to go, and new ones to take their name, on a busy machine.
pub(super) fn named_processes_once(name: &str, present: bool) -> Vec<String> {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let found = named_processes(name);
        if found.is_empty() != present || std::time::Instant::now() > until {
            return found;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Programs of the language tests (`crates/sandpy/tests/all/language.rs`), run in both
/// tiers here and as session cells in `native_sessions.rs`.
pub(super) const COMPAT_PROGRAMS: [&str; 6] = [
    "from dataclasses import dataclass\n\
     @dataclass\n\
     class Point:\n\
     \x20   x: int\n\
     \x20   y: int\n\
     def squares(n):\n\
     \x20   for i in range(n):\n\
     \x20       yield i * i\n\
     def describe(v):\n\
     \x20   match v:\n\
     \x20       case Point(x=0, y=0): return 'origin'\n\
     \x20       case [a, b]: return f'pair {a} {b}'\n\
     \x20       case _: return 'other'\n\
     print(list(squares(4)), describe(Point(0, 0)), describe([1, 2]))\n\
     {'p': repr(Point(1, 2)), 's': sum(squares(10))}",
    "import json, re, datetime, decimal, fractions, statistics, itertools, collections, hashlib, base64\n\
     from decimal import Decimal\n\
     [json.loads(json.dumps({'a': [1, 2.5, None]})), re.findall(r'(\\d+)-(\\w+)', '1-a 22-bb'),\n\
     str(datetime.date(2024, 2, 28) + datetime.timedelta(days=1)), str(Decimal('0.1') + Decimal('0.2')),\n\
     str(fractions.Fraction(1, 3) * 3), statistics.median([5, 1, 3]), list(itertools.accumulate([1, 2, 3])),\n\
     collections.Counter('abca').most_common(1), hashlib.sha256(b'x').hexdigest()[:8], base64.b64encode(b'hi').decode()]",
    "import asyncio\n\
     async def twice(x):\n\
     \x20   await asyncio.sleep(0.01)\n\
     \x20   return 2 * x\n\
     async def main():\n\
     \x20   return await asyncio.gather(twice(1), twice(2), twice(3))\n\
     print(asyncio.run(main()))",
    "import asyncio\n\
     x = await asyncio.gather(*(asyncio.sleep(0.01, result=i) for i in range(3)))\n\
     x",
    "import json\njson.loads('{')",
    "import sys\nprint('to stderr', file=sys.stderr)\ntry:\n    raise KeyError('k')\nexcept KeyError as e:\n    caught = repr(e)\ncaught",
];

/// The two tiers' executions of `code` say the same: tracebacks through the stdlib name
/// its files, which differ between the two Pythons; everything else must not.
pub(super) fn assert_alike(code: &str, native: &Value, wasm: &Value) {
    for field in [
        "/status",
        "/stdout",
        "/return_value",
        "/error/type",
        "/error/message",
    ] {
        assert_eq!(
            native.pointer(field),
            wasm.pointer(field),
            "{field} differs for:\n{code}\n{native}\n{wasm}"
        );
    }
    if native["status"] == "ok" {
        assert_eq!(native["stderr"], wasm["stderr"], "{code}");
    }
}
