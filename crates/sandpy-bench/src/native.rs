//! The native tier: confined fresh runs and sessions against the WebAssembly tier's and
//! against unconfined processes.

use crate::measure::{median, percentile, timed_run, whole_process_ms};
use crate::programs::{timed, CPU_SET};
use crate::Bench;
use anyhow::bail;
use sandpy::{Limits, Status};
use std::process::Command;
use std::time::{Duration, Instant};

impl Bench {
    /// The native tier with numpy and pandas pre-imported: a confined fresh run against a
    /// fresh process importing the same packages, runs per second, and the CPU-bound set
    /// against the same interpreter unconfined.
    pub(crate) fn native(&self) -> anyhow::Result<()> {
        let Some(venv) = &self.args.native_venv else {
            println!(
                "\nnative tier: skipped (pass --native-venv DIR, made by `sandpy build --native`)"
            );
            return Ok(());
        };
        let (rt, args, cores) = (&self.rt, &self.args, self.cores);
        // The tier as configured (the next run's process made ahead), and its baseline in
        // the same run: every run in a process cloned once its code came.
        let tier = |fresh_only: bool| {
            sandpy::Sandbox::new(sandpy::Config {
                native: Some(sandpy::native::NativeConfig {
                    venv: Some(venv.clone()),
                    preimport: vec!["numpy".into(), "pandas".into()],
                    fresh_only,
                    ..Default::default()
                }),
                ..crate::config()
            })
        };
        let (sandbox, fresh_only) = (tier(false)?, tier(true)?);
        let options = sandpy::RunOptions {
            tier: sandpy::Tier::Native,
            ..sandpy::RunOptions::default()
        };
        let python = venv.join("bin").join("python");
        let python = python.to_string_lossy();
        for sandbox in [&sandbox, &fresh_only] {
            timed_run(rt, sandbox, "print('warm')", &options)?; // starts the zygote
        }
        const PANDAS_SUM: &str = "import pandas as pd\nprint(pd.Series(range(1000)).sum())";
        // Per tier: blocks of runs back to back (a run's process made ahead while the
        // last one ran), the two alternating block by block.
        let mut times = [(Vec::new(), Vec::new()), (Vec::new(), Vec::new())];
        let runs = args.runs.max(1);
        let block = runs.min(10);
        for _ in 0..runs.div_ceil(block) {
            for (which, sandbox) in [&sandbox, &fresh_only].into_iter().enumerate() {
                let (hello, pandas) = &mut times[which];
                for _ in 0..block {
                    hello.push(timed_run(rt, sandbox, "print('hello')", &options)?);
                    pandas.push(timed_run(rt, sandbox, PANDAS_SUM, &options)?);
                }
            }
        }
        // Runs spaced out, as a user's runs come (seconds apart): the next run's process
        // has been made by the time its code comes. Back to back (above), each run waits
        // for the process the zygote makes as the last one answered.
        let mut spaced = [(Vec::new(), Vec::new()), (Vec::new(), Vec::new())];
        for _ in 0..runs.min(50) {
            for (which, sandbox) in [&sandbox, &fresh_only].into_iter().enumerate() {
                let (hello, pandas) = &mut spaced[which];
                std::thread::sleep(SPACING);
                hello.push(timed_run(rt, sandbox, "print('hello')", &options)?);
                std::thread::sleep(SPACING);
                pandas.push(timed_run(rt, sandbox, PANDAS_SUM, &options)?);
            }
        }
        let [(mut hello_s, mut pandas_s), (mut base_hello_s, mut base_pandas_s)] = spaced;
        let [hello_s, pandas_s, base_hello_s, base_pandas_s] = [
            median(&mut hello_s),
            median(&mut pandas_s),
            median(&mut base_hello_s),
            median(&mut base_pandas_s),
        ];
        let mut fresh = Vec::new();
        for _ in 0..5 {
            let code = format!("import numpy, pandas\n{PANDAS_SUM}");
            fresh.push(whole_process_ms(&[&python, "-c", &code])?);
        }
        let [(mut hello, mut pandas), (mut base_hello, mut base_pandas)] = times;
        for sorted in [&mut hello, &mut pandas, &mut base_hello, &mut base_pandas] {
            sorted.sort_by(f64::total_cmp);
        }
        let fresh = median(&mut fresh);
        let p50 = percentile(&pandas, 0.5);
        let (hello_p50, base_hello_p50) = (percentile(&hello, 0.5), percentile(&base_hello, 0.5));
        let base_p50 = percentile(&base_pandas, 0.5);
        println!(
            "\nnative tier (numpy and pandas pre-imported, confined fork per run, made ahead):\n  \
             print('hello') p50 {hello_p50:.2} ms  p99 {:.2} ms;  pandas sum p50 {p50:.2} ms  p99 {:.2} ms (n={})\n  \
             baseline, a fork cloned per run once its code came: print('hello') p50 {base_hello_p50:.2} ms, \
             pandas sum p50 {base_p50:.2} ms; made ahead / baseline: {:.2}x, {:.2}x\n  \
             runs {} ms apart: print('hello') p50 {hello_s:.2} ms, pandas sum p50 {pandas_s:.2} ms; \
             baseline {base_hello_s:.2} ms, {base_pandas_s:.2} ms ({:.2}x, {:.2}x; n={})\n  \
             a fresh `python -c 'import numpy, pandas; ...'` process {fresh:.1} ms: the confined run takes {:.3}x of it",
            percentile(&hello, 0.99),
            percentile(&pandas, 0.99),
            pandas.len(),
            hello_p50 / base_hello_p50,
            p50 / base_p50,
            SPACING.as_millis(),
            hello_s / base_hello_s,
            pandas_s / base_pandas_s,
            runs.min(50),
            p50 / fresh,
        );
        for (label, sandbox) in [("made ahead", &sandbox), ("baseline", &fresh_only)] {
            native_sessions(rt, sandbox, &options, label)?;
        }
        let total = 600;
        for (label, sandbox) in [("made ahead", &sandbox), ("baseline", &fresh_only)] {
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
                "  {label}: {:.0} pandas-sum runs/s with {cores} cores busy (n={total})",
                total as f64 / started.elapsed().as_secs_f64()
            );
        }
        drop(fresh_only);
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
}

/// The pause before each spaced run: longer than the zygote takes to make and warm up
/// the next process on a busy machine.
const SPACING: Duration = Duration::from_millis(60);

/// Sessions of ten small cells on the native tier and on the WebAssembly tier, alternated:
/// the first cell (which starts the session's process or instance) and the later ones.
fn native_sessions(
    rt: &tokio::runtime::Runtime,
    sandbox: &sandpy::Sandbox,
    native: &sandpy::RunOptions,
    label: &str,
) -> anyhow::Result<()> {
    let cells: Vec<String> = (0..10)
        .map(|i| {
            format!(
                "v{i} = {i} * 2\ntotal = sum(v for k, v in globals().items() if k.startswith('v'))"
            )
        })
        .collect();
    let wasm = sandpy::RunOptions::default();
    let sessions =
        sandpy::sessions::Sessions::new(sandbox, sandpy::sessions::SessionLimits::default());
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
        "  {label}: session cell p50 {native_cell:.2} ms against the WebAssembly tier's {wasm_cell:.2} ms \
         ({:.2}x); a session's first cell (its process or instance made) {:.2} ms against {:.2} ms \
         (20 sessions of 10 cells each, alternating)",
        native_cell / wasm_cell,
        median(&mut native_first),
        median(&mut wasm_first),
    );
    Ok(())
}
