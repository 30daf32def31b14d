//! Reading a config file: the raw `serde` shape of the file and of its `sandpy` section,
//! and one reader per section that checks it and names the key of any mistake.

use super::{is_plain_name, ConfigError, ConfigFile, ResourceLimits, Settings, TokenTenant};
use crate::files::Mount;
use crate::model_output::ModelOutput;
use crate::sessions::{SessionLimits, TenantQuota};
use crate::{LimitOverrides, Limits, Policy};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
    resources: RawResources,
    #[serde(default)]
    tenants: BTreeMap<String, RawTenant>,
    max_concurrent_runs: Option<usize>,
    max_queued_runs: Option<usize>,
    max_tenant_runs: Option<usize>,
    max_tenant_queued_runs: Option<usize>,
    drain_grace_ms: Option<u64>,
    #[serde(default)]
    metrics_require_token: bool,
    #[serde(default)]
    metrics_tenant_names: bool,
    #[serde(default)]
    allowed_origins: Vec<String>,
    #[serde(default)]
    allowed_hosts: Vec<String>,
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

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawResources {
    session_mb: Option<u64>,
    session_files: Option<usize>,
    total_mb: Option<u64>,
    tenant_mb: Option<u64>,
    ttl_ms: Option<u64>,
    inline_kb: Option<u64>,
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
    ///
    /// Its servers' commands run as this user, so the file must be one that no other user
    /// can write or swap ([`crate::files::trusted_file`]).
    pub fn load(path: &Path) -> Result<ConfigFile, ConfigError> {
        match crate::host_paths::trusted_file(path) {
            Ok(_) => {}
            Err(crate::host_paths::FolderError::Io { source, .. }) => {
                return Err(ConfigError::Read {
                    path: path.into(),
                    source,
                })
            }
            Err(source) => {
                return Err(ConfigError::Untrusted {
                    path: path.into(),
                    source,
                })
            }
        }
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
        let settings = settings(sandpy, base, path, &invalid)?;
        Ok(ConfigFile {
            settings,
            servers: raw.mcp_servers,
            auth,
        })
    }
}

/// The `sandpy` section read into [`Settings`]: each section checked, paths made absolute
/// against `base` (the config file's folder).
fn settings(
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
    let resources = resource_limits(&raw.resources, invalid)?;
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
    if raw.metrics_tenant_names && !raw.metrics_require_token {
        let message = "names tenants in an open /metrics: set sandpy.metrics_require_token too";
        return Err(invalid("sandpy.metrics_tenant_names", message.into()));
    }
    if raw.max_tenant_runs == Some(0) {
        return Err(invalid(
            "sandpy.max_tenant_runs",
            "must be at least 1".into(),
        ));
    }
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
        resources,
        session_dir,
        tenants,
        max_concurrent_runs: raw.max_concurrent_runs,
        max_queued_runs: raw.max_queued_runs,
        max_tenant_runs: raw.max_tenant_runs,
        max_tenant_queued_runs: raw.max_tenant_queued_runs,
        mounts,
        drain_grace: raw.drain_grace_ms.map(Duration::from_millis),
        metrics_require_token: raw.metrics_require_token,
        metrics_tenant_names: raw.metrics_tenant_names,
        allowed_origins: raw.allowed_origins,
        allowed_hosts: raw.allowed_hosts,
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

/// `sandpy.resources` over the defaults, checked: a session's bytes within the server's.
fn resource_limits(
    raw: &RawResources,
    invalid: &dyn Fn(&str, String) -> ConfigError,
) -> Result<ResourceLimits, ConfigError> {
    let mut limits = ResourceLimits::default();
    let mib = |mb: u64| mb.saturating_mul(1 << 20);
    limits.session_bytes = raw.session_mb.map_or(limits.session_bytes, mib);
    limits.session_files = raw.session_files.unwrap_or(limits.session_files);
    limits.total_bytes = raw.total_mb.map_or(limits.total_bytes, mib);
    if let Some(ms) = raw.ttl_ms {
        limits.ttl = Duration::from_millis(ms);
    }
    if let Some(kb) = raw.inline_kb {
        limits.inline_bytes = kb.saturating_mul(1 << 10);
    }
    if limits.session_bytes > limits.total_bytes {
        let message = format!(
            "must be at least sandpy.resources.session_mb ({}), what one session may keep",
            limits.session_bytes >> 20
        );
        return Err(invalid("sandpy.resources.total_mb", message));
    }
    // A tenant's share: half the server's by default, never less than one session's.
    limits.tenant_bytes = match raw.tenant_mb {
        Some(mb) => mib(mb),
        None => (limits.total_bytes / 2).max(limits.session_bytes),
    };
    if limits.tenant_bytes < limits.session_bytes || limits.tenant_bytes > limits.total_bytes {
        let message = format!(
            "must be between sandpy.resources.session_mb ({}) and total_mb ({})",
            limits.session_bytes >> 20,
            limits.total_bytes >> 20
        );
        return Err(invalid("sandpy.resources.tenant_mb", message));
    }
    Ok(limits)
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
