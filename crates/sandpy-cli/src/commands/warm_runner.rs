//! `sandpy warm-runner` (hidden): the warm runner (`crate::warm`) that `sandpy run --warm`
//! and `sandpy warmup --keep` start, for the settings of the command that started it.

use crate::common::{self, ConfigArgs};
use crate::exit::Outcome;
use crate::warm;
use std::time::Duration;

/// How long a runner stays without runs before it exits, unless
/// `$SANDPY_WARM_IDLE_SECS` says otherwise.
const DEFAULT_IDLE: Duration = Duration::from_secs(60);

#[derive(clap::Args)]
pub(super) struct Args {
    /// The key the starting command computed: the runner exits when its own differs.
    #[arg(long)]
    key: String,
    #[command(flatten)]
    settings: ConfigArgs,
}

/// `sandpy warm-runner`: load the sandbox for these settings and serve runs until idle.
pub(super) fn run(args: Args) -> anyhow::Result<Outcome> {
    warm::close_inherited_files();
    let (config, resolved) = args.settings.resolve_with_servers()?;
    let key = warm::Key::of(&resolved)?;
    if key.as_str() != args.key || !config.servers.is_empty() {
        // The settings changed since the command computed its key: that command's
        // successors will start the runner they need.
        return Ok(Outcome::Success);
    }
    let Some(runner) = warm::Runner::claim(key)? else {
        return Ok(Outcome::Success);
    };
    let sandbox = common::resolved_sandbox(&resolved)?;
    let idle = std::env::var("SANDPY_WARM_IDLE_SECS")
        .ok()
        .and_then(|secs| secs.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_IDLE);
    common::tokio_runtime()?.block_on(runner.serve(sandbox, resolved, idle))?;
    Ok(Outcome::Success)
}
