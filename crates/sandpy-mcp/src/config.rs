//! The configuration file as the MCP front end reads it: the `mcpServers` object agents
//! already keep, and sandpy's own settings beside it under `"sandpy"` (read by the
//! library, see [`sandpy::ConfigFile`]).
//!
//! ```json
//! {
//!   "mcpServers": {
//!     "everything": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"] },
//!     "remote": { "url": "http://127.0.0.1:3001/mcp", "headers": { "Authorization": "Bearer x" } }
//!   },
//!   "sandpy": { "limits": { "timeout_ms": 30000 }, "allowed_tools": ["mcp__everything__*"] }
//! }
//! ```

use sandpy::{ConfigError, ConfigFile, Settings};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How to reach one upstream MCP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerSpec {
    /// A process speaking MCP on stdin/stdout.
    Stdio {
        /// Program to start.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment variables (the rest is inherited).
        env: BTreeMap<String, String>,
        /// Working directory.
        cwd: Option<PathBuf>,
    },
    /// A streamable HTTP endpoint.
    Http {
        /// The endpoint URL.
        url: String,
        /// Extra request headers (e.g. `Authorization`).
        headers: BTreeMap<String, String>,
    },
}

/// Everything read from a config file. Defaults: no servers, default settings.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Upstream servers by name (the `<server>` of `mcp__<server>__<tool>`).
    pub servers: BTreeMap<String, ServerSpec>,
    /// sandpy's settings (the `sandpy` section).
    pub settings: Settings,
}

#[derive(Deserialize)]
struct RawServer {
    #[serde(rename = "type")]
    kind: Option<String>,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// Server names become part of tool names and Python identifiers.
fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && !name.contains("__")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl Config {
    /// Find the config: `explicit`, else `$SANDPY_CONFIG`, else `./.mcp.json`, else none.
    pub fn discover(explicit: Option<&Path>) -> Result<Config, ConfigError> {
        let file = ConfigFile::discover(explicit)?;
        Config::from_file(file)
    }

    /// Read and check one config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::from_file(ConfigFile::load(path)?)
    }

    /// Check config text; `path` is only used in messages and to resolve relative paths.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        Config::from_file(ConfigFile::parse(text, path)?)
    }

    /// Read the server entries of a config file.
    fn from_file(file: ConfigFile) -> Result<Config, ConfigError> {
        let path = file.settings.source.clone().unwrap_or_default();
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            path: path.clone(),
            key: key.into(),
            message,
        };
        let base = path.parent().unwrap_or(Path::new("."));
        let mut servers = BTreeMap::new();
        for (name, entry) in file.servers {
            let key = format!("mcpServers.{name}");
            let server: RawServer = serde_path_to_error::deserialize(entry).map_err(|e| {
                let at = e.path().to_string();
                let key = if at == "?" || at.is_empty() || at == "." {
                    key.clone()
                } else {
                    format!("{key}.{at}")
                };
                invalid(&key, e.into_inner().to_string())
            })?;
            if !valid_server_name(&name) {
                return Err(invalid(
                    &key,
                    "server names may use letters, digits, `-`, `_` and `.`, and not `__`".into(),
                ));
            }
            let spec = match (server.command, server.url, server.kind.as_deref()) {
                (_, _, Some("sse")) => {
                    return Err(invalid(
                        &format!("{key}.type"),
                        "SSE servers are not supported; use streamable HTTP (`url`)".into(),
                    ))
                }
                (Some(_), Some(_), _) => {
                    return Err(invalid(
                        &key,
                        "give either `command` (stdio) or `url` (HTTP), not both".into(),
                    ))
                }
                (None, None, _) => {
                    return Err(invalid(
                        &key,
                        "missing `command` (stdio server) or `url` (HTTP server)".into(),
                    ))
                }
                (Some(command), None, _) => {
                    if command.trim().is_empty() {
                        return Err(invalid(
                            &format!("{key}.command"),
                            "must not be empty".into(),
                        ));
                    }
                    ServerSpec::Stdio {
                        command,
                        args: server.args,
                        env: server.env,
                        cwd: server.cwd.map(|c| base.join(c)),
                    }
                }
                (None, Some(url), _) => {
                    if url.starts_with("https://") {
                        let message =
                            "https upstreams are not supported yet (this build has no TLS stack); \
                                       use http on loopback or a local TLS-terminating proxy";
                        return Err(invalid(&format!("{key}.url"), message.into()));
                    }
                    if !url.starts_with("http://") {
                        return Err(invalid(
                            &format!("{key}.url"),
                            format!("{url:?} is not an http URL"),
                        ));
                    }
                    ServerSpec::Http {
                        url,
                        headers: server.headers,
                    }
                }
            };
            servers.insert(name, spec);
        }
        Ok(Config {
            servers,
            settings: file.settings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn error(text: &str) -> String {
        Config::parse(text, Path::new("/x/.mcp.json"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn reads_stdio_and_http_servers_and_settings() {
        let c = Config::parse(
            r#"{"mcpServers": {"fs": {"command": "npx", "args": ["-y", "x"], "env": {"A": "1"}},
                "web": {"type": "http", "url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "Bearer t"}}},
               "sandpy": {"limits": {"timeout_ms": 5000, "max_tool_calls": 10}, "allowed_tools": ["mcp__fs__*"],
                          "audit_log": "audit.jsonl"}}"#,
            Path::new("/etc/sandpy/.mcp.json"),
        )
        .unwrap();
        assert!(matches!(&c.servers["fs"], ServerSpec::Stdio { command, .. } if command == "npx"));
        assert!(
            matches!(&c.servers["web"], ServerSpec::Http { headers, .. } if headers["Authorization"] == "Bearer t")
        );
        assert_eq!(c.settings.limits.timeout, Duration::from_secs(5));
        assert_eq!(c.settings.limits.tool_calls, 10);
        assert_eq!(
            c.settings.audit_log.as_deref(),
            Some(Path::new("/etc/sandpy/audit.jsonl"))
        );
    }

    #[test]
    fn errors_name_the_file_the_key_and_the_problem() {
        let e = error(r#"{"mcpServers": {"a": {"args": []}}}"#);
        assert!(
            e.contains("/x/.mcp.json")
                && e.contains("mcpServers.a")
                && e.contains("missing `command`"),
            "{e}"
        );
        let e = error(r#"{"mcpServers": {"a": {"command": 3}}}"#);
        assert!(
            e.contains("mcpServers.a.command") && e.contains("invalid type"),
            "{e}"
        );
        let e = error(r#"{"sandpy": {"limits": {"timeout": 5}}}"#);
        assert!(
            e.contains("sandpy.limits") && e.contains("unknown field `timeout`"),
            "{e}"
        );
        let e = error(r#"{"sandpy": {"allowed_tools": ["["]}}"#);
        assert!(e.contains("sandpy.allowed_tools[0]"), "{e}");
        let e = error(r#"{"mcpServers": {"a__b": {"command": "x"}}}"#);
        assert!(e.contains("not `__`"), "{e}");
        let e = error("{not json");
        assert!(
            e.contains("at `.`") && e.contains("key must be a string"),
            "{e}"
        );
        let e = error(r#"{"mcpServers": {"tls": {"url": "https://example.com/mcp"}}}"#);
        assert!(
            e.contains("mcpServers.tls.url") && e.contains("no TLS"),
            "{e}"
        );
        let e = error(r#"{"mcpServers": {"old": {"type": "sse", "url": "http://x"}}}"#);
        assert!(e.contains("SSE"), "{e}");
        let e = error(r#"{"sandpy": {"default_policy": "nope"}}"#);
        assert!(
            e.contains("sandpy.default_policy") && e.contains("known policies: default, strict"),
            "{e}"
        );
        let e = error(r#"{"sandpy": {"policies": {"strict": {}}}}"#);
        assert!(e.contains("built-in policy"), "{e}");
        let e = error(r#"{"sandpy": {"policies": {"mine": {"allowed_modulez": []}}}}"#);
        assert!(
            e.contains("sandpy.policies.mine") && e.contains("unknown field `allowed_modulez`"),
            "{e}"
        );
    }

    #[test]
    fn user_policies_and_default_policy() {
        let c = Config::parse(
            r#"{"sandpy": {"policies": {"evals": {"allowed_modules": ["json"], "timeout_ms": 100}}, "default_policy": "evals"}}"#,
            Path::new("c.json"),
        )
        .unwrap();
        let policy = c.settings.policy(None).unwrap().unwrap();
        assert_eq!(
            (policy.name.as_str(), policy.limits.timeout_ms),
            ("evals", Some(100))
        );
        assert_eq!(
            c.settings.policy(Some("strict")).unwrap().unwrap().name,
            "strict"
        );
    }
}
