//! Fresh-instance runs inside this process: latency and throughput, files, streamed
//! output, sessions, and memory per live instance.

use crate::measure::{median, percentile, private_bytes, timed_run};
use crate::Bench;
use sandpy::Limits;
use std::time::{Duration, Instant};

impl Bench {
    /// In-process fresh-instance latency and throughput, with wasmtime's pooling
    /// allocator (the default) and with on-demand allocation.
    pub(crate) fn hello(&self) -> anyhow::Result<()> {
        let (rt, args, cores) = (&self.rt, &self.args, self.cores);
        let on_demand = sandpy::Sandbox::new(sandpy::Config {
            pooled_instances: None,
            ..crate::config()
        })?;
        let configurations = [
            ("pooling allocator", &self.sandbox),
            ("on-demand allocator", &on_demand),
        ];
        // Latencies in alternating blocks, so that drift in the machine's load falls on both
        // alike while most runs follow one of their own kind: interleaved one by one, the
        // teardown of the on-demand instance before it slowed each pooled run (p50 about 1.5x
        // that of pooled runs alone, 2026-11-27).
        let runs = args.runs.max(1);
        let hello = sandpy::RunOptions::default();
        let ahead_before =
            configurations.map(|(_, sandbox)| sandbox.runs_on_instances_made_ahead());
        let mut latencies = [(); 2].map(|_| Vec::new());
        while latencies[0].len() < runs {
            let block = LATENCY_BLOCK.min(runs - latencies[0].len());
            for (i, (_, sandbox)) in configurations.iter().enumerate() {
                for _ in 0..block {
                    latencies[i].push(timed_run(rt, sandbox, "print('hello')", &hello)?);
                }
            }
        }
        for run_times in &mut latencies {
            run_times.sort_by(f64::total_cmp);
        }
        let ahead = configurations
            .iter()
            .zip(ahead_before)
            .map(|((name, sandbox), before)| {
                let taken = sandbox.runs_on_instances_made_ahead() - before;
                format!("{name} {taken} of {runs}")
            })
            .collect::<Vec<_>>();
        // The first configuration is the pooling allocator, the default.
        let pooled_p50 = percentile(&latencies[0], 0.5);
        for ((name, sandbox), latencies) in configurations.into_iter().zip(latencies) {
            let per_sec = hello_throughput(rt, sandbox, cores, 2000);
            println!(
                "{name:<20} in-process print('hello'), fresh instance: p50 {:.3} ms  p99 {:.3} ms (n={});  \
                 {per_sec:.0} runs/s with {cores} cores busy (n=2000)",
                percentile(&latencies, 0.5),
                percentile(&latencies, 0.99),
                latencies.len()
            );
        }
        println!(
            "  latency runs on an instance made ahead (after the run before answered): {}",
            ahead.join(", ")
        );
        // Runs a little apart, as calls come to a server: the instance made after one run
        // answered is ready when the next comes, and the other core is idle between runs.
        let mut apart = Vec::new();
        for _ in 0..runs {
            std::thread::sleep(RUNS_APART);
            apart.push(timed_run(rt, &self.sandbox, "print('hello')", &hello)?);
        }
        apart.sort_by(f64::total_cmp);
        println!(
            "  fresh print('hello') {} ms apart: p50 {:.3} ms (n={runs})",
            RUNS_APART.as_millis(),
            percentile(&apart, 0.5)
        );
        if let Some((kib, slots)) = crate::measure::snapshot_pages_written() {
            println!(
                "  written pages a fresh print('hello') leaves in its pool slot: {kib} KiB \
                 (mean of {slots} slots; copied back from the snapshot when a slot is reused)"
            );
        }
        // The same runs in a slot that has just run a heavy program: a slot's reset copies
        // back every page the slot holds privately, not only the ones its last run wrote.
        let mut after_heavy = Vec::new();
        for _ in 0..args.runs.max(1).div_ceil(AFTER_HEAVY) {
            timed_run(rt, &self.sandbox, crate::programs::HEAVY, &hello)?;
            for _ in 0..AFTER_HEAVY {
                after_heavy.push(timed_run(rt, &self.sandbox, "print('hello')", &hello)?);
            }
        }
        after_heavy.sort_by(f64::total_cmp);
        println!(
            "  fresh print('hello') in the pool after heavy runs: p50 {:.3} ms ({:.2}x the \
             pooled p50 above; the {AFTER_HEAVY} runs after each of {} heavy runs)",
            percentile(&after_heavy, 0.5),
            percentile(&after_heavy, 0.5) / pooled_p50,
            after_heavy.len() / AFTER_HEAVY,
        );
        if let Some((kib, slots)) = crate::measure::snapshot_pages_written() {
            println!("  written pages held per slot after them: {kib} KiB (mean of {slots} slots)");
        }
        // What the built-in HTTP libraries cost the runs that import them, and so what a
        // run that does not is spared (issue 46): run by run with plain runs.
        let (mut plain, mut http) = (Vec::new(), Vec::new());
        let pairs = runs.min(100);
        for _ in 0..pairs {
            plain.push(timed_run(rt, &self.sandbox, "print('hello')", &hello)?);
            http.push(timed_run(rt, &self.sandbox, HTTP_IMPORT, &hello)?);
        }
        let (p, h) = (median(&mut plain), median(&mut http));
        println!(
            "  fresh `import requests, httpx` then print('hello'): p50 {h:.3} ms against \
             {p:.3} ms without the import ({:.2}x; n={pairs} each, alternating)",
            h / p
        );
        Ok(())
    }

    /// The same run with an input file in and an output file out.
    pub(crate) fn files(&self) -> anyhow::Result<()> {
        let (rt, args, sandbox) = (&self.rt, &self.args, &self.sandbox);
        let with_files = sandpy::RunOptions {
            files: vec![sandpy::files::InputFile {
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
    pub(crate) fn stream(&self) -> anyhow::Result<()> {
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
    pub(crate) fn session(&self) -> anyhow::Result<()> {
        let (rt, sandbox) = (&self.rt, &self.sandbox);
        let (session_ms, fresh_ms, first_cells_ahead) = rt.block_on(async {
            let cells: Vec<String> = (0..10).map(|i| format!("v{i} = {i} * 2\ntotal = sum(v for k, v in globals().items() if k.startswith('v'))")).collect();
            let mut session_ms = Vec::new();
            let mut fresh_ms = Vec::new();
            let mut first_cells_ahead = 0;
            for round in 0..20 {
                let sessions = sandpy::sessions::Sessions::new(sandbox, sandpy::sessions::SessionLimits::default());
                let ahead = sandbox.runs_on_instances_made_ahead();
                let t = Instant::now();
                for cell in &cells {
                    sessions.run(&format!("bench-{round}"), cell, &sandpy::RunOptions::default()).await;
                }
                session_ms.push(t.elapsed().as_secs_f64() * 1e3);
                first_cells_ahead += sandbox.runs_on_instances_made_ahead() - ahead;
                let t = Instant::now();
                for cell in &cells {
                    sandbox.run(cell, &Limits::default()).await;
                }
                fresh_ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
            (median(&mut session_ms), median(&mut fresh_ms), first_cells_ahead)
        });
        println!("10-cell session end to end: {session_ms:.2} ms (the same 10 cells as fresh runs: {fresh_ms:.2} ms, ratio {:.2}x)", session_ms / fresh_ms);
        println!(
            "  sessions whose first cell ran on an instance made ahead: {first_cells_ahead} of 20"
        );
        // New sessions a little apart, as agents open them on a server: the first cell's
        // instance (made after the last session's first cell) is ready, the other core idle.
        let mut first_cells = rt.block_on(async {
            let sessions = sandpy::sessions::Sessions::new(
                sandbox,
                sandpy::sessions::SessionLimits::default(),
            );
            let mut first_cells = Vec::new();
            for round in 0..100 {
                std::thread::sleep(RUNS_APART);
                let t = Instant::now();
                sessions
                    .run(
                        &format!("first-{round}"),
                        "v = 1",
                        &sandpy::RunOptions::default(),
                    )
                    .await;
                first_cells.push(t.elapsed().as_secs_f64() * 1e3);
                sessions.close(&format!("first-{round}"));
            }
            first_cells
        });
        println!(
            "  a new session's first cell, sessions {} ms apart: p50 {:.3} ms (n=100)",
            RUNS_APART.as_millis(),
            median(&mut first_cells)
        );
        let (save_ms, bytes, restore_ms) = rt.block_on(async {
            let sessions = sandpy::sessions::Sessions::new(
                sandbox,
                sandpy::sessions::SessionLimits::default(),
            );
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
                let snapshot: sandpy::sessions::SessionSnapshot = serde_json::from_str(&text)?;
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

    /// Private memory per live instance (on-demand allocator: the pool keeps idle
    /// slots' pages warm, which would blur the figure).
    pub(crate) fn memory(&self) -> anyhow::Result<()> {
        let rt = &self.rt;
        let live = 40;
        let config = sandpy::Config {
            pooled_instances: None,
            max_concurrent_runs: Some(live),
            ..crate::config()
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

/// How many `print('hello')` runs follow each heavy run in `Bench::hello`.
const AFTER_HEAVY: usize = 10;

/// The pause between the hello part's runs "apart".
const RUNS_APART: Duration = Duration::from_millis(3);

/// A fresh run that imports the built-in HTTP libraries before its first output.
const HTTP_IMPORT: &str = "import requests, httpx\nprint('hello')";

/// Runs of one allocator in a row in the hello part's latencies.
const LATENCY_BLOCK: usize = 25;

/// Fresh-instance runs per second with `2 * cores` tasks in flight.
pub(crate) fn hello_throughput(
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
