//! sandpy-mcp's integration tests: the hub against real upstream MCP servers from the npm
//! registry (started with `npx`), driven by real Python in the sandbox, and the sandpy MCP
//! server through an in-process rmcp client and over HTTP with several clients (tenants);
//! https upstreams against a local TLS server; attacks by a misbehaving upstream written
//! here (`tests/hostile_upstream.py`).

mod audit;
mod hostile_upstream;
mod http_limits;
mod keep_alive;
mod oauth;
mod protocol;
mod resources;
mod resume;
mod served_side;
mod server;
mod tenants;
mod tls;
mod upstream;

use rmcp::model::CallToolRequestParams;
use rmcp::{ErrorData, Peer, RoleClient, ServiceError};
use sandpy::{Execution, RunOptions, Sandbox};
use sandpy_mcp::{ConfigFile, Hub};
use serde_json::Value;
use std::sync::OnceLock;

/// The library's defaults on the built-in guest: every test's sandbox starts from them.
pub(crate) fn sandbox_config() -> sandpy::Config {
    sandpy::Config {
        guest: Some(sandpy_guest::GUEST),
        ..sandpy::Config::default()
    }
}

/// The sandbox every test shares (loading the runtime once).
pub(crate) fn sandbox() -> &'static Sandbox {
    static SANDBOX: OnceLock<Sandbox> = OnceLock::new();
    // Tests about behaviour, not admission: let every test's runs in at once, so that a
    // timing assertion never measures time spent waiting for another test's run.
    let config = sandpy::Config {
        max_concurrent_runs: Some(64),
        ..sandbox_config()
    };
    SANDBOX.get_or_init(|| Sandbox::new(config).expect("the runtime loads"))
}

/// A multi-threaded runtime per test: upstream clients run beside the sandbox.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio")
        .block_on(future)
}

/// Parse a config given as JSON text.
pub fn config(json: &str) -> ConfigFile {
    ConfigFile::parse(json, std::path::Path::new("test.mcp.json")).expect("valid config")
}

/// Run `code` with the hub's tools and `allowed`.
pub async fn run_with_hub(hub: &Hub, code: &str, mut options: RunOptions) -> Execution {
    options.tools = Some(hub.for_execution("test".into(), None));
    sandbox().run_with(code, &options).await
}

/// Call `tool` as `client`; the result as the JSON a client reads, or the protocol error.
pub async fn call_tool(
    client: &Peer<RoleClient>,
    tool: &str,
    arguments: Value,
) -> Result<Value, ErrorData> {
    let Value::Object(arguments) = arguments else {
        panic!("arguments are an object: {arguments}");
    };
    let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
    match client.call_tool(params).await {
        Ok(result) => Ok(serde_json::to_value(result).expect("JSON")),
        Err(ServiceError::McpError(error)) => Err(error),
        Err(other) => panic!("{tool}: not a tool result nor a protocol error: {other}"),
    }
}

/// Call `tool` as `client`, which must answer with a result (error or not).
pub async fn tool_result(client: &Peer<RoleClient>, tool: &str, arguments: Value) -> Value {
    match call_tool(client, tool, arguments).await {
        Ok(result) => result,
        Err(error) => panic!("{tool}: protocol error {error:?}"),
    }
}

/// A tool result's first text block.
pub fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().expect("text content")
}
