//! The `sandpy.auth` section: which OAuth issuer's access tokens `sandpy serve --http`
//! takes, for which audience, and which claim names the tenant.
//!
//! ```json
//! "auth": {
//!   "issuer": "https://login.example.com/realms/acme",
//!   "audience": "https://sandpy.example.com/mcp",
//!   "tenant_claim": "sub"
//! }
//! ```
//!
//! Optional keys, with their defaults: `jwks_uri` (none: found in the issuer's metadata),
//! `ca_file` (none: the system's roots), `leeway_s` (60), `jwks_cache_s` (600),
//! `jwks_refetch_s` (60), `scopes_supported` (none).

use reqwest::Url;
use sandpy::settings::ConfigError;
use sandpy::tls::CaFile;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How `sandpy serve --http` checks OAuth access tokens (`sandpy.auth` in the config).
/// Checked when read: the issuer is `https` (or `http` on a loopback host), the audience
/// an absolute URL without a fragment, the durations within their bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthConfig {
    /// The authorization server whose tokens are taken: a token's `iss` must be exactly
    /// this text, and its metadata (RFC 8414, or OpenID Connect discovery) names the keys.
    pub issuer: String,
    /// This server's resource URI: a token's `aud` must contain it (RFC 8707), and the
    /// protected resource metadata (RFC 9728) names it as `resource`.
    pub audience: String,
    /// The claim whose string value names the token's tenant (default `sub`).
    pub tenant_claim: String,
    /// Where the issuer's keys are, when not taken from its metadata.
    pub jwks_uri: Option<String>,
    /// Certificates the issuer's certificate may chain to besides the system roots.
    pub ca_file: Option<CaFile>,
    /// How far `exp` and `nbf` may be off the server's clock (default 60 s, at most 300 s).
    pub leeway: Duration,
    /// How long fetched keys are used before they are fetched again (default 600 s).
    pub jwks_cache: Duration,
    /// The least time between two fetches of the keys (default 60 s, at least 1 s): a token
    /// with an unknown key id makes the server fetch again, at most this often, so that
    /// nobody can make it hammer the issuer.
    pub jwks_refetch: Duration,
    /// Scopes listed in the protected resource metadata (none by default).
    pub scopes_supported: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    issuer: String,
    audience: String,
    #[serde(default = "default_claim")]
    tenant_claim: String,
    jwks_uri: Option<String>,
    ca_file: Option<PathBuf>,
    leeway_s: Option<u64>,
    jwks_cache_s: Option<u64>,
    jwks_refetch_s: Option<u64>,
    #[serde(default)]
    scopes_supported: Vec<String>,
}

fn default_claim() -> String {
    "sub".into()
}

/// Where an issuer's or its keys' URL may point: `https`, or `http` on a loopback host
/// (an issuer on the same machine, in development and tests).
pub(crate) fn safe_url(url: &Url) -> bool {
    match url.scheme() {
        "https" => true,
        "http" => match url.host_str() {
            Some("localhost") => true,
            Some(host) => host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback()),
            None => false,
        },
        _ => false,
    }
}

impl OAuthConfig {
    /// Read the `sandpy.auth` section of the config file `path` (messages name the file
    /// and the key; a relative `ca_file` is taken from the file's folder).
    pub fn from_json(value: serde_json::Value, path: &Path) -> Result<OAuthConfig, ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Invalid {
            path: path.into(),
            key: format!("sandpy.auth{key}"),
            message,
        };
        let raw: RawAuth = serde_path_to_error::deserialize(value).map_err(|e| {
            let at = e.path().to_string();
            let key = if at == "?" || at.is_empty() || at == "." {
                String::new()
            } else {
                format!(".{at}")
            };
            invalid(&key, e.into_inner().to_string())
        })?;
        let url = |key: &str, text: &str| {
            let url = Url::parse(text)
                .map_err(|e| invalid(key, format!("{text:?} is not an absolute URL: {e}")))?;
            if url.fragment().is_some() {
                return Err(invalid(key, format!("{text:?} has a fragment (`#...`)")));
            }
            Ok(url)
        };
        let issuer = url(".issuer", &raw.issuer)?;
        if !safe_url(&issuer) || issuer.query().is_some() {
            return Err(invalid(
                ".issuer",
                format!(
                    "{:?} must be an https URL without a query (http only on a loopback host)",
                    raw.issuer
                ),
            ));
        }
        let audience = url(".audience", &raw.audience)?;
        if !matches!(audience.scheme(), "https" | "http") {
            return Err(invalid(
                ".audience",
                format!(
                    "{:?} must be this server's http or https URL (its MCP endpoint, e.g. \
                     https://sandpy.example.com/mcp)",
                    raw.audience
                ),
            ));
        }
        if let Some(jwks) = &raw.jwks_uri {
            if !safe_url(&url(".jwks_uri", jwks)?) {
                return Err(invalid(
                    ".jwks_uri",
                    format!("{jwks:?} must be an https URL (http only on a loopback host)"),
                ));
            }
        }
        if raw.tenant_claim.is_empty() {
            return Err(invalid(".tenant_claim", "must not be empty".into()));
        }
        if ["iss", "aud", "exp", "nbf"].contains(&raw.tenant_claim.as_str()) {
            return Err(invalid(
                ".tenant_claim",
                format!(
                    "`{}` is not a name of a person; use `sub` or a claim such as `email`",
                    raw.tenant_claim
                ),
            ));
        }
        let leeway = raw.leeway_s.unwrap_or(60);
        if leeway > 300 {
            return Err(invalid(".leeway_s", "must be at most 300".into()));
        }
        let refetch = raw.jwks_refetch_s.unwrap_or(60);
        if refetch == 0 {
            return Err(invalid(".jwks_refetch_s", "must be at least 1".into()));
        }
        let cache = raw.jwks_cache_s.unwrap_or(600);
        if cache < refetch {
            return Err(invalid(
                ".jwks_cache_s",
                format!("must be at least jwks_refetch_s ({refetch})"),
            ));
        }
        let base = path.parent().unwrap_or(Path::new("."));
        let ca_file = match raw.ca_file {
            None => None,
            Some(file) => Some(
                CaFile::read(&base.join(file)).map_err(|e| invalid(".ca_file", e.to_string()))?,
            ),
        };
        Ok(OAuthConfig {
            issuer: raw.issuer,
            audience: raw.audience,
            tenant_claim: raw.tenant_claim,
            jwks_uri: raw.jwks_uri,
            ca_file,
            leeway: Duration::from_secs(leeway),
            jwks_cache: Duration::from_secs(cache),
            jwks_refetch: Duration::from_secs(refetch),
            scopes_supported: raw.scopes_supported,
        })
    }

    /// Where the protected resource metadata of [`OAuthConfig::audience`] is (RFC 9728,
    /// section 3.1): `/.well-known/oauth-protected-resource` put between the host and the
    /// path, so `https://h/mcp` has it at `https://h/.well-known/oauth-protected-resource/mcp`.
    pub fn resource_metadata_url(&self) -> String {
        let Ok(audience) = Url::parse(&self.audience) else {
            return String::new(); // checked when read
        };
        let path = audience.path().trim_end_matches('/');
        format!(
            "{}/.well-known/oauth-protected-resource{path}",
            audience.origin().ascii_serialization()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(value: serde_json::Value) -> Result<OAuthConfig, String> {
        OAuthConfig::from_json(value, Path::new("/etc/sandpy/.mcp.json")).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_the_section_with_its_defaults() {
        let c = read(json!({"issuer": "https://id.example.com/realms/a",
                            "audience": "https://sandpy.example.com/mcp"}))
        .expect("valid");
        assert_eq!(c.tenant_claim, "sub");
        assert_eq!(c.leeway, Duration::from_secs(60));
        assert_eq!(
            (c.jwks_cache, c.jwks_refetch),
            (Duration::from_secs(600), Duration::from_secs(60))
        );
        assert_eq!(
            c.resource_metadata_url(),
            "https://sandpy.example.com/.well-known/oauth-protected-resource/mcp"
        );
    }

    #[test]
    fn bad_sections_name_the_file_the_key_and_the_problem() {
        let issuer = "https://id.example.com";
        let audience = "https://sandpy.example.com/mcp";
        for (section, expected) in [
            (
                json!({"audience": audience}),
                "at `sandpy.auth`: missing field `issuer`",
            ),
            (
                json!({"issuer": "http://id.example.com", "audience": audience}),
                "at `sandpy.auth.issuer`: \"http://id.example.com\" must be an https URL",
            ),
            (
                json!({"issuer": "id.example.com", "audience": audience}),
                "at `sandpy.auth.issuer`: \"id.example.com\" is not an absolute URL",
            ),
            (
                json!({"issuer": issuer, "audience": "https://s.example.com/mcp#x"}),
                "at `sandpy.auth.audience`: \"https://s.example.com/mcp#x\" has a fragment",
            ),
            (
                json!({"issuer": issuer, "audience": audience, "jwks_uri": "http://keys.example.com/k"}),
                "at `sandpy.auth.jwks_uri`: \"http://keys.example.com/k\" must be an https URL",
            ),
            (
                json!({"issuer": issuer, "audience": audience, "tenant_claim": ""}),
                "at `sandpy.auth.tenant_claim`: must not be empty",
            ),
            (
                json!({"issuer": issuer, "audience": audience, "tenant_claim": "aud"}),
                "at `sandpy.auth.tenant_claim`: `aud` is not a name of a person",
            ),
            (
                json!({"issuer": issuer, "audience": audience, "leeway_s": 3600}),
                "at `sandpy.auth.leeway_s`: must be at most 300",
            ),
            (
                json!({"issuer": issuer, "audience": audience, "jwks_refetch_s": 0}),
                "at `sandpy.auth.jwks_refetch_s`: must be at least 1",
            ),
            (
                json!({"issuer": issuer, "audience": audience, "jwks_cache_s": 5}),
                "at `sandpy.auth.jwks_cache_s`: must be at least jwks_refetch_s (60)",
            ),
            (
                json!({"issuer": issuer, "audience": audience, "audiences": []}),
                "at `sandpy.auth.audiences`: unknown field `audiences`",
            ),
        ] {
            let e = read(section.clone()).expect_err(&section.to_string());
            assert!(
                e.starts_with("config `/etc/sandpy/.mcp.json`: ") && e.contains(expected),
                "{section}: {e}"
            );
        }
        let loopback = read(json!({"issuer": "http://127.0.0.1:8080", "audience": audience}));
        assert!(loopback.is_ok(), "http on loopback: {loopback:?}");
    }
}
