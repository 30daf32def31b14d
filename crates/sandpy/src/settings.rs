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
//!     "allowed_origins": ["https://agent.example.com"],
//!     "audit_arguments": false,
//!     "sessions": { "max_sessions": 64, "memory_mb": 256, "idle_ttl_ms": 600000,
//!                   "total_memory_mb": 8192, "tenant_max_sessions": 8, "tenant_memory_mb": 2048,
//!                   "save_dir": "saved-sessions" },
//!     "tenants": { "agent-a": { "token_env": "AGENT_A_TOKEN", "max_sessions": 16 } }
//!   }
//! }
//! ```
//!
//! A front end reads the file once ([`ConfigFile::discover`]), picks the policy once
//! ([`Settings::resolve`]) and passes the [`Resolved`] value on.

use crate::files::Mount;
use crate::model_output::ModelOutput;
use crate::sessions::{SessionLimits, TenantQuota};
use crate::{Config, LimitOverrides, Limits, Policy, RunOptions};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
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
    /// Folder where saved sessions are written and read; none disables saving.
    pub session_dir: Option<PathBuf>,
    /// HTTP clients known by their bearer tokens (`sandpy.tenants`), each with its own
    /// sessions, quota, saved sessions and audit field.
    pub tenants: Vec<TokenTenant>,
    /// Runs executing at once (default: the number of cores).
    pub max_concurrent_runs: Option<usize>,
    /// Runs waiting for a slot before new ones are answered `busy` (default 256).
    pub max_queued_runs: Option<usize>,
    /// Host folders every run may read, at their guest paths.
    pub mounts: Vec<Mount>,
    /// How long runs in flight may go on after `sandpy serve --http` is told to stop
    /// (`drain_grace_ms`); the server's default (30 s) when `None`.
    pub drain_grace: Option<Duration>,
    /// Whether `GET /metrics` needs the bearer token (it is open like the probes by
    /// default).
    pub metrics_require_token: bool,
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

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawFile {
    #[serde(default)]
    mcp_servers: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    sandpy: RawSandpy,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSandpy {
    #[serde(default)]
    limits: LimitOverrides,
    #[serde(default)]
    model_output: RawModelOutput,
    allowed_tools: Option<Vec<String>>,
    #[serde(default)]
    approve: Vec<String>,
    audit_log: Option<PathBuf>,
    #[serde(default)]
    audit_arguments: bool,
    #[serde(default)]
    policies: BTreeMap<String, Policy>,
    default_policy: Option<String>,
    #[serde(default)]
    sessions: RawSessions,
    #[serde(default)]
    tenants: BTreeMap<String, RawTenant>,
    max_concurrent_runs: Option<usize>,
    max_queued_runs: Option<usize>,
    drain_grace_ms: Option<u64>,
    #[serde(default)]
    metrics_require_token: bool,
    #[serde(default)]
    allowed_origins: Vec<String>,
    #[serde(default)]
    ready_requires: Vec<String>,
    /// Guest path -> host folder (relative to the config file), read-only.
    #[serde(default)]
    mounts: BTreeMap<String, PathBuf>,
    runtime: Option<PathBuf>,
    #[serde(default)]
    packages: Vec<String>,
    #[serde(default)]
    tier: crate::Tier,
    native: Option<crate::native::NativeConfig>,
    network: Option<crate::network::RawNetwork>,
    /// Read by the MCP front end.
    auth: Option<serde_json::Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawSessions {
    idle_ttl_ms: Option<u64>,
    max_sessions: Option<usize>,
    memory_mb: Option<u64>,
    journal_mb: Option<u64>,
    total_memory_mb: Option<u64>,
    tenant_max_sessions: Option<usize>,
    tenant_memory_mb: Option<u64>,
    save_dir: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenant {
    token: Option<String>,
    token_env: Option<String>,
    max_sessions: Option<usize>,
    memory_mb: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawModelOutput {
    text_bytes: Option<usize>,
}

impl ConfigFile {
    /// Find the config: `explicit`, else `$SANDPY_CONFIG`, else `./.mcp.json`, else none.
    pub fn discover(explicit: Option<&Path>) -> Result<ConfigFile, ConfigError> {
        if let Some(path) = explicit {
            return ConfigFile::load(path);
        }
        if let Some(path) = std::env::var_os("SANDPY_CONFIG") {
            return ConfigFile::load(Path::new(&path));
        }
        let local = Path::new(".mcp.json");
        if local.is_file() {
            return ConfigFile::load(local);
        }
        Ok(ConfigFile::default())
    }

    /// Read and check one config file.
    pub fn load(path: &Path) -> Result<ConfigFile, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        ConfigFile::parse(&text, path)
    }

    /// Check config text; `path` is only used in messages and to resolve relative paths.
    pub fn parse(text: &str, path: &Path) -> Result<ConfigFile, ConfigError> {
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
        let mut sandpy = raw.sandpy;
        let auth = sandpy.auth.take();
        let settings = Settings::from_raw(sandpy, base, path, &invalid)?;
        Ok(ConfigFile {
            settings,
            servers: raw.mcp_servers,
            auth,
        })
    }
}

impl Settings {
    fn from_raw(
        raw: RawSandpy,
        base: &Path,
        path: &Path,
        invalid: &dyn Fn(&str, String) -> ConfigError,
    ) -> Result<Settings, ConfigError> {
        raw.limits
            .validate()
            .map_err(|e| invalid(&format!("sandpy.limits.{}", e.key), e.requirement))?;
        let limits = raw.limits.apply(&Limits::default());
        let model_output = model_output(&raw.model_output, invalid)?;
        let patterns = [
            (
                "allowed_tools",
                raw.allowed_tools.as_deref().unwrap_or_default(),
            ),
            ("approve", &raw.approve),
        ];
        for (key, patterns) in patterns {
            for (i, pattern) in patterns.iter().enumerate() {
                if let Err(e) = crate::tools::validate_tool_pattern(pattern) {
                    return Err(invalid(&format!("sandpy.{key}[{i}]"), e.to_string()));
                }
            }
        }
        let policies = policies(raw.policies, invalid)?;
        let sessions = session_limits(&raw.sessions, invalid)?;
        let tenants = tenants(raw.tenants, &sessions, invalid)?;
        let session_dir = raw.sessions.save_dir.map(|dir| base.join(dir));
        let mounts: Vec<Mount> = raw
            .mounts
            .into_iter()
            .map(|(guest, host)| Mount {
                host: base.join(host),
                guest,
            })
            .collect();
        Mount::validate(&mounts).map_err(|e| invalid("sandpy.mounts", e.to_string()))?;
        let network = match raw.network {
            Some(network) => Some(network.read(base).map_err(|(key, e)| invalid(&key, e))?),
            None => None,
        };
        let settings = Settings {
            limits,
            model_output,
            allowed_tools: raw.allowed_tools,
            approve: raw.approve,
            audit_log: raw.audit_log.map(|p| base.join(p)),
            audit_arguments: raw.audit_arguments,
            policies,
            default_policy: raw.default_policy,
            sessions,
            session_dir,
            tenants,
            max_concurrent_runs: raw.max_concurrent_runs,
            max_queued_runs: raw.max_queued_runs,
            mounts,
            drain_grace: raw.drain_grace_ms.map(Duration::from_millis),
            metrics_require_token: raw.metrics_require_token,
            allowed_origins: raw.allowed_origins,
            ready_requires: raw.ready_requires,
            runtime: raw.runtime.map(|p| base.join(p)),
            packages: raw.packages,
            tier: raw.tier,
            native: raw.native.map(|mut native| {
                native.resolve_paths(base);
                native
            }),
            network,
            source: Some(path.to_path_buf()),
        };
        if let Err(unknown) = settings.policy(None) {
            return Err(invalid("sandpy.default_policy", unknown.to_string()));
        }
        Ok(settings)
    }

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

/// `sandpy.model_output`, checked.
fn model_output(
    raw: &RawModelOutput,
    invalid: &dyn Fn(&str, String) -> ConfigError,
) -> Result<ModelOutput, ConfigError> {
    let mut model_output = ModelOutput::default();
    if let Some(bytes) = raw.text_bytes {
        if bytes == 0 {
            let message = "must be at least 1".to_string();
            return Err(invalid("sandpy.model_output.text_bytes", message));
        }
        model_output.text_bytes = bytes;
    }
    Ok(model_output)
}

/// `sandpy.policies`, each named and checked: no built-in name taken, valid limits and
/// tool patterns.
fn policies(
    raw: BTreeMap<String, Policy>,
    invalid: &dyn Fn(&str, String) -> ConfigError,
) -> Result<BTreeMap<String, Policy>, ConfigError> {
    let mut policies = BTreeMap::new();
    for (name, mut policy) in raw {
        if Policy::builtin(&name).is_some() {
            return Err(invalid(
                &format!("sandpy.policies.{name}"),
                format!("`{name}` is a built-in policy; choose another name"),
            ));
        }
        policy
            .limits
            .validate()
            .map_err(|e| invalid(&format!("sandpy.policies.{name}.{}", e.key), e.requirement))?;
        let patterns = policy.allowed_tools.iter().flatten().chain(&policy.approve);
        for pattern in patterns {
            if let Err(e) = crate::tools::validate_tool_pattern(pattern) {
                return Err(invalid(&format!("sandpy.policies.{name}"), e.to_string()));
            }
        }
        policy.name = name.clone();
        policies.insert(name, policy);
    }
    Ok(policies)
}

/// `sandpy.sessions` over the defaults, checked (the per-tenant quota too).
fn session_limits(
    raw: &RawSessions,
    invalid: &dyn Fn(&str, String) -> ConfigError,
) -> Result<SessionLimits, ConfigError> {
    let mut sessions = SessionLimits::default();
    if let Some(ms) = raw.idle_ttl_ms {
        sessions.idle_ttl = Duration::from_millis(ms);
    }
    sessions.max_sessions = raw.max_sessions.unwrap_or(sessions.max_sessions);
    if let Some(mb) = raw.memory_mb {
        let memory = LimitOverrides {
            memory_mb: Some(mb),
            ..LimitOverrides::default()
        };
        memory
            .validate()
            .map_err(|e| invalid("sandpy.sessions.memory_mb", e.requirement))?;
        sessions.memory_bytes = memory.apply(&Limits::default()).memory_bytes;
    }
    if let Some(mb) = raw.journal_mb {
        if mb == 0 {
            return Err(invalid(
                "sandpy.sessions.journal_mb",
                "must be at least 1 (MiB)".into(),
            ));
        }
        sessions.journal_bytes = mb.saturating_mul(1 << 20);
    }
    if let Some(mb) = raw.total_memory_mb {
        let total = mb.saturating_mul(1 << 20) as usize;
        if total < sessions.memory_bytes {
            let message = format!(
                "must be at least sandpy.sessions.memory_mb ({}), the memory of one session",
                sessions.memory_bytes >> 20
            );
            return Err(invalid("sandpy.sessions.total_memory_mb", message));
        }
        sessions.total_memory_bytes = Some(total);
    }
    if let Some(max) = raw.tenant_max_sessions {
        sessions.per_tenant.max_sessions = max;
    }
    match raw.tenant_memory_mb {
        Some(mb) => sessions.per_tenant.memory_bytes = mb.saturating_mul(1 << 20) as usize,
        // Sessions bigger than the default tenant memory: room for one at least.
        None => {
            let one = sessions.memory_bytes;
            sessions.per_tenant.memory_bytes = sessions.per_tenant.memory_bytes.max(one);
        }
    }
    check_quota(
        &sessions.per_tenant,
        &sessions,
        "sandpy.sessions.tenant_",
        invalid,
    )?;
    Ok(sessions)
}

/// A quota lets its tenant hold at least one session. `key` is the keys' prefix
/// (`max_sessions` and `memory_mb` follow it).
fn check_quota(
    quota: &TenantQuota,
    sessions: &SessionLimits,
    key: &str,
    invalid: &dyn Fn(&str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    if quota.max_sessions == 0 {
        return Err(invalid(
            &format!("{key}max_sessions"),
            "must be at least 1".into(),
        ));
    }
    if quota.memory_bytes < sessions.memory_bytes {
        let message = format!(
            "must be at least sandpy.sessions.memory_mb ({}), the memory of one session",
            sessions.memory_bytes >> 20
        );
        return Err(invalid(&format!("{key}memory_mb"), message));
    }
    Ok(())
}

/// The `tenants` section: names plain, each with exactly one non-empty token (given, or
/// read from the environment), no token shared; quotas default to the per-tenant ones.
fn tenants(
    raw: BTreeMap<String, RawTenant>,
    sessions: &SessionLimits,
    invalid: &dyn Fn(&str, String) -> ConfigError,
) -> Result<Vec<TokenTenant>, ConfigError> {
    let mut tenants: Vec<TokenTenant> = Vec::with_capacity(raw.len());
    for (name, raw) in raw {
        let key = format!("sandpy.tenants.{name}");
        if !is_plain_name(&name) {
            let message =
                "a tenant's name may use letters, digits, `-`, `_` and `.` (at most 64, not starting with `.`)";
            return Err(invalid(&key, message.into()));
        }
        let token = match (raw.token, raw.token_env) {
            (Some(token), None) => token,
            (None, Some(var)) => std::env::var(&var).map_err(|_| {
                invalid(
                    &format!("{key}.token_env"),
                    format!("the environment variable `{var}` is not set (or not UTF-8)"),
                )
            })?,
            _ => {
                let message = "needs exactly one of `token` and `token_env`".to_string();
                return Err(invalid(&key, message));
            }
        };
        if token.is_empty() {
            return Err(invalid(&key, "the token is empty".into()));
        }
        if let Some(other) = tenants.iter().find(|t| t.token == token) {
            let message = format!("has the same token as tenant `{}`", other.name);
            return Err(invalid(&key, message));
        }
        let mut quota = sessions.per_tenant;
        if let Some(max) = raw.max_sessions {
            quota.max_sessions = max;
        }
        if let Some(mb) = raw.memory_mb {
            quota.memory_bytes = mb.saturating_mul(1 << 20) as usize;
        }
        check_quota(&quota, sessions, &format!("{key}."), invalid)?;
        tenants.push(TokenTenant { name, token, quota });
    }
    Ok(tenants)
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
