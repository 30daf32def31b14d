//! `sandpy check`: the policy's static check, without running the code.

use crate::common::{self, outln, Program};
use crate::exit::Outcome;
use anyhow::{bail, Context};
use std::path::PathBuf;

#[derive(clap::Args)]
pub(super) struct Args {
    /// Python file to check; `-` reads stdin.
    file: PathBuf,
    /// Print `{file, policy, violations}` as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    settings: common::ConfigArgs,
}

pub(super) fn run(args: Args) -> anyhow::Result<Outcome> {
    // No run, so no `invalid_input` execution: a file that is not text is a usage error.
    let (code, filename) = match Program::read(Some(&args.file), None)? {
        Program::Text { code, name } => (code, name),
        Program::Refused(why) => bail!(why),
    };
    let resolved = args.settings.resolve()?;
    let policy = resolved
        .policy
        .clone()
        .unwrap_or_else(sandpy::Policy::standard);
    let sandbox = common::one_shot_sandbox(&resolved, None)?;
    let violations = common::one_shot_runtime()?
        .block_on(sandbox.validate(&code, &policy))
        .context("the check could not run")?;
    if args.json {
        let report =
            serde_json::json!({"file": filename, "policy": policy.name, "violations": violations});
        outln!("{report}")?;
    } else {
        for v in &violations {
            outln!(
                "{filename}:{}:{}: {}: {}",
                v.line,
                v.column,
                v.rule,
                v.message
            )?;
        }
    }
    Ok(if violations.is_empty() {
        Outcome::Success
    } else {
        Outcome::Violations
    })
}
