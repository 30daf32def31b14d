//! `sandpy call`: call one function of a Python file with JSON arguments, once or for
//! every line of a JSON Lines file (one fresh sandbox per line, in parallel, results in
//! input order).
//!
//! A batch runs in worker processes (`call/workers.rs`: guest code without interruption
//! checks, a call past its time ends its worker), `--jobs` at a time; with
//! `--in-process`, or for a program read from stdin, on this process's runtime threads
//! (code with checks). Why both: docs/dev/performance.md, "Threads or worker processes".

mod lines;
mod workers;

use crate::common::{self, outln, Program};
use crate::exit::Outcome;
use anyhow::{bail, Context};
use lines::{line_error, line_result, next_line, parse_arguments, parse_line, InOrder};
use sandpy::{Execution, RunOptions, Status};
use serde_json::Value;

use std::io::BufRead;
use std::path::PathBuf;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

/// How many lines each job holds at once: the one it runs and the next, ready, so that a
/// job never waits for this process between lines. A worker process is sent its next line
/// while it runs one (it waits in its stdin); threads keep as many lines waiting in the
/// sandbox's queue as run (a batch in ~0.9x the time of one line per job at a time in both
/// modes: docs/dev/performance.md, "Eval batches against fresh runs").
const LINES_AHEAD: usize = 2;

#[derive(clap::Args)]
pub(super) struct Args {
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
    /// Check and compile the program in every line of --args-file instead of once per
    /// batch: the way before, for `sandpy bench`'s comparison.
    #[arg(long, hide = true)]
    compile_per_line: bool,
    /// Print the whole execution as JSON (single call).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    warm: common::WarmArgs,
    #[command(flatten)]
    limits: common::LimitArgs,
    #[command(flatten)]
    files: common::FileArgs,
    #[command(flatten)]
    settings: common::ConfigArgs,
}

pub(super) fn run(args: Args) -> anyhow::Result<Outcome> {
    let program = Program::read(Some(&args.file), None)?;
    let resolved = args.settings.resolve()?;
    let options = common::run_options(&resolved, &args.settings, &args.limits, &args.files)?;
    if args.worker {
        let Ok((code, filename)) = program.into_text() else {
            bail!("a worker needs a program that is UTF-8 text");
        };
        let current = Arc::new(AtomicUsize::new(0));
        let sandbox = workers::sandbox(&resolved, workers::overrun_answer(current.clone()))?;
        let options = RunOptions {
            filename: Some(filename),
            ..options
        };
        let once = !args.compile_per_line;
        workers::serve(&sandbox, &code, &args.function, &options, &current, once)?;
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
                {
                    let call = crate::warm::Call {
                        function: args.function.clone(),
                        arguments: arguments.clone(),
                    };
                    let usage = args.warm.usage(true);
                    let served = crate::warm::served(
                        usage,
                        &resolved,
                        &args.settings.to_flags(),
                        &code,
                        Some(call),
                        &options,
                    );
                    if let Some(execution) = served {
                        break 'call execution;
                    }
                }
                let overrun = common::print_and_exit(args.json, false);
                let sandbox = common::one_shot_sandbox(&resolved, Some(overrun))?;
                let rt = common::one_shot_runtime()?;
                let execution =
                    rt.block_on(sandbox.call_function(&code, &args.function, &arguments, &options));
                common::release_at_exit(sandbox, rt);
                execution
            }
        };
        common::print_execution(&execution, args.json)?;
        if !args.json {
            if let Some(value) = &execution.return_value {
                outln!("{value}")?;
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
    if args.warm.usage(true) == crate::warm::Usage::Start {
        // Not an error: `SANDPY_WARM` may be set for every command of a shell.
        eprintln!(
            "sandpy: --warm (or SANDPY_WARM) is for a single call; an --args-file batch \
             loads the runtime once for its own worker processes"
        );
    }
    let reader: Box<dyn BufRead + Send> = if path.as_os_str() == "-" {
        Box::new(std::io::BufReader::new(std::io::stdin()))
    } else {
        // As every file a user names: no other user controls the way to it.
        let real = sandpy::files::user_path(path)
            .with_context(|| format!("cannot open `{}`", path.display()))?;
        Box::new(std::io::BufReader::new(
            std::fs::File::open(real)
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
        workers::sandbox(&resolved, common::print_and_exit(false, false))?;
        let all_ok = workers::batch(&workers::worker_command(), reader, jobs)?;
        return Ok(if all_ok {
            Outcome::Success
        } else {
            Outcome::Run(Status::Error)
        });
    }
    // `jobs` runs execute at once, whatever the config's `max_concurrent_runs`, and the
    // lines `batch` keeps ready beside them may wait for a slot.
    let config = resolved.sandbox_config(sandpy::Config::default());
    let config = sandpy::Config {
        max_concurrent_runs: Some(jobs),
        max_queued_runs: config.max_queued_runs.max(jobs * (LINES_AHEAD - 1)),
        ..config
    };
    let batch = batch(
        common::sandbox_with(config)?,
        Arc::new(program),
        Arc::from(args.function.as_str()),
        Arc::new(options),
        reader,
        jobs,
        !args.compile_per_line,
    );
    let all_ok = common::tokio_runtime()?.block_on(batch)?;
    Ok(if all_ok {
        Outcome::Success
    } else {
        Outcome::Run(Status::Error)
    })
}

/// Run every line in this process, `jobs` at a time (each a task on the runtime's
/// threads), printing results in input order as they come. Lines beside them wait in the
/// sandbox's queue ([`LINES_AHEAD`] per job in all), so that a slot is taken again as soon
/// as a run leaves it. The program is checked and
/// compiled once for all lines ([`sandpy::Sandbox::compile_module`]) unless not
/// `compile_once`; one that cannot run is every line's result.
async fn batch(
    sandbox: sandpy::Sandbox,
    program: Arc<Result<String, Execution>>,
    function: Arc<str>,
    options: Arc<RunOptions>,
    mut reader: Box<dyn BufRead + Send>,
    jobs: usize,
    compile_once: bool,
) -> anyhow::Result<bool> {
    let program = Arc::new(match &*program {
        Ok(code) if compile_once => Ok(sandbox.compile_module(code, &options).await),
        Ok(code) => Ok(sandpy::CompiledModule::uncompiled(code)),
        Err(refused) => Err(refused.clone()),
    });
    let slots = Arc::new(tokio::sync::Semaphore::new(jobs * LINES_AHEAD));
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
                (Ok(module), Ok(arguments)) => loop {
                    let execution = sandbox
                        .call_compiled(module, &function, &arguments, &options)
                        .await;
                    // Busy only when a run ahead of it in the queue took its whole time
                    // limit and more: this batch's lines are the sandbox's only runs, and
                    // its queue holds them all, so the line waits for the next slot.
                    if execution.status != Status::Busy {
                        break line_result(number, &execution);
                    }
                },
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
