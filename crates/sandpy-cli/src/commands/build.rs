//! `sandpy build`: a runtime with extra pure-Python packages imported in its snapshot,
//! or (with --folder) just the packages, to mount at /packages at run time. Without
//! `--with`, the config's `sandpy.packages` list is built into its `sandpy.runtime` file.

use crate::common;
use crate::exit::Outcome;
use anyhow::{bail, Context};
use sandpy::packages;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub(super) struct Args {
    /// Packages as pip requirements, e.g. `toolz==1.0.0` (repeatable) [default: the
    /// config's `sandpy.packages`].
    #[arg(long = "with", value_name = "PKG")]
    with: Vec<String>,
    /// Config file whose `sandpy.packages` to build into its `sandpy.runtime`
    /// [default: $SANDPY_CONFIG, else ./.mcp.json].
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Leave out the curated set the built-in runtime has (attrs, python-dateutil, pyyaml,
    /// tabulate, jinja2, markupsafe, idna, six, requests, httpx).
    #[arg(long)]
    no_defaults: bool,
    /// Where to write the runtime component (use it with --runtime or $SANDPY_RUNTIME)
    /// [default: the config's `sandpy.runtime`, else sandpy-runtime.wasm].
    #[arg(short, long, value_name = "FILE", conflicts_with = "folder")]
    output: Option<PathBuf>,
    /// Only install the packages into DIR, to mount read-only with `--mount DIR:/packages`.
    #[arg(long, value_name = "DIR")]
    folder: Option<PathBuf>,
    /// Make the native tier's virtual environment instead: the packages (any, compiled
    /// ones too) from PyPI wheels into the config's `sandpy.native.venv` (or --output)
    /// [default packages: the config's `sandpy.native.packages`].
    #[arg(long, conflicts_with_all = ["folder", "no_defaults"])]
    native: bool,
}

pub(super) fn run(args: Args) -> anyhow::Result<Outcome> {
    let settings = sandpy::settings::ConfigFile::discover(args.config.as_deref())?.settings;
    if args.native {
        return native(&args, settings);
    }
    let mut wanted = if args.with.is_empty() {
        settings.packages.clone()
    } else {
        args.with.clone()
    };
    if wanted.is_empty() {
        bail!("name packages with --with PKG (repeatable), or list them in the config's `sandpy.packages`");
    }
    let output = args
        .output
        .clone()
        .or(settings.runtime.clone())
        .unwrap_or_else(|| PathBuf::from("sandpy-runtime.wasm"));
    if !args.no_defaults {
        wanted.extend(packages::CURATED.iter().map(|p| p.to_string()));
    }
    let config = sandpy::Config {
        // The runtime is made from the built-in guest's sources, with its componentize-py.
        guest: Some(sandpy_guest::GUEST),
        progress: Some(std::sync::Arc::new(|m: &str| eprintln!("{m}"))),
        ..sandpy::Config::default()
    };
    // Written as this user: checked before anything is written (a link another user put
    // in its place, or a folder they can write in, would take the bytes elsewhere).
    let set = match &args.folder {
        Some(folder) => {
            sandpy::files::output_folder(folder).context("--folder")?;
            packages::install(&wanted, folder, &config)?
        }
        None => {
            let parent = output.parent().filter(|p| !p.as_os_str().is_empty());
            sandpy::files::output_folder(parent.unwrap_or(Path::new("."))).context("--output")?;
            if std::fs::symlink_metadata(&output).is_ok_and(|m| m.file_type().is_symlink()) {
                bail!(
                    "--output `{}` is a link: not written through",
                    output.display()
                );
            }
            packages::build_runtime(&wanted, &output, &config)?
        }
    };
    let installed: Vec<String> = set
        .distributions
        .iter()
        .map(|(n, v)| format!("{n} {v}"))
        .collect();
    eprintln!("sandpy: installed {}", installed.join(", "));
    if !set.removed_extensions.is_empty() {
        eprintln!(
            "sandpy: left out optional compiled speedups: {}",
            set.removed_extensions.join(", ")
        );
    }
    let Some(folder) = &args.folder else {
        // Load the new runtime once: compiles and caches it, and shows what imports.
        let sandbox = common::sandbox_with(sandpy::Config {
            runtime: Some(output.clone()),
            ..sandpy::Config::default()
        })?;
        let report = common::tokio_runtime()?.block_on(sandbox.module_report())?;
        eprintln!(
            "sandpy: wrote {} with packages {}",
            output.display(),
            serde_json::to_string(&report.packages)?
        );
        if !report.package_failures.is_empty() {
            let failed: Vec<&str> = report.package_failures.keys().map(String::as_str).collect();
            eprintln!(
                "sandpy: these modules did not import at build time and are absent: {}",
                failed.join(", ")
            );
        }
        eprintln!(
            "sandpy: use it with `sandpy run --runtime {}` or SANDPY_RUNTIME",
            output.display()
        );
        return Ok(Outcome::Success);
    };
    eprintln!(
        "sandpy: use it with `sandpy run --mount {}:/packages ...`",
        folder.display()
    );
    Ok(Outcome::Success)
}

/// `sandpy build --native`: the native tier's venv.
fn native(args: &Args, settings: sandpy::settings::Settings) -> anyhow::Result<Outcome> {
    let config = settings.native.unwrap_or_default();
    let packages = if args.with.is_empty() {
        config.packages.clone()
    } else {
        args.with.clone()
    };
    let Some(venv) = args.output.clone().or(config.venv.clone()) else {
        bail!("say where the venv goes: --output DIR, or `sandpy.native.venv` in the config");
    };
    let python = config
        .python
        .clone()
        .unwrap_or_else(|| PathBuf::from("python3"));
    // The zygote will import from it as this user: made, or checked, as a folder that no
    // other user controls (an existing venv there would keep another user's `bin/python`).
    sandpy::files::output_folder(&venv).context("--output")?;
    build_venv(&python, &venv, &packages)?;
    eprintln!(
        "sandpy: made {} with {}",
        venv.display(),
        if packages.is_empty() {
            "no packages".to_string()
        } else {
            packages.join(", ")
        }
    );
    eprintln!(
        "sandpy: use it with `\"native\": {{\"venv\": \"{}\"}}` in the config and `--tier native`",
        venv.display()
    );
    Ok(Outcome::Success)
}

/// Make the native tier's virtual environment: `python -m venv`, then `packages` (pip
/// requirements) installed from PyPI as wheels only (nothing is compiled on this
/// machine). pip's own output goes to this process's stderr.
fn build_venv(python: &Path, venv: &Path, packages: &[String]) -> anyhow::Result<()> {
    let step = |program: &Path, args: &[&std::ffi::OsStr], what: &str| {
        let status = std::process::Command::new(program)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::inherit())
            .status()
            .with_context(|| format!("cannot run `{}` to {what}", program.display()))?;
        if !status.success() {
            bail!("`{}` failed to {what} ({status})", program.display());
        }
        Ok(())
    };
    step(
        python,
        &["-m".as_ref(), "venv".as_ref(), venv.as_os_str()],
        "make the virtual environment",
    )?;
    if packages.is_empty() {
        return Ok(());
    }
    let venv_python = venv.join("bin").join("python");
    let mut args: Vec<&std::ffi::OsStr> = ["-m", "pip", "install", "--only-binary=:all:"]
        .iter()
        .map(|a| a.as_ref())
        .collect();
    args.extend(packages.iter().map(|p| std::ffi::OsStr::new(p.as_str())));
    step(&venv_python, &args, "install the packages")
}
