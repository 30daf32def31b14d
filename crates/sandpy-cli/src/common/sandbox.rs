//! What commands build from their flags and settings: sandboxes (a server's, a one-shot
//! command's), a run's options, and tokio runtimes.

use super::{ConfigArgs, FileArgs, LimitArgs};
use sandpy::RunOptions;

/// The sandbox, with a progress message on stderr when the runtime must be compiled.
pub(crate) fn sandbox() -> anyhow::Result<sandpy::Sandbox> {
    sandbox_with(sandpy::Config::default())
}

/// [`sandbox`] with these settings, on the built-in guest (or the runtime file they name).
pub(crate) fn sandbox_with(config: sandpy::Config) -> anyhow::Result<sandpy::Sandbox> {
    let config = sandpy::Config {
        guest: Some(sandpy_guest::GUEST),
        progress: Some(std::sync::Arc::new(|message: &str| eprintln!("{message}"))),
        ..config
    };
    Ok(sandpy::Sandbox::new(config)?)
}

/// A tokio runtime for one command.
pub(crate) fn tokio_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// The sandbox of a command that makes one run and exits (`sandpy run`, `sandpy check`, a
/// single `sandpy call`): instances allocated on demand. The pool a server keeps (256
/// slots, each with its stack and guard pages set up at start) took more of such a
/// process's time than its run (docs/dev/performance.md, "One-shot runs"); the run's instance
/// is left to the process's exit instead of torn down. With `overrun`,
/// the guest's code has no interruption checks (CPU-bound code runs a few percent
/// faster) and a run past its time limit is reported by `overrun`, which ends the process.
pub(crate) fn one_shot_sandbox(
    resolved: &sandpy::settings::Resolved,
    overrun: Option<sandpy::OnOverrun>,
) -> anyhow::Result<sandpy::Sandbox> {
    sandbox_with(resolved.sandbox_config(sandpy::Config {
        pooled_instances: None,
        max_concurrent_runs: Some(1),
        leave_instances_to_exit: true,
        // A native-tier command never loads (or compiles) the WebAssembly runtime.
        runtime_on_first_use: resolved.settings.tier == sandpy::Tier::Native,
        interruption: match overrun {
            Some(end) => sandpy::Interruption::EndProcess(end),
            None => sandpy::Interruption::Checks,
        },
        ..sandpy::Config::default()
    }))
}

/// The end of a one-shot command: its run folders go now, the sandbox and the runtime
/// with the process's exit.
pub(crate) fn release_at_exit(sandbox: sandpy::Sandbox, rt: tokio::runtime::Runtime) {
    sandbox.release_at_exit();
    std::mem::forget(rt);
}

/// The tokio runtime of a one-run command: this thread alone, no worker threads to start
/// and stop.
pub(crate) fn one_shot_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// The sandbox `resolved` asks for.
pub(crate) fn resolved_sandbox(
    resolved: &sandpy::settings::Resolved,
) -> anyhow::Result<sandpy::Sandbox> {
    sandbox_with(resolved.sandbox_config(sandpy::Config::default()))
}

/// The options of a run from the settings `resolved` with the flags' limits, tool
/// allowlist, input files (read now) and mounts (after the config's).
pub(crate) fn run_options(
    resolved: &sandpy::settings::Resolved,
    settings: &ConfigArgs,
    limits: &LimitArgs,
    files: &FileArgs,
) -> anyhow::Result<RunOptions> {
    Ok(RunOptions {
        limit_overrides: limits.overrides(),
        allowed_tools: settings.allowed(),
        files: files.inputs()?,
        mounts: files.mounts(&resolved.settings.mounts)?,
        ..resolved.run_options()
    })
}
