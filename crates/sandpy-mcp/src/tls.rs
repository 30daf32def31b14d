//! The HTTP client of streamable HTTP upstreams, and TLS for the `https://` ones.
//!
//! TLS is rustls with the `ring` provider. A server's certificate must chain to one of the
//! system's root certificates (read once per process with `rustls-native-certs`, which
//! reads `SSL_CERT_FILE` and `SSL_CERT_DIR` instead of the system store when either is
//! set) or to one of the certificates of the server's own `ca_file`, or be exactly one of
//! those certificates: a self-signed certificate made with the usual
//! `openssl req -x509 ...` recipe marks itself `CA:TRUE`, which webpki refuses as a
//! server's certificate; when the operator named that very certificate as trusted, it is
//! accepted for the names it lists and while it is valid (pinning by exact match is at least
//! as strict as trusting it as a CA). Nothing else is trusted: no "accept invalid
//! certificates" switch.
//!
//! When a connection fails, [`explain`] turns the error into one a person can act on: a
//! rejected certificate names the server, the host and the reason (unknown issuer, name
//! mismatch, expired, ...); a `401` names the server and says what to configure.

use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::{CertificateError, RootCertStore};
use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use verifier::{is_ca_used_as_end_entity, ChainedOrExact};

mod verifier;

/// A server's `ca_file`: the PEM certificates it is trusted by beyond the system roots,
/// read and checked when the config is.
#[derive(Clone, PartialEq, Eq)]
pub struct CaFile {
    /// The file, resolved against the config file's folder.
    pub path: PathBuf,
    certificates: Vec<CertificateDer<'static>>,
}

impl std::fmt::Debug for CaFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaFile")
            .field("path", &self.path)
            .field("certificates", &self.certificates.len())
            .finish()
    }
}

/// Why a `ca_file` cannot be used. Each message names the file and what is wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaFileError {
    /// The file could not be read.
    #[error("cannot read `{}`: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The file is not PEM (a section that does not decode).
    #[error("`{}` is not a PEM file: {reason}", path.display())]
    NotPem {
        /// The file.
        path: PathBuf,
        /// What the PEM reader found wrong.
        reason: String,
    },
    /// The file holds no `CERTIFICATE` section.
    #[error("`{}` holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)", path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// A certificate cannot serve as a trust anchor (its DER does not parse).
    #[error("certificate {number} of `{}`: {reason}", path.display())]
    BadCertificate {
        /// The file.
        path: PathBuf,
        /// Which certificate, from 1.
        number: usize,
        /// What is wrong with it.
        reason: String,
    },
}

impl CaFile {
    /// Read the certificates of a PEM file; fails if it cannot be read, is not PEM, holds no
    /// certificate, or holds one that cannot serve as a trust anchor.
    pub fn read(path: &Path) -> Result<CaFile, CaFileError> {
        let path = path.to_path_buf();
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) => return Err(CaFileError::Read { path, error }),
        };
        let certificates =
            match CertificateDer::pem_slice_iter(&bytes).collect::<Result<Vec<_>, _>>() {
                Ok(certificates) => certificates,
                Err(e) => {
                    let reason = e.to_string();
                    return Err(CaFileError::NotPem { path, reason });
                }
            };
        if certificates.is_empty() {
            return Err(CaFileError::NoCertificate { path });
        }
        for (i, certificate) in certificates.iter().enumerate() {
            if let Err(e) = RootCertStore::empty().add(certificate.clone()) {
                let (number, reason) = (i + 1, e.to_string());
                return Err(CaFileError::BadCertificate {
                    path,
                    number,
                    reason,
                });
            }
        }
        Ok(CaFile { path, certificates })
    }

    /// How many certificates the file holds.
    pub fn len(&self) -> usize {
        self.certificates.len()
    }

    /// Whether the file holds no certificate (never true of one that was read).
    pub fn is_empty(&self) -> bool {
        self.certificates.is_empty()
    }
}

/// The system's root certificates, read once per process.
struct SystemRoots {
    store: RootCertStore,
    /// The same certificates as DER, for a server that presents one of them itself.
    certificates: Arc<[CertificateDer<'static>]>,
    /// Where they came from, for messages.
    source: String,
}

fn system_roots() -> &'static SystemRoots {
    static ROOTS: OnceLock<SystemRoots> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let loaded = rustls_native_certs::load_native_certs();
        for error in &loaded.errors {
            tracing::warn!("system root certificates: {error}");
        }
        let mut store = RootCertStore::empty();
        let certificates: Arc<[CertificateDer<'static>]> = loaded.certs.into();
        let (_, unusable) = store.add_parsable_certificates(certificates.iter().cloned());
        if unusable > 0 {
            tracing::warn!("system root certificates: {unusable} could not be parsed");
        }
        let from_env: Vec<String> = ["SSL_CERT_FILE", "SSL_CERT_DIR"]
            .into_iter()
            .filter_map(|name| Some(format!("{name}={}", std::env::var(name).ok()?)))
            .collect();
        let source = if from_env.is_empty() {
            "the system store".to_string()
        } else {
            from_env.join(" ")
        };
        SystemRoots {
            store,
            certificates,
            source,
        }
    })
}

/// The reqwest client of one upstream. For an `https` URL its TLS trusts the system roots
/// and `ca`; an `http` URL never loads them. Like rmcp's default client, it follows only
/// same-origin 307 and 308 redirects.
///
/// Over http, like rmcp's default client, it opens a connection per request: a reused
/// connection to a server that leaves Nagle's algorithm on (no `TCP_NODELAY`) waits ~40 ms
/// per call for the client's delayed ACK, a fresh one does not. Over https it keeps idle
/// connections: a TLS handshake per call would cost more than the call (on loopback 1.0 ms a
/// call against 0.38 ms, docs/dev/performance.md), and a server without `TCP_NODELAY` stalls a
/// fresh TLS connection just as much (its handshake is several writes), so there is nothing
/// to avoid.
pub(crate) fn http_client(https: bool, ca: Option<&CaFile>) -> Result<reqwest::Client, String> {
    let (mut roots, system) = if https {
        let roots = system_roots();
        (roots.store.clone(), roots.certificates.clone())
    } else {
        (RootCertStore::empty(), Arc::from([]))
    };
    let own = ca.map(|ca| ca.certificates.clone()).unwrap_or_default();
    roots.add_parsable_certificates(own.iter().cloned());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed: {e}"))?;
    let mut tls = if roots.is_empty() {
        // Plain http, or nothing trusted at all: webpki's verifier refuses to be built
        // without a root, and no certificate could pass anyway.
        builder.with_root_certificates(roots).with_no_client_auth()
    } else {
        let chained = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| format!("TLS setup failed: {e}"))?;
        let verifier = Arc::new(ChainedOrExact {
            chained,
            system,
            own,
        });
        builder
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth()
    };
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .pool_max_idle_per_host(if https { usize::MAX } else { 0 })
        .redirect(same_origin_redirects())
        .build()
        .map_err(|e| format!("cannot set up the HTTP client: {e}"))
}

/// rmcp's redirect policy for its default client (private there): only same-origin 307 and
/// 308 redirects, which keep the method and body, up to 10 hops; a cross-origin one would
/// replay the session id and the configured headers to another host.
fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let keeps_body = matches!(
            attempt.status(),
            reqwest::StatusCode::TEMPORARY_REDIRECT | reqwest::StatusCode::PERMANENT_REDIRECT
        );
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !keeps_body || !same_origin {
            attempt.stop()
        } else if attempt.previous().len() > 10 {
            attempt.error("exceeded 10 redirects")
        } else {
            attempt.follow()
        }
    })
}

/// The errors in `error`'s chain. Besides `source()`, it follows the errors that an
/// `io::Error` wraps (its `source` skips them) and those that rmcp holds without naming
/// them as sources: a failed initialisation's transport error and the HTTP client's error.
fn chain<'a>(error: &'a (dyn Error + 'static)) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    use rmcp::service::ClientInitializeError;
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    let mut next = Some(error);
    std::iter::from_fn(move || {
        let current = next?;
        next = if let Some(io) = current.downcast_ref::<std::io::Error>() {
            io.get_ref().map(|inner| inner as &(dyn Error + 'static))
        } else if let Some(init) = current.downcast_ref::<ClientInitializeError>() {
            match init {
                ClientInitializeError::TransportError { error, .. } => Some(error as _),
                ClientInitializeError::LegacyFallbackFailed { fallback, .. } => {
                    Some(fallback.as_ref() as _)
                }
                _ => current.source(),
            }
        } else if let Some(StreamableHttpError::Client(client)) =
            current.downcast_ref::<StreamableHttpError<reqwest::Error>>()
        {
            Some(client as _)
        } else {
            current.source()
        };
        Some(current)
    })
}

/// `https://host:port/path` → `host:port` (the scheme's port when the URL has none).
fn host_of(url: &str) -> String {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return url.to_string();
    };
    match (parsed.host_str(), parsed.port_or_known_default()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_string(),
        (None, _) => url.to_string(),
    }
}

/// Why the connection to `server` at `url` failed, when the cause is one a person must act
/// on: a TLS certificate that was rejected (and why), a handshake that failed, or a `401`.
/// `None` for any other error.
pub(crate) fn explain(
    server: &str,
    url: &str,
    ca: Option<&CaFile>,
    error: &(dyn Error + 'static),
) -> Option<String> {
    let host = host_of(url);
    for cause in chain(error) {
        if let Some(tls) = cause.downcast_ref::<rustls::Error>() {
            return Some(match tls {
                rustls::Error::InvalidCertificate(reason) => format!(
                    "server {server}: the TLS certificate of {host} was rejected: {}",
                    certificate_problem(reason, ca)
                ),
                rustls::Error::InvalidMessage(_) => format!(
                    "server {server}: TLS handshake with {host} failed ({tls}); \
                     does it serve https on that port?"
                ),
                other => format!("server {server}: TLS handshake with {host} failed: {other}"),
            });
        }
        if let Some(status) = http_status(cause) {
            if status == 401 {
                return Some(format!(
                    "server {server} answered 401 Unauthorized at {url}: it wants credentials \
                     that were not sent or were refused. sandpy does not implement MCP's OAuth \
                     flow; give the server a token in its `headers` in the config, e.g. \
                     \"Authorization\": \"Bearer ${{TOKEN}}\" (taken from the environment)"
                ));
            }
            if status == 403 {
                return Some(format!(
                    "server {server} answered 403 Forbidden at {url}: the credentials in its \
                     `headers` are not allowed to use it"
                ));
            }
        }
    }
    None
}

/// The HTTP status an error of rmcp's reqwest client carries, if any.
fn http_status(error: &(dyn Error + 'static)) -> Option<u16> {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    if let Some(error) = error.downcast_ref::<reqwest::Error>() {
        return error.status().map(|s| s.as_u16());
    }
    match error.downcast_ref::<StreamableHttpError<reqwest::Error>>()? {
        StreamableHttpError::AuthRequired(_) => Some(401),
        StreamableHttpError::InsufficientScope(_) => Some(403),
        // A 401 or 403 without a `WWW-Authenticate` challenge.
        StreamableHttpError::UnexpectedServerResponse(text) => {
            let code = text.strip_prefix("HTTP ")?.get(..3)?;
            code.parse().ok()
        }
        _ => None,
    }
}

/// The reason a certificate was rejected, starting with its short name.
fn certificate_problem(error: &CertificateError, ca: Option<&CaFile>) -> String {
    match error {
        CertificateError::UnknownIssuer => {
            let roots = system_roots();
            let trusted = format!("{} system roots from {}", roots.store.len(), roots.source);
            match ca {
                Some(ca) => format!(
                    "unknown issuer: it chains neither to the {trusted} nor to the {} \
                     certificate(s) of `ca_file` `{}`",
                    ca.len(),
                    ca.path.display()
                ),
                None => format!(
                    "unknown issuer: it chains to none of the {trusted}; for a private CA, \
                     set `ca_file` in the server's entry"
                ),
            }
        }
        CertificateError::NotValidForName => {
            "name mismatch: the certificate does not list the name the server was reached by; \
             use a name from its subjectAltName in the server's `url`, or reissue it for this \
             name"
                .into()
        }
        CertificateError::NotValidForNameContext {
            expected,
            presented,
        } => {
            // webpki gives each name as `DnsName("host")` or `IpAddress(...)`.
            let names: Vec<&str> = presented
                .iter()
                .map(|name| {
                    name.strip_prefix("DnsName(\"")
                        .and_then(|rest| rest.strip_suffix("\")"))
                        .unwrap_or(name)
                })
                .collect();
            let listed = if names.is_empty() {
                "no name".to_string()
            } else {
                names.join(", ")
            };
            let expected = expected.to_str();
            format!(
                "name mismatch: it was issued for {listed}, not {expected:?}; use one of those \
                 names in the server's `url`, or reissue the certificate with \
                 subjectAltName for {expected:?}"
            )
        }
        CertificateError::Expired => "expired: renew the server's certificate".into(),
        CertificateError::ExpiredContext { not_after, .. } => format!(
            "expired: not valid after {}; renew the server's certificate",
            date(*not_after)
        ),
        CertificateError::NotValidYet => {
            "not valid yet: check the clocks of this machine and the server".into()
        }
        CertificateError::NotValidYetContext { not_before, .. } => format!(
            "not valid yet: not valid before {}; check the clocks of this machine and the \
             server",
            date(*not_before)
        ),
        CertificateError::Revoked => "revoked: the server needs a new certificate".into(),
        CertificateError::BadSignature => {
            "bad signature: it names a trusted issuer but was not signed with that issuer's key"
                .into()
        }
        CertificateError::Other(other) if is_ca_used_as_end_entity(other) => {
            let trusted = match ca {
                Some(ca) => format!("`ca_file` `{}`", ca.path.display()),
                None => "the server's `ca_file` (or SSL_CERT_FILE)".to_string(),
            };
            format!(
                "the server's certificate is itself a CA certificate (CA:TRUE, as a \
                 self-signed `openssl req -x509` certificate is), and it is not one of the \
                 trusted certificates; to trust exactly this certificate, put it in {trusted}; \
                 or serve a certificate signed by a CA you trust"
            )
        }
        CertificateError::BadEncoding => "malformed certificate".into(),
        other => other.to_string(),
    }
}

/// `2024-05-01 12:00:00 UTC`.
fn date(time: UnixTime) -> String {
    let secs = time.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days, for days since 1970-01-01 (never negative here).
    let z = days as i64 + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn dates_and_hosts() {
        let t = |s| UnixTime::since_unix_epoch(Duration::from_secs(s));
        assert_eq!(date(t(0)), "1970-01-01 00:00:00 UTC");
        assert_eq!(date(t(951_782_400)), "2000-02-29 00:00:00 UTC");
        assert_eq!(date(t(1_735_689_599)), "2024-12-31 23:59:59 UTC");
        assert_eq!(
            host_of("https://u:p@example.com:8443/mcp?x"),
            "example.com:8443"
        );
        assert_eq!(host_of("https://[::1]/mcp"), "[::1]:443");
    }
}
