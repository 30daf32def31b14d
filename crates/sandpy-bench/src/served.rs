//! `run_python` served over MCP's streamable HTTP, as agents' MCP clients call it: one
//! kept-alive connection per client (rmcp's reqwest client), 1 and 16 clients, beside the
//! same build's in-process fresh runs measured in the same part.

use crate::measure::percentile;
use crate::Bench;
use anyhow::{bail, Context};
use rmcp::model::CallToolRequestParams;
use rmcp::ServiceExt;
use std::time::Instant;

/// Calls of the one client whose latencies are measured.
const LATENCY_CALLS: usize = 300;
/// The clients calling at once for the throughput, and the calls each makes.
const CLIENTS: usize = 16;
const CALLS_PER_CLIENT: usize = 125;
const THROUGHPUT_CALLS: usize = CLIENTS * CALLS_PER_CLIENT;

impl Bench {
    /// In process, then over HTTP with one client and with 16 (p50 and runs/s).
    pub(crate) fn served(&self) -> anyhow::Result<()> {
        let rt = &self.rt;
        let code = "print(1)";
        // The baseline: fresh runs in this process, one at a time and 16 at once.
        let mut in_process = Vec::new();
        for _ in 0..LATENCY_CALLS {
            in_process.push(crate::measure::timed_run(
                rt,
                &self.sandbox,
                code,
                &sandpy::RunOptions::default(),
            )?);
        }
        in_process.sort_by(f64::total_cmp);
        let started = Instant::now();
        rt.block_on(async {
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..CLIENTS {
                let sandbox = self.sandbox.clone();
                tasks.spawn(async move {
                    for _ in 0..CALLS_PER_CLIENT {
                        sandbox.run(code, &sandpy::Limits::default()).await;
                    }
                });
            }
            while tasks.join_next().await.is_some() {}
        });
        let in_process_per_s = THROUGHPUT_CALLS as f64 / started.elapsed().as_secs_f64();
        let (one, many_per_s) = rt.block_on(over_http(&self.sandbox, code))?;
        let p50 = |sorted: &[f64]| percentile(sorted, 0.5);
        println!(
            "\nrun_python {code} served over HTTP (rmcp's client, one kept-alive connection per client):"
        );
        println!(
            "  in process, fresh instance:  p50 {:.3} ms;  {in_process_per_s:.0} runs/s with {CLIENTS} at once",
            p50(&in_process)
        );
        println!(
            "  over HTTP:                   p50 {:.3} ms (+{:.3} ms);  {many_per_s:.0} runs/s with {CLIENTS} clients ({:.2}x in process)",
            p50(&one),
            p50(&one) - p50(&in_process),
            many_per_s / in_process_per_s
        );
        Ok(())
    }
}

/// Serve `sandbox` on a loopback port; one client's sorted latencies, then runs/s of
/// [`CLIENTS`] clients calling at once.
async fn over_http(sandbox: &sandpy::Sandbox, code: &str) -> anyhow::Result<(Vec<f64>, f64)> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = sandpy_mcp::ConfigFile::parse(r#"{"mcpServers": {}}"#, "bench.json".as_ref())?;
    let hub = sandpy_mcp::Hub::start(&config).await;
    let resolved = config.settings.resolve(None)?;
    let server = sandpy_mcp::SandpyServer::new(sandbox.clone(), hub, &resolved)?;
    let listener = sandpy_mcp::HttpListener::bind(
        ([127, 0, 0, 1], 0).into(),
        None,
        &resolved.settings.tenants,
    )
    .await?;
    let url = format!("http://{}/mcp", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(listener.serve(server, async {
        let _ = stopped.await;
    }));
    let mut one = calls(&url, code, LATENCY_CALLS).await?;
    one.sort_by(f64::total_cmp);
    let started = Instant::now();
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..CLIENTS {
        let (url, code) = (url.clone(), code.to_string());
        clients.spawn(async move { calls(&url, &code, CALLS_PER_CLIENT).await });
    }
    while let Some(done) = clients.join_next().await {
        done??;
    }
    let per_s = THROUGHPUT_CALLS as f64 / started.elapsed().as_secs_f64();
    let _ = stop.send(());
    let _ = serving.await;
    Ok((one, per_s))
}

/// One MCP client on one connection: `n` calls of `run_python`, each one's milliseconds.
async fn calls(url: &str, code: &str, n: usize) -> anyhow::Result<Vec<f64>> {
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.to_string());
    let client = ().serve(transport).await.context("an MCP session over HTTP")?;
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let serde_json::Value::Object(args) = serde_json::json!({ "code": code }) else {
            bail!("arguments are an object")
        };
        let t = Instant::now();
        let result = client
            .call_tool(CallToolRequestParams::new("run_python").with_arguments(args))
            .await?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        if result.is_error == Some(true) {
            bail!("run_python {code} failed: {result:?}");
        }
    }
    let _ = client.cancel().await;
    Ok(times)
}
