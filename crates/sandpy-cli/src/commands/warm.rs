//! Warm runs: `sandpy run` and `sandpy call` hand their run to the user's warm runner for
//! their settings when one is up (`--warm` starts one when none is, `--cold` never uses
//! one); `sandpy warmup --keep` starts one; and the runner itself (`sandpy warm-runner`,
//! hidden).

use super::ConfigArgs;
use crate::warm_runner::{WarmCall, WarmError, WarmKey, WarmRequest, WarmRunner};
use sandpy::{Execution, Status};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long a runner stays without runs before it exits, unless
/// `$SANDPY_WARM_IDLE_SECS` says otherwise.
const DEFAULT_IDLE: Duration = Duration::from_secs(60);

/// What a run served by a runner logs at debug level (`SANDPY_LOG=sandpy=debug`).
pub(super) const SERVED: &str = "served by the warm runner";

/// The flags that choose whether a command's run goes to a warm runner.
#[derive(clap::Args)]
pub(super) struct WarmArgs {
    /// Hand the run (a single run or call, not an --args-file batch) to a background
    /// runner that keeps the runtime loaded, and start one for these settings when none is
    /// up (gone after $SANDPY_WARM_IDLE_SECS, default 60, without runs). Without this flag
    /// a runner is used when one is up, and none is started (configs without MCP servers).
    #[arg(long, env = "SANDPY_WARM", value_parser = clap::builder::FalseyValueParser::new())]
    warm: bool,
    /// Run in this process even when a warm runner for these settings is up.
    #[arg(
        long,
        env = "SANDPY_COLD",
        value_parser = clap::builder::FalseyValueParser::new(),
        conflicts_with = "warm"
    )]
    cold: bool,
}

/// How a command uses the warm runner of its settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WarmUse {
    /// Never: the run is this process's (`--cold`, or what a runner cannot do for it).
    Never,
    /// When one is up (the default); none is started.
    IfUp,
    /// When one is up; else one is started for the next run (`--warm`).
    Start,
}

impl WarmArgs {
    /// The use these flags ask for; `Never` where `runnable` is false (a run that needs
    /// this process: MCP servers, a terminal to ask for approval).
    pub(super) fn usage(&self, runnable: bool) -> WarmUse {
        match (runnable, self.cold, self.warm) {
            (false, _, _) | (_, true, _) => WarmUse::Never,
            (_, _, true) => WarmUse::Start,
            _ => WarmUse::IfUp,
        }
    }
}

#[derive(clap::Args)]
pub(super) struct Args {
    /// The key the starting command computed: the runner exits when its own differs.
    #[arg(long)]
    key: String,
    #[command(flatten)]
    settings: ConfigArgs,
}

/// The execution of `code` (or `call` of it) with `options`, from the runner of the
/// settings' key (its output given to `options.on_output` as it is written); `None` when
/// the run is for this process (no usable runner: with [`WarmUse::Start`] one is started
/// for the next run). A runner lost during the run gives an `internal_error`: the run may
/// have had effects, so it is not run again here.
pub(super) fn served(
    usage: WarmUse,
    resolved: &sandpy::settings::Resolved,
    settings: &ConfigArgs,
    code: &str,
    call: Option<WarmCall>,
    options: &sandpy::RunOptions,
) -> Option<Execution> {
    if usage == WarmUse::Never {
        return None;
    }
    let key = match WarmKey::of(resolved) {
        Ok(key) => key,
        Err(e) => {
            tracing::debug!("not using a warm runner: {:#}", anyhow::Error::from(e));
            return None;
        }
    };
    let request = WarmRequest::new(key, code, call, options);
    match crate::warm_runner::run_warm(&request, options.on_output.as_ref()) {
        Ok(execution) => {
            tracing::debug!("{SERVED}");
            Some(execution)
        }
        Err(WarmError::Lost(why)) => {
            let message = format!("the warm runner took the run, then its answer was lost: {why}");
            Some(Execution::refused(Status::InternalError, message))
        }
        Err(WarmError::NotTaken(why)) if usage == WarmUse::Start => {
            tracing::debug!("no warm runner took the run ({why}); starting one");
            if let Err(e) = start_runner(&request.key, settings, None) {
                tracing::debug!("cannot start a warm runner: {e}");
            }
            None
        }
        Err(other) => {
            tracing::debug!("not using a warm runner: {:#}", anyhow::Error::from(other));
            None
        }
    }
}

/// Start `sandpy warm-runner` for `key` in the background (leaving after `idle` without
/// runs, else as `$SANDPY_WARM_IDLE_SECS` says): its own process group (a terminal's
/// Ctrl-C is for the command), no standard streams.
pub(super) fn start_runner(
    key: &WarmKey,
    settings: &ConfigArgs,
    idle: Option<Duration>,
) -> std::io::Result<()> {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(std::env::current_exe()?);
    if let Some(idle) = idle {
        command.env("SANDPY_WARM_IDLE_SECS", idle.as_secs().to_string());
    }
    command
        .args(["warm-runner", "--key", key.as_str()])
        .args(settings.to_flags())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    // Not waited for: the runner outlives this command.
    command.spawn().map(drop)
}

/// `sandpy warm-runner`: load the sandbox for these settings and serve runs until idle.
pub(super) fn run(args: Args) -> anyhow::Result<crate::exit::Outcome> {
    crate::warm_runner::close_inherited_files();
    let (config, resolved) = args.settings.resolve_with_servers()?;
    let key = WarmKey::of(&resolved)?;
    if key.as_str() != args.key || !config.servers.is_empty() {
        // The settings changed since the command computed its key: that command's
        // successors will start the runner they need.
        return Ok(crate::exit::Outcome::Success);
    }
    let Some(runner) = WarmRunner::claim(key)? else {
        return Ok(crate::exit::Outcome::Success);
    };
    let sandbox = super::resolved_sandbox(&resolved)?;
    let idle = std::env::var("SANDPY_WARM_IDLE_SECS")
        .ok()
        .and_then(|secs| secs.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_IDLE);
    super::tokio_runtime()?.block_on(runner.serve(sandbox, resolved, idle))?;
    Ok(crate::exit::Outcome::Success)
}
