//! Whole processes: `sandpy run` against native Python's start, the CPU-bound set, and
//! an eval batch through `sandpy call`.

use crate::measure::{median, peak_rss, whole_process_ms};
use crate::programs::{timed, CPU_SET};
use crate::Bench;
use anyhow::{bail, Context};
use sandpy::{Limits, Status};
use std::process::Command;
use std::time::{Duration, Instant};

impl Bench {
    /// Whole-process latency, warm cache, against native python3 start-up: `sandpy run`
    /// loading the runtime itself (`--cold`), and the same command handing the run to the
    /// warm runner that is up for its settings.
    pub(crate) fn process(&self) -> anyhow::Result<()> {
        let args = &self.args;
        let exe = self.sandpy_bin.to_string_lossy();
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
    pub(crate) fn cpu(&self) -> anyhow::Result<()> {
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
                let out = Command::new(&self.sandpy_bin)
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

    /// Eval batch: the real `sandpy call --args-file` over 10,000 inputs, beside fresh
    /// `print('hello')` runs/s of this build measured in the same run (before and after the
    /// batches, so that drift in the machine's load shows), then where a call's time goes
    /// beyond a fresh run.
    pub(crate) fn eval(&self) -> anyhow::Result<()> {
        let fresh_before =
            crate::in_process::hello_throughput(&self.rt, &self.sandbox, self.cores, 4000);
        let (workers, threads) = eval_batch(&self.sandpy_bin, self.cores)?;
        let fresh_after =
            crate::in_process::hello_throughput(&self.rt, &self.sandbox, self.cores, 4000);
        let fresh = (fresh_before + fresh_after) / 2.0;
        println!(
            "  fresh print('hello') in process, {} cores busy: {fresh_before:.0} runs/s before the \
             batches, {fresh_after:.0} after; batch / fresh: workers {:.2}x, threads {:.2}x (goal >= 0.9x)",
            self.cores,
            workers / fresh,
            threads / fresh
        );
        self.eval_breakdown()
    }

    /// One call at a time in process, p50 of each step from a fresh `print('hello')` to
    /// the batch's call: what each adds.
    fn eval_breakdown(&self) -> anyhow::Result<()> {
        let (rt, sandbox) = (&self.rt, &self.sandbox);
        let strict = sandpy::RunOptions {
            policy: Some(sandpy::Policy::strict()),
            ..sandpy::RunOptions::default()
        };
        let plain = sandpy::RunOptions::default();
        let arguments = serde_json::json!(["answer 17", "answer 17"]);
        // What a batch line runs: the scorer checked and compiled once for the batch.
        let module = rt.block_on(sandbox.compile_module(SCORER, &strict));
        if !module.is_compiled() {
            bail!("the scorer did not compile under strict");
        }
        let steps: [(&str, &str, Option<&str>, &sandpy::RunOptions); 6] = [
            ("fresh run print('hello')", "print('hello')", None, &plain),
            (
                "call `def f(*a): return 1`",
                "def f(*a):\n    return 1\n",
                Some("f"),
                &plain,
            ),
            ("call the scorer", SCORER, Some("score"), &plain),
            (
                "the scorer under --policy strict",
                SCORER,
                Some("score"),
                &strict,
            ),
            (
                "the scorer compiled once, under strict",
                SCORER,
                Some(COMPILED),
                &strict,
            ),
            (
                "run print('hello') under strict",
                "print('hello')",
                None,
                &strict,
            ),
        ];
        let runs = self.args.runs.max(1);
        let mut times = steps.map(|_| Vec::with_capacity(runs));
        // In alternating blocks, so that the machine's drift falls on every step alike
        // while most runs follow one of their own kind (the instance made ahead after a
        // run has that run's limits: strict's are not the default ones).
        while times[0].len() < runs {
            let block = BREAKDOWN_BLOCK.min(runs - times[0].len());
            for (i, (what, code, function, options)) in steps.iter().enumerate() {
                for _ in 0..block {
                    let started = Instant::now();
                    let e = match function {
                        None => rt.block_on(sandbox.run_with(code, options)),
                        Some(COMPILED) => rt
                            .block_on(sandbox.call_compiled(&module, "score", &arguments, options)),
                        Some(f) => rt.block_on(sandbox.call_function(code, f, &arguments, options)),
                    };
                    times[i].push(started.elapsed().as_secs_f64() * 1e3);
                    if e.status != Status::Ok {
                        bail!("{what} failed: {e:?}");
                    }
                }
            }
        }
        println!("  one call at a time in process, p50 (n={runs}):");
        let base = median(&mut times[0]);
        for ((what, ..), t) in steps.iter().zip(&mut times) {
            let t = median(t);
            println!("    {what:<40} {t:.3} ms (+{:.3} ms)", t - base);
        }
        Ok(())
    }
}

/// The breakdown's step that calls the scorer compiled once (as a batch line does).
const COMPILED: &str = "<compiled score>";

/// Runs of one step in a row in the eval part's breakdown.
const BREAKDOWN_BLOCK: usize = 25;

/// The eval batch's scoring function.
const SCORER: &str = "import difflib\ndef score(pred, gold):\n    return round(difflib.SequenceMatcher(None, pred, gold).ratio(), 3)\n";

/// A small scoring function over 10,000 JSON lines, one fresh sandbox per line: calls/s
/// of worker processes and of threads.
fn eval_batch(exe: &std::path::Path, cores: usize) -> anyhow::Result<(f64, f64)> {
    let dir = std::env::temp_dir().join(format!("sandpy-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let scorer = dir.join("scorer.py");
    std::fs::write(&scorer, SCORER)?;
    let inputs = dir.join("inputs.jsonl");
    let lines: Vec<String> = (0..10_000)
        .map(|i| format!("[\"answer {i}\", \"answer {}\"]", i % 97))
        .collect();
    std::fs::write(&inputs, lines.join("\n") + "\n")?;
    let (scorer, inputs) = (scorer.display().to_string(), inputs.display().to_string());
    let call = |extra: &[&str]| -> anyhow::Result<f64> {
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
    // Alternately, three times each: worker processes (the default) and threads, with the
    // scorer compiled once per batch (the default) and in every line (as before).
    let per_line = "--compile-per-line";
    let [mut workers, mut threads, mut workers_per_line, mut threads_per_line] =
        [(); 4].map(|_| Vec::new());
    for _ in 0..3 {
        workers.push(call(&[])?);
        threads.push(call(&["--in-process"])?);
        workers_per_line.push(call(&[per_line])?);
        threads_per_line.push(call(&["--in-process", per_line])?);
    }
    std::fs::remove_dir_all(&dir)?;
    let (w, t) = (median(&mut workers), median(&mut threads));
    let (wl, tl) = (median(&mut workers_per_line), median(&mut threads_per_line));
    println!(
        "\neval batch `sandpy call scorer.py score --policy strict --args-file inputs.jsonl` (10,000 lines, {cores} jobs): \
         worker processes {w:.0} calls/s, threads (--in-process) {t:.0} calls/s: {:.2}x",
        w / t
    );
    println!(
        "  the scorer checked and compiled in every line (`--compile-per-line`, as before): \
         workers {wl:.0} calls/s ({:.2}x of that), threads {tl:.0} calls/s ({:.2}x)",
        w / wl,
        t / tl
    );
    Ok((w, t))
}

/// Start the warm runner for the default settings with `sandpy warmup --keep`, which
/// returns once the runner serves runs; it leaves by itself after two idle minutes.
#[cfg(target_os = "linux")]
fn start_warm_runner(sandpy_bin: &str) -> anyhow::Result<()> {
    let out = Command::new(sandpy_bin)
        .args(["warmup", "--keep", "--idle-secs", "120"])
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("cannot run `{sandpy_bin}`"))?;
    if !out.status.success() {
        bail!(
            "`{sandpy_bin} warmup --keep` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
