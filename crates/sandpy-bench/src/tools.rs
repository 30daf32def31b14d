//! Tool calls: the sandbox's own round trip (no-op tools), lookups among many tools, a
//! real upstream, https against http, and `run_python` over stdio end to end.

use crate::measure::{median, percentile};
use crate::programs::call_loop;
use crate::Bench;
use anyhow::{bail, Context};
use sandpy::Limits;
use std::time::Instant;

/// A tool that answers at once: what is left of a call is the sandbox's own cost.
struct NoopTools;

impl sandpy::tools::ToolHost for NoopTools {
    fn list_tools(&self) -> Vec<sandpy::tools::ToolInfo> {
        vec![sandpy::tools::ToolInfo {
            name: "noop".into(),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
        }]
    }

    fn call_tool(&self, _name: &str, _arguments: serde_json::Value) -> sandpy::tools::ToolFuture {
        Box::pin(async { Ok(serde_json::Value::Null) })
    }
}

/// `count` tools that answer at once, looked up by name as the hub does (`mcp__many__tool_N`):
/// what a call costs with 10 tools against 10,000.
struct ManyTools {
    tools: std::collections::BTreeMap<String, sandpy::tools::ToolInfo>,
}

impl ManyTools {
    fn new(count: usize) -> ManyTools {
        let tools = (0..count).map(|i| {
            let name = format!("mcp__many__tool_{i}");
            let info = sandpy::tools::ToolInfo {
                name: name.clone(),
                description: format!("tool number {i}"),
                input_schema: serde_json::json!({"type": "object", "properties": {"i": {"type": "integer"}}}),
            };
            (name, info)
        });
        ManyTools {
            tools: tools.collect(),
        }
    }
}

impl sandpy::tools::ToolHost for ManyTools {
    fn list_tools(&self) -> Vec<sandpy::tools::ToolInfo> {
        self.tools.values().cloned().collect()
    }

    fn tool(&self, name: &str) -> Option<sandpy::tools::ToolInfo> {
        self.tools.get(name).cloned()
    }

    fn has_tool(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    fn tool_names(&self) -> Vec<String> {
        self.tools.keys().cloned().collect()
    }

    fn call_tool(&self, _name: &str, _arguments: serde_json::Value) -> sandpy::tools::ToolFuture {
        Box::pin(async { Ok(serde_json::Value::Null) })
    }
}

impl Bench {
    /// Tool-call round trips: a no-op tool, a batch, a real upstream, and `run_python`
    /// over stdio end to end.
    pub(crate) fn tools(&self) -> anyhow::Result<()> {
        let (rt, args, sandbox) = (&self.rt, &self.args, &self.sandbox);
        println!("\ntool calls (per call, timed inside the program):");
        let noop = sandpy::RunOptions {
            tools: Some(std::sync::Arc::new(NoopTools)),
            limits: Limits {
                tool_calls: 10_000,
                ..Limits::default()
            },
            ..sandpy::RunOptions::default()
        };
        let mut per_call = Vec::new();
        for _ in 0..5 {
            let e = rt.block_on(sandbox.run_with(&call_loop("noop", "{}", 2000), &noop));
            per_call.push(
                e.return_value
                    .as_ref()
                    .and_then(|v| v.as_f64())
                    .with_context(|| format!("noop loop failed: {e:?}"))?,
            );
        }
        println!(
            "  sandbox -> host round trip, no-op tool: {:.4} ms",
            median(&mut per_call)
        );
        let batched = "import asyncio, time\nt = time.perf_counter()\nawait asyncio.gather(*(call_mcp_tool('noop') for _ in range(2000)))\n(time.perf_counter() - t) * 1000 / 2000";
        let e = rt.block_on(sandbox.run_with(batched, &noop));
        println!(
            "  same, 2000 calls in one asyncio.gather batch: {:.4} ms per call",
            e.return_value.and_then(|v| v.as_f64()).unwrap_or(f64::NAN)
        );
        if !args.no_upstream {
            rt.block_on(upstream_overhead(sandbox))?;
            rt.block_on(stdio_end_to_end(&self.sandpy_bin))?;
        }
        Ok(())
    }

    /// A call by full name and one through `tools.<server>.<tool>`, with 10 tools and with
    /// 10,000: lookups by name should cost the same (they cloned every tool per call).
    pub(crate) fn lookup(&self) -> anyhow::Result<()> {
        let (rt, sandbox) = (&self.rt, &self.sandbox);
        println!("\ntool lookups (per call, timed inside the program, no-op tools):");
        let attribute = "import time\nt = time.perf_counter()\nfor _ in range(N):\n    tools.many.tool_7()\n(time.perf_counter() - t) * 1000 / N".replace("N", "2000");
        let forms = [
            (
                "call_mcp_tool(name)",
                call_loop("mcp__many__tool_7", "{}", 2000),
            ),
            ("tools.many.tool_7()", attribute),
        ];
        for (form, code) in forms {
            let mut per_count = Vec::new();
            for count in [10, 10_000] {
                let options = sandpy::RunOptions {
                    tools: Some(std::sync::Arc::new(ManyTools::new(count))),
                    limits: Limits {
                        tool_calls: 10_000,
                        ..Limits::default()
                    },
                    ..sandpy::RunOptions::default()
                };
                let mut per_call = Vec::new();
                for _ in 0..3 {
                    let e = rt.block_on(sandbox.run_with(&code, &options));
                    per_call.push(
                        e.return_value
                            .as_ref()
                            .and_then(|v| v.as_f64())
                            .with_context(|| format!("{form} loop failed: {e:?}"))?,
                    );
                }
                per_count.push(median(&mut per_call));
            }
            println!(
                "  {form}: {:.4} ms with 10 tools, {:.4} ms with 10,000 ({:.2}x)",
                per_count[0],
                per_count[1],
                per_count[1] / per_count[0]
            );
        }
        Ok(())
    }

    /// An upstream call over https against the same call over http, to the same echo server
    /// on loopback in this run: what TLS adds to a call.
    pub(crate) fn tls(&self) -> anyhow::Result<()> {
        self.rt.block_on(https_against_http(&self.sandbox))
    }
}

/// The reference server the upstream part calls (pinned, as `sandpy demo` pins it).
const EVERYTHING: &str = "@modelcontextprotocol/server-everything@2026.8.31";

/// A config with one upstream: the reference `everything` server, via npx.
fn everything_config() -> sandpy_mcp::ConfigFile {
    let mut config = sandpy_mcp::ConfigFile::default();
    config.servers.insert(
        "everything".into(),
        sandpy_mcp::ServerSpec::Stdio {
            command: "npx".into(),
            args: vec!["-y".into(), EVERYTHING.into()],
            env: Default::default(),
            cwd: None,
            expansions: Default::default(),
        },
    );
    config
}

/// Echo through the sandbox and the hub, against the hub alone, on the same server.
async fn upstream_overhead(sandbox: &sandpy::Sandbox) -> anyhow::Result<()> {
    use sandpy::tools::ToolHost;
    let hub = sandpy_mcp::Hub::start(&everything_config()).await;
    let calls = 300;
    let mut direct = Vec::new();
    let mut inside = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..calls {
            hub.call_tool("mcp__everything__echo", serde_json::json!({"message": "x"}))
                .await?;
        }
        direct.push(t.elapsed().as_secs_f64() * 1e3 / calls as f64);
        let options = sandpy::RunOptions {
            tools: Some(hub.for_execution("bench".into(), None)),
            ..sandpy::RunOptions::default()
        };
        let e = sandbox
            .run_with(
                &call_loop("mcp__everything__echo", "{'message': 'x'}", calls),
                &options,
            )
            .await;
        inside.push(
            e.return_value
                .and_then(|v| v.as_f64())
                .context("upstream loop failed")?,
        );
    }
    let (d, i) = (median(&mut direct), median(&mut inside));
    println!("  echo on server-everything: from Rust via the hub {d:.3} ms, from sandboxed Python {i:.3} ms: overhead {:.3} ms", i - d);
    hub.shutdown().await;
    Ok(())
}

/// Echo on the test server over http and over https (a certificate from a CA made here,
/// trusted through `ca_file`), both behind a bearer token, called in alternating rounds
/// from Rust via the hub and from sandboxed Python.
async fn https_against_http(sandbox: &sandpy::Sandbox) -> anyhow::Result<()> {
    use sandpy::tools::ToolHost;
    use sandpy_mcp::test_server::{TestCa, TestServer};
    let token = "bench-token";
    let ca = TestCa::new();
    let plain = TestServer::start(None, Some(token)).await?;
    let tls = TestServer::start(Some(ca.issue(&["localhost"])), Some(token)).await?;
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("ca.pem"), ca.pem())?;
    let headers = serde_json::json!({"Authorization": format!("Bearer {token}")});
    let config = serde_json::json!({"mcpServers": {
        "http": {"url": plain.url(), "headers": headers},
        "https": {"url": tls.url(), "headers": headers, "ca_file": "ca.pem"},
    }});
    let path = dir.path().join(".mcp.json");
    std::fs::write(&path, config.to_string())?;
    let hub = sandpy_mcp::Hub::start(&sandpy_mcp::ConfigFile::load(&path)?).await;
    for server in hub.servers() {
        if !server.is_ready() {
            bail!("test server {}: {}", server.name, server.status);
        }
    }
    let options = sandpy::RunOptions {
        tools: Some(hub.for_execution("bench".into(), None)),
        ..sandpy::RunOptions::default()
    };
    let calls = 300;
    // [http, https] per-call milliseconds, from Rust and from Python.
    let (mut rust, mut python) = ([vec![], vec![]], [vec![], vec![]]);
    for _ in 0..5 {
        for (i, tool) in ["mcp__http__echo", "mcp__https__echo"]
            .into_iter()
            .enumerate()
        {
            let t = Instant::now();
            for _ in 0..calls {
                hub.call_tool(tool, serde_json::json!({"message": "x"}))
                    .await?;
            }
            rust[i].push(t.elapsed().as_secs_f64() * 1e3 / calls as f64);
            let e = sandbox
                .run_with(&call_loop(tool, "{'message': 'x'}", calls), &options)
                .await;
            python[i].push(
                e.return_value
                    .and_then(|v| v.as_f64())
                    .with_context(|| format!("{tool} loop failed: {:?}", e.error))?,
            );
        }
    }
    let line = |from: &str, [http, https]: &mut [Vec<f64>; 2]| {
        let (http, https) = (median(http), median(https));
        println!(
            "  from {from}: http {http:.3} ms, https {https:.3} ms per call: https/http {:.2}x",
            https / http
        );
    };
    println!(
        "\nupstream echo over https vs http (test server on loopback, bearer token, {calls} calls x 5 rounds;\n  \
         http opens a connection per call, as rmcp's default client does; https keeps its connections):"
    );
    line("Rust via the hub", &mut rust);
    line("sandboxed Python", &mut python);
    hub.shutdown().await;
    plain.stop().await;
    tls.stop().await;
    Ok(())
}

/// `run_python` over stdio, end to end: an rmcp client driving `sandpy serve`.
async fn stdio_end_to_end(sandpy_bin: &std::path::Path) -> anyhow::Result<()> {
    use rmcp::model::CallToolRequestParams;
    use rmcp::ServiceExt;
    let mut command = tokio::process::Command::new(sandpy_bin);
    command
        .arg("serve")
        .env_remove("SANDPY_CONFIG")
        .current_dir(std::env::temp_dir());
    let transport = rmcp::transport::TokioChildProcess::new(command)?;
    let client = ().serve(transport).await?;
    let mut times = Vec::new();
    for _ in 0..100 {
        let args = serde_json::json!({"code": "print('hello')"});
        let serde_json::Value::Object(args) = args else {
            bail!("arguments are an object")
        };
        let t = Instant::now();
        client
            .call_tool(CallToolRequestParams::new("run_python").with_arguments(args))
            .await?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "  run_python print('hello') over stdio, end to end: p50 {:.2} ms  p99 {:.2} ms",
        percentile(&times, 0.5),
        percentile(&times, 0.99)
    );
    let _ = client.cancel().await;
    Ok(())
}
