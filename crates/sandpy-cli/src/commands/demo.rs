//! `sandpy demo`: the main job on a built-in default. Python in the sandbox discovers and
//! calls the tools of the MCP reference server `everything` (started with `npx`), several
//! at once with `asyncio.gather`, and returns one combined result.

use crate::common::{self, outln};
use crate::exit::Outcome;
use sandpy::RunOptions;
use sandpy_mcp::{ConfigFile, ServerSpec};
use std::io::Write as _;

/// The reference server the demo starts (pinned, so the demo is repeatable).
const EVERYTHING: &str = "@modelcontextprotocol/server-everything@2026.8.31";

const PROGRAM: &str = r#"
import asyncio

names = [t["name"] for t in discover_mcp_tools()]
print(f"{len(names)} tools available, e.g. {names[:4]}")
print("search 'add numbers' ->", [t["name"] for t in search_tools("add numbers", limit=2)])

# Three tool calls in one batch: the host runs them concurrently.
echoed, total, again = await asyncio.gather(
    tools.everything.echo(message="hello from the sandbox"),
    call_mcp_tool("mcp__everything__get-sum", {"a": 20, "b": 22}),
    tools.everything.echo(message="second echo"),
)
try:
    await call_mcp_tool("mcp__everything__get-sum", {"a": "not a number"})
except ToolError as e:
    print("schema check refused a bad call:", str(e).splitlines()[0])
{"echo": echoed, "sum": total, "again": again}
"#;

#[derive(clap::Args)]
pub(super) struct Args {
    /// Print the whole execution as JSON.
    #[arg(long)]
    json: bool,
}

/// A config with one upstream: the pinned reference `everything` server, via npx.
pub(super) fn everything_config() -> ConfigFile {
    let mut config = ConfigFile::default();
    config.servers.insert(
        "everything".into(),
        ServerSpec::Stdio {
            command: "npx".into(),
            args: vec!["-y".into(), EVERYTHING.into()],
            env: Default::default(),
            cwd: None,
            expansions: Default::default(),
        },
    );
    config
}

pub(super) fn run(args: Args) -> anyhow::Result<Outcome> {
    let config = everything_config();
    let sandbox = common::sandbox()?;
    eprintln!("sandpy demo: starting `npx {EVERYTHING}` and running this program in the sandbox:\n{PROGRAM}");
    let execution = common::tokio_runtime()?.block_on(async {
        let hub = common::start_hub(&config).await;
        let options = RunOptions {
            tools: hub.as_ref().map(|h| h.for_execution("demo".into(), None)),
            ..RunOptions::default()
        };
        let execution = sandbox.run_with(PROGRAM, &options).await;
        if let Some(hub) = hub {
            hub.shutdown().await;
        }
        execution
    });
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&execution)?)?;
    } else {
        let bounded = sandpy::model_output::ModelOutput::default().bound(&execution);
        write!(
            std::io::stdout().lock(),
            "{}",
            sandpy_mcp::summarize(&bounded)
        )?;
    }
    Ok(Outcome::Run(execution.status))
}
