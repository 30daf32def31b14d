//! `sandpy warmup`: compile and cache the runtime ahead of time; with `--keep`, also start
//! the warm runner for these settings, which later `sandpy run` and `sandpy call`
//! commands then use.

use crate::common;
use crate::exit::Outcome;
use anyhow::{bail, Context};
use std::time::{Duration, Instant};

/// How long `--keep` waits for its runner to serve.
const KEEP_WAIT: Duration = Duration::from_secs(120);

#[derive(clap::Args)]
pub(super) struct Args {
    /// Also start a warm runner for these settings (configs without MCP servers): the
    /// `sandpy run` and `sandpy call` commands run in this folder with them are then
    /// handed to it, and start in milliseconds.
    #[arg(long)]
    keep: bool,
    /// Seconds without runs after which the kept runner leaves.
    #[arg(long, value_name = "SECS", default_value_t = 900, requires = "keep",
          value_parser = clap::value_parser!(u64).range(1..))]
    idle_secs: u64,
    #[command(flatten)]
    settings: common::ConfigArgs,
}

pub(super) fn run(args: Args) -> anyhow::Result<Outcome> {
    let started = Instant::now();
    common::sandbox()?;
    // The one-shot commands' code, compiled without interruption checks, is cached apart.
    common::one_shot_sandbox(
        &sandpy::settings::Resolved::default(),
        Some(common::print_and_exit(false, false)),
    )?;
    let dir = sandpy::Config::default().resolved_cache_dir();
    eprintln!(
        "sandpy: runtime ready in {:.1} s (cache: `{}`)",
        started.elapsed().as_secs_f64(),
        dir.display()
    );
    if args.keep {
        keep(&args)?;
    }
    Ok(Outcome::Success)
}

/// Start the runner for the settings and wait until it serves a run.
fn keep(args: &Args) -> anyhow::Result<()> {
    let (config, resolved) = args.settings.resolve_with_servers()?;
    if !config.servers.is_empty() {
        bail!("a warm runner serves configs without MCP servers; this one names some");
    }
    let key = crate::warm::Key::of(&resolved)?;
    let idle = Duration::from_secs(args.idle_secs);
    crate::warm::start(&key, &args.settings.to_flags(), Some(idle))
        .context("cannot start the warm runner")?;
    let probe = crate::warm::Request::new(key, "pass", None, &resolved.run_options());
    let deadline = Instant::now() + KEEP_WAIT;
    loop {
        match crate::warm::run(&probe, None) {
            Ok(_) => break,
            Err(e) if Instant::now() >= deadline => {
                return Err(e).context(format!(
                    "the warm runner did not serve within {} s",
                    KEEP_WAIT.as_secs()
                ))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    eprintln!(
        "sandpy: warm runner up: `sandpy run` and `sandpy call` in this folder with these \
         settings use it until it has had no run for {} s (`--cold` runs without it)",
        args.idle_secs
    );
    Ok(())
}
