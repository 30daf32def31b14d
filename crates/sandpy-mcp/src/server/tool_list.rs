//! `tools/list` as a client reads it: the tools in a fixed order, and `run_python`'s
//! description completed with where code runs, the upstream servers as they are now and
//! their tools as Python signatures.

use super::run;
use super::{SandpyServer, ServerState};
use rmcp::model::Tool;
use sandpy::tools::signature::{self, SignatureLimits};
use sandpy::tools::ToolHost;

/// The order tools are listed in: running code first, then finding upstream tools, then
/// sessions. A tool missing here is listed after these, by name.
const LISTED: [&str; 10] = [
    "run_python",
    "call_python_function",
    "search_tools",
    "get_tool_schema",
    "list_sessions",
    "reset_session",
    "close_session",
    "save_session",
    "restore_session",
    "fork_session",
];

/// How long `tools/list` waits for upstream servers still starting before it answers
/// with their status as it is (`starting`): well under a client's request timeout.
pub(super) const STARTING_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl SandpyServer {
    /// The tools in [`LISTED`] order, `run_python`'s description completed with the
    /// upstream servers and their tools' signatures as they are now, and the run tools'
    /// `tier` argument only where the operator lets requests choose it
    /// (`sandpy.native.per_run`).
    pub(super) fn tools(&self) -> Vec<Tool> {
        let rank = |tool: &Tool| {
            LISTED
                .iter()
                .position(|name| *name == tool.name)
                .unwrap_or(LISTED.len())
        };
        let mut tools = self.state.tools.list_all();
        tools.sort_by_key(rank); // stable: the unlisted stay sorted by name
        for tool in &mut tools {
            if !self.state.tier_per_run {
                run::without_tier(tool);
            }
            if tool.name == "run_python" {
                let guide = tool.description.as_deref().unwrap_or_default();
                let (runs_on, servers) = (&self.state.runs_on, self.state.servers_line());
                let mut description = format!("{guide}\n{runs_on}\n{servers}");
                description.push_str(&self.state.signatures());
                tool.description = Some(description.into());
            }
        }
        tools
    }
}

/// What `run_python`'s description says of where code runs: each tier a request can get,
/// its Python and packages, and the network. A model that knows `import pandas` fails in
/// the WebAssembly tier writes code that works the first time.
pub(super) fn runs_on(settings: &sandpy::settings::Settings) -> String {
    let native = settings.native.as_ref();
    let wasm = "Python 3.14 in WebAssembly: the standard library and pure-Python packages \
                (no compiled packages such as numpy or pandas)";
    let native_line = |config: &sandpy::native::NativeConfig| {
        let version = config
            .venv
            .as_ref()
            .and_then(|venv| std::fs::read_to_string(venv.join("pyvenv.cfg")).ok())
            .and_then(|cfg| {
                cfg.lines().find_map(|line| {
                    let (key, value) = line.split_once('=')?;
                    matches!(key.trim(), "version" | "version_info")
                        .then(|| value.trim().to_string())
                })
            })
            .map_or("the host's CPython".to_string(), |v| format!("CPython {v}"));
        let packages = if config.packages.is_empty() {
            "its venv's packages".to_string()
        } else {
            config.packages.join(", ")
        };
        format!("{version} natively (confined) with {packages}")
    };
    let tiers = match (settings.tier, native) {
        (sandpy::Tier::Native, Some(config)) if config.per_run => format!(
            "Runs on {}; `tier: \"wasm\"` gives {wasm}.",
            native_line(config)
        ),
        (sandpy::Tier::Native, Some(config)) => format!("Runs on {}.", native_line(config)),
        (_, Some(config)) if config.per_run => format!(
            "Runs on {wasm}; `tier: \"native\"` gives {}.",
            native_line(config)
        ),
        _ => format!("Runs on {wasm}."),
    };
    let network = if settings.network.is_some() {
        "Network: HTTP(S) to the hosts the operator allows (urllib.request, http.client); no sockets."
    } else {
        "Network: none."
    };
    format!("{tiers} {network}")
}

/// What heads the signatures in `run_python`'s description.
const SIGNATURES_HEAD: &str = "\nThe tools as Python signatures (arguments are keyword-only; \
leave out an optional one or pass None; a dict result is the TypedDict shown; from async code \
a call returns an awaitable):\n```python\n";

impl ServerState {
    /// The allowed upstream tools as Python stubs ([`signature::stubs`]), for the end of
    /// `run_python`'s description: as much detail as fits in the config's
    /// `model_output.text_bytes`, the tools past it counted. Empty without tools.
    fn signatures(&self) -> String {
        let names = self.hub.tool_names();
        if names.is_empty() {
            return String::new();
        }
        let tool = |i: usize| {
            let name = names.get(i)?;
            Some((self.hub.tool(name)?, self.hub.output_schema(name)))
        };
        let budget = self.model_output.text_bytes;
        let limits = SignatureLimits::default();
        let stubs = signature::stubs(names.len(), &tool, budget, &limits);
        if stubs.is_empty() {
            return String::new();
        }
        format!("{SIGNATURES_HEAD}{stubs}\n```")
    }

    /// `Available servers: …` for `run_python`'s description: each upstream server and
    /// its status.
    fn servers_line(&self) -> String {
        let servers: Vec<String> = self
            .hub
            .servers()
            .iter()
            .map(|s| format!("{} ({})", s.name, s.status))
            .collect();
        let servers = if servers.is_empty() {
            "none configured".to_string()
        } else {
            servers.join(", ")
        };
        format!("Available servers: {servers}.")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(sandpy: &str) -> sandpy::settings::Settings {
        let text = format!(r#"{{"sandpy": {sandpy}}}"#);
        let config = sandpy::settings::ConfigFile::parse(&text, std::path::Path::new("/c.json"))
            .expect("config");
        config.settings
    }

    #[test]
    fn run_python_says_which_python_and_packages_each_tier_has() {
        let wasm = runs_on(&settings("{}"));
        assert!(
            wasm.starts_with("Runs on Python 3.14 in WebAssembly"),
            "{wasm}"
        );
        assert!(
            wasm.contains("no compiled packages") && wasm.ends_with("Network: none."),
            "{wasm}"
        );
        let venv = tempfile::tempdir().expect("venv");
        std::fs::write(
            venv.path().join("pyvenv.cfg"),
            "home = /usr/bin\nversion = 3.12.3\n",
        )
        .expect("cfg");
        let native = format!(
            r#"{{"tier": "native", "native": {{"venv": {:?}, "packages": ["numpy", "pandas"], "per_run": true}}}}"#,
            venv.path()
        );
        let native = runs_on(&settings(&native));
        assert!(
            native.starts_with("Runs on CPython 3.12.3 natively (confined) with numpy, pandas; `tier: \"wasm\"` gives Python 3.14 in WebAssembly"),
            "{native}"
        );
    }
}
