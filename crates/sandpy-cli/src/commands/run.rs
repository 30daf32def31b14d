//! `sandpy run`: run a program and print what it printed, or the whole `Execution` as JSON.

use crate::exit::Outcome;
use anyhow::{bail, Context};
use sandpy::{LimitOverrides, Limits, RunOptions};
use std::io::{Read, Write};
use std::path::PathBuf;

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
    #[command(flatten)]
    files: super::files::FileArgs,
    #[command(flatten)]
    settings: super::ConfigArgs,
}

/// Limit flags shared by the commands that run code; unset flags keep the config's
/// defaults (30 s, 256 MiB, 1 MiB of output unless the config says otherwise).
#[derive(clap::Args, Clone)]
pub struct LimitArgs {
    /// Wall-clock limit in milliseconds [default: 30000].
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout_ms: Option<u64>,
    /// Linear-memory limit in MiB [default: 256].
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=Limits::MAX_MEMORY_MB))]
    pub memory_mb: Option<u64>,
    /// Cap on stdout + stderr in bytes [default: 1048576].
    #[arg(long, value_name = "BYTES")]
    pub max_output_bytes: Option<usize>,
    /// Disk quota of the scratch folder /tmp, input files included, in MiB [default: 64].
    #[arg(long, value_name = "MIB")]
    pub disk_mb: Option<u64>,
    /// Disk quota of /output (what a run can return) in MiB [default: 8].
    #[arg(long, value_name = "MIB")]
    pub output_files_mb: Option<u64>,
}

impl LimitArgs {
    /// The flags that were given, as limits to put over the config's and the policy's.
    pub fn overrides(&self) -> LimitOverrides {
        LimitOverrides {
            timeout_ms: self.timeout_ms,
            memory_mb: self.memory_mb,
            max_output_bytes: self.max_output_bytes,
            disk_mb: self.disk_mb,
            output_files_mb: self.output_files_mb,
            ..LimitOverrides::default()
        }
    }
}

pub fn read_code(
    file: Option<&PathBuf>,
    code: Option<&String>,
) -> anyhow::Result<(String, String)> {
    if let Some(code) = code {
        return Ok((code.clone(), "<string>".into()));
    }
    let Some(file) = file else {
        bail!("give a FILE, `-` or -c CODE")
    };
    let from_stdin = file.as_os_str() == "-";
    let bytes = if from_stdin {
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .context("cannot read the program from stdin")?;
        bytes
    } else {
        std::fs::read(file).with_context(|| format!("cannot read `{}`", file.display()))?
    };
    let code = String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "`{}` is not UTF-8 text (invalid byte at offset {})",
            file.display(),
            e.utf8_error().valid_up_to()
        )
    })?;
    let name = if from_stdin {
        "<stdin>".to_string()
    } else {
        file.display().to_string()
    };
    Ok((code, name))
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let (code, filename) = if args.list_modules {
        (String::new(), String::new())
    } else {
        read_code(args.file.as_ref(), args.code.as_ref())?
    };
    let stdin = match &args.input {
        Some(path) => Some(
            std::fs::read(path)
                .with_context(|| format!("cannot read input `{}`", path.display()))?,
        ),
        None => None,
    };
    let (config, resolved) = args.settings.resolve_with_servers()?;
    let files = args.files.inputs()?;
    let mounts = args.files.mounts(&resolved.settings.mounts)?;
    let sandbox = super::resolved_sandbox(&resolved)?;
    let rt = super::tokio_runtime()?;
    if args.list_modules {
        let report = rt.block_on(sandbox.module_report())?;
        if args.json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            print_module_report(&report);
        }
        return Ok(Outcome::Success);
    }
    let execution = rt.block_on(async {
        let hub = super::start_hub(&config).await;
        let options = RunOptions {
            limit_overrides: args.limits.overrides(),
            stdin,
            filename: Some(filename),
            tools: hub.as_ref().map(|h| h.for_execution("cli".into(), None)),
            allowed_tools: args.settings.allowed(),
            files,
            mounts,
            ..resolved.run_options()
        };
        let execution = sandbox.run_with(&code, &options).await;
        if let Some(hub) = hub {
            hub.shutdown().await;
        }
        execution
    });
    if args.json {
        println!("{}", serde_json::to_string(&execution)?);
    } else {
        print_human(&execution)?;
    }
    args.files.save_outputs(&execution)?;
    Ok(Outcome::Run(execution.status))
}

pub fn print_human(execution: &sandpy::Execution) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(execution.stdout.as_bytes())?;
    stdout.flush()?;
    let mut stderr = std::io::stderr().lock();
    stderr.write_all(execution.stderr.as_bytes())?;
    if let Some(error) = &execution.error {
        if error.traceback.as_deref().is_none_or(str::is_empty) {
            writeln!(stderr, "sandpy: {}: {}", execution.status, error.message)?;
        }
    }
    Ok(())
}

fn print_module_report(report: &sandpy::ModuleReport) {
    let packages = if report.packages.is_empty() {
        "none".to_string()
    } else {
        report.packages.join(", ")
    };
    println!("Third-party packages: {packages}");
    println!(
        "{} stdlib modules available. Absent:",
        report.available.len()
    );
    for (name, reason) in &report.absent {
        println!("  {name:<24} {reason}");
    }
}
