//! `sandpy run --warm` and `sandpy call --warm`: hand the run to the user's warm runner
//! for these settings; and the runner itself (`sandpy warm-runner`, hidden), which the
//! first such command starts.

use super::ConfigArgs;
use sandpy::warm::{WarmCall, WarmError, WarmKey, WarmRequest, WarmRunner};
use sandpy::{Execution, Status};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long a runner stays without runs before it exits, unless
/// `$SANDPY_WARM_IDLE_SECS` says otherwise.
const DEFAULT_IDLE: Duration = Duration::from_secs(60);

/// What a run served by a runner logs at debug level (`SANDPY_LOG=sandpy=debug`).
pub(super) const SERVED: &str = "served by the warm runner";

#[derive(clap::Args)]
pub(super) struct Args {
    /// The key the starting command computed: the runner exits when its own differs.
    #[arg(long)]
    key: String,
    #[command(flatten)]
    settings: ConfigArgs,
}

/// With `--warm`: the execution of `code` (or `call` of it) with `options`, from the
/// runner of the settings' key; `None` when the run is for this process (no usable runner
/// yet: one is started for the next run). A runner lost during the run gives an
/// `internal_error`: the run may have had effects, so it is not run again here.
pub(super) fn served(
    resolved: &sandpy::Resolved,
    settings: &ConfigArgs,
    code: &str,
    call: Option<WarmCall>,
    options: &sandpy::RunOptions,
) -> Option<Execution> {
    let key = match WarmKey::of(resolved) {
        Ok(key) => key,
        Err(e) => {
            tracing::debug!("not using a warm runner: {:#}", anyhow::Error::from(e));
            return None;
        }
    };
    let request = WarmRequest::new(key, code, call, options);
    match sandpy::warm::run_warm(&request) {
        Ok(execution) => {
            tracing::debug!("{SERVED}");
            Some(execution)
        }
        Err(WarmError::Lost(why)) => {
            let message = format!("the warm runner took the run, then its answer was lost: {why}");
            Some(Execution::refused(Status::InternalError, message))
        }
        Err(WarmError::NotTaken(why)) => {
            tracing::debug!("no warm runner took the run ({why}); starting one");
            if let Err(e) = start_runner(&request.key, settings) {
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

/// Start `sandpy warm-runner` for `key` in the background: its own process group (a
/// terminal's Ctrl-C is for the command), no standard streams.
fn start_runner(key: &WarmKey, settings: &ConfigArgs) -> std::io::Result<()> {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(std::env::current_exe()?);
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
    sandpy::warm::close_inherited_files();
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
