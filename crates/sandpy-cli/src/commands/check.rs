//! `sandpy check`: the policy's static check, without running the code.

use crate::exit::Outcome;
use anyhow::Context;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Python file to check; `-` reads stdin.
    file: PathBuf,
    /// Print `{file, policy, violations}` as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    settings: super::ConfigArgs,
}

pub fn run(args: Args) -> anyhow::Result<Outcome> {
    let (code, filename) = super::run::read_code(Some(&args.file), None)?;
    let resolved = args.settings.resolve()?;
    let policy = resolved
        .policy
        .clone()
        .unwrap_or_else(sandpy::Policy::standard);
    let sandbox = super::resolved_sandbox(&resolved)?;
    let violations = super::tokio_runtime()?
        .block_on(sandbox.validate(&code, &policy))
        .context("the check could not run")?;
    if args.json {
        let report =
            serde_json::json!({"file": filename, "policy": policy.name, "violations": violations});
        println!("{report}");
    } else {
        for v in &violations {
            println!(
                "{filename}:{}:{}: {}: {}",
                v.line, v.column, v.rule, v.message
            );
        }
    }
    Ok(if violations.is_empty() {
        Outcome::Success
    } else {
        Outcome::Violations
    })
}
