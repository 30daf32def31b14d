//! TLS trust for every connection sandpy makes out: https upstream MCP servers and the
//! sandboxed code's allowed hosts (`sandpy.network`).
//!
//! TLS is rustls with the `ring` provider. A server's certificate must chain to one of the
//! system's root certificates (read once per process with `rustls-native-certs`, which
//! reads `SSL_CERT_FILE` and `SSL_CERT_DIR` instead of the system store when either is
//! set) or to one of the certificates of a `ca_file`, or be exactly one of those
//! certificates: a self-signed certificate made with the usual `openssl req -x509 ...`
//! recipe marks itself `CA:TRUE`, which webpki refuses as a server's certificate; when the
//! operator named that very certificate as trusted, it is accepted for the names it lists
//! and while it is valid (pinning by exact match is at least as strict as trusting it as a
//! CA). Nothing else is trusted: no "accept invalid certificates" switch.
//!
//! [`certificate_problem`] turns a rejected certificate into a sentence a person can act on.

use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::{CertificateError, ClientConfig, RootCertStore};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use verifier::{is_ca_used_as_end_entity, ChainedOrExact};

mod verifier;

/// A `ca_file`: PEM certificates trusted beyond the system roots (an upstream server's, or
/// the sandboxed code's network's), read and checked when the config is.
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
    /// Another user could write or swap the file, and so choose whom sandpy trusts.
    #[error("`{}` is not used as trust anchors", path.display())]
    Untrusted {
        /// The file.
        path: PathBuf,
        /// Whose it is, or who else can change it.
        #[source]
        source: crate::files::FolderError,
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
        // Trust anchors: a file another user could write would let them stand in for any host.
        match crate::host_paths::trusted_file(&path) {
            Ok(_) => {}
            Err(crate::host_paths::FolderError::Io { source, .. }) => {
                return Err(CaFileError::Read {
                    path,
                    error: source,
                })
            }
            Err(source) => return Err(CaFileError::Untrusted { path, source }),
        }
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

/// The TLS settings of a client that trusts the system roots (when `system` is true) and
/// `ca`, speaking HTTP/1.1 only (ALPN). With nothing trusted at all (plain http) it is
/// valid and refuses every certificate.
pub fn client_config(system: bool, ca: Option<&CaFile>) -> Result<ClientConfig, rustls::Error> {
    let (mut roots, system) = if system {
        let roots = system_roots();
        (roots.store.clone(), roots.certificates.clone())
    } else {
        (RootCertStore::empty(), Arc::from([]))
    };
    let own = ca.map(|ca| ca.certificates.clone()).unwrap_or_default();
    roots.add_parsable_certificates(own.iter().cloned());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let mut tls = if roots.is_empty() {
        // Nothing trusted: webpki's verifier refuses to be built without a root, and no
        // certificate could pass anyway.
        builder.with_root_certificates(roots).with_no_client_auth()
    } else {
        let chained = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| rustls::Error::General(e.to_string()))?;
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
    Ok(tls)
}

/// The reason a certificate was rejected, starting with its short name. `ca_key` names
/// where the operator puts a `ca_file` for this connection (e.g. "`ca_file` in the
/// server's entry"), `name_key` where the name it is reached by comes from.
pub fn certificate_problem(
    error: &CertificateError,
    ca: Option<&CaFile>,
    ca_key: &str,
    name_key: &str,
) -> String {
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
                     set {ca_key}"
                ),
            }
        }
        CertificateError::NotValidForName => {
            format!(
                "name mismatch: the certificate does not list the name the server was reached \
             by; use a name from its subjectAltName in {name_key}, or reissue it for this name"
            )
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
                 names in {name_key}, or reissue the certificate with \
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
                None => format!("{ca_key} (or SSL_CERT_FILE)"),
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
    fn dates() {
        let t = |s| UnixTime::since_unix_epoch(Duration::from_secs(s));
        assert_eq!(date(t(0)), "1970-01-01 00:00:00 UTC");
        assert_eq!(date(t(951_782_400)), "2000-02-29 00:00:00 UTC");
        assert_eq!(date(t(1_735_689_599)), "2024-12-31 23:59:59 UTC");
    }
}
