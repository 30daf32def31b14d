//! The command line: one subcommand per file.

/// `println!` that returns the write's error instead of panicking: a closed pipe
/// (`sandpy run script.py | head`) then ends the command quietly (`exit::finish`).
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

mod approve;
mod batch_lines;
mod bench;
mod build;
mod call;
mod check;
mod demo;
#[cfg(test)]
mod documented;
mod files;
mod run;
mod serve;
mod warm;
mod warmup;
mod workers;

use crate::exit::Outcome;
pub(crate) use bench::NoBenchProgram;
use clap::{Parser, Subcommand};

/// Run untrusted Python (real CPython 3.14) in a WebAssembly sandbox.
#[derive(Parser)]
#[command(name = "sandpy", version, about, propagate_version = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a Python program in a fresh sandbox.
    Run(run::Args),
    /// Be an MCP server (stdio, or streamable HTTP with --http) whose `run_python` tool
    /// runs code that can call the configured MCP servers' tools.
    Serve(serve::Args),
    /// Check a program against a policy without running it.
    Check(check::Args),
    /// Call a function of a Python file with JSON arguments (one call, or one per line of a file).
    Call(call::Args),
    /// Run a built-in example: Python that calls MCP tools of the reference `everything` server.
    Demo(demo::Args),
    /// Compile the Python runtime to native code now, so the first run is fast; with
    /// `--keep`, keep it loaded in a warm runner that later runs use.
    Warmup(warmup::Args),
    /// Measure latency, throughput and CPU-bound speed against native python3 (runs the
    /// `sandpy-bench` program beside this binary).
    Bench(bench::Args),
    /// Build a runtime with extra pure-Python packages from PyPI (or a folder to mount).
    Build(build::Args),
    /// The background runner `sandpy run --warm` starts (not for direct use).
    #[cfg(target_os = "linux")]
    #[command(hide = true)]
    WarmRunner(warm::Args),
}

pub(crate) fn dispatch(cli: Cli) -> anyhow::Result<Outcome> {
    match cli.command {
        Command::Run(args) => run::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Check(args) => check::run(args),
        Command::Call(args) => call::run(args),
        Command::Warmup(args) => warmup::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Build(args) => build::run(args),
        #[cfg(target_os = "linux")]
        Command::WarmRunner(args) => warm::run(args),
    }
}

/// The sandbox, with a progress message on stderr when the runtime must be compiled.
pub(crate) fn sandbox() -> anyhow::Result<sandpy::Sandbox> {
    sandbox_with(sandpy::Config::default())
}

/// [`sandbox`] with these settings.
pub(crate) fn sandbox_with(config: sandpy::Config) -> anyhow::Result<sandpy::Sandbox> {
    let config = sandpy::Config {
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

/// What `sandpy run` and a single `sandpy call` do with a run that outlived its time on
/// code without interruption checks: print its `timeout` as they print any run, and exit
/// with the timeout's code.
pub(crate) fn print_and_exit(json: bool, streamed: bool) -> sandpy::OnOverrun {
    std::sync::Arc::new(move |execution: sandpy::Execution| {
        let printed = if streamed {
            run::print_after_stream(&execution)
        } else {
            run::print_execution(&execution, json)
        };
        match printed {
            Err(e) if !crate::exit::closed_pipe(&e) => {
                eprintln!("error: cannot print the run's result: {e}");
            }
            _ => {}
        }
        std::process::exit(i32::from(crate::exit::status_code(execution.status)));
    })
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

/// The config file, and the policy and tools a run may use.
#[derive(clap::Args, Clone)]
pub(crate) struct ConfigArgs {
    /// Config file (`mcpServers` + `sandpy` settings) [default: $SANDPY_CONFIG, else ./.mcp.json].
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// Policy: `strict`, `default`, or one defined in the config [default: the config's].
    #[arg(long, value_name = "NAME")]
    pub policy: Option<String>,
    /// Tool names or globs the code may call (repeatable; narrows the config's allowlist).
    #[arg(long = "allow-tool", value_name = "PATTERN")]
    pub allow_tool: Vec<String>,
    /// Runtime component from `sandpy build` [default: $SANDPY_RUNTIME, else the config's, else built-in].
    #[arg(long, value_name = "FILE")]
    pub runtime: Option<std::path::PathBuf>,
    /// Where code runs: `wasm` (CPython 3.14 in WebAssembly) or `native` (the machine's
    /// CPython with compiled packages, confined by the kernel) [default: the config's, else wasm].
    #[arg(long, value_enum, value_name = "TIER")]
    pub tier: Option<TierArg>,
    /// Hosts the code may reach over HTTP(S) (repeatable; adds to the config's
    /// `sandpy.network.allow`): `host`, `host:port`, `*.domain`, an IP literal, or
    /// `"GET https://host/path/*"` [default: no network].
    #[arg(long = "allow-host", value_name = "ENTRY", value_parser = sandpy::network::AllowRule::parse)]
    pub allow_host: Vec<sandpy::network::AllowRule>,
}

/// The `--tier` values.
#[derive(clap::ValueEnum, Clone, Copy)]
pub(crate) enum TierArg {
    Wasm,
    Native,
}

impl ConfigArgs {
    /// The config's settings with the flags' policy and runtime, resolved once; for the
    /// commands that call no upstream servers.
    pub(crate) fn resolve(&self) -> anyhow::Result<sandpy::settings::Resolved> {
        let file = sandpy::settings::ConfigFile::discover(self.config.as_deref())?;
        self.choose(file.settings)
    }

    /// [`ConfigArgs::resolve`] with the config's upstream servers, for the commands whose
    /// code may call their tools.
    pub(crate) fn resolve_with_servers(
        &self,
    ) -> anyhow::Result<(sandpy_mcp::ConfigFile, sandpy::settings::Resolved)> {
        let config = sandpy_mcp::ConfigFile::discover(self.config.as_deref())?;
        crate::log::hide(config.expansions());
        let resolved = self.choose(config.settings.clone())?;
        Ok((config, resolved))
    }

    fn choose(
        &self,
        mut settings: sandpy::settings::Settings,
    ) -> anyhow::Result<sandpy::settings::Resolved> {
        if self.runtime.is_some() {
            settings.runtime = self.runtime.clone();
        }
        sandpy::network::Network::allow_also(&mut settings.network, &self.allow_host)?;
        match self.tier {
            Some(TierArg::Wasm) => settings.tier = sandpy::Tier::Wasm,
            Some(TierArg::Native) => settings.tier = sandpy::Tier::Native,
            None => {}
        }
        if cfg!(debug_assertions) {
            // Test builds only: switch confinement layers off to show what each stops.
            if let Ok(names) = std::env::var("SANDPY_TEST_NATIVE_LAYERS_OFF") {
                let native = settings.native.get_or_insert_with(Default::default);
                native.layers_off = names
                    .split(',')
                    .filter_map(|name| serde_json::from_value(name.into()).ok())
                    .collect();
            }
        }
        Ok(settings.resolve(self.policy.as_deref())?)
    }

    /// The flags that choose the settings (not the per-run tool allowlist), to start
    /// another `sandpy` process with the same ones.
    pub(crate) fn to_flags(&self) -> Vec<std::ffi::OsString> {
        let mut flags = Vec::new();
        for (flag, value) in [("--config", &self.config), ("--runtime", &self.runtime)] {
            if let Some(value) = value {
                flags.extend([flag.into(), value.clone().into_os_string()]);
            }
        }
        if let Some(policy) = &self.policy {
            flags.extend(["--policy".into(), policy.into()]);
        }
        match self.tier {
            Some(TierArg::Wasm) => flags.extend(["--tier".into(), "wasm".into()]),
            Some(TierArg::Native) => flags.extend(["--tier".into(), "native".into()]),
            None => {}
        }
        for entry in &self.allow_host {
            flags.extend(["--allow-host".into(), entry.to_string().into()]);
        }
        flags
    }

    pub(crate) fn allowed(&self) -> Option<Vec<String>> {
        (!self.allow_tool.is_empty()).then(|| self.allow_tool.clone())
    }
}

/// The sandbox `resolved` asks for.
pub(crate) fn resolved_sandbox(
    resolved: &sandpy::settings::Resolved,
) -> anyhow::Result<sandpy::Sandbox> {
    sandbox_with(resolved.sandbox_config(sandpy::Config::default()))
}

/// Start the hub when the config names servers, reporting each that failed on stderr.
pub(crate) async fn start_hub(config: &sandpy_mcp::ConfigFile) -> Option<sandpy_mcp::Hub> {
    if config.servers.is_empty() {
        return None;
    }
    let hub = sandpy_mcp::Hub::start(config).await;
    report_start(&hub, &config.settings);
    Some(hub)
}

/// On stderr, once the servers have started: those that failed, and the config's tool
/// patterns (`sandpy.allowed_tools`, `sandpy.approve`) that match none of the tools of
/// the servers that did start (a typo there would allow nothing, or ask for nothing).
pub(crate) fn report_start(hub: &sandpy_mcp::Hub, settings: &sandpy::settings::Settings) {
    for server in hub.servers() {
        if !server.is_ready() {
            eprintln!("sandpy: MCP server `{}` is {}", server.name, server.status);
        }
    }
    let allowed = settings.allowed_tools.as_deref().unwrap_or_default();
    for (key, patterns) in [("allowed_tools", allowed), ("approve", &settings.approve)] {
        for pattern in hub.matching_none(patterns) {
            eprintln!(
                "sandpy: the sandpy.{key} pattern {pattern:?} matches none of the tools of the servers that started"
            );
        }
    }
}
