//! One checked request sent and its answer read, bounded: the exchange of
//! [`super::NetworkAccess::fetch_many`], several at once when the code gathered several.

use super::destination::destination;
use super::resolver::failure;
use super::FetchError;
use crate::network::allow::AllowRule;
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
    /// Whether a secret's value goes with it.
    pub carries: bool,
}

/// A whole answer as it came, before it is scrubbed.
pub(super) struct Answer {
    pub status: reqwest::StatusCode,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
    /// Bytes of headers and body, as counted against the run's bytes in.
    pub received: u64,
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
    /// Send it and read the whole answer within its time limit, refusing an answer that
    /// would pass `budget` before it is held; a failure names what went wrong (a rejected
    /// certificate, a name that resolved to internal addresses only).
    pub(super) async fn send(
        self,
        rules: &NetworkRules,
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
            carries,
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
            let too_big = |received: u64| {
                // Sizes of an answer to a request with a secret could tell its length.
                let size = if carries {
                    String::new()
                } else {
                    format!(" ({received} bytes or more)")
                };
                FetchError::Refused(format!(
                    "the response{size} would pass the run's {max_bytes_in} bytes in \
                     (sandpy.network.limits.max_bytes_in)"
                ))
            };
            let status = response.status();
            let mut headers = Vec::new();
            let mut received = 0u64;
            for (name, value) in response.headers() {
                received += (name.as_str().len() + value.len() + 4) as u64;
                headers.push((name.as_str().to_string(), value.as_bytes().to_vec()));
            }
            if !held.take(received) {
                return Err(too_big(received));
            }
            if carries {
                let encoding = response
                    .headers()
                    .get(reqwest::header::CONTENT_ENCODING)
                    .map(|v| {
                        String::from_utf8_lossy(v.as_bytes())
                            .trim()
                            .to_ascii_lowercase()
                    });
                if let Some(encoding) = encoding.filter(|e| !e.is_empty() && e != "identity") {
                    return Err(FetchError::Refused(format!(
                        "the answer to a request that carries a secret came encoded \
                         (Content-Encoding: {encoding}), which the host cannot scrub"
                    )));
                }
            }
            if let Some(length) = response.content_length() {
                if !held.fits(length) {
                    return Err(too_big(received + length));
                }
            }
            let mut body = Vec::new();
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|e| failure(&e, allow, narrowed, &destination))?
            {
                received += chunk.len() as u64;
                if !held.take(chunk.len() as u64) {
                    return Err(too_big(received));
                }
                body.extend_from_slice(&chunk);
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
