//! Warm runs: `sandpy run` and `sandpy call` hand their run to the user's warm runner for
//! their settings when one is up (`--warm` starts one when none is, `--cold` never uses
//! one); `sandpy warmup --keep` starts one; and the runner itself (`sandpy warm-runner`,
//! hidden).

use super::ConfigArgs;
use crate::warm;
use std::time::Duration;

/// How long a runner stays without runs before it exits, unless
/// `$SANDPY_WARM_IDLE_SECS` says otherwise.
const DEFAULT_IDLE: Duration = Duration::from_secs(60);

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

impl WarmArgs {
    /// The use these flags ask for; `Never` where `runnable` is false (a run that needs
    /// this process: MCP servers, a terminal to ask for approval).
    pub(super) fn usage(&self, runnable: bool) -> warm::Usage {
        match (runnable, self.cold, self.warm) {
            (false, _, _) | (_, true, _) => warm::Usage::Never,
            (_, _, true) => warm::Usage::Start,
            _ => warm::Usage::IfUp,
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

/// `sandpy warm-runner`: load the sandbox for these settings and serve runs until idle.
pub(super) fn run(args: Args) -> anyhow::Result<crate::exit::Outcome> {
    warm::close_inherited_files();
    let (config, resolved) = args.settings.resolve_with_servers()?;
    let key = warm::Key::of(&resolved)?;
    if key.as_str() != args.key || !config.servers.is_empty() {
        // The settings changed since the command computed its key: that command's
        // successors will start the runner they need.
        return Ok(crate::exit::Outcome::Success);
    }
    let Some(runner) = warm::Runner::claim(key)? else {
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
