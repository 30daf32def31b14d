//! `sandpy call`: call one function of a Python file with JSON arguments, once or for
//! every line of a JSON Lines file (one fresh sandbox per line, in parallel, results in
//! input order).
//!
//! A batch runs in worker processes (this same binary with `--jobs 1`), each making one
//! call at a time, rather than in threads of one process. That was chosen when every run
//! took copy-on-write faults on the runtime's snapshot, which made the kernel interrupt
//! every other core running the same process (two processes then did over twice the
//! calls per second of one process with two threads). The vendored wasmtime fix removed
//! those faults and threads now scale too; the two have not been compared since.

use crate::exit::Outcome;
use anyhow::{bail, Context};
use sandpy::{Execution, RunOptions, Status};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(clap::Args)]
pub struct Args {
    /// Python file that defines the function.
    file: PathBuf,
    /// Function to call.
    function: String,
    /// Arguments as JSON: a list (positional) or an object (keywords).
    #[arg(long, value_name = "JSON", conflicts_with = "args_file")]
    args: Option<String>,
    /// JSON Lines file of arguments, one call per line (`-` for stdin); prints one JSON
    /// result per line, in input order.
    #[arg(long, value_name = "FILE")]
    args_file: Option<PathBuf>,
    /// Calls in flight at once for --args-file, each in its own worker process
    /// [default: number of cores].
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// Print the whole execution as JSON (single call).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    limits: super::run::LimitArgs,
    #[command(flatten)]
    files: super::files::FileArgs,
    #[command(flatten)]
    settings: super::ConfigArgs,
}

/// One batch result line.
fn line_result(line: usize, execution: &Execution) -> Value {
    let mut out =
        json!({"line": line, "status": execution.status, "duration_ms": execution.duration_ms});
    match &execution.error {
        None => out["result"] = execution.return_value.clone().unwrap_or(Value::Null),
        Some(error) => out["error"] = json!({"type": error.kind, "message": error.message}),
    }
    if !execution.files.is_empty() {
        out["files"] = serde_json::to_value(&execution.files).unwrap_or(Value::Null);
    }
    out
}

fn parse_arguments(text: &str) -> Result<Value, String> {
    match serde_json::from_str::<Value>(text) {
        Ok(value @ (Value::Array(_) | Value::Object(_))) => Ok(value),
        Ok(_) => Err("arguments must be a JSON list (positional) or object (keywords)".into()),
        Err(e) => Err(format!("not valid JSON: {e}")),
    }
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let (code, filename) = super::run::read_code(Some(&args.file), None)?;
    let resolved = args.settings.resolve()?;
    let options = RunOptions {
        limit_overrides: args.limits.overrides(),
        filename: Some(filename),
        allowed_tools: args.settings.allowed(),
        files: args.files.inputs()?,
        mounts: args.files.mounts(&resolved.settings.mounts)?,
        ..resolved.run_options()
    };
    let sandbox = super::resolved_sandbox(&resolved)?;
    let rt = super::tokio_runtime()?;
    let Some(path) = &args.args_file else {
        let arguments = parse_arguments(args.args.as_deref().unwrap_or("[]"))
            .map_err(anyhow::Error::msg)
            .context("--args")?;
        let execution =
            rt.block_on(sandbox.call_function(&code, &args.function, &arguments, &options));
        if args.json {
            println!("{}", serde_json::to_string(&execution)?);
        } else {
            super::run::print_human(&execution)?;
            if let Some(value) = &execution.return_value {
                println!("{value}");
            }
        }
        args.files.save_outputs(&execution)?;
        return Ok(Outcome::Run(execution.status));
    };
    if args.json {
        bail!("--json is for a single call; --args-file already prints JSON Lines");
    }
    if args.files.output_dir.is_some() {
        bail!("--output-dir is for a single call; with --args-file each line's files are in its result");
    }
    let reader: Box<dyn BufRead + Send> = if path.as_os_str() == "-" {
        Box::new(std::io::BufReader::new(std::io::stdin()))
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(path)
                .with_context(|| format!("cannot open `{}`", path.display()))?,
        ))
    };
    let jobs = args
        .jobs
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
        })
        .max(1);
    // Temporary, for measuring threads against worker processes (issue 11, point 7).
    let all_ok = if jobs > 1 && std::env::var_os("SANDPY_CALL_WORKERS").is_some() {
        drop(sandbox);
        batch_in_workers(reader, jobs)?
    } else {
        let batch = batch(
            sandbox,
            Arc::new(code),
            Arc::from(args.function.as_str()),
            Arc::new(options),
            reader,
            jobs,
        );
        rt.block_on(batch)?
    };
    Ok(if all_ok {
        Outcome::Success
    } else {
        Outcome::Run(Status::Error)
    })
}

/// Prints results in input order as they arrive; tracks whether all were `ok`.
struct InOrder {
    done: BTreeMap<usize, Value>,
    next: usize,
    all_ok: bool,
}

impl InOrder {
    fn new() -> InOrder {
        InOrder {
            done: BTreeMap::new(),
            next: 1,
            all_ok: true,
        }
    }

    fn add(&mut self, number: usize, value: Value) -> std::io::Result<()> {
        self.done.insert(number, value);
        let mut stdout = std::io::stdout().lock();
        while let Some(value) = self.done.remove(&self.next) {
            self.all_ok &= value["status"] == "ok";
            writeln!(stdout, "{value}")?;
            self.next += 1;
        }
        stdout.flush()
    }

    /// Report every line up to `total` that got no answer as `internal_error`.
    fn finish(&mut self, total: usize, why: &str) -> std::io::Result<()> {
        while self.next <= total {
            let number = self.next;
            let lost = json!({"line": number, "status": "internal_error",
                "error": {"type": "InternalError", "message": why}});
            self.add(number, lost)?;
        }
        Ok(())
    }
}

/// The arguments of this command for a worker: the same, reading lines from stdin one
/// call at a time.
fn worker_arguments() -> Vec<std::ffi::OsString> {
    let mut out = Vec::new();
    let mut skip_value = false;
    for arg in std::env::args_os().skip(1) {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        let text = arg.to_string_lossy();
        if text == "--args-file" || text == "--jobs" {
            skip_value = true;
            continue;
        }
        if text.starts_with("--args-file=") || text.starts_with("--jobs=") {
            continue;
        }
        out.push(arg);
    }
    out.extend(["--args-file", "-", "--jobs", "1"].map(Into::into));
    out
}

/// Run the batch in `workers` processes, lines dealt round-robin, results in input order.
fn batch_in_workers(reader: Box<dyn BufRead + Send>, workers: usize) -> anyhow::Result<bool> {
    use std::process::{Command, Stdio};
    let exe = std::env::current_exe()
        .context("cannot find the sandpy executable for worker processes")?;
    let mut children = Vec::with_capacity(workers);
    for _ in 0..workers {
        let child = Command::new(&exe)
            .args(worker_arguments())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start a worker process")?;
        children.push(child);
    }
    let (sender, results) = std::sync::mpsc::channel::<(usize, Value)>();
    let mut readers = Vec::with_capacity(workers);
    for (worker, child) in children.iter_mut().enumerate() {
        let stdout = child.stdout.take().context("worker stdout")?;
        let sender = sender.clone();
        readers.push(std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let Ok(mut value) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                let Some(local) = value["line"]
                    .as_u64()
                    .and_then(|n| (n as usize).checked_sub(1))
                else {
                    continue;
                };
                let number = local * workers + worker + 1;
                value["line"] = json!(number);
                if sender.send((number, value)).is_err() {
                    return;
                }
            }
        }));
    }
    drop(sender);
    let mut stdins: Vec<_> = children
        .iter_mut()
        .map(|c| c.stdin.take().map(std::io::BufWriter::new))
        .collect();
    let writer = std::thread::spawn(move || -> anyhow::Result<usize> {
        let mut total = 0;
        for (index, line) in reader.lines().enumerate() {
            let line = line.with_context(|| format!("cannot read line {}", index + 1))?;
            if let Some(stdin) = &mut stdins[index % workers] {
                // A worker that died is reported below, line by line.
                if writeln!(stdin, "{line}").is_err() {
                    stdins[index % workers] = None;
                }
            }
            total = index + 1;
        }
        Ok(total)
    });
    let mut in_order = InOrder::new();
    for (number, value) in results {
        in_order.add(number, value)?;
    }
    let total = writer
        .join()
        .map_err(|_| anyhow::anyhow!("the input thread panicked"))??;
    for reader in readers {
        let _ = reader.join();
    }
    for mut child in children {
        let _ = child.wait();
    }
    in_order.finish(
        total,
        "the worker process for this line exited before answering",
    )?;
    Ok(in_order.all_ok)
}

/// Run every line in this process, `jobs` at a time (each a task on the runtime's
/// threads), printing results in input order as they come.
async fn batch(
    sandbox: sandpy::Sandbox,
    code: Arc<String>,
    function: Arc<str>,
    options: Arc<RunOptions>,
    reader: Box<dyn BufRead + Send>,
    jobs: usize,
) -> anyhow::Result<bool> {
    let slots = Arc::new(tokio::sync::Semaphore::new(jobs));
    let (sender, mut results) = tokio::sync::mpsc::unbounded_channel::<(usize, Value)>();
    let mut in_order = InOrder::new();
    let mut total = 0;
    for (index, line) in reader.lines().enumerate() {
        let number = index + 1;
        total = number;
        let line = line.with_context(|| format!("cannot read line {number}"))?;
        let slot = slots.clone().acquire_owned().await?;
        let (sandbox, code, function, options, sender) = (
            sandbox.clone(),
            code.clone(),
            function.clone(),
            options.clone(),
            sender.clone(),
        );
        tokio::spawn(async move {
            let value = match parse_arguments(&line) {
                Err(message) => {
                    json!({"line": number, "status": "invalid_input", "error": {"type": "InvalidInput", "message": message}})
                }
                Ok(arguments) => {
                    let execution = sandbox
                        .call_function(&code, &function, &arguments, &options)
                        .await;
                    line_result(number, &execution)
                }
            };
            drop(slot);
            let _ = sender.send((number, value));
        });
        while let Ok((number, value)) = results.try_recv() {
            in_order.add(number, value)?;
        }
    }
    drop(sender);
    while let Some((number, value)) = results.recv().await {
        in_order.add(number, value)?;
    }
    in_order.finish(total, "the run of this line ended without an answer")?;
    Ok(in_order.all_ok)
}
