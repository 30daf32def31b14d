//! One checked request sent and its answer read, bounded: the exchange of
//! [`super::NetworkAccess::fetch_many`], several at once when the code gathered several.

use super::destination::destination;
use super::resolver::failure;
use super::FetchError;
use crate::network::allow::AllowRule;
use crate::network::scrub::Scrubber;
use crate::network::NetworkRules;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A request the rules allowed and the run's counts took, ready to send.
pub(super) struct Prepared {
    pub client: reqwest::Client,
    pub method: reqwest::Method,
    pub url: reqwest::Url,
    /// With secrets in place, without the headers the host sets or drops.
    pub headers: reqwest::header::HeaderMap,
    pub body: Vec<u8>,
    /// The whole exchange's limit; `None` when the run's deadline comes first.
    pub timeout: Option<Duration>,
    /// Which limit `timeout` is, for its message.
    pub which: &'static str,
    /// The URL as messages and the audit record show it.
    pub shown: String,
    /// Whether it goes to a host a secret goes to: its answer must come unencoded.
    pub guarded: bool,
}

/// An answer's headers, names and values, in order.
pub(in crate::network) type Headers = Vec<(String, Vec<u8>)>;

/// A whole answer, scrubbed of every secret's value as it was read.
pub(super) struct Answer {
    pub status: reqwest::StatusCode,
    pub headers: Headers,
    pub body: Vec<u8>,
    /// Bytes of headers and body as scrubbed, as counted against the run's bytes in: the
    /// same whatever the length of a value the server reflected.
    pub received: u64,
}

/// Codings of an answer the host can scrub: none at all.
const PLAIN: &[&str] = &["", "identity", "chunked", "7bit", "8bit", "binary"];

/// An answer's headers as the code gets them, and their bytes as counted: names and values
/// scrubbed, and from a `guarded` host (see [`Prepared::guarded`]) without
/// `Content-Length` (the length of a reflected value) and refused when any header that
/// names a coding (`Content-Encoding`, `Transfer-Encoding`, their kin, every one of them,
/// every item of a list) names one the host cannot scrub through.
pub(in crate::network) fn head(
    headers: &reqwest::header::HeaderMap,
    guarded: bool,
    scrubber: &Scrubber,
) -> Result<(Headers, u64), FetchError> {
    let mut kept = Vec::new();
    let mut counted = 0u64;
    for (name, value) in headers {
        let name = name.as_str();
        if guarded && (name.ends_with("content-encoding") || name.ends_with("transfer-encoding")) {
            let text = String::from_utf8_lossy(value.as_bytes()).to_ascii_lowercase();
            let coding = text
                .split(',')
                .map(|item| item.split(';').next().unwrap_or("").trim())
                .find(|coding| !PLAIN.contains(coding));
            if let Some(coding) = coding {
                let coding: String = coding.chars().take(64).collect();
                // As servers write it (`Content-Encoding`); it comes lowercased.
                let name: String = name
                    .split('-')
                    .map(|word| {
                        let mut chars = word.chars();
                        chars.next().map_or(String::new(), |first| {
                            first.to_ascii_uppercase().to_string() + chars.as_str()
                        })
                    })
                    .collect::<Vec<_>>()
                    .join("-");
                return Err(FetchError::Refused(format!(
                    "the answer from a host a secret goes to came encoded ({name}: {coding}), \
                     which the host cannot scrub"
                )));
            }
        }
        if guarded && name == "content-length" {
            continue;
        }
        // A placeholder's `:` would end the name where the code reads it.
        let scrubbed = scrubber.scrub_name(name.as_bytes());
        let name = if scrubbed == name.as_bytes() {
            name.to_string()
        } else {
            String::from_utf8_lossy(&scrubbed).replace(':', "-")
        };
        let value = scrubber.scrub(value.as_bytes());
        counted += (name.len() + value.len() + 4) as u64;
        kept.push((name, value));
    }
    Ok((kept, counted))
}

/// What the answers of one batch may hold together: what the run has left of its
/// `max_bytes_in`, shared by the answers read at once, so that several never hold more
/// than one could.
pub(super) struct InBudget {
    remaining: u64,
    held: AtomicU64,
}

impl InBudget {
    pub(super) fn new(remaining: u64) -> InBudget {
        InBudget {
            remaining,
            held: AtomicU64::new(0),
        }
    }
}

/// One answer's part of an [`InBudget`]: given back when the answer is dropped unread
/// (refused, failed, timed out), kept by a whole answer until the batch ends.
struct Held<'a> {
    budget: &'a InBudget,
    bytes: u64,
}

impl Held<'_> {
    /// Take `n` more bytes; false when the batch's answers would hold more than the run
    /// has left.
    fn take(&mut self, n: u64) -> bool {
        let before = self.budget.held.fetch_add(n, Ordering::SeqCst);
        self.bytes += n;
        before.saturating_add(n) <= self.budget.remaining
    }

    /// Whether `n` more bytes would still fit, as things stand.
    fn fits(&self, n: u64) -> bool {
        let held = self.budget.held.load(Ordering::SeqCst);
        held.saturating_add(n) <= self.budget.remaining
    }

    /// The answer is whole: its bytes stay taken.
    fn keep(mut self) {
        self.bytes = 0;
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

impl Prepared {
    /// Send it and read the whole answer within its time limit, scrubbed by `scrubber` as
    /// it comes, refusing an answer that would pass `budget` before it is held; a failure names what went wrong (a rejected
    /// certificate, a name that resolved to internal addresses only).
    pub(super) async fn send(
        self,
        rules: &NetworkRules,
        scrubber: &Scrubber,
        narrowed: Option<&[AllowRule]>,
        budget: &InBudget,
    ) -> Result<Answer, FetchError> {
        let Prepared {
            client,
            method,
            url,
            headers,
            body,
            timeout,
            which,
            shown,
            guarded,
        } = self;
        let destination = destination(&url, method.as_str())?;
        let allow = &rules.allow;
        let max_bytes_in = rules.limits.max_bytes_in;
        let sent = client
            .request(method.clone(), url.clone())
            .headers(headers)
            .body(body)
            .send();
        let exchange = async {
            let mut response = sent
                .await
                .map_err(|e| failure(&e, allow, narrowed, &destination))?;
            let mut held = Held { budget, bytes: 0 };
            // The bytes as scrubbed (or a `Content-Length` from a host no secret goes to):
            // never a reflected value's length.
            let too_big = |received: u64| {
                FetchError::Refused(format!(
                    "the response ({received} bytes or more) would pass the run's \
                     {max_bytes_in} bytes in (sandpy.network.limits.max_bytes_in)"
                ))
            };
            let status = response.status();
            let (headers, mut received) = head(response.headers(), guarded, scrubber)?;
            if !held.take(received) {
                return Err(too_big(received));
            }
            // A guarded answer's length is checked as it is read and scrubbed: its raw
            // length would tell a reflected value's.
            if let Some(length) = response.content_length().filter(|_| !guarded) {
                if !held.fits(length) {
                    return Err(too_big(received + length));
                }
            }
            let mut body = Vec::new();
            let mut stream = scrubber.stream();
            let mut count = |body: &Vec<u8>, before: usize, received: &mut u64| {
                let n = (body.len() - before) as u64;
                *received += n;
                held.take(n)
            };
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|e| failure(&e, allow, narrowed, &destination))?
            {
                let before = body.len();
                stream.push(&chunk, &mut body);
                if !count(&body, before, &mut received) {
                    return Err(too_big(received));
                }
            }
            let before = body.len();
            stream.finish(&mut body);
            if !count(&body, before, &mut received) {
                return Err(too_big(received));
            }
            held.keep();
            Ok(Answer {
                status,
                headers,
                body,
                received,
            })
        };
        match timeout {
            Some(timeout) => tokio::time::timeout(timeout, exchange).await.map_err(|_| {
                FetchError::Timeout(format!(
                    "no whole answer from {shown} within {} ms ({which})",
                    timeout.as_millis()
                ))
            })?,
            // The run's deadline ends the run (status `timeout`) while it waits.
            None => exchange.await,
        }
    }
}
