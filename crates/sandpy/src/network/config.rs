//! The `sandpy.network` section of a config file.
//!
//! ```json
//! "network": {
//!   "allow": ["api.github.com", "*.example.com:443", "GET https://pypi.org/simple/*"],
//!   "secrets": { "GITHUB_TOKEN": { "env": "GH_TOKEN", "hosts": ["api.github.com"] },
//!                "LOCAL_KEY": { "env": "LOCAL_KEY", "hosts": ["10.0.0.7:8080"], "allow_http": true } },
//!   "limits": { "max_requests": 100, "max_bytes_out": 16777216, "max_bytes_in": 67108864,
//!               "request_timeout_ms": 30000 },
//!   "ca_file": "internal-ca.pem"
//! }
//! ```

use super::{AllowRule, Network, NetworkLimits, NetworkRules, Secret};
use crate::tls::CaFile;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The section as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNetwork {
    #[serde(default)]
    allow: Vec<AllowRule>,
    #[serde(default)]
    secrets: BTreeMap<String, RawSecret>,
    #[serde(default)]
    limits: RawLimits,
    ca_file: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSecret {
    env: String,
    hosts: Vec<AllowRule>,
    /// Plain `http` requests get the value too (default: `https` only).
    #[serde(default)]
    allow_http: bool,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    max_requests: Option<usize>,
    max_bytes_out: Option<u64>,
    max_bytes_in: Option<u64>,
    request_timeout_ms: Option<u64>,
}

impl RawNetwork {
    /// The network these settings describe: secrets read from the environment now, the
    /// `ca_file` (relative to `base`) read and checked now. `Err((key, message))` names
    /// the key under `sandpy.network` that is wrong.
    pub(crate) fn read(self, base: &Path) -> Result<Network, (String, String)> {
        let mut secrets = Vec::new();
        for (name, raw) in self.secrets {
            let key = format!("sandpy.network.secrets.{name}");
            let value = std::env::var(&raw.env).map_err(|_| {
                let message = format!("the environment variable {} is not set", raw.env);
                (key.clone(), message)
            })?;
            let secret = Secret::new(&name, value, raw.hosts).map_err(|e| (key, e.to_string()))?;
            secrets.push(secret.allow_http(raw.allow_http));
        }
        let defaults = NetworkLimits::default();
        let raw = self.limits;
        let limits = NetworkLimits {
            max_requests: raw.max_requests.unwrap_or(defaults.max_requests),
            max_bytes_out: raw.max_bytes_out.unwrap_or(defaults.max_bytes_out),
            max_bytes_in: raw.max_bytes_in.unwrap_or(defaults.max_bytes_in),
            request_timeout: raw
                .request_timeout_ms
                .map_or(defaults.request_timeout, Duration::from_millis),
        };
        if limits.request_timeout.is_zero() {
            let key = "sandpy.network.limits.request_timeout_ms".to_string();
            return Err((key, "must be at least 1".into()));
        }
        let ca_file = match self.ca_file {
            Some(file) => Some(
                CaFile::read(&base.join(file))
                    .map_err(|e| ("sandpy.network.ca_file".to_string(), e.to_string()))?,
            ),
            None => None,
        };
        let rules = NetworkRules {
            allow: self.allow,
            secrets,
            limits,
            ca_file,
        };
        Network::new(rules).map_err(|e| {
            let message = crate::error::error_chain(&e);
            ("sandpy.network".to_string(), message)
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::settings::ConfigFile;
    use std::path::Path;

    fn error(network: &str) -> String {
        let text = format!(r#"{{"sandpy": {{"network": {network}}}}}"#);
        match ConfigFile::parse(&text, Path::new("/x/sandpy.json")) {
            Ok(_) => panic!("{network} was accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_bad_network_section_names_the_key_and_the_fix() {
        let bad_entry = error(r#"{"allow": ["ok.example", "ftp://x/"]}"#);
        assert!(
            bad_entry.contains("sandpy.network.allow[1]") && bad_entry.contains("http or https"),
            "{bad_entry}"
        );
        let unset =
            error(r#"{"secrets": {"T": {"env": "SANDPY_SURELY_UNSET_VAR", "hosts": ["a.b"]}}}"#);
        assert!(
            unset.contains("sandpy.network.secrets.T")
                && unset.contains("SANDPY_SURELY_UNSET_VAR is not set"),
            "{unset}"
        );
        let pattern =
            error(r#"{"secrets": {"T": {"env": "PATH", "hosts": ["GET https://a.b/x"]}}}"#);
        assert!(pattern.contains("hosts, not URL patterns"), "{pattern}");
        let name = error(r#"{"secrets": {"1T": {"env": "PATH", "hosts": ["a.b"]}}}"#);
        assert!(
            name.contains("not an environment variable's name"),
            "{name}"
        );
        let zero = error(r#"{"limits": {"request_timeout_ms": 0}}"#);
        assert!(zero.contains("request_timeout_ms"), "{zero}");
        let ca = error(r#"{"ca_file": "missing.pem"}"#);
        assert!(
            ca.contains("sandpy.network.ca_file") && ca.contains("/x/missing.pem"),
            "{ca}"
        );
    }
}
