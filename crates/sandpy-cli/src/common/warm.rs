//! The flags of `sandpy run` and `sandpy call` that choose whether their run goes to the
//! user's warm runner for their settings (`crate::warm`): used when one is up, `--warm`
//! starts one when none is, `--cold` never uses one.

use crate::warm;

/// The flags that choose whether a command's run goes to a warm runner.
#[derive(clap::Args)]
pub(crate) struct WarmArgs {
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
    pub(crate) fn usage(&self, runnable: bool) -> warm::Usage {
        match (runnable, self.cold, self.warm) {
            (false, _, _) | (_, true, _) => warm::Usage::Never,
            (_, _, true) => warm::Usage::Start,
            _ => warm::Usage::IfUp,
        }
    }
}
