//! A request checked and counted before it is sent: its URL and method parsed, its
//! destination checked against both lists, its headers filtered and given their secrets,
//! its bytes out counted against the run's, and its time limit chosen.

use super::destination::{check, destination, reachable};
use super::exchange::Prepared;
use super::headers::{dropped, SECRET_UNSAFE};
use super::secrets::with_secrets;
use super::{FetchError, NetworkAccess, Request};
use std::time::Duration;

impl NetworkAccess {
    /// Check and count request `index` of [`Self::made`] and make it ready to send:
    /// everything but the exchange, in the order the code asked.
    pub(super) fn prepare(
        &mut self,
        request: Request,
        index: usize,
    ) -> Result<Prepared, FetchError> {
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
        // To a host a secret goes to (whether or not this request carries its value: the
        // host may have kept one): the answer must come whole and uncompressed to be
        // scrubbed.
        let guarded = self.network.holds_secrets(&destination);
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
            if guarded && SECRET_UNSAFE.contains(&lower.as_str()) {
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
        if guarded {
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
            guarded,
        })
    }
}
