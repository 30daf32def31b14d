//! The HTTP client of streamable HTTP upstreams, and TLS for the `https://` ones.
//!
//! Trust (system roots, a server's `ca_file`, a self-signed certificate trusted exactly)
//! is [`sandpy::tls`]'s, shared with the sandboxed code's network.
//!
//! When a connection fails, [`explain`] turns the error into one a person can act on: a
//! rejected certificate names the server, the host and the reason (unknown issuer, name
//! mismatch, expired, ...); a `401` names the server and says what to configure.

use sandpy::tls::{certificate_problem, client_config, CaFile};
use std::error::Error;

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
    let tls = client_config(https, ca).map_err(|e| format!("TLS setup failed: {e}"))?;
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
                    certificate_problem(
                        reason,
                        ca,
                        "`ca_file` in the server's entry",
                        "the server's `url`"
                    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        assert_eq!(
            host_of("https://u:p@example.com:8443/mcp?x"),
            "example.com:8443"
        );
        assert_eq!(host_of("https://[::1]/mcp"), "[::1]:443");
    }
}
