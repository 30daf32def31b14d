//! One run's network: its requests checked, made, bounded, scrubbed and recorded. Both
//! tiers hand the guest's requests to [`NetworkAccess::fetch`], or a batch of them (an
//! event loop's gathered requests) to [`NetworkAccess::fetch_many`], which keeps the
//! run's counts and its record of requests.
//!
//! Its parts: [`prepare`] checks and counts a request before it is sent, with
//! [`destination`] (where it goes, and whether the lists allow it), [`headers`] (which of
//! the code's headers are dropped) and [`secrets`] (placeholders in, values scrubbed out);
//! [`exchange`] sends it and reads the answer, bounded; [`resolver`] resolves names
//! without handing the code internal addresses, and explains a failed exchange.

mod destination;
mod exchange;
mod headers;
mod prepare;
mod resolver;
mod secrets;

use super::allow::AllowRule;
use super::Network;
use crate::plan::Deadline;
use destination::shown_url;
/// The checks the property tests drive with generated destinations.
#[cfg(test)]
pub(super) use destination::{check, destination, reachable};
/// What the property tests drive with generated reflections.
#[cfg(test)]
pub(super) use exchange::head;
use exchange::{Answer, InBudget};
use futures::StreamExt;
pub(super) use resolver::CheckedResolver;
use serde::{Deserialize, Serialize};

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
    /// Requests refused because the run had made its `max_requests`: the first is
    /// recorded, the count of the rest goes in its record.
    past_limit: u64,
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
            past_limit: 0,
            made: Vec::new(),
        }
    }

    /// The refusal of a request past the run's `max_requests`, recorded: the first as a
    /// record of its own, the later ones counted in it, so that the record says how many
    /// were refused and stays as bounded as the requests made.
    fn refuse_past_limit(&mut self, limit: usize, request: &Request) -> FetchError {
        let message =
            format!("the run made its {limit} requests (sandpy.network.limits.max_requests)");
        self.past_limit += 1;
        let error = match self.past_limit {
            1 => format!("{message}; not sent"),
            n => format!(
                "{message}; not sent, nor the {} requests after it (not recorded apart)",
                n - 1
            ),
        };
        if self.past_limit == 1 {
            self.made.push(NetworkRequest {
                method: request.method.clone(),
                url: shown_url(&request.url),
                status: None,
                bytes_out: 0,
                bytes_in: 0,
                error: Some(error),
            });
        } else if let Some(record) = self.made.last_mut() {
            record.error = Some(error);
        }
        FetchError::Refused(message)
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
                let refused = self.refuse_past_limit(limit, &request);
                answers.push(Some(Err(refused)));
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
                    let refused = self.record_end(index, Err(refused));
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
            let scrubber = network.scrubber();
            let mut exchanges = futures::stream::iter(ready.into_iter().map(
                |(slot, index, prepared)| async move {
                    let answered = prepared.send(rules, scrubber, narrowed, budget).await;
                    (slot, index, answered)
                },
            ))
            .buffer_unordered(MAX_CONCURRENT_FETCHES);
            // Each record is complete as its answer comes: a run that ends meanwhile
            // shows the ones that did.
            while let Some((slot, index, answered)) = exchanges.next().await {
                if let Some(answer) = answers.get_mut(slot) {
                    *answer = Some(self.finish(index, answered));
                }
            }
        }
        answers
            .into_iter()
            .map(|a| a.unwrap_or_else(|| Err(FetchError::Failed("no answer".into()))))
            .collect()
    }

    /// The record and the code's answer for request `index` once its exchange ended:
    /// the answer (scrubbed as it was read) counted against the run's bytes in.
    fn finish(
        &mut self,
        index: usize,
        answered: Result<Answer, FetchError>,
    ) -> Result<Response, FetchError> {
        let result = answered.map(|answer| {
            self.bytes_in += answer.received;
            if let Some(record) = self.made.get_mut(index) {
                record.bytes_in = answer.received;
                record.status = Some(answer.status.as_u16());
            }
            Response {
                status: answer.status.as_u16(),
                // The status's own name, never the server's text.
                reason: answer.status.canonical_reason().unwrap_or("").to_string(),
                headers: answer
                    .headers
                    .into_iter()
                    .map(|(name, value)| (name, String::from_utf8_lossy(&value).into_owned()))
                    .collect(),
                body: answer.body,
            }
        });
        self.record_end(index, result)
    }

    /// What request `index`'s record says of how it ended, and the result as the code
    /// gets it: an error's message scrubbed of every secret's value, as answers are (a
    /// server's text can reach it through a library's message).
    fn record_end<T>(
        &mut self,
        index: usize,
        result: Result<T, FetchError>,
    ) -> Result<T, FetchError> {
        let scrubber = self.network.scrubber();
        let scrub = |e: String| String::from_utf8_lossy(&scrubber.scrub(e.as_bytes())).into_owned();
        let result = result.map_err(|e| match e {
            FetchError::Refused(e) => FetchError::Refused(scrub(e)),
            FetchError::Timeout(e) => FetchError::Timeout(scrub(e)),
            FetchError::Failed(e) => FetchError::Failed(scrub(e)),
        });
        if let Some(record) = self.made.get_mut(index) {
            record.error = match &result {
                Ok(_) => None,
                Err(FetchError::Refused(e) | FetchError::Timeout(e) | FetchError::Failed(e)) => {
                    Some(e.clone())
                }
            };
        }
        result
    }
}
