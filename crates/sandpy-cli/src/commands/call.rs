//! `sandpy call`: call one function of a Python file with JSON arguments, once or for
//! every line of a JSON Lines file (one fresh sandbox per line, in parallel, results in
//! input order).
//!
//! A batch runs in worker processes (`workers.rs`: guest code without interruption
//! checks, a call past its time ends its worker), `--jobs` at a time; with
//! `--in-process`, or for a program read from stdin, on this process's runtime threads
//! (code with checks). Why both: docs/performance.md, "Threads or worker processes".

use super::run::Program;
use crate::exit::Outcome;
use anyhow::{bail, Context};
use sandpy::{Execution, RunOptions, Status};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
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
    /// Calls in flight at once for --args-file [default: number of cores].
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// Run the calls of --args-file on threads of this process (guest code with
    /// interruption checks) instead of worker processes (code without them, faster; a
    /// call past its time limit ends its worker).
    #[arg(long, requires = "args_file")]
    in_process: bool,
    /// Be one worker of an --args-file batch (JSON Lines requests on stdin).
    #[arg(long, hide = true, conflicts_with_all = ["args", "args_file"])]
    worker: bool,
    /// Print the whole execution as JSON (single call).
    #[arg(long)]
    json: bool,
    /// Hand a single call to a background runner that keeps the runtime loaded (as
    /// `sandpy run --warm`).
    #[arg(long, env = "SANDPY_WARM", value_parser = clap::builder::FalseyValueParser::new())]
    warm: bool,
    #[command(flatten)]
    limits: super::run::LimitArgs,
    #[command(flatten)]
    files: super::files::FileArgs,
    #[command(flatten)]
    settings: super::ConfigArgs,
}

/// The result line of a line the host answers itself, without a run (a bad line, a lost
/// run): its `status` and an error of that status's type.
pub(super) fn line_error(line: usize, status: Status, message: &str) -> Value {
    json!({"line": line, "status": status, "error": {"type": status.error_type(), "message": message}})
}

/// One batch result line.
pub(super) fn line_result(line: usize, execution: &Execution) -> Value {
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

/// One line of `--args-file` as arguments; a line that is not UTF-8 is that line's error.
pub(super) fn parse_line(bytes: &[u8]) -> Result<Value, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        format!(
            "not UTF-8 text (invalid byte at offset {})",
            e.valid_up_to()
        )
    })?;
    parse_arguments(text)
}

/// The next line of `reader` without its line ending (`None` at the end), as bytes: a
/// line that is not UTF-8 fails alone, the batch goes on.
pub(super) fn next_line(reader: &mut dyn BufRead) -> std::io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    if reader.read_until(b'\n', &mut line)? == 0 {
        return Ok(None);
    }
    if line.last() == Some(&b'\n') {
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
    }
    Ok(Some(line))
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let program = Program::read(Some(&args.file), None)?;
    let resolved = args.settings.resolve()?;
    let options = RunOptions {
        limit_overrides: args.limits.overrides(),
        allowed_tools: args.settings.allowed(),
        files: args.files.inputs()?,
        mounts: args.files.mounts(&resolved.settings.mounts)?,
        ..resolved.run_options()
    };
    if args.worker {
        let Ok((code, filename)) = program.into_text() else {
            bail!("a worker needs a program that is UTF-8 text");
        };
        let current = Arc::new(AtomicUsize::new(0));
        let sandbox =
            super::workers::sandbox(&resolved, super::workers::overrun_answer(current.clone()))?;
        let options = RunOptions {
            filename: Some(filename),
            ..options
        };
        super::workers::serve(&sandbox, &code, &args.function, &options, &current)?;
        return Ok(Outcome::Success);
    }
    let Some(path) = &args.args_file else {
        // The program and its arguments are the run's input: what is wrong with them is
        // the run's result (`invalid_input`), as for a bad line of --args-file.
        let arguments = parse_arguments(args.args.as_deref().unwrap_or("[]"));
        let execution = match (program.into_text(), arguments) {
            (Err(refused), _) => *refused,
            (Ok(_), Err(why)) => Execution::refused(Status::InvalidInput, format!("--args: {why}")),
            (Ok((code, filename)), Ok(arguments)) => 'call: {
                let options = RunOptions {
                    filename: Some(filename),
                    ..options
                };
                #[cfg(target_os = "linux")]
                if args.warm {
                    let call = sandpy::warm::WarmCall {
                        function: args.function.clone(),
                        arguments: arguments.clone(),
                    };
                    let served =
                        super::warm::served(&resolved, &args.settings, &code, Some(call), &options);
                    if let Some(execution) = served {
                        break 'call execution;
                    }
                }
                let overrun = super::print_and_exit(args.json);
                let sandbox = super::one_shot_sandbox(&resolved, Some(overrun))?;
                let rt = super::one_shot_runtime()?;
                let execution =
                    rt.block_on(sandbox.call_function(&code, &args.function, &arguments, &options));
                super::release_at_exit(sandbox, rt);
                execution
            }
        };
        super::run::print_execution(&execution, args.json)?;
        if !args.json {
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
    let (program, options) = match program.into_text() {
        Ok((code, filename)) => {
            let options = RunOptions {
                filename: Some(filename),
                ..options
            };
            (Ok(code), options)
        }
        Err(refused) => (Err(*refused), options),
    };
    // Worker processes need the program from a file they can read again. The native tier
    // already runs each call in a process of its own, forked from one zygote.
    let native = options.tier == sandpy::Tier::Native;
    if program.is_ok() && !args.in_process && !native && args.file.as_os_str() != "-" {
        // Compile the workers' runtime here once, not in every worker at the same time.
        super::workers::sandbox(&resolved, super::print_and_exit(false))?;
        let all_ok = super::workers::batch(&super::workers::worker_command(), reader, jobs)?;
        return Ok(if all_ok {
            Outcome::Success
        } else {
            Outcome::Run(Status::Error)
        });
    }
    let batch = batch(
        super::resolved_sandbox(&resolved)?,
        Arc::new(program),
        Arc::from(args.function.as_str()),
        Arc::new(options),
        reader,
        jobs,
    );
    let all_ok = super::tokio_runtime()?.block_on(batch)?;
    Ok(if all_ok {
        Outcome::Success
    } else {
        Outcome::Run(Status::Error)
    })
}

/// Prints results in input order as they arrive; tracks whether all were `ok`.
pub(super) struct InOrder {
    done: BTreeMap<usize, Value>,
    next: usize,
    pub(super) all_ok: bool,
}

impl InOrder {
    pub(super) fn new() -> InOrder {
        InOrder {
            done: BTreeMap::new(),
            next: 1,
            all_ok: true,
        }
    }

    pub(super) fn add(&mut self, number: usize, value: Value) -> std::io::Result<()> {
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
    pub(super) fn finish(&mut self, total: usize, why: &str) -> std::io::Result<()> {
        while self.next <= total {
            let number = self.next;
            self.add(number, line_error(number, Status::InternalError, why))?;
        }
        Ok(())
    }
}

/// Run every line in this process, `jobs` at a time (each a task on the runtime's
/// threads), printing results in input order as they come. A `program` that cannot run
/// is every line's result.
async fn batch(
    sandbox: sandpy::Sandbox,
    program: Arc<Result<String, Execution>>,
    function: Arc<str>,
    options: Arc<RunOptions>,
    mut reader: Box<dyn BufRead + Send>,
    jobs: usize,
) -> anyhow::Result<bool> {
    let slots = Arc::new(tokio::sync::Semaphore::new(jobs));
    let (sender, mut results) = tokio::sync::mpsc::unbounded_channel::<(usize, Value)>();
    let mut in_order = InOrder::new();
    let mut total = 0;
    while let Some(line) =
        next_line(&mut reader).with_context(|| format!("cannot read line {}", total + 1))?
    {
        let number = total + 1;
        total = number;
        let slot = slots.clone().acquire_owned().await?;
        let (sandbox, program, function, options, sender) = (
            sandbox.clone(),
            program.clone(),
            function.clone(),
            options.clone(),
            sender.clone(),
        );
        tokio::spawn(async move {
            let value = match (&*program, parse_line(&line)) {
                (Err(refused), _) => line_result(number, refused),
                (Ok(_), Err(message)) => line_error(number, Status::InvalidInput, &message),
                (Ok(code), Ok(arguments)) => {
                    let execution = sandbox
                        .call_function(code, &function, &arguments, &options)
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
