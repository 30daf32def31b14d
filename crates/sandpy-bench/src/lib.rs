//! `sandpy-bench`: the figures in `docs/guide/performance.md`, each measured in one run
//! against a baseline measured in the same run (native `python3`, the other allocator, the
//! other tier, http against https), so that ratios, not lone times, are what is compared.
//!
//! The benchmarks are a program of their own, kept out of the `sandpy` binary users get
//! (`sandpy bench` runs this binary from beside it). The library holds its command line
//! ([`Args`]) and [`run`], so that the CLI's tests can check the documented `sandpy bench`
//! commands against the flags this program takes.

mod in_process;
mod measure;
mod native;
mod network;
mod outputs;
mod packages;
mod process;
mod programs;
mod served;
mod tools;

use std::path::PathBuf;

/// The command line of `sandpy-bench` (and of `sandpy bench`, which hands its arguments here).
#[derive(clap::Parser)]
#[command(
    name = "sandpy-bench",
    version,
    about = "Measure latency, throughput and CPU-bound speed against native python3"
)]
pub struct Args {
    /// In-process runs for the latency percentiles.
    #[arg(long, default_value_t = 300)]
    runs: usize,
    /// Whole-process runs of `sandpy run`.
    #[arg(long, default_value_t = 30)]
    process_runs: usize,
    /// Native interpreter for the CPU-bound baseline.
    #[arg(long, default_value = "python3")]
    python: String,
    /// Skip the parts that start the reference MCP server with npx.
    #[arg(long)]
    no_upstream: bool,
    /// Only the package start-up comparison: the curated set bundled in the runtime
    /// against the same packages in a folder mounted at /packages (needs PyPI, ~1 min).
    #[arg(long)]
    packages: bool,
    /// Only this part.
    #[arg(long, value_name = "PART", value_parser = PARTS.map(|(name, _)| name))]
    only: Option<String>,
    /// The native tier's venv (with numpy and pandas, from `sandpy build --native`) for
    /// the `native` part (and the `outputs` part's figure); without it they skip it.
    #[arg(long, value_name = "DIR")]
    native_venv: Option<PathBuf>,
    /// The `sandpy` binary that the whole-process parts run (process, cpu, eval, and tools
    /// without --no-upstream); by default the one beside this program.
    #[arg(long, value_name = "PATH", env = "SANDPY_BENCH_SANDPY")]
    sandpy: Option<PathBuf>,
}

/// One part of the bench.
type Part = fn(&Bench) -> anyhow::Result<()>;

/// The parts, in the order a full run measures them.
const PARTS: [(&str, Part); 15] = [
    ("hello", Bench::hello),
    ("files", Bench::files),
    ("stream", Bench::stream),
    ("session", Bench::session),
    ("outputs", Bench::outputs),
    ("served", Bench::served),
    ("process", Bench::process),
    ("cpu", Bench::cpu),
    ("tools", Bench::tools),
    ("lookup", Bench::lookup),
    ("tls", Bench::tls),
    ("network", Bench::network),
    ("eval", Bench::eval),
    ("memory", Bench::memory),
    ("native", Bench::native),
];

/// The interpreter `python` starts, by its own `sys.executable`; `python` itself when it
/// cannot say. A launcher such as pyenv's `python3` shim is a script that finds the
/// interpreter through its environment: under `-I -S` (the start-up baseline) it fails, and
/// elsewhere its own start-up would be timed as the native interpreter's.
fn real_interpreter(python: &str) -> String {
    let asked = std::process::Command::new(python)
        .args(["-c", "import sys; print(sys.executable)"])
        .output();
    let Ok(out) = asked else {
        return python.to_string();
    };
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if out.status.success() && std::path::Path::new(&path).is_file() {
        path
    } else {
        python.to_string()
    }
}

/// Measure what `args` asks for and print the figures on stdout.
pub fn run(mut args: Args) -> anyhow::Result<()> {
    args.python = real_interpreter(&args.python);
    let sandpy_bin = match &args.sandpy {
        Some(path) => path.clone(),
        None => std::env::current_exe()?
            .with_file_name(format!("sandpy{}", std::env::consts::EXE_SUFFIX)),
    };
    let bench = Bench {
        sandbox: sandbox_with(config())?,
        rt: tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?,
        cores: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2),
        sandpy_bin,
        args,
    };
    if bench.args.packages {
        let runs = bench.args.runs.clamp(1, 100);
        return packages::packages_startup(&bench.rt, &bench.sandbox, runs);
    }
    let chosen: Vec<(&str, Part)> = PARTS
        .into_iter()
        .filter(|(name, _)| bench.args.only.as_deref().is_none_or(|only| only == *name))
        .collect();
    // The parts that run the `sandpy` binary (`tools` only for `sandpy serve` over stdio).
    let runs_sandpy = |name: &str| {
        matches!(name, "process" | "cpu" | "eval") || (name == "tools" && !bench.args.no_upstream)
    };
    let needing: Vec<&str> = chosen
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| runs_sandpy(name))
        .collect();
    if !needing.is_empty() && !bench.sandpy_bin.is_file() {
        let parts = match needing[..] {
            [one] => format!("the part `{one}` runs"),
            _ => format!("the parts `{}` run", needing.join("`, `")),
        };
        anyhow::bail!(
            "{parts} the `sandpy` binary, and there is none at `{}`: build it beside this \
             program (`cargo build --release -p sandpy-cli -p sandpy-bench`), pass --sandpy \
             PATH, or choose another part with --only",
            bench.sandpy_bin.display()
        );
    }
    println!("sandpy bench (medians; the machine is shared, compare ratios)\n");
    for (_, part) in chosen {
        part(&bench)?;
    }
    Ok(())
}

/// What every part of the bench shares.
struct Bench {
    args: Args,
    sandbox: sandpy::Sandbox,
    rt: tokio::runtime::Runtime,
    cores: usize,
    /// The `sandpy` binary, for the parts that run it as a process.
    sandpy_bin: PathBuf,
}

/// The default settings on the built-in guest: what every part's sandbox starts from.
fn config() -> sandpy::Config {
    sandpy::Config {
        guest: Some(sandpy_guest::GUEST),
        ..sandpy::Config::default()
    }
}

/// A sandbox with these settings that reports its progress (compiling the runtime on a
/// cold cache) on stderr.
fn sandbox_with(config: sandpy::Config) -> anyhow::Result<sandpy::Sandbox> {
    let config = sandpy::Config {
        progress: Some(std::sync::Arc::new(|message: &str| eprintln!("{message}"))),
        ..config
    };
    Ok(sandpy::Sandbox::new(config)?)
}

#[cfg(test)]
mod tests {
    use super::real_interpreter;

    #[test]
    fn the_native_baseline_is_the_interpreter_itself_and_runs_isolated() {
        let python = real_interpreter("python3");
        assert!(std::path::Path::new(&python).is_absolute(), "{python}");
        // What the start-up baseline runs: a launcher script (pyenv's shim) fails here.
        let out = std::process::Command::new(&python)
            .args(["-I", "-S", "-c", "print('hello')"])
            .output()
            .expect("the interpreter starts");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n", "{python}");
        // A name that starts nothing is kept, for the part to report.
        assert_eq!(
            real_interpreter("/nonexistent/python"),
            "/nonexistent/python"
        );
    }
}
