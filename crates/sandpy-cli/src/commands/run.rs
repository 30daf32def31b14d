//! `sandpy run`: run a program and print what it printed, or the whole `Execution` as JSON.

use crate::exit::Outcome;
use anyhow::{bail, Context};
use sandpy::{Limits, RunOptions};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// Python file to run; `-` reads the program from stdin.
    #[arg(required_unless_present_any = ["code", "list_modules"], conflicts_with = "code")]
    file: Option<PathBuf>,
    /// Program passed as a string.
    #[arg(short = 'c', long = "code", value_name = "CODE")]
    code: Option<String>,
    /// File whose bytes the program reads as stdin (default: empty stdin).
    #[arg(long, value_name = "FILE")]
    input: Option<PathBuf>,
    /// Print the whole execution as one JSON object.
    #[arg(long)]
    json: bool,
    /// Print which stdlib modules are available and which are absent, and why.
    #[arg(long, conflicts_with_all = ["file", "code"])]
    list_modules: bool,
    #[command(flatten)]
    limits: LimitArgs,
}

/// Limit flags shared by the commands that run code.
#[derive(clap::Args, Clone)]
pub struct LimitArgs {
    /// Wall-clock limit in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout_ms: u64,
    /// Linear-memory limit in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub memory_mb: u64,
    /// Cap on stdout + stderr in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub max_output_bytes: usize,
}

impl LimitArgs {
    pub fn limits(&self) -> Limits {
        Limits {
            timeout: Duration::from_millis(self.timeout_ms),
            memory_bytes: (self.memory_mb as usize) << 20,
            output_bytes: self.max_output_bytes,
            ..Limits::default()
        }
    }
}

fn read_code(args: &Args) -> anyhow::Result<(String, String)> {
    if let Some(code) = &args.code {
        return Ok((code.clone(), "<string>".into()));
    }
    let Some(file) = &args.file else { bail!("give a FILE, `-` or -c CODE") };
    let from_stdin = file.as_os_str() == "-";
    let bytes = if from_stdin {
        let mut bytes = Vec::new();
        std::io::stdin().read_to_end(&mut bytes).context("cannot read the program from stdin")?;
        bytes
    } else {
        std::fs::read(file).with_context(|| format!("cannot read `{}`", file.display()))?
    };
    let code = String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!("`{}` is not UTF-8 text (invalid byte at offset {})", file.display(), e.utf8_error().valid_up_to())
    })?;
    let name = if from_stdin { "<stdin>".to_string() } else { file.display().to_string() };
    Ok((code, name))
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let (code, filename) = if args.list_modules { (String::new(), String::new()) } else { read_code(&args)? };
    let stdin = match &args.input {
        Some(path) => Some(std::fs::read(path).with_context(|| format!("cannot read input `{}`", path.display()))?),
        None => None,
    };
    let sandbox = super::sandbox()?;
    let options = RunOptions { limits: args.limits.limits(), stdin, filename: Some(filename), ..RunOptions::default() };
    let execution = super::tokio_runtime()?.block_on(async {
        if args.list_modules {
            sandbox.module_report().await
        } else {
            sandbox.run_with(&code, &options).await
        }
    });
    if args.json {
        println!("{}", serde_json::to_string(&execution)?);
    } else if args.list_modules {
        print_module_report(&execution)?;
    } else {
        print_human(&execution)?;
    }
    Ok(Outcome::Run(execution.status))
}

fn print_human(execution: &sandpy::Execution) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(execution.stdout.as_bytes())?;
    stdout.flush()?;
    let mut stderr = std::io::stderr().lock();
    stderr.write_all(execution.stderr.as_bytes())?;
    if let Some(error) = &execution.error {
        if error.traceback.is_none() {
            writeln!(stderr, "sandpy: {}: {}", execution.status, error.message)?;
        }
    }
    Ok(())
}

fn print_module_report(execution: &sandpy::Execution) -> anyhow::Result<()> {
    let Some(report) = &execution.return_value else { bail!("the runtime gave no module report: {execution:?}") };
    let available = report["available"].as_array().map(Vec::len).unwrap_or(0);
    println!("{available} stdlib modules available. Absent:");
    if let Some(absent) = report["absent"].as_object() {
        for (name, reason) in absent {
            println!("  {name:<24} {}", reason.as_str().unwrap_or(""));
        }
    }
    Ok(())
}
