//! The configuration file as the MCP front end reads it: the `mcpServers` object agents
//! already keep, and sandpy's own settings beside it under `"sandpy"` (read by the
//! library, see [`sandpy::settings::ConfigFile`]).
//!
//! ```json
//! {
//!   "mcpServers": {
//!     "everything": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-everything"] },
//!     "local": { "url": "http://127.0.0.1:3001/mcp" },
//!     "remote": {
//!       "url": "https://mcp.example.com/mcp",
//!       "headers": { "Authorization": "Bearer ${REMOTE_TOKEN}" },
//!       "ca_file": "certs/internal-ca.pem"
//!     }
//!   },
//!   "sandpy": { "limits": { "timeout_ms": 30000 }, "allowed_tools": ["mcp__everything__*"] }
//! }
//! ```
//!
//! `${VAR}` and `${VAR:-default}` in a server's `command`, `args`, `env` values, `url` and
//! `headers` values are expanded from the environment when the file is read (see
//! [`Expansions`] for how messages keep the values out).

use crate::expand::{expand, Expansions, Lookup};
use axum::http::{HeaderName, HeaderValue};
use sandpy::settings::{self, ConfigError, Settings};
use sandpy::tls::CaFile;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How to reach one upstream MCP server. Its `Debug` shows what a log may: values the
/// config took from the environment as their `${VAR}` text, argument and environment
/// values not at all (they may hold tokens).
#[derive(Clone, PartialEq, Eq)]
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
        /// Values `command` took from the environment, for [`ServerSpec::hide`].
        expansions: Expansions,
    },
    /// A streamable HTTP endpoint, `http://` or `https://`.
    Http {
        /// The endpoint URL.
        url: String,
        /// Extra request headers (e.g. `Authorization`).
        headers: BTreeMap<String, String>,
        /// Values `url` and `headers` took from the environment, for [`ServerSpec::hide`].
        expansions: Expansions,
        /// Certificates an `https` server's certificate may chain to besides the system
        /// roots (`ca_file` in the config: a PEM file, relative to the config's folder).
        ca_file: Option<CaFile>,
    },
}

impl std::fmt::Debug for ServerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerSpec::Stdio {
                command,
                args,
                env,
                cwd,
                ..
            } => f
                .debug_struct("Stdio")
                .field("command", &self.hide(command))
                .field("args", &format_args!("[{} arguments]", args.len()))
                .field("env", &env.keys().collect::<Vec<_>>())
                .field("cwd", cwd)
                .finish_non_exhaustive(),
            ServerSpec::Http {
                url,
                headers,
                ca_file,
                ..
            } => f
                .debug_struct("Http")
                .field("url", &self.hide(url))
                .field("headers", &headers.keys().collect::<Vec<_>>())
                .field("ca_file", ca_file)
                .finish_non_exhaustive(),
        }
    }
}

impl ServerSpec {
    /// `text`, a message about this server, with every value the config took from the
    /// environment for `command`, `url` or `headers` shown as its `${VAR}` text: those
    /// values may be secrets, and messages reach logs, agents and the audit log.
    pub fn hide(&self, text: &str) -> String {
        self.expansions().hide(text)
    }

    /// The values [`ServerSpec::hide`] hides.
    pub fn expansions(&self) -> &Expansions {
        match self {
            ServerSpec::Stdio { expansions, .. } | ServerSpec::Http { expansions, .. } => {
                expansions
            }
        }
    }
}

/// A config file as the MCP front end reads it: the library's reading
/// ([`sandpy::settings::ConfigFile`]) with its `mcpServers` entries checked and their
/// `${VAR}`s expanded. Defaults: no servers, default settings.
#[derive(Debug, Clone, Default)]
pub struct ConfigFile {
    /// Upstream servers by name (the `<server>` of `mcp__<server>__<tool>`).
    pub servers: BTreeMap<String, ServerSpec>,
    /// sandpy's settings (the `sandpy` section).
    pub settings: Settings,
    /// The OAuth issuer whose access tokens `sandpy serve --http` takes (`sandpy.auth`).
    pub auth: Option<crate::OAuthConfig>,
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
    ca_file: Option<PathBuf>,
    /// A server switched off in a shared config file (as Cline, Roo Code and Windsurf
    /// write it): not started, its tools absent.
    #[serde(default)]
    disabled: bool,
}

/// Server names become part of tool names and Python identifiers.
fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && !name.contains("__")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl ConfigFile {
    /// Find the config: `explicit`, else `$SANDPY_CONFIG`, else `./.mcp.json`, else none.
    pub fn discover(explicit: Option<&Path>) -> Result<ConfigFile, ConfigError> {
        let file = settings::ConfigFile::discover(explicit)?;
        ConfigFile::from_file(file)
    }

    /// Every value the servers' `command`, `url` and `headers` took from the environment,
    /// for text that is not about one server: the log, where libraries (rmcp, reqwest)
    /// write URLs as they are.
    pub fn expansions(&self) -> Expansions {
        let mut all = Expansions::default();
        for spec in self.servers.values() {
            all.extend(spec.expansions());
        }
        all
    }

    /// Read and check one config file.
    pub fn load(path: &Path) -> Result<ConfigFile, ConfigError> {
        ConfigFile::from_file(settings::ConfigFile::load(path)?)
    }

    /// Check config text; `path` is only used in messages and to resolve relative paths.
    pub fn parse(text: &str, path: &Path) -> Result<ConfigFile, ConfigError> {
        ConfigFile::from_file(settings::ConfigFile::parse(text, path)?)
    }

    /// Read the server entries of a config file, expanding `${VAR}`s from the environment.
    fn from_file(file: settings::ConfigFile) -> Result<ConfigFile, ConfigError> {
        ConfigFile::from_file_with(file, &|name: &str| std::env::var(name))
    }

    /// [`ConfigFile::parse`] with variables looked up in `lookup`, for tests.
    #[cfg(test)]
    pub(crate) fn parse_with(
        text: &str,
        path: &Path,
        lookup: Lookup<'_>,
    ) -> Result<ConfigFile, ConfigError> {
        ConfigFile::from_file_with(settings::ConfigFile::parse(text, path)?, lookup)
    }

    /// Read the server entries of a config file, with variables from `lookup`.
    fn from_file_with(
        file: settings::ConfigFile,
        lookup: Lookup<'_>,
    ) -> Result<ConfigFile, ConfigError> {
        let path = file.settings.source.clone().unwrap_or_default();
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            path: path.clone(),
            key: key.into(),
            message,
        };
        let expand_at = |text: &str, key: &str, hide: Option<&mut Expansions>| {
            expand(text, lookup, hide).map_err(|e| invalid(key, e.to_string()))
        };
        let base = path.parent().unwrap_or(Path::new("."));
        let mut servers = BTreeMap::new();
        let mut disabled = Vec::new();
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
            if server.disabled {
                disabled.push(name);
                continue;
            }
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
                (Some(_), None, _) if server.ca_file.is_some() => {
                    return Err(invalid(
                        &format!("{key}.ca_file"),
                        "only `https` servers (`url`) use a CA file".into(),
                    ))
                }
                (Some(command), None, _) => {
                    let mut expansions = Expansions::default();
                    let at = format!("{key}.command");
                    let command = expand_at(&command, &at, Some(&mut expansions))?;
                    if command.trim().is_empty() {
                        return Err(invalid(&at, "must not be empty".into()));
                    }
                    let args = (server.args.iter().enumerate())
                        .map(|(i, arg)| expand_at(arg, &format!("{key}.args[{i}]"), None))
                        .collect::<Result<_, _>>()?;
                    let env = (server.env.iter())
                        .map(|(var, value)| {
                            let value = expand_at(value, &format!("{key}.env.{var}"), None)?;
                            Ok((var.clone(), value))
                        })
                        .collect::<Result<_, ConfigError>>()?;
                    ServerSpec::Stdio {
                        command,
                        args,
                        env,
                        cwd: server.cwd.map(|c| base.join(c)),
                        expansions,
                    }
                }
                (None, Some(written), _) => {
                    let mut expansions = Expansions::default();
                    let at = format!("{key}.url");
                    let url = expand_at(&written, &at, Some(&mut expansions))?;
                    let https = url.starts_with("https://");
                    if !https && !url.starts_with("http://") {
                        let expanded = if url == written { "" } else { " once expanded" };
                        return Err(invalid(
                            &at,
                            format!("{written:?} is not an http or https URL{expanded}"),
                        ));
                    }
                    let ca_file = match server.ca_file {
                        None => None,
                        Some(_) if !https => {
                            return Err(invalid(
                                &format!("{key}.ca_file"),
                                "only `https` servers use a CA file, and `url` is http".into(),
                            ))
                        }
                        Some(file) => Some(
                            CaFile::read(&base.join(file))
                                .map_err(|e| invalid(&format!("{key}.ca_file"), e.to_string()))?,
                        ),
                    };
                    let mut headers = BTreeMap::new();
                    for (header, value) in &server.headers {
                        let at = format!("{key}.headers.{header}");
                        if HeaderName::try_from(header.as_str()).is_err() {
                            return Err(invalid(&at, "not a valid HTTP header name".into()));
                        }
                        let value = expand_at(value, &at, Some(&mut expansions))?;
                        // Neither the value nor a part of it: it may be a secret.
                        if HeaderValue::try_from(value.as_str()).is_err() {
                            return Err(invalid(
                                &at,
                                "not a valid HTTP header value (control characters such as \
                                 line breaks are not allowed)"
                                    .into(),
                            ));
                        }
                        headers.insert(header.clone(), value);
                    }
                    ServerSpec::Http {
                        url,
                        headers,
                        expansions,
                        ca_file,
                    }
                }
            };
            servers.insert(name, spec);
        }
        for (i, name) in file.settings.ready_requires.iter().enumerate() {
            if !servers.contains_key(name) {
                let why = if disabled.contains(name) {
                    "is disabled in `mcpServers`"
                } else {
                    "is not a server of `mcpServers`"
                };
                return Err(invalid(
                    &format!("sandpy.ready_requires[{i}]"),
                    format!("{name:?} {why}"),
                ));
            }
        }
        let auth = match file.auth {
            None => None,
            Some(section) => Some(crate::OAuthConfig::from_json(section, &path)?),
        };
        Ok(ConfigFile {
            servers,
            settings: file.settings,
            auth,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn error(text: &str) -> String {
        ConfigFile::parse(text, Path::new("/x/.mcp.json"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn reads_stdio_and_http_servers_and_settings() {
        let c = ConfigFile::parse(
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

    /// `"disabled": true` (shared config files of other clients) leaves a server out: not
    /// started, and not checked (its command may be missing); a readiness requirement on
    /// it is refused, saying so.
    #[test]
    fn a_disabled_server_is_left_out() {
        let c = ConfigFile::parse(
            r#"{"mcpServers": {"on": {"command": "npx"}, "off": {"disabled": true},
                               "off2": {"command": "x", "disabled": true}}}"#,
            Path::new("/x/.mcp.json"),
        )
        .unwrap();
        assert_eq!(c.servers.keys().collect::<Vec<_>>(), ["on"]);
        let e = error(
            r#"{"mcpServers": {"off": {"command": "x", "disabled": true}},
                "sandpy": {"ready_requires": ["off"]}}"#,
        );
        assert!(
            e.contains("sandpy.ready_requires[0]") && e.contains("\"off\" is disabled"),
            "{e}"
        );
    }

    #[test]
    fn debug_output_holds_no_value_from_the_environment_nor_any_argument_or_header_value() {
        let lookup = |name: &str| match name {
            "TOKEN" => Ok("sk-9f8e7d".to_string()),
            _ => Err(std::env::VarError::NotPresent),
        };
        let c = ConfigFile::parse_with(
            r#"{"mcpServers": {
                "fs": {"command": "/opt/${TOKEN}/srv", "args": ["--key", "literal-key"], "env": {"K": "${TOKEN}"}},
                "web": {"url": "https://h.test/mcp?k=${TOKEN}", "headers": {"Authorization": "Bearer ${TOKEN}"}}}}"#,
            Path::new("/x/.mcp.json"),
            &lookup,
        )
        .expect("valid");
        let shown = format!("{c:?}");
        for secret in ["sk-9f8e7d", "literal-key", "Bearer"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(
            shown.contains("/opt/${TOKEN}/srv") && shown.contains("k=${TOKEN}"),
            "{shown}"
        );
        assert!(
            shown.contains("\"Authorization\"") && shown.contains("\"K\""),
            "names stay: {shown}"
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
        let e = error(r#"{"mcpServers": {"ftp": {"url": "ftp://example.com/mcp"}}}"#);
        assert!(
            e.contains("mcpServers.ftp.url") && e.contains("not an http or https URL"),
            "{e}"
        );
        let e = error(r#"{"mcpServers": {"old": {"type": "sse", "url": "http://x"}}}"#);
        assert!(e.contains("SSE"), "{e}");
        let e = error(r#"{"sandpy": {"auth": {"issuer": "https://id.example.com"}}}"#);
        assert!(
            e.contains("/x/.mcp.json") && e.contains("at `sandpy.auth`: missing field `audience`"),
            "{e}"
        );
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

    fn env(name: &str) -> Result<String, std::env::VarError> {
        match name {
            "GH_TOKEN" => Ok("ghp_S3CR3T0123456789".into()),
            "PORT" => Ok("3009".into()),
            "DATA" => Ok("/srv/data".into()),
            "PLAIN_URL" => Ok("ftp://user:pw-S3CR3T@host/x".into()),
            "BROKEN" => Ok("Bearer a\nX-Injected: 1".into()),
            _ => Err(std::env::VarError::NotPresent),
        }
    }

    fn with_env(text: &str) -> Result<ConfigFile, ConfigError> {
        ConfigFile::parse_with(text, Path::new("/x/.mcp.json"), &env)
    }

    #[test]
    fn variables_expand_in_command_args_env_url_and_headers() {
        let c = with_env(
            r#"{"mcpServers": {
                "fs": {"command": "${TOOLS:-/opt}/bin/fs", "args": ["--root=${DATA}", "$HOME", "${DATA:-x}/in"],
                       "env": {"TOKEN": "${GH_TOKEN}", "MODE": "${MODE:-ro}"}, "cwd": "${DATA}"},
                "gh": {"url": "http://127.0.0.1:${PORT}/mcp", "headers": {"Authorization": "Bearer ${GH_TOKEN}"}}},
               "sandpy": {"audit_log": "${DATA}/audit.jsonl"}}"#,
        )
        .expect("valid");
        let ServerSpec::Stdio {
            command,
            args,
            env,
            cwd,
            ..
        } = &c.servers["fs"]
        else {
            panic!("stdio: {:?}", c.servers["fs"]);
        };
        assert_eq!(command, "/opt/bin/fs");
        assert_eq!(args, &["--root=/srv/data", "$HOME", "/srv/data/in"]);
        assert_eq!(env["TOKEN"], "ghp_S3CR3T0123456789");
        assert_eq!(env["MODE"], "ro");
        assert_eq!(
            cwd.as_deref(),
            Some(Path::new("/x/${DATA}")),
            "only the five fields Claude Code expands"
        );
        let ServerSpec::Http { url, headers, .. } = &c.servers["gh"] else {
            panic!("http: {:?}", c.servers["gh"]);
        };
        assert_eq!(url, "http://127.0.0.1:3009/mcp");
        assert_eq!(headers["Authorization"], "Bearer ghp_S3CR3T0123456789");
        assert_eq!(
            c.servers["gh"].hide(&format!(
                "cannot connect to {url} with {}",
                headers["Authorization"]
            )),
            "cannot connect to http://127.0.0.1:${PORT}/mcp with Bearer ${GH_TOKEN}"
        );
        assert_eq!(
            c.expansions().hide("ghp_S3CR3T0123456789 3009 /srv/data"),
            "${GH_TOKEN} ${PORT} /srv/data",
            "every server's command, url and headers; not args nor env"
        );
        assert_eq!(
            c.settings.audit_log.as_deref(),
            Some(Path::new("/x/${DATA}/audit.jsonl")),
            "the `sandpy` section is not expanded"
        );
    }

    #[test]
    fn an_unset_variable_names_the_file_the_key_and_the_variable() {
        for (entry, key) in [
            (r#"{"command": "${NO_CMD}"}"#, "mcpServers.s.command"),
            (
                r#"{"command": "x", "args": ["a", "-t=${NO_VAR}"]}"#,
                "mcpServers.s.args[1]",
            ),
            (
                r#"{"command": "x", "env": {"GH": "${NO_VAR}"}}"#,
                "mcpServers.s.env.GH",
            ),
            (r#"{"url": "http://${NO_VAR}/mcp"}"#, "mcpServers.s.url"),
            (
                r#"{"url": "http://h/mcp", "headers": {"Authorization": "Bearer ${NO_VAR}"}}"#,
                "mcpServers.s.headers.Authorization",
            ),
        ] {
            let e = with_env(&format!(r#"{{"mcpServers": {{"s": {entry}}}}}"#))
                .expect_err(entry)
                .to_string();
            let var = if key.ends_with("command") {
                "NO_CMD"
            } else {
                "NO_VAR"
            };
            assert!(
                e.starts_with("config `/x/.mcp.json`: at `")
                    && e.contains(&format!("at `{key}`:"))
                    && e.contains(&format!("environment variable `{var}` is not set")),
                "{e}"
            );
        }
        let e = with_env(r#"{"mcpServers": {"s": {"command": "${EMPTY_CMD:-}"}}}"#)
            .expect_err("empty command")
            .to_string();
        assert!(
            e.contains("mcpServers.s.command") && e.contains("must not be empty"),
            "{e}"
        );
    }

    #[test]
    fn url_and_header_errors_show_the_text_not_the_value() {
        let e = with_env(r#"{"mcpServers": {"s": {"url": "${PLAIN_URL}"}}}"#)
            .expect_err("not http")
            .to_string();
        assert!(
            e.contains("mcpServers.s.url")
                && e.contains(r#""${PLAIN_URL}" is not an http or https URL once expanded"#),
            "{e}"
        );
        assert!(!e.contains("S3CR3T"), "{e}");
        let e = with_env(r#"{"mcpServers": {"s": {"url": "http://h/mcp", "headers": {"Authorization": "${BROKEN}"}}}}"#)
            .expect_err("a line break in a header")
            .to_string();
        assert!(
            e.contains("mcpServers.s.headers.Authorization")
                && e.contains("not a valid HTTP header value"),
            "{e}"
        );
        assert!(!e.contains("Injected"), "{e}");
        let e = with_env(
            r#"{"mcpServers": {"s": {"url": "http://h/mcp", "headers": {"Bad Name": "x"}}}}"#,
        )
        .expect_err("a space in a header name")
        .to_string();
        assert!(
            e.contains("mcpServers.s.headers.Bad Name") && e.contains("header name"),
            "{e}"
        );
    }

    #[test]
    fn user_policies_and_default_policy() {
        let c = ConfigFile::parse(
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
