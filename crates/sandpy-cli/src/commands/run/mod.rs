//! `sandpy run`: run a program and print what it printed, or the whole `Execution` as JSON.

mod approver;

use crate::common::{self, outln, print_after_stream, print_execution, Program};
use crate::exit::Outcome;
use anyhow::Context;
use sandpy::RunOptions;
use std::io::Write;
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
    warm: common::WarmArgs,
    /// Ask on the terminal before each tool call that needs approval (the config's
    /// `sandpy.approve`, `--require-approval`). Without it, or when stdin is not a
    /// terminal, such calls are refused (the program gets a `ToolError`).
    #[arg(long)]
    approve: bool,
    /// Tools (names or globs) whose calls need approval, besides the config's.
    #[arg(long, value_name = "PATTERN")]
    require_approval: Vec<String>,
    #[command(flatten)]
    limits: common::LimitArgs,
    #[command(flatten)]
    files: common::FileArgs,
    #[command(flatten)]
    settings: common::ConfigArgs,
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
        Some(path) => {
            let context = || format!("cannot read input `{}`", path.display());
            let real = sandpy::files::user_path(path).with_context(context)?;
            crate::common::regular_file(&real).with_context(context)?;
            Some(std::fs::read(real).with_context(context)?)
        }
        None => None,
    };
    let (config, resolved) = args.settings.resolve_with_servers()?;
    let base = common::run_options(&resolved, &args.settings, &args.limits, &args.files)?;
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
    let options = RunOptions {
        approve: [base.approve, args.require_approval.clone()].concat(),
        approver: args.approve.then(approver::terminal),
        on_output: streamed.then(to_own_streams),
        stdin,
        filename: Some(filename),
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
    let overrun = (!args.list_modules).then(|| common::print_and_exit(args.json, streamed));
    let sandbox = common::one_shot_sandbox(&resolved, overrun)?;
    let rt = common::one_shot_runtime()?;
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
        let hub = common::start_hub(&config).await;
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
    common::release_at_exit(sandbox, rt);
    Ok(Outcome::Run(execution.status))
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
