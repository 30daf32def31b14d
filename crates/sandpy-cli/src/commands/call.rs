//! `sandpy call`: call one function of a Python file with JSON arguments, once or for
//! every line of a JSON Lines file (one fresh sandbox per line, in parallel, results in
//! input order).

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
    /// Calls in flight at once for --args-file [default: number of cores].
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
    let mut out = json!({"line": line, "status": execution.status, "duration_ms": execution.duration_ms});
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
        limits: args.limits.apply(&resolved.limits),
        filename: Some(filename),
        policy: resolved.policy.clone(),
        allowed_tools: args.settings.allowed(),
        files: args.files.inputs()?,
        mounts: args.files.mounts(&resolved.config.mounts)?,
        ..RunOptions::default()
    };
    let sandbox = resolved.sandbox()?;
    let rt = super::tokio_runtime()?;
    let Some(path) = &args.args_file else {
        let arguments = parse_arguments(args.args.as_deref().unwrap_or("[]")).map_err(anyhow::Error::msg).context("--args")?;
        let execution = rt.block_on(sandbox.call_function(&code, &args.function, &arguments, &options));
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
    let reader: Box<dyn BufRead> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::io::BufReader::new(std::fs::File::open(path).with_context(|| format!("cannot open `{}`", path.display()))?))
    };
    let jobs = args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2)).max(1);
    let all_ok = rt.block_on(batch(sandbox, Arc::new(code), Arc::from(args.function.as_str()), options, reader, jobs))?;
    Ok(if all_ok { Outcome::Success } else { Outcome::Run(Status::Error) })
}

/// Run every line, `jobs` at a time, printing results in input order as they complete.
async fn batch(
    sandbox: sandpy::Sandbox,
    code: Arc<String>,
    function: Arc<str>,
    options: RunOptions,
    reader: Box<dyn BufRead>,
    jobs: usize,
) -> anyhow::Result<bool> {
    let options = Arc::new(options);
    let mut tasks = tokio::task::JoinSet::new();
    let mut done: BTreeMap<usize, Value> = BTreeMap::new();
    let mut next_to_print = 1;
    let mut all_ok = true;
    let mut stdout = std::io::stdout().lock();
    let mut flush = |done: &mut BTreeMap<usize, Value>, next: &mut usize, all_ok: &mut bool| -> std::io::Result<()> {
        while let Some(value) = done.remove(next) {
            *all_ok &= value["status"] == "ok";
            writeln!(stdout, "{value}")?;
            *next += 1;
        }
        Ok(())
    };
    for (index, line) in reader.lines().enumerate() {
        let number = index + 1;
        let line = line.with_context(|| format!("cannot read line {number}"))?;
        if tasks.len() >= jobs {
            if let Some(finished) = tasks.join_next().await {
                let (n, value) = finished?;
                done.insert(n, value);
            }
        }
        match parse_arguments(&line) {
            Err(message) => {
                let invalid = json!({"line": number, "status": "invalid_input", "error": {"type": "InvalidInput", "message": message}});
                done.insert(number, invalid);
            }
            Ok(arguments) => {
                let (sandbox, code, function, options) = (sandbox.clone(), code.clone(), function.clone(), options.clone());
                tasks.spawn(async move {
                    let execution = sandbox.call_function(&code, &function, &arguments, &options).await;
                    (number, line_result(number, &execution))
                });
            }
        }
        flush(&mut done, &mut next_to_print, &mut all_ok)?;
    }
    while let Some(finished) = tasks.join_next().await {
        let (n, value) = finished?;
        done.insert(n, value);
        flush(&mut done, &mut next_to_print, &mut all_ok)?;
    }
    Ok(all_ok)
}
