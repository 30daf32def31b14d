//! End-to-end tests of the `sandpy` binary: real processes, real files, and a real MCP
//! client (the official Python SDK) driving `sandpy serve` over stdio and HTTP.

mod bench;
mod config;
mod documented;
/// Everything the guest reports, checked by the host (issue 60, part 3): both tiers, and
/// `--output-dir` with a hostile rich output.
mod guest_reports;
mod help;
/// Every host path sandpy loads from or writes into, attacked by another local user.
mod host_paths;
mod hostile_clients;
mod live;
mod load;
/// What the native tier's tests share: its venv, config, runs and attack prelude.
mod native;
/// Attacks on the native tier's channel, session bounds, devices and path.
mod native_attacks;
/// The native tier's filesystem boundary.
mod native_files;
/// `requests` and `httpx` from the native venv through the host (issue 46).
mod native_http_libraries;
/// The native tier's kernel interface, and each confinement layer.
mod native_kernel;
/// Processes made ahead of their runs: nothing of the last run, shapes, crashes, ends.
mod native_made_ahead;
/// The native tier's network boundary.
mod native_network;
/// Showing results: figures, tables and `display()` as rich outputs (issue 43).
mod native_outputs;
/// The native tier's process boundary.
mod native_processes;
/// What the native tier runs: packages, limits, tools, both tiers alike, warm runs.
mod native_runs;
mod native_sessions;
/// What the native tier's runs share: signals, the zygote, memory outside a run (issue 60).
mod native_shared;
mod oauth;
mod packages;
/// Files the client can fetch: `/output` files as MCP resources (issue 43).
mod resources;
mod resumed;
mod run;
mod serve;
mod served_connections;
mod service;
mod traces;
mod upstream_attacks;
mod warm;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// The reference server with every kind of tool, pinned.
pub(crate) const EVERYTHING_PKG: &str = "@modelcontextprotocol/server-everything@2026.8.31";
/// The reference filesystem server, pinned (the upstream of the documented commands).
pub(crate) const FILESYSTEM_PKG: &str = "@modelcontextprotocol/server-filesystem@2026.8.31";
/// The official MCP Python SDK, for the client in `tests/mcp_client.py`.
const MCP_PYTHON_SDK: &str = "mcp==2.3.0";
/// The official Prometheus client, whose parser reads `/metrics` in the service tests.
const PROMETHEUS_CLIENT: &str = "prometheus-client==0.26.0";
/// The official OTLP protobuf definitions, which decode the spans the trace tests receive.
const OTLP_PROTO: &str = "opentelemetry-proto==1.45.2";
/// gRPC for Python, which serves the OTLP trace service in the gRPC trace test.
const GRPCIO: &str = "grpcio==1.85.3";

/// A `sandpy` command with the runtimes compiled first and no config from the environment.
pub(crate) fn sandpy() -> Command {
    // Compile both runtimes (with and without interruption checks) once, before the first
    // command: on a cold cache, tests running side by side would each compile them, and a
    // server compiling in process shows a compiler's memory, not its own.
    static WARM: std::sync::Once = std::sync::Once::new();
    WARM.call_once(|| {
        let warmed = Command::new(env!("CARGO_BIN_EXE_sandpy"))
            .arg("warmup")
            .stdin(Stdio::null())
            .output()
            .expect("sandpy warmup");
        assert!(
            warmed.status.success(),
            "sandpy warmup: {}",
            String::from_utf8_lossy(&warmed.stderr)
        );
    });
    let mut command = Command::new(env!("CARGO_BIN_EXE_sandpy"));
    command
        .env_remove("SANDPY_CONFIG")
        .env_remove("SANDPY_TOKEN")
        .env_remove("SANDPY_WARM")
        .stdin(Stdio::null());
    command
}

/// Run `sandpy` with `args`: exit code, stdout, stderr.
pub fn run(args: &[&str]) -> (i32, String, String) {
    let out = sandpy().args(args).output().expect("sandpy");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Run `sandpy` with `args`, feeding `stdin`.
pub fn sandpy_with_stdin(args: &[&str], stdin: &[u8]) -> Output {
    use std::io::Write;
    let mut child = sandpy()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sandpy");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("write stdin");
    child.wait_with_output().expect("sandpy output")
}

/// A venv with the official MCP Python SDK (and the Prometheus client, the OTLP protobufs
/// and gRPC), made once under
/// `target/`.
pub fn mcp_python() -> &'static PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/e2e-venv");
        let python = venv.join("bin/python");
        let marker = venv.join(".installed");
        let wanted = format!("{MCP_PYTHON_SDK} {PROMETHEUS_CLIENT} {OTLP_PROTO} {GRPCIO}");
        if std::fs::read_to_string(&marker).ok().as_deref() != Some(wanted.as_str()) {
            let ok = Command::new("python3")
                .args(["-m", "venv"])
                .arg(&venv)
                .status()
                .expect("python3 -m venv")
                .success();
            assert!(ok, "cannot create the client venv");
            let ok = Command::new(&python)
                .args([
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--disable-pip-version-check",
                    MCP_PYTHON_SDK,
                    PROMETHEUS_CLIENT,
                    OTLP_PROTO,
                    GRPCIO,
                ])
                .status()
                .expect("pip")
                .success();
            assert!(ok, "cannot install {wanted}");
            std::fs::write(&marker, &wanted).expect("marker");
        }
        python
    })
}

/// Drive an MCP server with the Python SDK client: `target` is `["stdio", cmd, args..]` or
/// `["http", url, token?]`; returns the JSON the client printed, its exit status and its
/// stderr (the SDK's warnings, and over stdio the server's stderr).
pub fn mcp_client(
    target: &[&str],
    requests: &serde_json::Value,
) -> (serde_json::Value, i32, String) {
    mcp_client_with(target, requests, &[])
}

/// [`mcp_client`] with these environment variables (e.g. `MCP_CLIENT_ELICIT`).
pub fn mcp_client_with(
    target: &[&str],
    requests: &serde_json::Value,
    env: &[(&str, &str)],
) -> (serde_json::Value, i32, String) {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sandpy-mcp/tests/mcp_client.py");
    let mut command = Command::new(mcp_python());
    command.arg(script).args(target);
    command.envs(env.iter().copied());
    use std::io::Write;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("client");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(requests.to_string().as_bytes())
        .expect("requests");
    let out = child.wait_with_output().expect("client output");
    let text = String::from_utf8_lossy(&out.stdout);
    let value = serde_json::from_str(text.trim()).unwrap_or_else(|e| {
        panic!(
            "client printed no JSON ({e}): stdout {text}\nstderr {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (
        value,
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
