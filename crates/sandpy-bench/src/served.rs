//! `run_python` served over MCP's streamable HTTP, as agents' MCP clients call it: one
//! kept-alive connection per client, 1 and 16 clients, with rmcp's Rust client and with
//! the official MCP Python SDK, beside the same build's in-process fresh runs measured in
//! the same part.

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
/// The program every part runs.
const CODE: &str = "print(1)";

/// The official SDK's client program (`python served_client.py URL CLIENTS CALLS CODE`).
const PYTHON_CLIENT: &str = include_str!("served_client.py");

impl Bench {
    /// In process, then over HTTP with one client and with 16 (p50 and runs/s), from Rust
    /// and from the official Python SDK (when `--python` has it).
    pub(crate) fn served(&self) -> anyhow::Result<()> {
        let rt = &self.rt;
        let mut in_process = Vec::new();
        for _ in 0..LATENCY_CALLS {
            let options = sandpy::RunOptions::default();
            in_process.push(crate::measure::timed_run(
                rt,
                &self.sandbox,
                CODE,
                &options,
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
                        sandbox.run(CODE, &sandpy::Limits::default()).await;
                    }
                });
            }
            while tasks.join_next().await.is_some() {}
        });
        let in_process_per_s = THROUGHPUT_CALLS as f64 / started.elapsed().as_secs_f64();
        let base = percentile(&in_process, 0.5);
        println!("\nrun_python {CODE} served over HTTP (one kept-alive connection per client):");
        println!(
            "  in process, fresh instance:  p50 {base:.3} ms;  {in_process_per_s:.0} runs/s with {CLIENTS} at once"
        );
        let line = |client: &str, one: &[f64], per_s: f64| {
            let p50 = percentile(one, 0.5);
            println!(
                "  {client:<28} p50 {p50:.3} ms (+{:.3} ms);  {per_s:.0} runs/s with {CLIENTS} clients ({:.2}x in process)",
                p50 - base,
                per_s / in_process_per_s
            );
        };
        let server = rt.block_on(Served::start(&self.sandbox))?;
        let rust = rt.block_on(async {
            let mut one = calls(&server.url, LATENCY_CALLS).await?;
            one.sort_by(f64::total_cmp);
            let started = Instant::now();
            let mut clients = tokio::task::JoinSet::new();
            for _ in 0..CLIENTS {
                let url = server.url.clone();
                clients.spawn(async move { calls(&url, CALLS_PER_CLIENT).await });
            }
            while let Some(done) = clients.join_next().await {
                done??;
            }
            anyhow::Ok((
                one,
                THROUGHPUT_CALLS as f64 / started.elapsed().as_secs_f64(),
            ))
        });
        match rust {
            Ok((one, per_s)) => line("rmcp (Rust, reqwest):", &one, per_s),
            Err(e) => println!("  rmcp (Rust, reqwest): failed: {e:#}"),
        }
        match python_sdk(&self.args.python, &server.url) {
            Ok(Some((one, per_s))) => line("official Python SDK (httpx):", &one, per_s),
            Ok(None) => println!(
                "  official Python SDK: skipped ({} has no `mcp`; pass --python with the SDK installed)",
                self.args.python
            ),
            Err(e) => println!("  official Python SDK: failed: {e:#}"),
        }
        rt.block_on(server.stop());
        Ok(())
    }
}

/// `sandpy serve --http`'s listener over a sandbox, on a loopback port, in this process.
struct Served {
    url: String,
    stop: tokio::sync::oneshot::Sender<()>,
    serving: tokio::task::JoinHandle<Result<(), sandpy_mcp::HttpError>>,
}

impl Served {
    async fn start(sandbox: &sandpy::Sandbox) -> anyhow::Result<Served> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let config = sandpy_mcp::ConfigFile::parse(r#"{"mcpServers": {}}"#, "bench.json".as_ref())?;
        let hub = sandpy_mcp::Hub::start(&config).await;
        let resolved = config.settings.resolve(None)?;
        let server = sandpy_mcp::SandpyServer::new(sandbox.clone(), hub, &resolved)?;
        let tenants = &resolved.settings.tenants;
        let listener =
            sandpy_mcp::HttpListener::bind(([127, 0, 0, 1], 0).into(), None, tenants).await?;
        let url = format!("http://{}/mcp", listener.local_addr()?);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(listener.serve(server, async {
            let _ = stopped.await;
        }));
        Ok(Served { url, stop, serving })
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.serving.await;
    }
}

/// One rmcp client on one connection: `n` calls of `run_python`, each one's milliseconds.
async fn calls(url: &str, n: usize) -> anyhow::Result<Vec<f64>> {
    let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.to_string());
    let client = ().serve(transport).await.context("an MCP session over HTTP")?;
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let serde_json::Value::Object(args) = serde_json::json!({ "code": CODE }) else {
            bail!("arguments are an object")
        };
        let t = Instant::now();
        let result = client
            .call_tool(CallToolRequestParams::new("run_python").with_arguments(args))
            .await?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        if result.is_error == Some(true) {
            bail!("run_python {CODE} failed: {result:?}");
        }
    }
    let _ = client.cancel().await;
    Ok(times)
}

/// The official Python SDK's latencies (one client) and runs/s ([`CLIENTS`] clients),
/// each from a process of its own; `None` when `python` has no SDK.
fn python_sdk(python: &str, url: &str) -> anyhow::Result<Option<(Vec<f64>, f64)>> {
    let has_sdk = std::process::Command::new(python)
        .args(["-c", "import mcp, httpx2"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !has_sdk {
        return Ok(None);
    }
    let run = |clients: usize, calls: usize| -> anyhow::Result<(Vec<f64>, f64)> {
        let out = std::process::Command::new(python)
            .args(["-c", PYTHON_CLIENT, url])
            .args([clients.to_string(), calls.to_string(), CODE.to_string()])
            .output()?;
        if !out.status.success() {
            bail!("{}", String::from_utf8_lossy(&out.stderr));
        }
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        let mut ms: Vec<f64> = report["ms"]
            .as_array()
            .context("no times")?
            .iter()
            .filter_map(serde_json::Value::as_f64)
            .collect();
        ms.sort_by(f64::total_cmp);
        let seconds = report["seconds"].as_f64().context("no seconds")?;
        Ok((ms, (clients * calls) as f64 / seconds))
    };
    let (one, _) = run(1, LATENCY_CALLS)?;
    let (_, per_s) = run(CLIENTS, CALLS_PER_CLIENT)?;
    Ok(Some((one, per_s)))
}
