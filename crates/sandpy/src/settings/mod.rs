//! The `"sandpy"` section of a config file: the settings every front end shares (limits,
//! policies, sessions, mounts, runtime, concurrency, audit). The file is the `mcpServers`
//! file agents already keep; this module reads sandpy's section and hands the server
//! entries, unread, to the MCP front end.
//!
//! ```json
//! {
//!   "mcpServers": {
//!     "everything": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"] }
//!   },
//!   "sandpy": {
//!     "limits": { "timeout_ms": 30000, "memory_mb": 256, "max_output_bytes": 1048576,
//!                 "max_tool_calls": 1000, "tool_timeout_ms": 60000 },
//!     "model_output": { "text_bytes": 20000 },
//!     "allowed_tools": ["mcp__everything__*"],
//!     "approve": ["mcp__everything__write_*"],
//!     "audit_log": "sandpy-audit.jsonl",
//!     "drain_grace_ms": 30000, "metrics_require_token": false, "ready_requires": ["everything"],
//!     "allowed_origins": ["https://agent.example.com"], "allowed_hosts": ["mcp.example.com"],
//!     "metrics_tenant_names": false, "max_tenant_runs": 4, "max_tenant_queued_runs": 128,
//!     "audit_arguments": false,
//!     "sessions": { "max_sessions": 64, "memory_mb": 256, "idle_ttl_ms": 600000,
//!                   "total_memory_mb": 8192, "tenant_max_sessions": 8, "tenant_memory_mb": 2048,
//!                   "save_dir": "saved-sessions" },
//!     "resources": { "session_mb": 64, "session_files": 1000, "total_mb": 256, "tenant_mb": 128,
//!                    "ttl_ms": 3600000, "inline_kb": 1024 },
//!     "tenants": { "agent-a": { "token_env": "AGENT_A_TOKEN", "max_sessions": 16 } }
//!   }
//! }
//! ```
//!
//! A front end reads the file once ([`ConfigFile::discover`]), picks the policy once
//! ([`Settings::resolve`]) and passes the [`Resolved`] value on.

mod read;

use crate::files::Mount;
use crate::model_output::ModelOutput;
use crate::sessions::{SessionLimits, TenantQuota};
use crate::{Config, Limits, Policy, RunOptions};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// The configuration could not be used; says which file, which key, and what is wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config `{path}`")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Another user could write or swap the file (its servers' commands would run as this
    /// user), so it is not read.
    #[error("config `{path}` is not read")]
    Untrusted {
        /// The file.
        path: PathBuf,
        /// Whose it is, or who else can change it.
        #[source]
        source: crate::files::FolderError,
    },
    /// The file is not valid JSON, or a key has the wrong type or value.
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

/// A run or the config named a policy that is neither built in nor in the config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy {name:?}; known policies: {}", .known.join(", "))]
pub struct UnknownPolicy {
    /// The name asked for.
    pub name: String,
    /// The policies there are.
    pub known: Vec<String>,
}

/// sandpy's settings from a config file. Defaults: default limits (the 60 s tool-call
/// timeout among them), default model output (20,000 bytes a text), every tool allowed,
/// no audit log, no policies of its own and none by default, default session limits with
/// saving off, no tenants of their own, default concurrency, no mounts, the built-in
/// runtime, no extra packages, no network.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    /// Limits of every run (a policy's and the run's own go over them).
    pub limits: Limits,
    /// How much of a run's result a model is shown (the MCP server's results).
    pub model_output: ModelOutput,
    /// Tools runs may use (names or globs); `None` allows all. Per-run lists only narrow it.
    pub allowed_tools: Option<Vec<String>>,
    /// Tools (names or globs) whose calls wait for a person's approval; refused where
    /// nobody can be asked.
    pub approve: Vec<String>,
    /// Where to append the JSON Lines audit log.
    pub audit_log: Option<PathBuf>,
    /// Whether the audit log records tool-call argument values.
    pub audit_arguments: bool,
    /// Policies defined in the config, by name (beside the built-in `strict` and `default`).
    pub policies: BTreeMap<String, Policy>,
    /// The policy runs use unless they name one.
    pub default_policy: Option<String>,
    /// Idle TTL, count and memory of sessions.
    pub sessions: SessionLimits,
    /// How long and how much of runs' files the MCP server keeps for its clients to read
    /// as resources (`sandpy.resources`).
    pub resources: ResourceLimits,
    /// Folder where saved sessions are written and read; none disables saving.
    pub session_dir: Option<PathBuf>,
    /// HTTP clients known by their bearer tokens (`sandpy.tenants`), each with its own
    /// sessions, quota, saved sessions and audit field.
    pub tenants: Vec<TokenTenant>,
    /// Runs executing at once (default: the number of cores).
    pub max_concurrent_runs: Option<usize>,
    /// Runs waiting for a slot before new ones are answered `busy` (default 256).
    pub max_queued_runs: Option<usize>,
    /// Runs of one tenant of `sandpy serve --http` executing at once (default: half the
    /// run slots, rounded up), so that one tenant cannot take every slot.
    pub max_tenant_runs: Option<usize>,
    /// Runs of one tenant waiting for its share before its new ones are answered `busy`
    /// (default: half of `max_queued_runs`), so that one tenant cannot fill the queue.
    pub max_tenant_queued_runs: Option<usize>,
    /// Host folders every run may read, at their guest paths.
    pub mounts: Vec<Mount>,
    /// How long runs in flight may go on after `sandpy serve --http` is told to stop
    /// (`drain_grace_ms`); the server's default (30 s) when `None`.
    pub drain_grace: Option<Duration>,
    /// Whether `GET /metrics` needs the bearer token (it is open like the probes by
    /// default).
    pub metrics_require_token: bool,
    /// Whether `GET /metrics` labels sessions by the tenants' names (`tenant="oauth:…"`);
    /// otherwise by a keyed hash of each name. Only with `metrics_require_token`.
    pub metrics_tenant_names: bool,
    /// `Host` values (`host[:port]`) every route of `sandpy serve --http` answers, beside
    /// the loopback names on a loopback server; any other `Host` gets 403 (DNS
    /// rebinding). Empty beyond loopback: any `Host` (the token guards `/mcp`).
    pub allowed_hosts: Vec<String>,
    /// Browser origins (`scheme://host[:port]`) whose requests `sandpy serve --http`
    /// takes; a request with any other `Origin` is refused with 403 (the MCP transport's
    /// rule against DNS rebinding and cross-site requests). Loopback origins are allowed
    /// too when the server listens on loopback. Clients that are not browsers send none.
    pub allowed_origins: Vec<String>,
    /// Upstream servers (names in `mcpServers`) that must be up for `GET /readyz` to
    /// answer 200: a replica whose required tools are down takes no new traffic.
    pub ready_requires: Vec<String>,
    /// Runtime component from `sandpy build` to use instead of the built-in one.
    pub runtime: Option<PathBuf>,
    /// Extra packages (pip requirements) that `sandpy build` puts into `runtime`.
    pub packages: Vec<String>,
    /// The tier runs use unless the operator picks another for one (`--tier`).
    pub tier: crate::Tier,
    /// The native tier's Python and packages.
    pub native: Option<crate::native::NativeConfig>,
    /// The hosts runs may reach over HTTP(S) and their secrets; `None`: no network.
    pub network: Option<crate::network::Network>,
    /// The file this came from, if any.
    pub source: Option<PathBuf>,
}

/// What the MCP server keeps of runs' `/output` files (and images too big to send inline)
/// for its clients to read back as resources (`sandpy.resources`): bounded in time, in
/// bytes and files per MCP session, and in bytes for the whole server, each bound checked
/// before anything is kept. Defaults: an hour, 64 MiB and 1,000 files a session, 256 MiB
/// in all, files up to 1 MiB also sent inline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceLimits {
    /// Bytes one MCP session's kept files may hold together; its oldest runs' files go to
    /// make room. 0 keeps nothing: every file is sent inline, as before resources.
    pub session_bytes: u64,
    /// Files one MCP session may have kept at once; its oldest runs' files go to make room.
    pub session_files: usize,
    /// Bytes all sessions' kept files may hold together; a run whose files would go past
    /// it has none kept (the result says so).
    pub total_bytes: u64,
    /// Bytes one tenant's kept files may hold together, over all its MCP sessions; its
    /// oldest runs' files go to make room, so that one tenant cannot fill `total_bytes`.
    pub tenant_bytes: u64,
    /// How long a run's files are kept, at most (they go sooner when the MCP session ends).
    pub ttl: Duration,
    /// Files (and images of rich outputs) up to this size are sent inline in the result
    /// as well; bigger ones only as a link.
    pub inline_bytes: u64,
}

impl Default for ResourceLimits {
    fn default() -> Self {
        ResourceLimits {
            session_bytes: 64 << 20,
            session_files: 1000,
            total_bytes: 256 << 20,
            tenant_bytes: 128 << 20,
            ttl: Duration::from_secs(3600),
            inline_bytes: 1 << 20,
        }
    }
}

/// A tenant of `sandpy serve --http` known by its bearer token: the sessions made with
/// the token are its own, whichever MCP session (connection) made them, so that they
/// survive a client reconnecting.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenTenant {
    /// Its name: the audit log's `tenant` field and its folder under `save_dir`.
    pub name: String,
    /// The bearer token that identifies it.
    pub token: String,
    /// What its sessions may hold.
    pub quota: TenantQuota,
}

impl std::fmt::Debug for TokenTenant {
    /// The token is a secret: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenTenant")
            .field("name", &self.name)
            .field("token", &"<secret>")
            .field("quota", &self.quota)
            .finish()
    }
}

/// A config file as read: sandpy's settings, and the `mcpServers` entries left for the
/// MCP front end to read (as JSON, by server name).
#[derive(Debug, Clone, Default)]
pub struct ConfigFile {
    /// The `sandpy` section.
    pub settings: Settings,
    /// The `mcpServers` object's entries, unread.
    pub servers: BTreeMap<String, serde_json::Value>,
    /// The `sandpy.auth` section (OAuth for `sandpy serve --http`), unread: the MCP front
    /// end reads it.
    pub auth: Option<serde_json::Value>,
}

/// Settings with the run-time choices made once: the policy picked. Front ends build it
/// once and hand it to everything that needs settings.
#[derive(Debug, Clone, Default)]
pub struct Resolved {
    /// The settings.
    pub settings: Settings,
    /// The policy in force: the one asked for, else the config's default, else none.
    pub policy: Option<Policy>,
}

impl Settings {
    /// The policy named `name`, else the config's default policy, else none.
    pub fn policy(&self, name: Option<&str>) -> Result<Option<Policy>, UnknownPolicy> {
        let Some(name) = name.or(self.default_policy.as_deref()) else {
            return Ok(None);
        };
        if let Some(policy) = self
            .policies
            .get(name)
            .cloned()
            .or_else(|| Policy::builtin(name))
        {
            return Ok(Some(policy));
        }
        let mut known = vec!["default".to_string(), "strict".to_string()];
        known.extend(self.policies.keys().cloned());
        Err(UnknownPolicy {
            name: name.to_string(),
            known,
        })
    }

    /// These settings with the policy `name` picked (else the config's default).
    pub fn resolve(self, policy: Option<&str>) -> Result<Resolved, UnknownPolicy> {
        let policy = self.policy(policy)?;
        Ok(Resolved {
            settings: self,
            policy,
        })
    }
}

/// Whether a name can be a folder name as it is: letters, digits, `-`, `_` and `.`, at
/// most 64, not starting with `.` (the rule of saved-session names too).
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl Resolved {
    /// The sandbox settings asked for, over `base`.
    pub fn sandbox_config(&self, base: Config) -> Config {
        let settings = &self.settings;
        Config {
            max_concurrent_runs: settings.max_concurrent_runs.or(base.max_concurrent_runs),
            max_queued_runs: settings.max_queued_runs.unwrap_or(base.max_queued_runs),
            runtime: settings.runtime.clone().or(base.runtime),
            native: settings.native.clone().or(base.native),
            ..base
        }
    }

    /// Options of a run under these settings: their limits, policy, mounts, tier, network
    /// and the tools needing approval; the rest default.
    pub fn run_options(&self) -> RunOptions {
        RunOptions {
            limits: self.settings.limits.clone(),
            policy: self.policy.clone(),
            mounts: self.settings.mounts.clone(),
            tier: self.settings.tier,
            approve: self.settings.approve.clone(),
            network: self.settings.network.clone(),
            ..RunOptions::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse(text: &str) -> Result<Settings, String> {
        ConfigFile::parse(text, Path::new("/x/sandpy.json"))
            .map(|file| file.settings)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn model_output_and_tool_timeout_are_read_with_defaults() {
        let defaults = parse("{}").unwrap();
        assert_eq!(defaults.model_output.text_bytes, 20_000);
        assert_eq!(defaults.limits.tool_timeout, Duration::from_secs(60));
        let set = parse(
            r#"{"sandpy": {"model_output": {"text_bytes": 500}, "limits": {"tool_timeout_ms": 250},
                "policies": {"quick": {"tool_timeout_ms": 100}}}}"#,
        )
        .unwrap();
        assert_eq!(set.model_output, ModelOutput { text_bytes: 500 });
        assert_eq!(set.limits.tool_timeout, Duration::from_millis(250));
        let quick = set.policy(Some("quick")).unwrap().unwrap();
        assert_eq!(
            quick.limits(&set.limits).tool_timeout,
            Duration::from_millis(100),
            "a policy may set tool_timeout_ms like any limit"
        );
    }

    #[test]
    fn bad_model_output_and_tool_timeout_name_the_key() {
        assert_eq!(
            parse(r#"{"sandpy": {"model_output": {"text_bytes": 0}}}"#).unwrap_err(),
            "config `/x/sandpy.json`: at `sandpy.model_output.text_bytes`: must be at least 1"
        );
        let unknown = parse(r#"{"sandpy": {"model_output": {"bytes": 5}}}"#).unwrap_err();
        assert!(
            unknown.contains("sandpy.model_output") && unknown.contains("unknown field `bytes`"),
            "{unknown}"
        );
        assert_eq!(
            parse(r#"{"sandpy": {"limits": {"tool_timeout_ms": 0}}}"#).unwrap_err(),
            "config `/x/sandpy.json`: at `sandpy.limits.tool_timeout_ms`: must be at least 1"
        );
    }

    #[test]
    fn resources_are_read_with_defaults_and_checked() {
        let defaults = parse(r#"{"sandpy": {}}"#).unwrap();
        assert_eq!(defaults.resources, ResourceLimits::default());
        let set = parse(
            r#"{"sandpy": {"resources": {"session_mb": 2, "session_files": 5, "total_mb": 3,
                "ttl_ms": 1500, "inline_kb": 0}}}"#,
        )
        .unwrap();
        let expected = ResourceLimits {
            session_bytes: 2 << 20,
            session_files: 5,
            total_bytes: 3 << 20,
            tenant_bytes: 2 << 20,
            ttl: Duration::from_millis(1500),
            inline_bytes: 0,
        };
        assert_eq!(set.resources, expected);
        assert_eq!(
            parse(r#"{"sandpy": {"resources": {"session_mb": 8, "total_mb": 4}}}"#).unwrap_err(),
            "config `/x/sandpy.json`: at `sandpy.resources.total_mb`: must be at least sandpy.resources.session_mb (8), what one session may keep"
        );
        let unknown = parse(r#"{"sandpy": {"resources": {"max_mb": 5}}}"#).unwrap_err();
        assert!(unknown.contains("sandpy.resources"), "{unknown}");
    }

    #[test]
    fn tenants_and_their_quotas_are_read_and_checked() {
        let set = parse(
            r#"{"sandpy": {"sessions": {"tenant_max_sessions": 3, "memory_mb": 100},
                "tenants": {"agent-a": {"token": "ta"}, "agent-b": {"token": "tb", "max_sessions": 5, "memory_mb": 1000}}}}"#,
        )
        .unwrap();
        assert_eq!(set.sessions.per_tenant.max_sessions, 3);
        assert_eq!(set.sessions.per_tenant.memory_bytes, 2048 << 20, "default");
        let a = &set.tenants[0];
        assert_eq!((a.name.as_str(), a.token.as_str()), ("agent-a", "ta"));
        assert_eq!(
            a.quota, set.sessions.per_tenant,
            "the per-tenant quota by default"
        );
        let b = &set.tenants[1];
        assert_eq!(
            b.quota,
            TenantQuota {
                max_sessions: 5,
                memory_bytes: 1000 << 20
            }
        );
        assert!(!format!("{set:?}").contains("tb"), "tokens are not printed");
        let total = parse(r#"{"sandpy": {"sessions": {"total_memory_mb": 1024}}}"#).unwrap();
        assert_eq!(total.sessions.total_memory_bytes, Some(1 << 30));
        assert_eq!(
            parse(r#"{"sandpy": {"sessions": {"total_memory_mb": 100}}}"#).unwrap_err(),
            "config `/x/sandpy.json`: at `sandpy.sessions.total_memory_mb`: must be at least sandpy.sessions.memory_mb (256), the memory of one session"
        );
        let big = parse(r#"{"sandpy": {"sessions": {"memory_mb": 4096}}}"#).unwrap();
        assert_eq!(
            big.sessions.per_tenant.memory_bytes,
            4096 << 20,
            "the default tenant memory holds one session at least"
        );

        for (text, expected) in [
            (
                r#"{"sandpy": {"tenants": {"a": {"token": "t"}, "b": {"token": "t"}}}}"#,
                "at `sandpy.tenants.b`: has the same token as tenant `a`",
            ),
            (
                r#"{"sandpy": {"tenants": {"a": {}}}}"#,
                "at `sandpy.tenants.a`: needs exactly one of `token` and `token_env`",
            ),
            (
                r#"{"sandpy": {"tenants": {"a": {"token": ""}}}}"#,
                "at `sandpy.tenants.a`: the token is empty",
            ),
            (
                r#"{"sandpy": {"tenants": {"../x": {"token": "t"}}}}"#,
                "at `sandpy.tenants.../x`: a tenant's name may use",
            ),
            (
                r#"{"sandpy": {"tenants": {"a": {"token_env": "SANDPY_TEST_NO_SUCH_VAR"}}}}"#,
                "at `sandpy.tenants.a.token_env`: the environment variable `SANDPY_TEST_NO_SUCH_VAR` is not set",
            ),
            (
                r#"{"sandpy": {"tenants": {"a": {"token": "t", "memory_mb": 10}}}}"#,
                "at `sandpy.tenants.a.memory_mb`: must be at least sandpy.sessions.memory_mb (256)",
            ),
            (
                r#"{"sandpy": {"sessions": {"tenant_max_sessions": 0}}}"#,
                "at `sandpy.sessions.tenant_max_sessions`: must be at least 1",
            ),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
