//! A misbehaving upstream (`crates/sandpy-mcp/tests/hostile_upstream.py`) against a whole
//! `sandpy run` process: each attack gets its exact answer, the same run then still calls
//! the server's `echo`, and the process's peak RSS stays under the 300 MiB (an
//! in-process test cannot tell its RSS from its neighbours').

use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::sync::Once;

const MAX_RSS_MIB: u64 = 300;

/// Runs its arguments as a command and prints its stdout, then the peak RSS in KiB of the
/// largest process it waited for (`sandpy`; the upstream it starts is far smaller); passes
/// on the command's stderr and exit status.
const MEASURE: &str = "import resource, subprocess, sys\n\
p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)\n\
sys.stderr.buffer.write(p.stderr)\n\
sys.stdout.write(p.stdout.decode() + '\\n' + str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n\
sys.exit(p.returncode if p.returncode >= 0 else 128 - p.returncode)";

/// `sandpy run --json -c code` with the hostile server in `mode` as upstream `bad`: the
/// execution as JSON, and the peak RSS in MiB.
fn run_against(mode: &[&str], code: &str) -> (Value, u64) {
    static WARM: Once = Once::new();
    // The first run compiles the runtime to native code: not what is measured here.
    WARM.call_once(|| {
        let warmed = crate::sandpy().args(["run", "-c", "1"]).output();
        assert!(warmed.is_ok_and(|o| o.status.success()), "sandpy runs");
    });
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../sandpy-mcp/tests/hostile_upstream.py"
    );
    let mut args = vec![json!(script)];
    args.extend(mode.iter().map(|m| json!(m)));
    let config = json!({"mcpServers": {"bad": {"command": "python3", "args": args}}});
    // A folder of its own: tests of one mode run side by side, and one's removal (or
    // rewrite) of a shared file left the other's `sandpy` with no config to read.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("sandpy.json");
    std::fs::write(&path, config.to_string()).expect("config");
    let out = Command::new("python3")
        .args(["-c", MEASURE, env!("CARGO_BIN_EXE_sandpy"), "run", "--json"])
        .arg("--config")
        .arg(&path)
        .args(["-c", code])
        .env_remove("SANDPY_CONFIG")
        .stdin(Stdio::null())
        .output()
        .expect("python3");
    let text = String::from_utf8_lossy(&out.stdout);
    let Some((json, rss)) = text.trim().rsplit_once('\n') else {
        panic!(
            "`sandpy run` printed no result ({}); its stderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let execution: Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"));
    let rss_kib: u64 = rss.trim().parse().expect("RSS in KiB");
    eprintln!("{mode:?}: peak RSS {} MiB", rss_kib / 1024);
    (execution, rss_kib / 1024)
}

const ECHO: &str = "call_mcp_tool('mcp__bad__echo', {'message': 'still here'})";

#[test]
fn forty_15_mib_results_in_one_gather_keep_the_host_under_300_mib() {
    let code = format!(
        "import asyncio\n\
         async def attempt():\n\
         \x20   try:\n        return await call_mcp_tool('mcp__bad__blob', {{'n': 15 << 20}})\n    except ToolError as e:\n        return str(e)\n\
         r = await asyncio.gather(*(attempt() for _ in range(40)))\n[sorted(set(r)), len(r), await {ECHO}]"
    );
    let (e, rss) = run_against(&["odd-tools"], &code);
    assert_eq!(
        e["return_value"],
        json!([["the result of mcp__bad__blob is 15728642 bytes, over the limit of 8388608 bytes (max_tool_result_bytes)"], 40, "still here"]),
        "{e}"
    );
    assert!(rss < MAX_RSS_MIB, "peak RSS {rss} MiB");
}

#[test]
fn an_endless_tool_list_keeps_the_host_under_300_mib() {
    let (e, rss) = run_against(&["endless"], ECHO);
    assert_eq!(e["return_value"], json!("still here"), "{e}");
    assert!(rss < MAX_RSS_MIB, "peak RSS {rss} MiB");
}

#[test]
fn a_ref_cycle_schema_called_keeps_the_host_under_300_mib() {
    let code = format!("[call_mcp_tool('mcp__bad__cycle', {{'x': 1}}), {ECHO}]");
    let (e, rss) = run_against(&["odd-tools"], &code);
    assert_eq!(
        e["return_value"],
        json!(["called cycle", "still here"]),
        "{e}"
    );
    assert!(rss < MAX_RSS_MIB, "peak RSS {rss} MiB");
}

#[test]
fn ten_thousand_tools_keep_the_host_under_300_mib() {
    let code = format!(
        "r = [tools.bad.tool_9998(i=1) for _ in range(100)] + [call_mcp_tool('mcp__bad__tool_1', {{'i': 2}}) for _ in range(100)]\n\
         [len(r), r[0], r[-1], len(dir(tools.bad)), {ECHO}]"
    );
    let (e, rss) = run_against(&["many", "10000"], &code);
    assert_eq!(
        e["return_value"],
        json!([
            200,
            "called tool_9998",
            "called tool_1",
            10000,
            "still here"
        ]),
        "{e}"
    );
    assert!(rss < MAX_RSS_MIB, "peak RSS {rss} MiB");
}
