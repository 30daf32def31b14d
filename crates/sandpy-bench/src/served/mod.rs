//! `run_python` served over MCP's streamable HTTP, as agents' MCP clients call it: one
//! kept-alive connection per client, 1 and 16 clients, with rmcp's Rust client and with
//! the official MCP Python SDK, beside the same build's in-process fresh runs measured in
//! the same part. rmcp's client is given a reqwest client that keeps its connections (its
//! default client keeps none: a new connection per call, also measured). Each client also
//! calls a tool that does nothing (the `echo` of the test server, on the same HTTP stack;
//! for the SDK also its own server's), its ceiling: what the client and the transport cost
//! without a run, on the same two cores.

mod python;

use crate::measure::percentile;
use crate::Bench;
use anyhow::{bail, Context};
use rmcp::model::CallToolRequestParams;
use rmcp::ServiceExt;
use serde_json::{json, Value};
use std::time::Instant;

/// Calls of the one client whose latencies are measured.
const LATENCY_CALLS: usize = 300;
/// The clients calling at once for the throughput, and the calls each makes.
const CLIENTS: usize = 16;
const CALLS_PER_CLIENT: usize = 125;
const THROUGHPUT_CALLS: usize = CLIENTS * CALLS_PER_CLIENT;
/// The program every part runs.
const CODE: &str = "print(1)";

/// A tool to call and its arguments.
#[derive(Clone, Copy)]
pub(crate) struct Call {
    pub(crate) tool: &'static str,
    arguments: fn() -> Value,
}

/// `run_python` of [`CODE`].
pub(crate) const RUN: Call = Call {
    tool: "run_python",
    arguments: || json!({ "code": CODE }),
};

/// The test server's `echo`: no run, the served path alone.
pub(crate) const NO_OP: Call = Call {
    tool: "echo",
    arguments: || json!({ "message": "1" }),
};

/// Which HTTP client rmcp's client is given.
#[derive(Clone, Copy)]
enum Http {
    /// A reqwest client that keeps its connections (reqwest's default).
    Pooled,
    /// rmcp's default (`from_uri`): no idle connection kept, a new one per call.
    RmcpDefault,
}

/// The p50 (ms) of one client and the calls/s of [`CLIENTS`].
pub(crate) struct Figures {
    pub(crate) one: Vec<f64>,
    pub(crate) per_s: f64,
    /// This process's CPU time per call (ms) with [`CLIENTS`]: the clients', the
    /// server's and the runs' together (none for clients in another process).
    pub(crate) cpu_ms: Option<f64>,
    /// Runs that took an instance made ahead, of the one client's and of [`CLIENTS`]'
    /// (when the sandbox serving them was given).
    pub(crate) made_ahead: Option<(u64, u64)>,
}

/// This process's CPU time (user and system) so far, in seconds, from `/proc/self/stat`
/// (in clock ticks of 1/100 s, Linux's `USER_HZ`); `None` where there is none.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command's `)`: state is the 3rd field, utime the 14th.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let user: f64 = fields.next()?.parse().ok()?;
    let system: f64 = fields.next()?.parse().ok()?;
    Some((user + system) / 100.0)
}

/// CPU ms per call between `before` and now, over `calls` calls.
fn cpu_ms_per_call(before: Option<f64>, calls: usize) -> Option<f64> {
    Some((cpu_seconds()? - before?) * 1e3 / calls as f64)
}

impl Figures {
    pub(crate) fn p50(&self) -> f64 {
        percentile(&self.one, 0.5)
    }
}

impl Bench {
    /// In process, then over HTTP with one client and with 16 (p50 and runs/s), from Rust
    /// and from the official Python SDK (when `--python` has it), each beside its ceiling.
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
        // The same runs as tokio tasks on the runtime's workers, as served runs are (the
        // runs above execute on this thread, which does nothing else).
        // Timed around the spawn (two hand-overs between threads) and inside the task (the
        // run alone, as a served run's own time on its worker).
        let (mut on_worker, mut inside_task) = (Vec::new(), Vec::new());
        for _ in 0..LATENCY_CALLS {
            let sandbox = self.sandbox.clone();
            let t = Instant::now();
            let (e, inside) = rt.block_on(async move {
                tokio::spawn(async move {
                    let t = Instant::now();
                    let e = sandbox.run(CODE, &sandpy::Limits::default()).await;
                    (e, t.elapsed())
                })
                .await
            })?;
            on_worker.push(t.elapsed().as_secs_f64() * 1e3);
            inside_task.push(inside.as_secs_f64() * 1e3);
            if e.status != sandpy::Status::Ok {
                bail!("{CODE:?} failed on a worker: {e:?}");
            }
        }
        on_worker.sort_by(f64::total_cmp);
        inside_task.sort_by(f64::total_cmp);
        let cpu_before = cpu_seconds();
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
        let in_process_cpu = cpu_ms_per_call(cpu_before, THROUGHPUT_CALLS);
        let base = percentile(&in_process, 0.5);
        println!("\nrun_python {CODE} served over HTTP (one kept-alive connection per client):");
        println!(
            "  in process, fresh instance:  p50 {base:.3} ms;  {in_process_per_s:.0} runs/s with {CLIENTS} at once"
        );
        println!(
            "    the same on a tokio worker: p50 {:.3} ms (timed inside its task: {:.3} ms)",
            percentile(&on_worker, 0.5),
            percentile(&inside_task, 0.5)
        );
        let line = |client: &str, figures: &Figures| {
            let p50 = figures.p50();
            println!(
                "  {client:<28} p50 {p50:.3} ms (+{:.3} ms);  {:.0} runs/s with {CLIENTS} clients ({:.2}x in process)",
                p50 - base,
                figures.per_s,
                figures.per_s / in_process_per_s
            );
        };
        let ceiling = |client: &str, figures: &Figures| {
            println!(
                "    {client:<26} p50 {:.3} ms;  {:.0} calls/s with {CLIENTS} clients",
                figures.p50(),
                figures.per_s
            );
        };
        let server = rt.block_on(Served::start(&self.sandbox))?;
        let no_op = rt.block_on(sandpy_mcp::test_server::TestServer::start(None, None))?;
        let no_op_url = format!("http://{}/mcp", no_op.addr());
        let sandbox = Some(&self.sandbox);
        let rust = rt.block_on(rmcp_figures(&server.url, RUN, Http::Pooled, sandbox));
        let rust_ceiling = rt.block_on(rmcp_figures(&no_op_url, NO_OP, Http::Pooled, None));
        let rust_default = rt.block_on(rmcp_figures(&server.url, RUN, Http::RmcpDefault, None));
        match &rust {
            Ok(figures) => line("rmcp (Rust, reqwest):", figures),
            Err(e) => println!("  rmcp (Rust, reqwest): failed: {e:#}"),
        }
        match &rust_ceiling {
            Ok(figures) => ceiling("its ceiling, a no-op tool:", figures),
            Err(e) => println!("    its ceiling: failed: {e:#}"),
        }
        if let (Ok(served), Ok(ceiling)) = (&rust, &rust_ceiling) {
            println!(
                "    served = {:.2}x the no-op tool's calls/s",
                served.per_s / ceiling.per_s
            );
        }
        if let (Ok(served), Ok(ceiling)) = (&rust, &rust_ceiling) {
            cpu_line(
                "CPU",
                CLIENTS,
                served.cpu_ms,
                in_process_cpu,
                ceiling.cpu_ms,
            );
        }
        if let Some((one, many)) = rust.as_ref().ok().and_then(|f| f.made_ahead) {
            println!(
                "    runs on an instance made ahead: {one} of {LATENCY_CALLS} with one client, {many} of {THROUGHPUT_CALLS} with {CLIENTS}"
            );
        }
        match &rust_default {
            Ok(figures) => line("rmcp, its default client:", figures),
            Err(e) => println!("  rmcp, its default client: failed: {e:#}"),
        }
        let python = &self.args.python;
        match python::sdk_figures(python, &server.url, &no_op_url) {
            Ok(Some(sdk)) => sdk.print(&line, &ceiling, in_process_cpu),
            Ok(None) => println!(
                "  official Python SDK: skipped ({python} has no `mcp`; pass --python with the SDK installed)"
            ),
            Err(e) => println!("  official Python SDK: failed: {e:#}"),
        }
        rt.block_on(no_op.stop());
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

/// Where a served call's CPU time (`whose`, with `clients` clients at once) goes: the
/// run's (in process), the client's and transport's (the no-op tool), and the rest; no
/// line where a figure is missing.
fn cpu_line(whose: &str, clients: usize, call: Option<f64>, run: Option<f64>, no_op: Option<f64>) {
    let (Some(call), Some(run), Some(no_op)) = (call, run, no_op) else {
        return;
    };
    println!(
        "    {whose} per call with {clients}: {call:.3} ms = the run in process {run:.3} + the no-op call {no_op:.3} + {:.3} ms besides",
        call - run - no_op
    );
}

/// rmcp's client over `http` calling `call` at `url`: one client's latencies, then
/// [`CLIENTS`] at once; with `sandbox` (the one serving `url`), how many runs of each
/// took an instance made ahead.
async fn rmcp_figures(
    url: &str,
    call: Call,
    http: Http,
    sandbox: Option<&sandpy::Sandbox>,
) -> anyhow::Result<Figures> {
    let taken = || sandbox.map(sandpy::Sandbox::runs_on_instances_made_ahead);
    let before = taken();
    let mut one = calls(url, call, LATENCY_CALLS, http).await?;
    one.sort_by(f64::total_cmp);
    let after_one = taken();
    let cpu_before = cpu_seconds();
    let started = Instant::now();
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..CLIENTS {
        let url = url.to_string();
        clients.spawn(async move { calls(&url, call, CALLS_PER_CLIENT, http).await });
    }
    while let Some(done) = clients.join_next().await {
        done??;
    }
    let per_s = THROUGHPUT_CALLS as f64 / started.elapsed().as_secs_f64();
    let cpu_ms = cpu_ms_per_call(cpu_before, THROUGHPUT_CALLS);
    let made_ahead = before
        .zip(after_one)
        .zip(taken())
        .map(|((before, one), all)| (one - before, all - one));
    Ok(Figures {
        one,
        per_s,
        cpu_ms,
        made_ahead,
    })
}

/// One rmcp client over `http`: `n` calls of `call`, each one's milliseconds.
async fn calls(url: &str, call: Call, n: usize, http: Http) -> anyhow::Result<Vec<f64>> {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::transport::StreamableHttpClientTransport;
    let transport = match http {
        Http::Pooled => StreamableHttpClientTransport::with_client(
            reqwest::Client::new(),
            StreamableHttpClientTransportConfig::with_uri(url.to_string()),
        ),
        Http::RmcpDefault => StreamableHttpClientTransport::from_uri(url.to_string()),
    };
    let client = ().serve(transport).await.context("an MCP session over HTTP")?;
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let Value::Object(args) = (call.arguments)() else {
            bail!("arguments are an object")
        };
        let t = Instant::now();
        let result = client
            .call_tool(CallToolRequestParams::new(call.tool).with_arguments(args))
            .await?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        if result.is_error == Some(true) {
            bail!("{} failed: {result:?}", call.tool);
        }
    }
    let _ = client.cancel().await;
    Ok(times)
}

/// The arguments of `call` as JSON text (for the Python client's command line).
pub(crate) fn arguments_text(call: Call) -> String {
    (call.arguments)().to_string()
}

/// The clients and calls of each measure, for the Python client.
pub(crate) const SHAPE: (usize, usize, usize) = (LATENCY_CALLS, CLIENTS, CALLS_PER_CLIENT);
