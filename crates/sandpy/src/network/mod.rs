//! Network by allowlist: sandboxed code reaches the hosts the operator names over HTTP and
//! HTTPS, and secrets never enter the sandbox.
//!
//! Off by default: without a [`Network`] a run has no network at all. With one, the
//! guest's `http.client` (and so `urllib.request`) hands each request to the host, which
//! checks it against [`NetworkRules::allow`] (and a policy's narrower list), resolves the
//! name itself and refuses internal addresses (`address.rs`), does TLS itself (the trust of
//! [`crate::tls`]), never follows a redirect (the code's library asks again, and the next
//! hop is checked like the first), puts each [`Secret`]'s value in place of its
//! placeholder only in the headers of requests to that secret's hosts, and scrubs the value
//! from everything that comes back. Every request counts against [`NetworkLimits`] and is
//! recorded in [`crate::Execution::requests`].
//!
//! Both tiers use the same host side (`access.rs`); the WebAssembly tier through the
//! `network` import of `guest/wit/sandpy.wit`, the native tier over its channel.

mod access;
mod address;
mod allow;
mod config;
#[cfg(test)]
mod proptests;
mod scrub;

pub use access::NetworkRequest;
pub(crate) use access::{FetchError, NetworkAccess, Request};
pub use allow::{AllowRule, AllowRuleError};
pub(crate) use config::RawNetwork;

use crate::tls::CaFile;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// What a request gets when the run has no network.
pub(crate) const NO_NETWORK: &str = "the sandbox has no network: the operator allows hosts \
    with `sandpy.network.allow` in the config (or `sandpy run --allow-host`)";

/// What a placeholder looks like: `sandpy-secret:NAME`.
pub const SECRET_PREFIX: &str = "sandpy-secret:";

/// The operator's network rules (`sandpy.network` in a config file).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NetworkRules {
    /// What code may reach; empty allows nothing.
    pub allow: Vec<AllowRule>,
    /// Values code may use in request headers without ever seeing them.
    pub secrets: Vec<Secret>,
    /// Caps of one run's requests.
    pub limits: NetworkLimits,
    /// Certificates trusted beyond the system roots, as for an upstream server.
    pub ca_file: Option<CaFile>,
}

/// A value code uses by its placeholder: `os.environ[name]` is `sandpy-secret:NAME`, and
/// the host puts the value in its place in the headers of requests to `hosts` only.
///
/// Defaults: over `https` only, and only to the port a `hosts` entry names (443 when it
/// names none); [`Secret::allow_http`] lets it go over plain `http` too (port 80 when the
/// entry names none).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    /// The environment variable the code sees (`GITHUB_TOKEN`).
    pub name: String,
    /// Hosts (host forms of [`AllowRule`]) whose requests get the value.
    pub hosts: Vec<AllowRule>,
    /// Whether plain `http` requests get the value too (default `false`: anyone on the
    /// path would read it).
    pub allow_http: bool,
    value: String,
}

/// Why a [`Secret`] cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// The name is not an environment variable's (letters, digits, `_`; not a digit first).
    #[error("{0:?} is not an environment variable's name")]
    Name(String),
    /// The value is empty.
    #[error("its value is empty")]
    EmptyValue,
    /// No host would get it.
    #[error("it names no `hosts` to send it to")]
    NoHosts,
    /// A `hosts` entry is a method and URL pattern.
    #[error("`hosts` entries are hosts, not URL patterns: {0}")]
    NotAHost(String),
}

impl Secret {
    /// A secret `name` with `value`, sent to `hosts` only.
    pub fn new(name: &str, value: String, hosts: Vec<AllowRule>) -> Result<Secret, SecretError> {
        let mut chars = name.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(SecretError::Name(name.to_string()));
        }
        if value.is_empty() {
            return Err(SecretError::EmptyValue);
        }
        if hosts.is_empty() {
            return Err(SecretError::NoHosts);
        }
        if let Some(host) = hosts.iter().find(|h| !h.is_host_only()) {
            return Err(SecretError::NotAHost(host.to_string()));
        }
        Ok(Secret {
            name: name.to_string(),
            hosts,
            allow_http: false,
            value,
        })
    }

    /// The same secret, sent over plain `http` too when `allow` (the config's
    /// `allow_http`).
    pub fn allow_http(mut self, allow: bool) -> Secret {
        self.allow_http = allow;
        self
    }

    /// Whether a request to `to` gets the value: its scheme is `https` (or `http` when
    /// allowed), and an entry of `hosts` allows it on the port that entry names, or on
    /// the scheme's default port when it names none.
    pub(crate) fn sends_to(&self, to: &allow::Destination<'_>) -> bool {
        let default_port = match to.scheme {
            "https" => 443,
            "http" if self.allow_http => 80,
            _ => return false,
        };
        self.hosts
            .iter()
            .any(|h| h.allows(to) && h.port().unwrap_or(default_port) == to.port)
    }

    /// What the code sees instead of the value.
    pub fn placeholder(&self) -> String {
        format!("{SECRET_PREFIX}{}", self.name)
    }
}

impl std::fmt::Debug for Secret {
    /// The value is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secret")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("allow_http", &self.allow_http)
            .field("value", &"<secret>")
            .finish()
    }
}

/// Caps of one run's requests. Requests are made one at a time, or a batch at once when
/// the code gathers them on its event loop (`httpx.AsyncClient`), 8 at most: a run holds
/// at most 8 connections, and the answers read at once share its bytes in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkLimits {
    /// Requests one run may make (default 100).
    pub max_requests: usize,
    /// Bytes one run may send: request lines, headers and bodies (default 16 MiB).
    pub max_bytes_out: u64,
    /// Bytes one run may receive: headers and bodies (default 64 MiB); a response that
    /// would pass it is refused before it is held.
    pub max_bytes_in: u64,
    /// Time one request may take, connection and whole body included, unless the run's
    /// own deadline comes first (default 30 s).
    pub request_timeout: Duration,
}

impl Default for NetworkLimits {
    fn default() -> Self {
        NetworkLimits {
            max_requests: 100,
            max_bytes_out: 16 << 20,
            max_bytes_in: 64 << 20,
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// Why a [`Network`] cannot be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetworkError {
    /// The TLS settings could not be built.
    #[error("TLS setup for the sandbox's network failed")]
    Tls(#[source] rustls::Error),
    /// The HTTP client could not be built.
    #[error("cannot set up the sandbox's HTTP client")]
    Client(#[source] reqwest::Error),
}

/// The operator's rules with the HTTP client that applies them, made once and shared by
/// every run (a clone is a reference).
#[derive(Clone)]
pub struct Network {
    inner: Arc<Inner>,
}

struct Inner {
    rules: NetworkRules,
    /// The secrets' values in every form answers are scrubbed of.
    scrubber: scrub::Scrubber,
    tls: rustls::ClientConfig,
    /// A client per scheme and set of internal addresses its requests may reach (see
    /// [`Network::client`]); the one with none is made with the network.
    clients: std::sync::Mutex<HashMap<ClientKey, reqwest::Client>>,
}

/// Whether `https`, and the internal addresses a name may resolve to.
type ClientKey = (bool, Vec<IpAddr>);

/// Clients kept at most: one per distinct set of internal addresses (a handful of
/// address entries make a handful); past it a request gets a client of its own.
const MAX_CLIENTS: usize = 64;

impl Network {
    /// The clients for `rules`: TLS trusting the system roots and `rules.ca_file`, names
    /// resolved by the host with internal addresses refused (unless an entry names the
    /// address for the request's port, method and path), no redirects followed, no proxy
    /// from the host's environment, HTTP/1.1.
    ///
    /// `https` connections are kept for the next request to the same host (90 s idle at
    /// most): a TLS handshake per request would cost a round trip or two to a real API.
    /// `http` ones are not, as for upstream servers (`sandpy-mcp`'s `tls.rs`): a reused
    /// connection to a server that leaves Nagle's algorithm on waits ~40 ms per request
    /// for the delayed ACK, a fresh one does not.
    pub fn new(rules: NetworkRules) -> Result<Network, NetworkError> {
        let tls =
            crate::tls::client_config(true, rules.ca_file.as_ref()).map_err(NetworkError::Tls)?;
        let mut clients = HashMap::new();
        for https in [false, true] {
            let client = build_client(&tls, https, Vec::new()).map_err(NetworkError::Client)?;
            clients.insert((https, Vec::new()), client);
        }
        let scrubber = scrub::Scrubber::new(
            rules
                .secrets
                .iter()
                .map(|s| (s.value.as_bytes(), s.placeholder().into_bytes())),
        );
        Ok(Network {
            inner: Arc::new(Inner {
                scrubber,
                rules,
                tls,
                clients: std::sync::Mutex::new(clients),
            }),
        })
    }

    /// The rules it applies.
    pub fn rules(&self) -> &NetworkRules {
        &self.inner.rules
    }

    /// `network` with `extra` entries allowed too, made when there was none: an
    /// operator's addition (`sandpy run --allow-host`, the Python package's `allow_hosts`
    /// for a sandbox or for one run). Nothing changes when `extra` is empty.
    pub fn allow_also(
        network: &mut Option<Network>,
        extra: &[AllowRule],
    ) -> Result<(), NetworkError> {
        if extra.is_empty() {
            return Ok(());
        }
        let mut rules = network
            .as_ref()
            .map(|n| n.rules().clone())
            .unwrap_or_default();
        rules.allow.extend(extra.iter().cloned());
        *network = Some(Network::new(rules)?);
        Ok(())
    }

    /// A digest of the rules, secret values included, that tells two networks apart
    /// without showing a value (a warm runner serves only commands whose secrets are the
    /// ones it was started with).
    pub fn fingerprint(&self) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        let mut hash = Sha256::new();
        hash.update(format!("{:?}", self.inner.rules).as_bytes());
        for secret in &self.inner.rules.secrets {
            hash.update(secret.name.as_bytes());
            hash.update([0]);
            hash.update(secret.value.as_bytes());
            hash.update([0]);
        }
        hash.finalize().into()
    }

    /// What scrubs every secret's value from answers and errors.
    pub(crate) fn scrubber(&self) -> &scrub::Scrubber {
        &self.inner.scrubber
    }

    /// Whether `to` is a host some secret goes to (on any scheme and on the ports its
    /// entry allows): its answers may hold a value it got before, so they are asked for
    /// whole and uncompressed, and counted scrubbed, whether or not this request carries
    /// one.
    pub(crate) fn holds_secrets(&self, to: &allow::Destination<'_>) -> bool {
        let secrets = &self.inner.rules.secrets;
        secrets.iter().any(|s| s.hosts.iter().any(|h| h.allows(to)))
    }

    /// The environment the code sees: each secret's name with its placeholder.
    pub(crate) fn placeholders(&self) -> Vec<(String, String)> {
        let secrets = &self.inner.rules.secrets;
        secrets
            .iter()
            .map(|s| (s.name.clone(), s.placeholder()))
            .collect()
    }

    /// The client for a URL of `scheme` whose name may resolve to the internal addresses
    /// `reachable` (and to public ones). A client's kept connections serve only requests
    /// with the same reachable addresses: a connection made for one run's request to an
    /// internal address never serves a request whose port or policy does not allow it.
    fn client(&self, scheme: &str, reachable: Vec<IpAddr>) -> Result<reqwest::Client, FetchError> {
        let key = (scheme == "https", reachable);
        let mut clients = self
            .inner
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let client = build_client(&self.inner.tls, key.0, key.1.clone())
            .map_err(|e| FetchError::Failed(format!("cannot set up the HTTP client: {e}")))?;
        if clients.len() < MAX_CLIENTS {
            clients.insert(key, client.clone());
        }
        Ok(client)
    }
}

/// A client whose resolver keeps public addresses and `reachable` ones; `https` ones keep
/// connections (see [`Network::new`]).
fn build_client(
    tls: &rustls::ClientConfig,
    https: bool,
    reachable: Vec<IpAddr>,
) -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls.clone())
        .dns_resolver(access::CheckedResolver::new(reachable))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .http1_only()
        // As Python sends them (`Authorization`), for servers that care.
        .http1_title_case_headers()
        .pool_max_idle_per_host(if https { usize::MAX } else { 0 })
        .pool_idle_timeout(std::time::Duration::from_secs(90))
        .build()
}

impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.rules.fmt(f)
    }
}

impl PartialEq for Network {
    fn eq(&self, other: &Self) -> bool {
        self.inner.rules == other.inner.rules
    }
}
