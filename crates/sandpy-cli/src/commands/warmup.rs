//! `sandpy warmup`: compile and cache the runtime ahead of time.

use crate::exit::Outcome;

#[derive(clap::Args)]
pub(super) struct Args {}

pub(super) fn run(_args: Args) -> anyhow::Result<Outcome> {
    let started = std::time::Instant::now();
    super::sandbox()?;
    // The one-shot commands' code, compiled without interruption checks, is cached apart.
    super::one_shot_sandbox(
        &sandpy::Resolved::default(),
        Some(super::print_and_exit(false, false)),
    )?;
    let dir = sandpy::Config::default().resolved_cache_dir();
    eprintln!(
        "sandpy: runtime ready in {:.1} s (cache: `{}`)",
        started.elapsed().as_secs_f64(),
        dir.display()
    );
    Ok(Outcome::Success)
}
