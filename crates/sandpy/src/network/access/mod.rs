//! One run's network: its requests checked, made, bounded, scrubbed and recorded. Both
//! tiers hand the guest's requests to [`NetworkAccess::fetch`], or a batch of them (an
//! event loop's gathered requests) to [`NetworkAccess::fetch_many`]; the exchange itself
//! is `exchange.rs`.

mod exchange;

use super::address::is_internal;
use super::allow::{confined, AllowRule, Destination, Host};
use super::{Network, Secret};
use crate::plan::Deadline;
use exchange::{Answer, InBudget, Prepared};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// One request as the code asked for it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Request {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    #[serde(with = "crate::files::base64_bytes", rename = "body_base64")]
    pub body: Vec<u8>,
    /// The code's own time limit for the whole answer, milliseconds (the connection's or
    /// the library's timeout); the host's `request_timeout` when that is shorter.
    #[serde(default)]
    pub timeout_ms: Option<u32>,
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

/// Headers that tell a server behind a proxy what the proxy saw (the client, the host, the
/// scheme) or which method or path to use instead: from the code they would steer the
/// request past what was checked. Dropped, with every `X-Forwarded-*`.
const FORWARDING: &[&str] = &[
    "forwarded",
    "via",
    "x-real-ip",
    "x-client-ip",
    "client-ip",
    "true-client-ip",
    "x-cluster-client-ip",
    "x-originating-ip",
    "x-remote-ip",
    "x-remote-addr",
    "x-host",
    "x-original-host",
    "x-original-url",
    "x-rewrite-url",
    "x-original-uri",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "front-end-https",
    "x-url-scheme",
];

/// Whether the host drops the code's header `name` (lowercase).
fn dropped(name: &str) -> bool {
    HOST_SET.contains(&name) || FORWARDING.contains(&name) || name.starts_with("x-forwarded-")
}

/// Headers of the code's that would let it read a secret's value back in pieces or
/// compressed (past the scrubbing): dropped from a request that carries a secret, whose
/// `Accept-Encoding` the host sets to `identity`.
const SECRET_UNSAFE: &[&str] = &["accept-encoding", "range", "if-range"];

/// Requests of one run whose answers are read at once, at most: the rest of a batch wait
/// their turn, so a run holds this many connections and partial answers at most.
pub(crate) const MAX_CONCURRENT_FETCHES: usize = 8;

/// What a request's record says until its answer comes: a run that ends first (its time
/// limit, a cancellation) leaves it so.
const NOT_COMPLETED: &str = "did not complete: the run ended before the answer came";

/// One run's network: the rules, the policy's narrower list, the counts against the
/// limits and the requests made.
#[derive(Clone)]
pub(crate) struct NetworkAccess {
    network: Network,
    /// A policy's allowlist: a request must pass it too.
    narrowed: Option<Vec<AllowRule>>,
    /// When the run's time ends.
    deadline: Deadline,
    bytes_out: u64,
    bytes_in: u64,
    /// The requests made (and refused), in order; each is recorded before it is sent.
    pub made: Vec<NetworkRequest>,
}

impl NetworkAccess {
    /// A run's access to `network`, narrowed by a policy's list when it has one.
    pub(crate) fn new(
        network: Network,
        narrowed: Option<Vec<AllowRule>>,
        deadline: Deadline,
    ) -> NetworkAccess {
        NetworkAccess {
            network,
            narrowed,
            deadline,
            bytes_out: 0,
            bytes_in: 0,
            made: Vec::new(),
        }
    }

    /// The bytes one run may send (the native tier sizes its channel's messages by it).
    pub(crate) fn max_bytes_out(&self) -> usize {
        usize::try_from(self.network.rules().limits.max_bytes_out).unwrap_or(usize::MAX)
    }

    /// Check, make and record one request. The record is in [`Self::made`] before the
    /// request is sent, so a run that ends while it waits still shows it.
    pub(crate) async fn fetch(&mut self, request: Request) -> Result<Response, FetchError> {
        let mut answers = self.fetch_many(vec![request]).await;
        answers
            .pop()
            .unwrap_or_else(|| Err(FetchError::Failed("no answer".into())))
    }

    /// Check, make and record a batch of requests (an event loop's gathered requests),
    /// the answers read at once, [`MAX_CONCURRENT_FETCHES`] at most (the rest wait their
    /// turn); one answer per request, in order. Each is checked, counted and recorded in
    /// order before any is sent, exactly as one at a time would be; the answers being read
    /// share what is left of the run's bytes in, so together they never hold more.
    pub(crate) async fn fetch_many(
        &mut self,
        requests: Vec<Request>,
    ) -> Vec<Result<Response, FetchError>> {
        let limit = self.network.rules().limits.max_requests;
        let mut answers: Vec<Option<Result<Response, FetchError>>> = Vec::new();
        let mut ready = Vec::new();
        for request in requests {
            if self.made.len() >= limit {
                // Not recorded: the record of a run stays as bounded as its requests.
                answers.push(Some(Err(FetchError::Refused(format!(
                    "the run made its {limit} requests (sandpy.network.limits.max_requests)"
                )))));
                continue;
            }
            let index = self.made.len();
            self.made.push(NetworkRequest {
                method: request.method.clone(),
                url: shown_url(&request.url),
                status: None,
                bytes_out: 0,
                bytes_in: 0,
                error: Some(NOT_COMPLETED.into()),
            });
            match self.prepare(request, index) {
                Ok(prepared) => {
                    ready.push((answers.len(), index, prepared));
                    answers.push(None);
                }
                Err(refused) => {
                    let refused = Err(refused);
                    self.record_end(index, &refused);
                    answers.push(Some(refused));
                }
            }
        }
        if !ready.is_empty() {
            let network = self.network.clone();
            let narrowed = self.narrowed.clone();
            let left = network
                .rules()
                .limits
                .max_bytes_in
                .saturating_sub(self.bytes_in);
            let budget = InBudget::new(left);
            let (rules, narrowed, budget) = (network.rules(), narrowed.as_deref(), &budget);
            let mut exchanges = futures::stream::iter(ready.into_iter().map(
                |(slot, index, prepared)| async move {
                    let carries = prepared.carries;
                    let answered = prepared.send(rules, narrowed, budget).await;
                    (slot, index, carries, answered)
                },
            ))
            .buffer_unordered(MAX_CONCURRENT_FETCHES);
            // Each record is complete as its answer comes: a run that ends meanwhile
            // shows the ones that did.
            while let Some((slot, index, carries, answered)) = exchanges.next().await {
                if let Some(answer) = answers.get_mut(slot) {
                    *answer = Some(self.finish(index, carries, answered));
                }
            }
        }
        answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(FetchError::Failed("no answer".into()))))
            .collect()
    }

    /// Check and count request `index` of [`Self::made`] and make it ready to send:
    /// everything but the exchange, in the order the code asked.
    fn prepare(&mut self, request: Request, index: usize) -> Result<Prepared, FetchError> {
        let rules = self.network.rules();
        let limits = &rules.limits;
        let url = reqwest::Url::parse(&request.url)
            .map_err(|e| FetchError::Refused(format!("{:?} is not a URL: {e}", request.url)))?;
        let method = reqwest::Method::from_bytes(request.method.as_bytes())
            .map_err(|_| FetchError::Refused(format!("{:?} is not a method", request.method)))?;
        let destination = destination(&url, method.as_str())?;
        let shown = destination.to_string();
        if let Some(record) = self.made.get_mut(index) {
            record.url = shown.clone();
        }
        check(&rules.allow, self.narrowed.as_deref(), &destination)?;
        let carries = rules.secrets.iter().any(|s| {
            s.sends_to(&destination)
                && request
                    .headers
                    .iter()
                    .any(|(_, v)| v.contains(&s.placeholder()))
        });
        let mut headers = reqwest::header::HeaderMap::new();
        // Counted as the code wrote it: the size of a secret's value is never told.
        let mut size = request.method.len() + request.url.len() + 12 + request.body.len();
        for (name, value) in &request.headers {
            let lower = name.to_ascii_lowercase();
            if dropped(&lower) {
                continue;
            }
            // Counted as written, so the count is the same with or without a secret.
            size += name.len() + value.len() + 4;
            if carries && SECRET_UNSAFE.contains(&lower.as_str()) {
                continue;
            }
            let value = with_secrets(value, &rules.secrets, &destination);
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| FetchError::Refused(format!("{name:?} is not a header name")))?;
            let value = reqwest::header::HeaderValue::from_str(&value).map_err(|_| {
                FetchError::Refused(format!("the value of header {name} is not a header value"))
            })?;
            headers.append(name, value);
        }
        if carries {
            headers.insert(
                reqwest::header::ACCEPT_ENCODING,
                reqwest::header::HeaderValue::from_static("identity"),
            );
        }
        let size = size as u64;
        if self.bytes_out + size > limits.max_bytes_out {
            return Err(FetchError::Refused(format!(
                "the request ({size} bytes) would pass the run's {} bytes out \
                 (sandpy.network.limits.max_bytes_out)",
                limits.max_bytes_out
            )));
        }
        let client = self.network.client(
            destination.scheme,
            reachable(&rules.allow, self.narrowed.as_deref(), &destination),
        )?;
        // The code's own timeout when it is the shorter, named in the message.
        let own = request
            .timeout_ms
            .map(|ms| Duration::from_millis(ms.into()))
            .filter(|own| *own < limits.request_timeout);
        let (limit, which) = match own {
            Some(own) => (own, "the request's own timeout"),
            None => (
                limits.request_timeout,
                "sandpy.network.limits.request_timeout_ms",
            ),
        };
        let timeout = self.deadline.call_timeout(limit);
        self.bytes_out += size;
        if let Some(record) = self.made.get_mut(index) {
            record.bytes_out = size;
        }
        Ok(Prepared {
            client,
            method,
            url,
            headers,
            body: request.body,
            timeout,
            which,
            shown,
            carries,
        })
    }

    /// The record and the code's answer for request `index` once its exchange ended:
    /// the answer counted against the run's bytes in and scrubbed of every secret.
    fn finish(
        &mut self,
        index: usize,
        carries: bool,
        answered: Result<Answer, FetchError>,
    ) -> Result<Response, FetchError> {
        let result = answered.map(|answer| {
            self.bytes_in += answer.received;
            if let Some(record) = self.made.get_mut(index) {
                record.bytes_in = answer.received;
                record.status = Some(answer.status.as_u16());
            }
            let secrets = &self.network.rules().secrets;
            Response {
                status: answer.status.as_u16(),
                reason: answer.status.canonical_reason().unwrap_or("").to_string(),
                headers: answer
                    .headers
                    .into_iter()
                    // The length of an answer that echoes a secret would tell the value's.
                    .filter(|(name, _)| !(carries && name == "content-length"))
                    .map(|(name, value)| {
                        let value = scrub(value, secrets);
                        (name, String::from_utf8_lossy(&value).into_owned())
                    })
                    .collect(),
                body: scrub(answer.body, secrets),
            }
        });
        self.record_end(index, &result);
        result
    }

    /// What request `index`'s record says of how it ended.
    fn record_end<T>(&mut self, index: usize, result: &Result<T, FetchError>) {
        if let Some(record) = self.made.get_mut(index) {
            record.error = match result {
                Ok(_) => None,
                Err(FetchError::Refused(e) | FetchError::Timeout(e) | FetchError::Failed(e)) => {
                    Some(e.clone())
                }
            };
        }
    }
}

/// Whether the operator's list, and the policy's when there is one, allow `to`; the
/// refusal names the list that refused.
pub(super) fn check(
    allow: &[AllowRule],
    narrowed: Option<&[AllowRule]>,
    to: &Destination<'_>,
) -> Result<(), FetchError> {
    let by = if !allow.iter().any(|r| r.allows(to)) {
        "sandpy.network.allow"
    } else if narrowed.is_some_and(|list| !list.iter().any(|r| r.allows(to))) {
        "the policy's `network_allow`"
    } else {
        return Ok(());
    };
    let mut message = format!("{} {to} is not allowed by {by}", to.method);
    if !confined(to.path) {
        message.push_str(
            " (a URL pattern never matches a path with an encoded `/`, `\\` or `%`, or a \
             `.` or `..` segment)",
        );
    }
    Err(FetchError::Refused(message))
}

/// The internal addresses a name in `to` may resolve to and still be reached: those an
/// entry of the operator's list names that allows `to` with the address in place of the
/// name (its port, method and path included), and that the policy's list allows so too.
pub(super) fn reachable(
    allow: &[AllowRule],
    narrowed: Option<&[AllowRule]>,
    to: &Destination<'_>,
) -> Vec<IpAddr> {
    if matches!(to.host, Host::Ip(_)) {
        return Vec::new();
    }
    let mut addresses: Vec<IpAddr> = allow
        .iter()
        .filter_map(AllowRule::address)
        .filter(|ip| {
            let by_address = Destination {
                host: Host::Ip(*ip),
                ..*to
            };
            check(allow, narrowed, &by_address).is_ok()
        })
        .collect();
    addresses.sort();
    addresses.dedup();
    addresses
}

/// The parts of `url` the rules look at; only http and https.
pub(super) fn destination<'a>(
    url: &'a reqwest::Url,
    method: &'a str,
) -> Result<Destination<'a>, FetchError> {
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

/// `value` with each placeholder of a secret that goes to `to` replaced by the secret's
/// value; other placeholders stay as they are.
fn with_secrets(value: &str, secrets: &[Secret], to: &Destination<'_>) -> String {
    let mut value = value.to_string();
    for secret in secrets {
        let placeholder = secret.placeholder();
        if value.contains(&placeholder) && secret.sends_to(to) {
            value = value.replace(&placeholder, &secret.value);
        }
    }
    value
}

/// `body` with every secret's value replaced by its placeholder, in the forms a server
/// or the code's request could turn it into (see [`super::scrub`]).
fn scrub(body: Vec<u8>, secrets: &[Secret]) -> Vec<u8> {
    secrets.iter().fold(body, |body, secret| {
        super::scrub::scrub(
            body,
            secret.value.as_bytes(),
            secret.placeholder().as_bytes(),
        )
    })
}

/// What went wrong: a rejected certificate says why and what to do; a name that resolved
/// only to internal addresses is a refusal that names the list that refused it.
fn failure(
    error: &reqwest::Error,
    allow: &[AllowRule],
    narrowed: Option<&[AllowRule]>,
    to: &Destination<'_>,
) -> FetchError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    let mut last = error.to_string();
    while let Some(current) = cause {
        if let Some(rustls::Error::InvalidCertificate(reason)) = current.downcast_ref() {
            return FetchError::Failed(format!(
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
            ));
        }
        if let Some(refused) = current.downcast_ref::<InternalAddress>() {
            return FetchError::Refused(refused.explain(allow, narrowed, to));
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
    FetchError::Failed(if error.is_connect() {
        format!("cannot connect: {last}")
    } else {
        last
    })
}

/// A name resolved only to addresses code may not reach.
#[derive(Debug)]
struct InternalAddress {
    host: String,
    refused: Vec<IpAddr>,
}

impl InternalAddress {
    /// The refusal as the code reads it: which addresses, and which list refused them.
    fn explain(
        &self,
        allow: &[AllowRule],
        narrowed: Option<&[AllowRule]>,
        to: &Destination<'_>,
    ) -> String {
        let by_operator = self.refused.iter().any(|ip| {
            let by_address = Destination {
                host: Host::Ip(*ip),
                ..*to
            };
            allow.iter().any(|r| r.allows(&by_address))
        });
        let by = if by_operator && narrowed.is_some() {
            "the policy's `network_allow`"
        } else {
            "sandpy.network.allow"
        };
        format!("{} {to}: {self}; refused by {by}", to.method)
    }
}

impl std::fmt::Display for InternalAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list: Vec<String> = self.refused.iter().map(IpAddr::to_string).collect();
        write!(
            f,
            "{} resolves to {}: internal addresses (loopback, private, link-local, metadata) \
             are reached only when an allowlist entry names the address (and allows this \
             port, method and path)",
            self.host,
            if list.is_empty() {
                "no address".to_string()
            } else {
                list.join(", ")
            }
        )
    }
}

impl std::error::Error for InternalAddress {}

/// Resolves names on the host and keeps only the addresses code may reach: public ones,
/// and the internal ones of `reachable`. A client (and so its kept connections) serves
/// only requests whose own reachable addresses are these (`Network::client`).
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
                let refused = refused.iter().map(|a| a.ip()).collect();
                return Err(Box::new(InternalAddress { host, refused }) as _);
            }
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to(scheme: &'static str, host: &'static str, port: u16) -> Destination<'static> {
        Destination {
            method: "GET",
            scheme,
            host: Host::Name(host),
            port,
            path: "/",
        }
    }

    #[test]
    fn secrets_go_only_to_their_hosts_over_https_and_are_scrubbed_from_answers() {
        let hosts = vec![AllowRule::parse("api.github.com").unwrap()];
        let secret = Secret::new("GH", "s3cr3t-value".into(), hosts).unwrap();
        let secrets = [secret.clone()];
        let header = "Bearer sandpy-secret:GH";
        let github = to("https", "api.github.com", 443);
        assert_eq!(
            with_secrets(header, &secrets, &github),
            "Bearer s3cr3t-value"
        );
        for other in [
            to("https", "evil.example", 443),
            to("http", "api.github.com", 80),
            to("https", "api.github.com", 8443),
        ] {
            assert_eq!(with_secrets(header, &secrets, &other), header, "{other}");
        }
        let http = [secret.allow_http(true)];
        assert_eq!(
            with_secrets(header, &http, &to("http", "api.github.com", 80)),
            "Bearer s3cr3t-value"
        );
        assert_eq!(
            with_secrets(header, &http, &to("http", "api.github.com", 8080)),
            header
        );
        assert_eq!(
            scrub(b"you sent s3cr3t-value, s3cr3t%2dvalue".to_vec(), &secrets),
            b"you sent sandpy-secret:GH, sandpy-secret:GH"
        );
    }

    #[test]
    fn forwarding_headers_are_dropped_as_host_is() {
        for name in [
            "host",
            "x-forwarded-host",
            "x-forwarded-for",
            "x-forwarded-proto",
            "x-forwarded-port",
            "forwarded",
            "x-original-url",
            "x-rewrite-url",
            "x-http-method-override",
            "x-method-override",
            "x-http-method",
        ] {
            assert!(dropped(name), "{name}");
        }
        assert!(!dropped("authorization") && !dropped("x-mine"));
    }
}
