//! `sandpy run`: run a program and print what it printed, or the whole `Execution` as JSON.

use crate::exit::Outcome;
use anyhow::{bail, Context};
use sandpy::{Execution, LimitOverrides, Limits, RunOptions, Status};
use std::io::{Read, Write};
use std::path::PathBuf;

#[derive(clap::Args)]
pub(super) struct Args {
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
    warm: super::warm::WarmArgs,
    /// Ask on the terminal before each tool call that needs approval (the config's
    /// `sandpy.approve`, `--require-approval`). Without it, or when stdin is not a
    /// terminal, such calls are refused (the program gets a `ToolError`).
    #[arg(long)]
    approve: bool,
    /// Tools (names or globs) whose calls need approval, besides the config's.
    #[arg(long, value_name = "PATTERN")]
    require_approval: Vec<String>,
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
pub(super) struct LimitArgs {
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
    pub(super) fn overrides(&self) -> LimitOverrides {
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

/// The program a command was given.
pub(super) enum Program {
    /// Its text, and the name its tracebacks show (`<string>`, `<stdin>` or the path).
    Text { code: String, name: String },
    /// Bytes that cannot be a program (not UTF-8): why. Commands report it as the
    /// program's result, an `invalid_input` execution (exit 8), not as a usage error.
    Refused(String),
}

impl Program {
    /// Read `-c CODE`, the file, or stdin for `-`. The error is a usage error: no program
    /// given, or a file or stdin that cannot be read.
    pub(super) fn read(file: Option<&PathBuf>, code: Option<&String>) -> anyhow::Result<Program> {
        if let Some(code) = code {
            return Ok(Program::Text {
                code: code.clone(),
                name: "<string>".into(),
            });
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
        let name = if from_stdin {
            "<stdin>".to_string()
        } else {
            file.display().to_string()
        };
        Ok(match String::from_utf8(bytes) {
            Ok(code) => Program::Text { code, name },
            Err(e) => Program::Refused(format!(
                "`{name}` is not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            )),
        })
    }

    /// The text and name, or the refusal as an `invalid_input` execution.
    pub(super) fn into_text(self) -> Result<(String, String), Box<Execution>> {
        match self {
            Program::Text { code, name } => Ok((code, name)),
            Program::Refused(why) => Err(Box::new(Execution::refused(Status::InvalidInput, why))),
        }
    }
}

/// Print an execution: as one JSON object, or the way Python would have printed.
pub(super) fn print_execution(execution: &Execution, json: bool) -> anyhow::Result<()> {
    if json {
        outln!("{}", serde_json::to_string(execution)?)?;
        Ok(())
    } else {
        print_human(execution)
    }
}

pub(super) fn run(args: Args) -> anyhow::Result<Outcome> {
    let program = if args.list_modules {
        Program::Text {
            code: String::new(),
            name: String::new(),
        }
    } else {
        Program::read(args.file.as_ref(), args.code.as_ref())?
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
    let (code, filename) = match program.into_text() {
        Ok(text) => text,
        Err(refused) => {
            print_execution(&refused, args.json)?;
            return Ok(Outcome::Run(refused.status));
        }
    };
    // Without --json, what the program writes reaches this process's stdout and stderr
    // as it is written (from a warm runner too).
    let streamed = !args.json && !args.list_modules;
    for pattern in &args.require_approval {
        sandpy::tools::validate_tool_pattern(pattern).context("--require-approval")?;
    }
    let base = resolved.run_options();
    let options = RunOptions {
        approve: [base.approve, args.require_approval.clone()].concat(),
        approver: args.approve.then(super::approve::terminal),
        on_output: streamed.then(to_own_streams),
        limit_overrides: args.limits.overrides(),
        stdin,
        filename: Some(filename),
        allowed_tools: args.settings.allowed(),
        files,
        mounts,
        ..base
    };
    // A runner has no MCP servers of its own and no terminal to ask for approval.
    #[cfg(target_os = "linux")]
    let usage = args
        .warm
        .usage(!args.list_modules && config.servers.is_empty() && !args.approve);
    #[cfg(target_os = "linux")]
    if let Some(execution) = crate::warm::served(
        usage,
        &resolved,
        &args.settings.to_flags(),
        &code,
        None,
        &options,
    ) {
        if streamed {
            print_after_stream(&execution)?;
        } else {
            print_execution(&execution, args.json)?;
        }
        args.files.save_outputs(&execution)?;
        return Ok(Outcome::Run(execution.status));
    }
    let overrun = (!args.list_modules).then(|| super::print_and_exit(args.json, streamed));
    let sandbox = super::one_shot_sandbox(&resolved, overrun)?;
    let rt = super::one_shot_runtime()?;
    if args.list_modules {
        let report = rt.block_on(sandbox.module_report())?;
        if args.json {
            outln!("{}", serde_json::to_string(&report)?)?;
        } else {
            print_module_report(&report)?;
        }
        return Ok(Outcome::Success);
    }
    let execution = rt.block_on(async {
        let hub = super::start_hub(&config).await;
        let options = RunOptions {
            tools: hub.as_ref().map(|h| h.for_execution("cli".into(), None)),
            ..options
        };
        let execution = sandbox.run_with(&code, &options).await;
        if let Some(hub) = hub {
            hub.shutdown().await;
        }
        execution
    });
    if streamed {
        print_after_stream(&execution)?;
    } else {
        print_execution(&execution, args.json)?;
    }
    args.files.save_outputs(&execution)?;
    super::release_at_exit(sandbox, rt);
    Ok(Outcome::Run(execution.status))
}

pub(super) fn print_human(execution: &Execution) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(execution.stdout.as_bytes())?;
    stdout.flush()?;
    std::io::stderr()
        .lock()
        .write_all(execution.stderr.as_bytes())?;
    print_error_line(execution)
}

/// What follows a run whose output was streamed: the mark of a cut, and the error of a
/// run that ended without a traceback.
pub(super) fn print_after_stream(execution: &Execution) -> anyhow::Result<()> {
    if execution.output_truncated {
        write!(
            std::io::stderr().lock(),
            "{}",
            sandpy::model_output::TRUNCATION_MARKER
        )?;
    }
    print_error_line(execution)
}

/// Each write of the program to this process's stdout or stderr, flushed at once.
fn to_own_streams() -> sandpy::OutputSink {
    std::sync::Arc::new(|stream, bytes| {
        // A closed stdout (`| head`) must not end the run: the execution still has it.
        let _ = match stream {
            sandpy::Stream::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(bytes).and_then(|()| out.flush())
            }
            sandpy::Stream::Stderr => std::io::stderr().lock().write_all(bytes),
        };
    })
}

/// `sandpy: <status>: <message>` for an error without a traceback.
fn print_error_line(execution: &Execution) -> anyhow::Result<()> {
    let mut stderr = std::io::stderr().lock();
    if let Some(error) = &execution.error {
        if error.traceback.as_deref().is_none_or(str::is_empty) {
            writeln!(stderr, "sandpy: {}: {}", execution.status, error.message)?;
        }
    }
    Ok(())
}

fn print_module_report(report: &sandpy::ModuleReport) -> std::io::Result<()> {
    let packages = if report.packages.is_empty() {
        "none".to_string()
    } else {
        report.packages.join(", ")
    };
    outln!("Third-party packages: {packages}")?;
    outln!(
        "{} stdlib modules available. Absent:",
        report.available.len()
    )?;
    for (name, reason) in &report.absent {
        outln!("  {name:<24} {reason}")?;
    }
    Ok(())
}
