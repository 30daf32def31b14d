//! The configuration file: the `mcpServers` object agents already keep, plus sandpy's own
//! settings beside it under `"sandpy"`.
//!
//! ```json
//! {
//!   "mcpServers": {
//!     "everything": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"] },
//!     "remote": { "url": "http://127.0.0.1:3001/mcp", "headers": { "Authorization": "Bearer x" } }
//!   },
//!   "sandpy": {
//!     "limits": { "timeout_ms": 30000, "memory_mb": 256, "max_output_bytes": 1048576,
//!                 "max_tool_calls": 1000, "tool_timeout_ms": 60000 },
//!     "allowed_tools": ["mcp__everything__*"],
//!     "audit_log": "sandpy-audit.jsonl",
//!     "audit_arguments": false
//!   }
//! }
//! ```

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The configuration could not be used; says which file, which key, and what is wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config `{path}`: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid JSON, or a key has the wrong type.
    #[error("config `{path}`: at `{key}`: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Dotted path of the offending key (`.` for the whole file).
        key: String,
        /// What is wrong.
        message: String,
    },
}

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

/// sandpy's default limits for runs started through MCP or with a config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitDefaults {
    /// Per-run limits.
    pub limits: sandpy::Limits,
    /// Per tool call timeout.
    pub tool_timeout: Duration,
}

impl Default for LimitDefaults {
    fn default() -> Self {
        LimitDefaults {
            limits: sandpy::Limits::default(),
            tool_timeout: Duration::from_secs(60),
        }
    }
}

/// Everything read from a config file. Defaults: no servers, default limits, every tool
/// allowed, no audit log.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Upstream servers by name (the `<server>` of `mcp__<server>__<tool>`).
    pub servers: BTreeMap<String, ServerSpec>,
    /// Default limits.
    pub defaults: LimitDefaults,
    /// Tools runs may use (names or globs); `None` allows all. Per-run lists only narrow it.
    pub allowed_tools: Option<Vec<String>>,
    /// Where to append the JSON Lines audit log.
    pub audit_log: Option<PathBuf>,
    /// Whether the audit log records tool-call argument values.
    pub audit_arguments: bool,
    /// Policies defined in the config, by name (beside the built-in `strict` and `default`).
    pub policies: BTreeMap<String, sandpy::Policy>,
    /// The policy runs use unless they name one.
    pub default_policy: Option<String>,
    /// Idle TTL, count and memory of `run_python` sessions.
    pub sessions: sandpy::SessionLimits,
    /// Folder where `save_session` writes and `restore_session` reads; none disables both.
    pub session_dir: Option<PathBuf>,
    /// Runs executing at once (default: the number of cores).
    pub max_concurrent_runs: Option<usize>,
    /// Runs waiting for a slot before new ones are answered `busy` (default 256).
    pub max_queued_runs: Option<usize>,
    /// Host folders every run may read, at their guest paths.
    pub mounts: Vec<sandpy::Mount>,
    /// Runtime component from `sandpy build` to use instead of the built-in one.
    pub runtime: Option<PathBuf>,
    /// Extra packages (pip requirements) that `sandpy build` puts into `runtime`.
    pub packages: Vec<String>,
    /// The file this came from, if any.
    pub source: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawFile {
    #[serde(default)]
    mcp_servers: BTreeMap<String, RawServer>,
    #[serde(default)]
    sandpy: RawSandpy,
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

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSandpy {
    #[serde(default)]
    limits: RawLimits,
    allowed_tools: Option<Vec<String>>,
    audit_log: Option<PathBuf>,
    #[serde(default)]
    audit_arguments: bool,
    #[serde(default)]
    policies: BTreeMap<String, sandpy::Policy>,
    default_policy: Option<String>,
    #[serde(default)]
    sessions: RawSessions,
    max_concurrent_runs: Option<usize>,
    max_queued_runs: Option<usize>,
    /// Guest path -> host folder (relative to the config file), read-only.
    #[serde(default)]
    mounts: BTreeMap<String, PathBuf>,
    runtime: Option<PathBuf>,
    #[serde(default)]
    packages: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSessions {
    idle_ttl_ms: Option<u64>,
    max_sessions: Option<usize>,
    memory_mb: Option<u64>,
    save_dir: Option<PathBuf>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    timeout_ms: Option<u64>,
    memory_mb: Option<u64>,
    max_output_bytes: Option<usize>,
    max_code_bytes: Option<usize>,
    max_tool_calls: Option<usize>,
    max_tool_result_bytes: Option<usize>,
    tool_timeout_ms: Option<u64>,
    disk_mb: Option<u64>,
    output_files_mb: Option<u64>,
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
        if let Some(path) = explicit {
            return Config::load(path);
        }
        if let Some(path) = std::env::var_os("SANDPY_CONFIG") {
            return Config::load(Path::new(&path));
        }
        let local = Path::new(".mcp.json");
        if local.is_file() {
            return Config::load(local);
        }
        Ok(Config::default())
    }

    /// Read and check one config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        Config::parse(&text, path)
    }

    /// Check config text; `path` is only used in messages and to resolve relative paths.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            path: path.into(),
            key: key.into(),
            message,
        };
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let raw: RawFile = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
            let key = match e.path().to_string() {
                path if path == "?" || path.is_empty() => ".".to_string(),
                path => path,
            };
            invalid(&key, e.into_inner().to_string())
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut servers = BTreeMap::new();
        for (name, server) in raw.mcp_servers {
            let key = format!("mcpServers.{name}");
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
        let l = raw.sandpy.limits;
        let mut defaults = LimitDefaults::default();
        let limits = &mut defaults.limits;
        if let Some(ms) = l.timeout_ms {
            if ms == 0 {
                return Err(invalid(
                    "sandpy.limits.timeout_ms",
                    "must be at least 1".into(),
                ));
            }
            limits.timeout = Duration::from_millis(ms);
        }
        if let Some(mb) = l.memory_mb {
            if !(1..=4096).contains(&mb) {
                return Err(invalid(
                    "sandpy.limits.memory_mb",
                    "must be between 1 and 4096".into(),
                ));
            }
            limits.memory_bytes = (mb as usize) << 20;
        }
        limits.output_bytes = l.max_output_bytes.unwrap_or(limits.output_bytes);
        limits.code_bytes = l.max_code_bytes.unwrap_or(limits.code_bytes);
        limits.tool_calls = l.max_tool_calls.unwrap_or(limits.tool_calls);
        limits.tool_result_bytes = l.max_tool_result_bytes.unwrap_or(limits.tool_result_bytes);
        if let Some(mb) = l.disk_mb {
            limits.disk_bytes = mb << 20;
        }
        if let Some(mb) = l.output_files_mb {
            limits.output_files_bytes = mb << 20;
        }
        if let Some(ms) = l.tool_timeout_ms {
            defaults.tool_timeout = Duration::from_millis(ms.max(1));
        }
        if let Some(patterns) = &raw.sandpy.allowed_tools {
            for (i, pattern) in patterns.iter().enumerate() {
                if let Err(e) = sandpy::validate_tool_pattern(pattern) {
                    return Err(invalid(&format!("sandpy.allowed_tools[{i}]"), e));
                }
            }
        }
        let mut policies = BTreeMap::new();
        for (name, mut policy) in raw.sandpy.policies {
            if sandpy::Policy::builtin(&name).is_some() {
                return Err(invalid(
                    &format!("sandpy.policies.{name}"),
                    format!("`{name}` is a built-in policy; choose another name"),
                ));
            }
            policy.name = name.clone();
            policies.insert(name, policy);
        }
        let mut sessions = sandpy::SessionLimits::default();
        let raw_sessions = raw.sandpy.sessions;
        if let Some(ms) = raw_sessions.idle_ttl_ms {
            sessions.idle_ttl = Duration::from_millis(ms);
        }
        sessions.max_sessions = raw_sessions.max_sessions.unwrap_or(sessions.max_sessions);
        if let Some(mb) = raw_sessions.memory_mb {
            if !(1..=4096).contains(&mb) {
                return Err(invalid(
                    "sandpy.sessions.memory_mb",
                    "must be between 1 and 4096".into(),
                ));
            }
            sessions.memory_bytes = (mb as usize) << 20;
        }
        let session_dir = raw_sessions.save_dir.map(|dir| base.join(dir));
        let mounts: Vec<sandpy::Mount> = raw
            .sandpy
            .mounts
            .into_iter()
            .map(|(guest, host)| sandpy::Mount {
                host: base.join(host),
                guest,
            })
            .collect();
        sandpy::Mount::validate(&mounts).map_err(|message| invalid("sandpy.mounts", message))?;
        let config = Config {
            servers,
            defaults,
            allowed_tools: raw.sandpy.allowed_tools,
            audit_log: raw.sandpy.audit_log.map(|p| base.join(p)),
            audit_arguments: raw.sandpy.audit_arguments,
            policies,
            default_policy: raw.sandpy.default_policy,
            sessions,
            session_dir,
            max_concurrent_runs: raw.sandpy.max_concurrent_runs,
            max_queued_runs: raw.sandpy.max_queued_runs,
            mounts,
            runtime: raw.sandpy.runtime.map(|p| base.join(p)),
            packages: raw.sandpy.packages,
            source: Some(path.to_path_buf()),
        };
        if let Err(message) = config.policy(None) {
            return Err(invalid("sandpy.default_policy", message));
        }
        Ok(config)
    }

    /// The sandbox settings this config asks for, over `base`.
    pub fn sandbox_config(&self, base: sandpy::Config) -> sandpy::Config {
        sandpy::Config {
            max_concurrent_runs: self.max_concurrent_runs.or(base.max_concurrent_runs),
            max_queued_runs: self.max_queued_runs.unwrap_or(base.max_queued_runs),
            runtime: self.runtime.clone().or(base.runtime),
            ..base
        }
    }

    /// The config's default limits with `policy`'s limit defaults applied.
    pub fn limits_for(&self, policy: Option<&sandpy::Policy>) -> sandpy::Limits {
        match policy {
            Some(policy) => policy.limits(&self.defaults.limits),
            None => self.defaults.limits.clone(),
        }
    }

    /// The policy named `name`, else the config's default policy, else none.
    pub fn policy(&self, name: Option<&str>) -> Result<Option<sandpy::Policy>, String> {
        let Some(name) = name.or(self.default_policy.as_deref()) else {
            return Ok(None);
        };
        if let Some(policy) = self
            .policies
            .get(name)
            .cloned()
            .or_else(|| sandpy::Policy::builtin(name))
        {
            return Ok(Some(policy));
        }
        let mut known = vec!["default".to_string(), "strict".to_string()];
        known.extend(self.policies.keys().cloned());
        Err(format!(
            "unknown policy {name:?}; known policies: {}",
            known.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(c.defaults.limits.timeout, Duration::from_secs(5));
        assert_eq!(c.defaults.limits.tool_calls, 10);
        assert_eq!(
            c.audit_log.as_deref(),
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
        let policy = c.policy(None).unwrap().unwrap();
        assert_eq!(
            (policy.name.as_str(), policy.timeout_ms),
            ("evals", Some(100))
        );
        assert_eq!(c.policy(Some("strict")).unwrap().unwrap().name, "strict");
    }
}
