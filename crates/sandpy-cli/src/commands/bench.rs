//! `sandpy bench`: the figures in docs/guide/performance.md, measured in one run against baselines
//! measured in the same run (native `python3`, and instances kept alive at once).

use crate::exit::Outcome;
use anyhow::{bail, Context};
use sandpy::{Limits, Status};
use std::process::Command;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub(super) struct Args {
    /// In-process runs for the latency percentiles.
    #[arg(long, default_value_t = 300)]
    runs: usize,
    /// Whole-process runs of `sandpy run`.
    #[arg(long, default_value_t = 30)]
    process_runs: usize,
    /// Native interpreter for the CPU-bound baseline.
    #[arg(long, default_value = "python3")]
    python: String,
    /// Skip the parts that start the reference MCP server with npx.
    #[arg(long)]
    no_upstream: bool,
    /// Only the package start-up comparison: the curated set bundled in the runtime
    /// against the same packages in a folder mounted at /packages (needs PyPI, ~1 min).
    #[arg(long)]
    packages: bool,
    /// Only this part: hello, files, stream, session, process, cpu, tools, lookup, tls,
    /// network, eval, memory or native.
    #[arg(long, value_name = "PART")]
    only: Option<String>,
    /// The native tier's venv (with numpy and pandas, from `sandpy build --native`) for
    /// the `native` part; without it that part is skipped.
    #[arg(long, value_name = "DIR")]
    native_venv: Option<std::path::PathBuf>,
}

/// A tool that answers at once: what is left of a call is the sandbox's own cost.
struct NoopTools;

impl sandpy::ToolHost for NoopTools {
    fn list_tools(&self) -> Vec<sandpy::ToolInfo> {
        vec![sandpy::ToolInfo {
            name: "noop".into(),
            description: String::new(),
            input_schema: serde_json::json!({"type": "object"}),
        }]
    }

    fn call_tool(&self, _name: &str, _arguments: serde_json::Value) -> sandpy::ToolFuture {
        Box::pin(async { Ok(serde_json::Value::Null) })
    }
}

/// `count` tools that answer at once, looked up by name as the hub does (`mcp__many__tool_N`):
/// what a call costs with 10 tools against 10,000.
struct ManyTools {
    tools: std::collections::BTreeMap<String, sandpy::ToolInfo>,
}

impl ManyTools {
    fn new(count: usize) -> ManyTools {
        let tools = (0..count).map(|i| {
            let name = format!("mcp__many__tool_{i}");
            let info = sandpy::ToolInfo {
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

impl sandpy::ToolHost for ManyTools {
    fn list_tools(&self) -> Vec<sandpy::ToolInfo> {
        self.tools.values().cloned().collect()
    }

    fn tool(&self, name: &str) -> Option<sandpy::ToolInfo> {
        self.tools.get(name).cloned()
    }

    fn has_tool(&self, name: &str) -> bool {
        self.tools.contains_key(name)
    }

    fn tool_names(&self) -> Vec<String> {
        self.tools.keys().cloned().collect()
    }

    fn call_tool(&self, _name: &str, _arguments: serde_json::Value) -> sandpy::ToolFuture {
        Box::pin(async { Ok(serde_json::Value::Null) })
    }
}

/// Per-call milliseconds of `calls` sequential calls of `tool`, timed inside the program.
const CALL_LOOP: &str = "import time\nt = time.perf_counter()\nfor _ in range(N):\n    call_mcp_tool(TOOL, ARGS)\n(time.perf_counter() - t) * 1000 / N";

fn call_loop(tool: &str, arguments: &str, calls: usize) -> String {
    CALL_LOOP
        .replace("N", &calls.to_string())
        .replace("TOOL", &format!("{tool:?}"))
        .replace("ARGS", arguments)
}

/// CPU-bound programs; each prints its own elapsed seconds so that start-up is excluded
/// on both sides.
const CPU_SET: &[(&str, &str)] = &[
    ("loops", "s = 0\nfor i in range(3_000_000):\n    s += i % 7\n"),
    ("sorting", "import random\nr = random.Random(1)\nxs = [r.random() for _ in range(300_000)]\nfor _ in range(3):\n    sorted(xs)\n"),
    ("strings", "parts = []\nfor i in range(200_000):\n    parts.append(f'{i}:{i*i:x}'.upper().replace('A', 'z'))\n' '.join(parts).split(' ')\n"),
    ("json", "import json\ndoc = [{'id': i, 'name': f'n{i}', 'tags': ['a', 'b'], 'v': i / 3} for i in range(20_000)]\nfor _ in range(5):\n    json.loads(json.dumps(doc))\n"),
];

fn timed(body: &str) -> String {
    format!("import time as _t\n_t0 = _t.perf_counter()\n{body}\nprint(_t.perf_counter() - _t0)\n")
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn private_bytes() -> anyhow::Result<u64> {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup")
        .context("reading /proc/self/smaps_rollup")?;
    let kib: u64 = text
        .lines()
        .filter(|l| l.starts_with("Private_Clean:") || l.starts_with("Private_Dirty:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    Ok(kib * 1024)
}

pub(super) fn run(args: Args) -> anyhow::Result<Outcome> {
    let bench = Bench {
        sandbox: super::sandbox()?,
        rt: super::tokio_runtime()?,
        cores: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2),
        exe: std::env::current_exe()?,
        args,
    };
    if bench.args.packages {
        let runs = bench.args.runs.clamp(1, 100);
        return packages_startup(&bench.rt, &bench.sandbox, runs);
    }
    let want = |part: &str| bench.args.only.as_deref().is_none_or(|only| only == part);
    println!("sandpy bench (medians; the machine is shared, compare ratios)\n");
    let parts: [(&str, Part); 13] = [
        ("hello", Bench::hello),
        ("files", Bench::files),
        ("stream", Bench::stream),
        ("session", Bench::session),
        ("process", Bench::process),
        ("cpu", Bench::cpu),
        ("tools", Bench::tools),
        ("lookup", Bench::lookup),
        ("tls", Bench::tls),
        ("network", Bench::network),
        ("eval", Bench::eval),
        ("memory", Bench::memory),
        ("native", Bench::native),
    ];
    for (name, part) in parts {
        if want(name) {
            part(&bench)?;
        }
    }
    Ok(Outcome::Success)
}

/// One part of the bench.
type Part = fn(&Bench) -> anyhow::Result<()>;

/// What every part of the bench shares.
struct Bench {
    args: Args,
    sandbox: sandpy::Sandbox,
    rt: tokio::runtime::Runtime,
    cores: usize,
    /// This binary, for the parts that run it as a process.
    exe: std::path::PathBuf,
}

impl Bench {
    /// In-process fresh-instance latency and throughput, with wasmtime's pooling
    /// allocator (the default) and with on-demand allocation.
    fn hello(&self) -> anyhow::Result<()> {
        let (rt, args, cores) = (&self.rt, &self.args, self.cores);
        let on_demand = sandpy::Sandbox::new(sandpy::Config {
            pooled_instances: None,
            ..sandpy::Config::default()
        })?;
        let configurations = [
            ("pooling allocator", &self.sandbox),
            ("on-demand allocator", &on_demand),
        ];
        // Latencies interleaved (one run of each in turn), so that drift in the machine's
        // load falls on both alike.
        let mut latencies = [(); 2].map(|_| Vec::new());
        for _ in 0..args.runs.max(1) {
            for (i, (_, sandbox)) in configurations.iter().enumerate() {
                latencies[i].push(timed_run(
                    rt,
                    sandbox,
                    "print('hello')",
                    &sandpy::RunOptions::default(),
                )?);
            }
        }
        for ((name, sandbox), mut latencies) in configurations.into_iter().zip(latencies) {
            latencies.sort_by(f64::total_cmp);
            let per_sec = hello_throughput(rt, sandbox, cores, 2000);
            println!(
                "{name:<20} in-process print('hello'), fresh instance: p50 {:.3} ms  p99 {:.3} ms (n={});  \
                 {per_sec:.0} runs/s with {cores} cores busy (n=2000)",
                percentile(&latencies, 0.5),
                percentile(&latencies, 0.99),
                latencies.len()
            );
        }
        Ok(())
    }

    /// The same run with an input file in and an output file out.
    fn files(&self) -> anyhow::Result<()> {
        let (rt, args, sandbox) = (&self.rt, &self.args, &self.sandbox);
        let with_files = sandpy::RunOptions {
            files: vec![sandpy::InputFile {
                path: "in.txt".into(),
                content: vec![b'x'; 1024],
            }],
            ..sandpy::RunOptions::default()
        };
        let (mut plain, mut filed) = (Vec::new(), Vec::new());
        for _ in 0..args.runs.max(1) {
            plain.push(timed_run(
                rt,
                sandbox,
                "print('hello')",
                &sandpy::RunOptions::default(),
            )?);
            filed.push(timed_run(
                rt,
                sandbox,
                "open('/output/out.txt', 'w').write(open('in.txt').read())",
                &with_files,
            )?);
        }
        let (p, f) = (median(&mut plain), median(&mut filed));
        println!("files: one 1 KiB input copied to /output and returned: p50 {f:.3} ms (print('hello') {p:.3} ms, ratio {:.2}x)", f / p);
        Ok(())
    }

    /// A program that prints 10,000 lines, with its output streamed to a sink as it is
    /// written (what `sandpy run`, MCP progress and `on_output` do) against captured only.
    fn stream(&self) -> anyhow::Result<()> {
        let (rt, args, sandbox) = (&self.rt, &self.args, &self.sandbox);
        let code = "for i in range(10_000):\n    print('line', i)";
        let bytes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let streamed = sandpy::RunOptions {
            on_output: Some({
                let bytes = bytes.clone();
                std::sync::Arc::new(move |_, chunk: &[u8]| {
                    bytes.fetch_add(chunk.len(), std::sync::atomic::Ordering::Relaxed);
                })
            }),
            ..sandpy::RunOptions::default()
        };
        let (mut plain, mut sunk) = (Vec::new(), Vec::new());
        for _ in 0..(args.runs / 10).max(5) {
            plain.push(timed_run(
                rt,
                sandbox,
                code,
                &sandpy::RunOptions::default(),
            )?);
            sunk.push(timed_run(rt, sandbox, code, &streamed)?);
        }
        let (p, s) = (median(&mut plain), median(&mut sunk));
        let runs = plain.len();
        println!("stream: 10,000 printed lines, streamed to a sink: p50 {s:.3} ms (captured only {p:.3} ms, ratio {:.2}x; n={runs})", s / p);
        Ok(())
    }

    /// Ten small cells in one session, end to end, against ten fresh runs; and saving
    /// and restoring a session.
    fn session(&self) -> anyhow::Result<()> {
        let (rt, sandbox) = (&self.rt, &self.sandbox);
        let (session_ms, fresh_ms) = rt.block_on(async {
            let cells: Vec<String> = (0..10).map(|i| format!("v{i} = {i} * 2\ntotal = sum(v for k, v in globals().items() if k.startswith('v'))")).collect();
            let mut session_ms = Vec::new();
            let mut fresh_ms = Vec::new();
            for round in 0..20 {
                let sessions = sandpy::Sessions::new(sandbox, sandpy::SessionLimits::default());
                let t = Instant::now();
                for cell in &cells {
                    sessions.run(&format!("bench-{round}"), cell, &sandpy::RunOptions::default()).await;
                }
                session_ms.push(t.elapsed().as_secs_f64() * 1e3);
                let t = Instant::now();
                for cell in &cells {
                    sandbox.run(cell, &Limits::default()).await;
                }
                fresh_ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
            (median(&mut session_ms), median(&mut fresh_ms))
        });
        println!("10-cell session end to end: {session_ms:.2} ms (the same 10 cells as fresh runs: {fresh_ms:.2} ms, ratio {:.2}x)", session_ms / fresh_ms);
        let (save_ms, bytes, restore_ms) = rt.block_on(async {
            let sessions = sandpy::Sessions::new(sandbox, sandpy::SessionLimits::default());
            for i in 0..10 {
                sessions
                    .run(
                        "s",
                        &format!("v{i} = list(range({i} * 100))"),
                        &sandpy::RunOptions::default(),
                    )
                    .await;
            }
            let (mut save, mut restore, mut bytes) = (Vec::new(), Vec::new(), 0);
            for round in 0..10 {
                let t = Instant::now();
                let text = serde_json::to_string(&sessions.snapshot("s").await?)?;
                save.push(t.elapsed().as_secs_f64() * 1e3);
                bytes = text.len();
                let t = Instant::now();
                let snapshot: sandpy::SessionSnapshot = serde_json::from_str(&text)?;
                sessions
                    .restore(
                        &format!("r{round}"),
                        &snapshot,
                        &sandpy::RunOptions::default(),
                    )
                    .await?;
                restore.push(t.elapsed().as_secs_f64() * 1e3);
                sessions.close(&format!("r{round}"));
            }
            Ok::<_, anyhow::Error>((median(&mut save), bytes, median(&mut restore)))
        })?;
        println!("  save it (journal to JSON): {save_ms:.3} ms, {bytes} bytes; restore it (replay): {restore_ms:.2} ms");
        Ok(())
    }

    /// Whole-process latency, warm cache, against native python3 start-up: `sandpy run`
    /// loading the runtime itself (`--cold`), and the same command handing the run to the
    /// warm runner that is up for its settings.
    fn process(&self) -> anyhow::Result<()> {
        let (args, exe) = (&self.args, &self.exe);
        let exe = exe.to_string_lossy();
        let sandpy = [exe.as_ref(), "run", "--cold", "-c", "print('hello')"];
        let warm = [exe.as_ref(), "run", "-c", "print('hello')"];
        // Native Python's fastest start: isolated (-I), no site module (-S).
        let python = [args.python.as_str(), "-I", "-S", "-c", "print('hello')"];
        #[cfg(target_os = "linux")]
        start_warm_runner(&exe)?;
        let (mut sandpy_ms, mut warm_ms, mut python_ms) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.process_runs.max(1) {
            sandpy_ms.push(whole_process_ms(&sandpy)?);
            #[cfg(target_os = "linux")]
            warm_ms.push(whole_process_ms(&warm)?);
            python_ms.push(whole_process_ms(&python)?);
        }
        let (s, p) = (median(&mut sandpy_ms), median(&mut python_ms));
        let (sandpy_peak, python_peak) = (
            peak_rss(&args.python, &sandpy)?,
            peak_rss(&args.python, &python)?,
        );
        println!(
            "whole process `sandpy run --cold -c \"print('hello')\"`: {s:.1} ms, peak RSS {sandpy_peak}  \
             (native `{} -I -S -c`, run alternately: {p:.1} ms, peak RSS {python_peak}; ratio {:.2}x)",
            args.python,
            s / p
        );
        if !warm_ms.is_empty() {
            let w = median(&mut warm_ms);
            println!(
                "  without --cold, a warm runner up (`sandpy warmup --keep`): {w:.1} ms, peak RSS {}; \
                 ratio to native {:.2}x",
                peak_rss(&args.python, &warm)?,
                w / p
            );
        }
        Ok(())
    }

    /// The CPU-bound set against native python3.
    fn cpu(&self) -> anyhow::Result<()> {
        let (rt, args, sandbox) = (&self.rt, &self.args, &self.sandbox);
        let limits = Limits::default();
        println!(
            "\nCPU-bound set (seconds inside the program, median of 3): in process (code with \
             interruption checks, as a server or the library runs it), and `sandpy run` (one \
             process per run, code without checks)"
        );
        let (mut ratios, mut one_shot_ratios) = (Vec::new(), Vec::new());
        let seconds = |out: std::process::Output, what: &str| -> anyhow::Result<f64> {
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse::<f64>()
                .with_context(|| format!("{what} failed: {}", String::from_utf8_lossy(&out.stderr)))
        };
        for (name, body) in CPU_SET {
            let code = timed(body);
            let (mut inside, mut one_shot, mut native) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..3 {
                let e = rt.block_on(sandbox.run(
                    &code,
                    &Limits {
                        timeout: Duration::from_secs(120),
                        ..limits.clone()
                    },
                ));
                if e.status != Status::Ok {
                    bail!("{name} failed in the sandbox: {e:?}");
                }
                inside.push(e.stdout.trim().parse::<f64>()?);
                let out = Command::new(&self.exe)
                    .args(["run", "--cold", "--timeout-ms", "120000", "-c", &code])
                    .output()?;
                one_shot.push(seconds(out, &format!("{name} in `sandpy run`"))?);
                let out = Command::new(&args.python).args(["-c", &code]).output()?;
                native.push(seconds(out, &format!("{name} natively"))?);
            }
            let (i, o, n) = (
                median(&mut inside),
                median(&mut one_shot),
                median(&mut native),
            );
            ratios.push(i / n);
            one_shot_ratios.push(o / n);
            println!(
                "  {name:<8} in process {:>8.1} ms ({:.2}x)   sandpy run {:>8.1} ms ({:.2}x)   native {:>8.1} ms",
                i * 1e3,
                i / n,
                o * 1e3,
                o / n,
                n * 1e3,
            );
        }
        let geo = |ratios: &[f64]| {
            (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp()
        };
        let native_version = Command::new(&args.python)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        println!(
            "  geometric mean ratio: in process {:.2}x, sandpy run {:.2}x (sandbox CPython 3.14 vs native {native_version})",
            geo(&ratios),
            geo(&one_shot_ratios)
        );
        Ok(())
    }

    /// The native tier with numpy and pandas pre-imported: a confined fresh run against a
    /// fresh process importing the same packages, runs per second, and the CPU-bound set
    /// against the same interpreter unconfined.
    fn native(&self) -> anyhow::Result<()> {
        let Some(venv) = &self.args.native_venv else {
            println!(
                "\nnative tier: skipped (pass --native-venv DIR, made by `sandpy build --native`)"
            );
            return Ok(());
        };
        let (rt, args, cores) = (&self.rt, &self.args, self.cores);
        let sandbox = sandpy::Sandbox::new(sandpy::Config {
            native: Some(sandpy::native::NativeConfig {
                venv: Some(venv.clone()),
                preimport: vec!["numpy".into(), "pandas".into()],
                ..Default::default()
            }),
            ..sandpy::Config::default()
        })?;
        let options = sandpy::RunOptions {
            tier: sandpy::Tier::Native,
            ..sandpy::RunOptions::default()
        };
        let python = venv.join("bin").join("python");
        let python = python.to_string_lossy();
        timed_run(rt, &sandbox, "print('warm')", &options)?; // starts the zygote
        const PANDAS_SUM: &str = "import pandas as pd\nprint(pd.Series(range(1000)).sum())";
        let (mut hello, mut pandas) = (Vec::new(), Vec::new());
        for _ in 0..args.runs.max(1) {
            hello.push(timed_run(rt, &sandbox, "print('hello')", &options)?);
            pandas.push(timed_run(rt, &sandbox, PANDAS_SUM, &options)?);
        }
        let mut fresh = Vec::new();
        for _ in 0..5 {
            let code = format!("import numpy, pandas\n{PANDAS_SUM}");
            fresh.push(whole_process_ms(&[&python, "-c", &code])?);
        }
        hello.sort_by(f64::total_cmp);
        pandas.sort_by(f64::total_cmp);
        let fresh = median(&mut fresh);
        let p50 = percentile(&pandas, 0.5);
        println!(
            "\nnative tier (numpy and pandas pre-imported, confined fresh fork per run):\n  \
             print('hello') p50 {:.2} ms  p99 {:.2} ms;  pandas sum p50 {p50:.2} ms  p99 {:.2} ms (n={})\n  \
             a fresh `python -c 'import numpy, pandas; ...'` process {fresh:.1} ms: the confined run takes {:.3}x of it",
            percentile(&hello, 0.5),
            percentile(&hello, 0.99),
            percentile(&pandas, 0.99),
            pandas.len(),
            p50 / fresh,
        );
        native_sessions(rt, &sandbox, &options)?;
        let total = 600;
        let started = Instant::now();
        rt.block_on(async {
            let mut tasks = tokio::task::JoinSet::new();
            let workers = cores * 2;
            for worker in 0..workers {
                let (sandbox, options) = (sandbox.clone(), options.clone());
                let share = total / workers + usize::from(worker < total % workers);
                tasks.spawn(async move {
                    for _ in 0..share {
                        sandbox.run_with(PANDAS_SUM, &options).await;
                    }
                });
            }
            while tasks.join_next().await.is_some() {}
        });
        println!(
            "  {:.0} pandas-sum runs/s with {cores} cores busy (n={total})",
            total as f64 / started.elapsed().as_secs_f64()
        );
        let mut ratios = Vec::new();
        let limits = Limits {
            timeout: Duration::from_secs(120),
            ..Limits::default()
        };
        let options = sandpy::RunOptions { limits, ..options };
        for (name, body) in CPU_SET {
            let code = timed(body);
            let (mut confined, mut plain) = (Vec::new(), Vec::new());
            for _ in 0..3 {
                let e = rt.block_on(sandbox.run_with(&code, &options));
                if e.status != Status::Ok {
                    bail!("{name} failed in the native tier: {e:?}");
                }
                confined.push(e.stdout.trim().parse::<f64>()?);
                let out = Command::new(&*python).args(["-c", &code]).output()?;
                plain.push(String::from_utf8_lossy(&out.stdout).trim().parse::<f64>()?);
            }
            let (c, n) = (median(&mut confined), median(&mut plain));
            ratios.push(c / n);
            println!(
                "  {name:<8} confined {:>8.1} ms   unconfined {:>8.1} ms   {:.2}x",
                c * 1e3,
                n * 1e3,
                c / n
            );
        }
        let geo = (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp();
        println!("  CPU-bound set, geometric mean: {geo:.2}x the same interpreter unconfined");
        Ok(())
    }

    /// An HTTP request through the sandbox's network (`urllib.request`, made by the host)
    /// against the same request from native Python, both timed inside the program, to a
    /// minimal local server (a connection per request on both sides).
    fn network(&self) -> anyhow::Result<()> {
        const REQUESTS: usize = 200;
        let (rt, sandbox) = (&self.rt, &self.sandbox);
        let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
        let port = listener.local_addr()?.port();
        rt.spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut request = Vec::new();
                    let mut buffer = [0u8; 4096];
                    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buffer).await {
                            Ok(n) if n > 0 => request.extend_from_slice(&buffer[..n]),
                            _ => return,
                        }
                    }
                    let answer =
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
                    let _ = stream.write_all(answer).await;
                });
            }
        });
        let program = format!(
            "import time, urllib.request\nt = time.perf_counter()\nfor _ in range({REQUESTS}):\n    \
             urllib.request.urlopen('http://127.0.0.1:{port}/').read()\n\
             ms = (time.perf_counter() - t) * 1000 / {REQUESTS}\n"
        );
        let rules = sandpy::network::NetworkRules {
            allow: vec![sandpy::network::AllowRule::parse(&format!(
                "127.0.0.1:{port}"
            ))?],
            limits: sandpy::network::NetworkLimits {
                max_requests: REQUESTS,
                ..sandpy::network::NetworkLimits::default()
            },
            ..sandpy::network::NetworkRules::default()
        };
        let options = sandpy::RunOptions {
            network: Some(sandpy::network::Network::new(rules)?),
            ..sandpy::RunOptions::default()
        };
        let (mut inside, mut native) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            let e = rt.block_on(sandbox.run_with(&format!("{program}ms"), &options));
            inside.push(
                e.return_value
                    .as_ref()
                    .and_then(|v| v.as_f64())
                    .with_context(|| format!("the request loop failed: {e:?}"))?,
            );
            let out = std::process::Command::new(&self.args.python)
                .args(["-c", &format!("{program}print(ms)")])
                .output()
                .with_context(|| format!("running {}", self.args.python))?;
            let text = String::from_utf8_lossy(&out.stdout);
            native.push(text.trim().parse::<f64>().with_context(|| {
                format!(
                    "native loop: {text}{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            })?);
        }
        let (s, n) = (median(&mut inside), median(&mut native));
        println!(
            "\nnetwork: an HTTP GET to a local server, per request (timed inside the program, {REQUESTS} requests x 5 rounds):\n  \
             through the sandbox (urllib.request, made by the host): {s:.3} ms; native {} (urllib.request): {n:.3} ms; ratio {:.2}x",
            self.args.python,
            s / n
        );
        Ok(())
    }

    /// Tool-call round trips: a no-op tool, a batch, a real upstream, and `run_python`
    /// over stdio end to end.
    fn tools(&self) -> anyhow::Result<()> {
        let (rt, args, sandbox, exe) = (&self.rt, &self.args, &self.sandbox, &self.exe);
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
            rt.block_on(stdio_end_to_end(exe))?;
        }
        Ok(())
    }

    /// A call by full name and one through `tools.<server>.<tool>`, with 10 tools and with
    /// 10,000: lookups by name should cost the same (they cloned every tool per call).
    fn lookup(&self) -> anyhow::Result<()> {
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
    fn tls(&self) -> anyhow::Result<()> {
        self.rt.block_on(https_against_http(&self.sandbox))
    }

    /// Eval batch: the real `sandpy call --args-file` over 10,000 inputs.
    fn eval(&self) -> anyhow::Result<()> {
        eval_batch(&self.exe, self.cores)
    }

    /// Private memory per live instance (on-demand allocator: the pool keeps idle
    /// slots' pages warm, which would blur the figure).
    fn memory(&self) -> anyhow::Result<()> {
        let rt = &self.rt;
        let live = 40;
        let config = sandpy::Config {
            pooled_instances: None,
            max_concurrent_runs: Some(live),
            ..sandpy::Config::default()
        };
        let on_demand = sandpy::Sandbox::new(config)?;
        let before = private_bytes()?;
        let during = rt.block_on(async {
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..live {
                let sandbox = on_demand.clone();
                tasks.spawn(async move {
                    sandbox
                        .run("import time\ntime.sleep(1.5)", &Limits::default())
                        .await
                });
            }
            tokio::time::sleep(Duration::from_millis(1000)).await;
            let during = private_bytes();
            while tasks.join_next().await.is_some() {}
            during
        })?;
        println!(
            "\nprivate memory per live instance: {:.2} MiB ({live} alive at once; process private memory {:.0} -> {:.0} MiB)",
            during.saturating_sub(before) as f64 / live as f64 / (1 << 20) as f64,
            before as f64 / (1 << 20) as f64,
            during as f64 / (1 << 20) as f64
        );
        Ok(())
    }
}

/// Milliseconds of one run, which must end `ok`.
/// Sessions of ten small cells on the native tier and on the WebAssembly tier, alternated:
/// the first cell (which starts the session's process or instance) and the later ones.
fn native_sessions(
    rt: &tokio::runtime::Runtime,
    sandbox: &sandpy::Sandbox,
    native: &sandpy::RunOptions,
) -> anyhow::Result<()> {
    let cells: Vec<String> = (0..10)
        .map(|i| {
            format!(
                "v{i} = {i} * 2\ntotal = sum(v for k, v in globals().items() if k.startswith('v'))"
            )
        })
        .collect();
    let wasm = sandpy::RunOptions::default();
    let sessions = sandpy::Sessions::new(sandbox, sandpy::SessionLimits::default());
    // Per tier: the first cells' times, then the later cells'.
    let mut times = [(Vec::new(), Vec::new()), (Vec::new(), Vec::new())];
    rt.block_on(async {
        for round in 0..20 {
            for (tier, options) in [native, &wasm].into_iter().enumerate() {
                let id = format!("bench-{tier}-{round}");
                for (i, cell) in cells.iter().enumerate() {
                    let t = Instant::now();
                    let execution = sessions.run(&id, cell, options).await;
                    let ms = t.elapsed().as_secs_f64() * 1e3;
                    if execution.status != Status::Ok {
                        bail!("a session cell failed: {execution:?}");
                    }
                    let (first, later) = &mut times[tier];
                    if i == 0 { first } else { later }.push(ms);
                }
                sessions.close(&id);
            }
        }
        Ok(())
    })?;
    let [(mut native_first, mut native_later), (mut wasm_first, mut wasm_later)] = times;
    let (native_cell, wasm_cell) = (median(&mut native_later), median(&mut wasm_later));
    println!(
        "  session cell p50 {native_cell:.2} ms against the WebAssembly tier's {wasm_cell:.2} ms \
         ({:.2}x); a session's first cell (its process or instance made) {:.2} ms against {:.2} ms \
         (20 sessions of 10 cells each, alternating)",
        native_cell / wasm_cell,
        median(&mut native_first),
        median(&mut wasm_first),
    );
    Ok(())
}

fn timed_run(
    rt: &tokio::runtime::Runtime,
    sandbox: &sandpy::Sandbox,
    code: &str,
    options: &sandpy::RunOptions,
) -> anyhow::Result<f64> {
    let t = Instant::now();
    let e = rt.block_on(sandbox.run_with(code, options));
    let ms = t.elapsed().as_secs_f64() * 1e3;
    if e.status != Status::Ok {
        bail!("{code:?} failed: {e:?}");
    }
    Ok(ms)
}

/// Start-up of a run importing the curated packages: bundled in the built-in runtime's
/// snapshot, against the same packages mounted at /packages in a runtime built without
/// them; and `print('hello')` on both runtimes (what bundling costs a run that does not
/// use them).
fn packages_startup(
    rt: &tokio::runtime::Runtime,
    builtin: &sandpy::Sandbox,
    runs: usize,
) -> anyhow::Result<Outcome> {
    let dir = tempfile::tempdir()?;
    let config = sandpy::Config {
        progress: Some(std::sync::Arc::new(|m: &str| eprintln!("{m}"))),
        ..sandpy::Config::default()
    };
    // One tiny unrelated package: a runtime that has none of the curated set.
    let bare_runtime = dir.path().join("bare.wasm");
    sandpy::packages::build_runtime(&["iniconfig==2.1.0".to_string()], &bare_runtime, &config)?;
    let folder = dir.path().join("packages");
    let curated: Vec<String> = sandpy::packages::CURATED
        .iter()
        .map(|p| p.to_string())
        .collect();
    sandpy::packages::install(&curated, &folder, &config)?;
    let bare = super::sandbox_with(sandpy::Config {
        runtime: Some(bare_runtime.clone()),
        ..sandpy::Config::default()
    })?;
    let mounted = sandpy::RunOptions {
        mounts: vec![sandpy::Mount {
            host: folder,
            guest: "/packages".into(),
        }],
        ..sandpy::RunOptions::default()
    };
    let imports = "import attrs, dateutil.parser, yaml, tabulate, jinja2, markupsafe, idna, six\n\
                   print(jinja2.Template('{{ n }}').render(n=tabulate.tabulate([[1]])))";
    let plain = sandpy::RunOptions::default();
    let mut figures = [(); 4].map(|_| Vec::new());
    for _ in 0..runs {
        figures[0].push(timed_run(rt, builtin, imports, &plain)?);
        figures[1].push(timed_run(rt, &bare, imports, &mounted)?);
        figures[2].push(timed_run(rt, builtin, "print('hello')", &plain)?);
        figures[3].push(timed_run(rt, &bare, "print('hello')", &plain)?);
    }
    let [b, m, h, bh] = figures.map(|mut f| median(&mut f));
    println!("packages ({}; median of {runs}):", curated.join(", "));
    println!("  run importing them, bundled in the built-in runtime's snapshot: {b:.2} ms");
    println!("  the same from a folder mounted at /packages (`sandpy build --folder`): {m:.2} ms (ratio {:.1}x)", m / b);
    println!("  print('hello') on the built-in runtime {h:.3} ms vs a runtime without them {bh:.3} ms (ratio {:.2}x)", h / bh);
    Ok(Outcome::Success)
}

/// Fresh-instance runs per second with `2 * cores` tasks in flight.
fn hello_throughput(
    rt: &tokio::runtime::Runtime,
    sandbox: &sandpy::Sandbox,
    cores: usize,
    total: usize,
) -> f64 {
    let started = Instant::now();
    rt.block_on(async {
        let mut tasks = tokio::task::JoinSet::new();
        let workers = cores * 2;
        for worker in 0..workers {
            let sandbox = sandbox.clone();
            let share = total / workers + usize::from(worker < total % workers);
            tasks.spawn(async move {
                for _ in 0..share {
                    sandbox.run("print('hello')", &Limits::default()).await;
                }
            });
        }
        while tasks.join_next().await.is_some() {}
    });
    total as f64 / started.elapsed().as_secs_f64()
}

/// A small scoring function over 10,000 JSON lines, one fresh sandbox per line.
fn eval_batch(exe: &std::path::Path, cores: usize) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("sandpy-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let scorer = dir.join("scorer.py");
    std::fs::write(&scorer, "import difflib\ndef score(pred, gold):\n    return round(difflib.SequenceMatcher(None, pred, gold).ratio(), 3)\n")?;
    let inputs = dir.join("inputs.jsonl");
    let lines: Vec<String> = (0..10_000)
        .map(|i| format!("[\"answer {i}\", \"answer {}\"]", i % 97))
        .collect();
    std::fs::write(&inputs, lines.join("\n") + "\n")?;
    let (scorer, inputs) = (scorer.display().to_string(), inputs.display().to_string());
    let call = |extra: Option<&str>| -> anyhow::Result<f64> {
        let mut args = vec![
            "call",
            &scorer,
            "score",
            "--policy",
            "strict",
            "--args-file",
            &inputs,
        ];
        args.extend(extra);
        let started = Instant::now();
        let out = Command::new(exe).args(&args).output()?;
        let seconds = started.elapsed().as_secs_f64();
        let ok = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains("\"status\":\"ok\""))
            .count();
        if ok != lines.len() {
            bail!(
                "eval batch: {ok} of {} lines ok: {}",
                lines.len(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(ok as f64 / seconds)
    };
    // Alternately, three times each: worker processes (the default) and threads.
    let (mut workers, mut threads) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        workers.push(call(None)?);
        threads.push(call(Some("--in-process"))?);
    }
    std::fs::remove_dir_all(&dir)?;
    let (w, t) = (median(&mut workers), median(&mut threads));
    println!(
        "\neval batch `sandpy call scorer.py score --policy strict --args-file inputs.jsonl` (10,000 lines, {cores} jobs): \
         worker processes {w:.0} calls/s, threads (--in-process) {t:.0} calls/s: {:.2}x",
        w / t
    );
    Ok(())
}

/// Start this binary's warm runner for the default settings and wait until it serves
/// runs (it leaves by itself when idle).
#[cfg(target_os = "linux")]
fn start_warm_runner(exe: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let out = Command::new(exe)
            .args(["run", "--warm", "-c", "pass"])
            .env("SANDPY_LOG", "sandpy=debug")
            .stdin(std::process::Stdio::null())
            .output()
            .with_context(|| format!("cannot run `{exe}`"))?;
        if String::from_utf8_lossy(&out.stderr).contains(super::warm::SERVED) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("no warm runner came up in 120 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Run `command` to its end (its output discarded): milliseconds from spawn to exit.
fn whole_process_ms(command: &[&str]) -> anyhow::Result<f64> {
    let started = Instant::now();
    let status = Command::new(command[0])
        .args(&command[1..])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .with_context(|| format!("cannot run `{}`", command[0]))?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    if !status.success() {
        bail!("`{}` failed ({status})", command.join(" "));
    }
    Ok(ms)
}

/// Forks, execs its arguments and prints the child's peak RSS and its own, in KiB.
const PEAK_RSS_PY: &str = "import os, resource, sys
pid = os.fork()
if pid == 0:
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
print(usage.ru_maxrss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, os.waitstatus_to_exitcode(status))
";

/// The peak RSS of `command`, measured through a small Python process that forks it: a
/// child's peak counts the pages it shared with its parent before its exec (the kernel
/// takes the old address space's high-water mark at exec), so it is measured from a
/// parent smaller than this one, and a peak at or under that parent's own reads "<=".
fn peak_rss(python: &str, command: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(python)
        .args(["-I", "-S", "-c", PEAK_RSS_PY])
        .args(command)
        .output()
        .with_context(|| format!("cannot run `{python}`"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<u64> = text
        .split_whitespace()
        .filter_map(|f| f.parse().ok())
        .collect();
    let [peak, floor, code] = fields[..] else {
        bail!(
            "measuring the peak RSS of `{}` failed: {text}",
            command.join(" ")
        );
    };
    if code != 0 {
        bail!("`{}` failed (exit code {code})", command.join(" "));
    }
    let mib = |kib: u64| kib as f64 / 1024.0;
    Ok(if peak <= floor {
        format!("<= {:.1} MiB", mib(floor))
    } else {
        format!("{:.1} MiB", mib(peak))
    })
}

/// Echo through the sandbox and the hub, against the hub alone, on the same server.
async fn upstream_overhead(sandbox: &sandpy::Sandbox) -> anyhow::Result<()> {
    use sandpy::ToolHost;
    let hub = sandpy_mcp::Hub::start(&super::demo::everything_config()).await;
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
    use sandpy::ToolHost;
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
    let hub = sandpy_mcp::Hub::start(&sandpy_mcp::Config::load(&path)?).await;
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
async fn stdio_end_to_end(exe: &std::path::Path) -> anyhow::Result<()> {
    use rmcp::model::CallToolRequestParams;
    use rmcp::ServiceExt;
    let mut command = tokio::process::Command::new(exe);
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
