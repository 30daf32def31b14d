//! One run's network: its requests checked, made, bounded, scrubbed and recorded. Both
//! tiers hand the guest's requests to [`NetworkAccess::fetch`].

use super::address::is_internal;
use super::allow::{AllowRule, Destination, Host};
use super::{Network, Secret};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use tokio::time::Instant;

/// One request as the code asked for it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Request {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    #[serde(with = "crate::files::base64_bytes", rename = "body_base64")]
    pub body: Vec<u8>,
}

/// The answer the code gets (the status of any kind, redirects included).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Response {
    pub status: u16,
    pub reason: String,
    pub headers: Vec<(String, String)>,
    #[serde(with = "crate::files::base64_bytes", rename = "body_base64")]
    pub body: Vec<u8>,
}

/// Why a request got no answer; the guest raises `PermissionError`, `TimeoutError` or
/// `ConnectionError` with the message.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum FetchError {
    /// The allowlist (or the run's network limits) refused it; nothing was sent.
    Refused(String),
    /// The request took longer than its time limit.
    Timeout(String),
    /// The connection or the exchange failed.
    Failed(String),
}

/// One request a run made, for the audit log: never a header, a query or a secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkRequest {
    /// `GET`, `POST`, ...
    pub method: String,
    /// `scheme://host:port/path`, without the query.
    pub url: String,
    /// The response's status; `None` when there was none (see `error`).
    pub status: Option<u16>,
    /// Bytes sent: request line, headers and body.
    pub bytes_out: u64,
    /// Bytes received: headers and body.
    pub bytes_in: u64,
    /// Why it was refused or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Headers the host sets itself: the code's values would let it talk to another host than
/// the one checked (`Host`), smuggle a second request (framing) or reach a proxy.
const HOST_SET: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
];

/// One run's network: the rules, the policy's narrower list, the counts against the
/// limits and the requests made.
#[derive(Clone)]
pub(crate) struct NetworkAccess {
    network: Network,
    /// A policy's allowlist: a request must pass it too.
    narrowed: Option<Vec<AllowRule>>,
    /// When the run's wall-clock limit ends; set as the guest is called.
    pub deadline: Option<Instant>,
    bytes_out: u64,
    bytes_in: u64,
    /// The requests made (and refused), in order.
    pub made: Vec<NetworkRequest>,
}

impl NetworkAccess {
    /// A run's access to `network`, narrowed by a policy's list when it has one.
    pub(crate) fn new(network: Network, narrowed: Option<Vec<AllowRule>>) -> NetworkAccess {
        NetworkAccess {
            network,
            narrowed,
            deadline: None,
            bytes_out: 0,
            bytes_in: 0,
            made: Vec::new(),
        }
    }

    /// The bytes one run may send (the native tier sizes its channel's messages by it).
    pub(crate) fn max_bytes_out(&self) -> usize {
        usize::try_from(self.network.rules().limits.max_bytes_out).unwrap_or(usize::MAX)
    }

    /// Check, make and record one request.
    pub(crate) async fn fetch(&mut self, request: Request) -> Result<Response, FetchError> {
        let limit = self.network.rules().limits.max_requests;
        if self.made.len() >= limit {
            // Not recorded: the record of a run stays as bounded as its requests.
            return Err(FetchError::Refused(format!(
                "the run made its {limit} requests (sandpy.network.limits.max_requests)"
            )));
        }
        let mut record = NetworkRequest {
            method: request.method.clone(),
            url: shown_url(&request.url),
            status: None,
            bytes_out: 0,
            bytes_in: 0,
            error: None,
        };
        let result = self.exchange(request, &mut record).await;
        if let Err(FetchError::Refused(e) | FetchError::Timeout(e) | FetchError::Failed(e)) =
            &result
        {
            record.error = Some(e.clone());
        }
        self.made.push(record);
        result
    }

    async fn exchange(
        &mut self,
        request: Request,
        record: &mut NetworkRequest,
    ) -> Result<Response, FetchError> {
        let rules = self.network.rules();
        let limits = &rules.limits;
        let url = reqwest::Url::parse(&request.url)
            .map_err(|e| FetchError::Refused(format!("{:?} is not a URL: {e}", request.url)))?;
        let method = reqwest::Method::from_bytes(request.method.as_bytes())
            .map_err(|_| FetchError::Refused(format!("{:?} is not a method", request.method)))?;
        let destination = destination(&url, method.as_str())?;
        record.url = format!(
            "{}://{}:{}{}",
            destination.scheme, destination.host, destination.port, destination.path
        );
        let listed = rules.allow.iter().any(|r| r.allows(&destination));
        let narrowed = self
            .narrowed
            .as_ref()
            .is_none_or(|list| list.iter().any(|r| r.allows(&destination)));
        if !listed || !narrowed {
            let by = if listed {
                "the policy's `network_allow`"
            } else {
                "sandpy.network.allow"
            };
            return Err(FetchError::Refused(format!(
                "{method} {} is not allowed by {by}",
                record.url
            )));
        }
        let mut headers = reqwest::header::HeaderMap::new();
        let mut size = request.method.len() + request.url.len() + 12 + request.body.len();
        for (name, value) in &request.headers {
            if HOST_SET.contains(&name.to_ascii_lowercase().as_str()) {
                continue;
            }
            let value = with_secrets(value, &rules.secrets, &destination);
            size += name.len() + value.len() + 4;
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| FetchError::Refused(format!("{name:?} is not a header name")))?;
            let value = reqwest::header::HeaderValue::from_str(&value).map_err(|_| {
                FetchError::Refused(format!("the value of header {name} is not a header value"))
            })?;
            headers.append(name, value);
        }
        let size = size as u64;
        if self.bytes_out + size > limits.max_bytes_out {
            return Err(FetchError::Refused(format!(
                "the request ({size} bytes) would pass the run's {} bytes out \
                 (sandpy.network.limits.max_bytes_out)",
                limits.max_bytes_out
            )));
        }
        let timeout = crate::limits::own_timeout(self.deadline, limits.request_timeout);
        self.bytes_out += size;
        record.bytes_out = size;
        let remaining = limits.max_bytes_in - self.bytes_in;
        let client = self.network.client(destination.scheme).clone();
        let sent = client
            .request(method, url)
            .headers(headers)
            .body(request.body)
            .send();
        let exchange = async {
            let mut response = sent.await.map_err(|e| FetchError::Failed(failure(&e)))?;
            let status = response.status();
            let mut headers = Vec::new();
            let mut received = 0u64;
            for (name, value) in response.headers() {
                received += (name.as_str().len() + value.len() + 4) as u64;
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                headers.push((name.as_str().to_string(), value));
            }
            let too_big = |received: u64| {
                FetchError::Refused(format!(
                    "the response ({received} bytes or more) would pass the run's {} bytes \
                     in (sandpy.network.limits.max_bytes_in)",
                    limits.max_bytes_in
                ))
            };
            if let Some(length) = response.content_length() {
                if received + length > remaining {
                    return Err(too_big(received + length));
                }
            }
            let mut body = Vec::new();
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|e| FetchError::Failed(failure(&e)))?
            {
                received += chunk.len() as u64;
                if received > remaining {
                    return Err(too_big(received));
                }
                body.extend_from_slice(&chunk);
            }
            Ok((status, headers, body, received))
        };
        let answered = match timeout {
            Some(timeout) => tokio::time::timeout(timeout, exchange).await.map_err(|_| {
                FetchError::Timeout(format!(
                    "no whole answer from {} within {} ms (sandpy.network.limits.request_timeout_ms)",
                    record.url,
                    timeout.as_millis()
                ))
            })?,
            // The run's deadline ends the run (status `timeout`) while it waits.
            None => exchange.await,
        };
        let (status, headers, body, received) = answered?;
        self.bytes_in += received;
        record.bytes_in = received;
        record.status = Some(status.as_u16());
        let secrets = &rules.secrets;
        Ok(Response {
            status: status.as_u16(),
            reason: status.canonical_reason().unwrap_or("").to_string(),
            headers: headers
                .into_iter()
                .map(|(name, value)| (name, scrub_text(value, secrets)))
                .collect(),
            body: scrub(body, secrets),
        })
    }
}

/// The parts of `url` the rules look at; only http and https.
fn destination<'a>(url: &'a reqwest::Url, method: &'a str) -> Result<Destination<'a>, FetchError> {
    let scheme = url.scheme();
    if scheme != "http" && scheme != "https" {
        return Err(FetchError::Refused(format!(
            "{scheme}: URLs are not supported (http and https are)"
        )));
    }
    let host = match url.host() {
        Some(url::Host::Domain(name)) => Host::Name(name.trim_end_matches('.')),
        Some(url::Host::Ipv4(ip)) => Host::Ip(IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => Host::Ip(IpAddr::V6(ip)),
        None => return Err(FetchError::Refused(format!("{url} names no host"))),
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(FetchError::Refused(
            "credentials in the URL are not sent; use a header (and a secret)".into(),
        ));
    }
    Ok(Destination {
        method,
        scheme,
        host,
        port: url.port_or_known_default().unwrap_or(0),
        path: url.path(),
    })
}

/// The URL as the audit log shows it when it cannot be parsed: cut at the query.
fn shown_url(url: &str) -> String {
    let end = url.find(['?', '#']).unwrap_or(url.len());
    url[..end].chars().take(2048).collect()
}

/// `value` with each placeholder of a secret whose hosts include `to` replaced by the
/// secret's value; other placeholders stay as they are.
fn with_secrets(value: &str, secrets: &[Secret], to: &Destination<'_>) -> String {
    let mut value = value.to_string();
    for secret in secrets {
        let placeholder = secret.placeholder();
        if value.contains(&placeholder) && secret.hosts.iter().any(|h| h.allows(to)) {
            value = value.replace(&placeholder, &secret.value);
        }
    }
    value
}

/// `body` with every secret's value replaced by its placeholder.
fn scrub(body: Vec<u8>, secrets: &[Secret]) -> Vec<u8> {
    let mut body = body;
    for secret in secrets {
        let (value, placeholder) = (secret.value.as_bytes(), secret.placeholder());
        if body.windows(value.len()).any(|w| w == value) {
            let mut out = Vec::with_capacity(body.len());
            let mut rest = &body[..];
            while let Some(at) = rest.windows(value.len()).position(|w| w == value) {
                out.extend_from_slice(&rest[..at]);
                out.extend_from_slice(placeholder.as_bytes());
                rest = &rest[at + value.len()..];
            }
            out.extend_from_slice(rest);
            body = out;
        }
    }
    body
}

fn scrub_text(text: String, secrets: &[Secret]) -> String {
    secrets.iter().fold(text, |text, secret| {
        text.replace(&secret.value, &secret.placeholder())
    })
}

/// What went wrong, as a sentence: a rejected certificate says why and what to do, a
/// refused address says which.
fn failure(error: &reqwest::Error) -> String {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    let mut last = error.to_string();
    while let Some(current) = cause {
        if let Some(rustls::Error::InvalidCertificate(reason)) = current.downcast_ref() {
            return format!(
                "the TLS certificate of {} was rejected: {}",
                error.url().map_or("the server".into(), |u| u
                    .host_str()
                    .unwrap_or("")
                    .to_string()),
                crate::tls::certificate_problem(
                    reason,
                    None,
                    "`sandpy.network.ca_file`",
                    "the URL"
                )
            );
        }
        if let Some(refused) = current.downcast_ref::<InternalAddress>() {
            return refused.0.clone();
        }
        last = current.to_string();
        // An `io::Error`'s `source` skips the error it wraps (rustls's, in a handshake).
        cause = match current.downcast_ref::<std::io::Error>() {
            Some(io) => io
                .get_ref()
                .map(|inner| inner as &(dyn std::error::Error + 'static)),
            None => current.source(),
        };
    }
    if error.is_connect() {
        format!("cannot connect: {last}")
    } else {
        last
    }
}

/// A name resolved only to addresses code may not reach.
#[derive(Debug)]
struct InternalAddress(String);

impl std::fmt::Display for InternalAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InternalAddress {}

/// Resolves names on the host and keeps only the addresses code may reach: public ones,
/// and internal ones an allowlist entry names.
pub(super) struct CheckedResolver {
    reachable: Vec<IpAddr>,
}

impl CheckedResolver {
    pub(super) fn new(reachable: Vec<IpAddr>) -> std::sync::Arc<CheckedResolver> {
        std::sync::Arc::new(CheckedResolver { reachable })
    }
}

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let reachable = self.reachable.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let (kept, refused): (Vec<SocketAddr>, Vec<SocketAddr>) =
                found.into_iter().partition(|a| {
                    let ip = a.ip();
                    !is_internal(ip)
                        || reachable
                            .iter()
                            .any(|r| r.to_canonical() == ip.to_canonical())
                });
            if kept.is_empty() {
                let list: Vec<String> = refused.iter().map(|a| a.ip().to_string()).collect();
                let message =
                    format!(
                    "{host} resolves to {}: internal addresses (loopback, private, link-local, \
                     metadata) are reached only when sandpy.network.allow names the address",
                    if list.is_empty() { "no address".to_string() } else { list.join(", ") }
                );
                return Err(Box::new(InternalAddress(message)) as _);
            }
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_go_only_to_their_hosts_and_are_scrubbed_from_answers() {
        let hosts = vec![AllowRule::parse("api.github.com").unwrap()];
        let secret = Secret::new("GH", "s3cr3t-value".into(), hosts).unwrap();
        let secrets = [secret];
        let to = |host| Destination {
            method: "GET",
            scheme: "https",
            host: Host::Name(host),
            port: 443,
            path: "/",
        };
        let header = "Bearer sandpy-secret:GH";
        assert_eq!(
            with_secrets(header, &secrets, &to("api.github.com")),
            "Bearer s3cr3t-value"
        );
        assert_eq!(with_secrets(header, &secrets, &to("evil.example")), header);
        assert_eq!(
            scrub(b"you sent s3cr3t-value, s3cr3t-value".to_vec(), &secrets),
            b"you sent sandpy-secret:GH, sandpy-secret:GH"
        );
        assert_eq!(
            scrub_text("x s3cr3t-value".into(), &secrets),
            "x sandpy-secret:GH"
        );
    }
}
