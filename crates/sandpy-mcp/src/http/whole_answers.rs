//! A request answered quickly gets its answer as one JSON body, so that MCP clients keep
//! their connection for the next request.
//!
//! rmcp (3.11) answers every `POST` of a request in a session with an SSE stream: a
//! priming event, then the answer, then the chunked body's end. MCP clients stop reading
//! at the answer, before the body's end, and so lose the connection: the official Python
//! SDK closes the response at the answer event, and httpx then closes any connection whose
//! response was not read to its end; rmcp's own client pools no connection at all. Each call
//! then pays a new TCP connection on both sides. A JSON body (which the protocol allows in
//! place of the stream) is read whole, and the connection goes back to the client's pool.
//!
//! So a request's stream is held for at most [`HOLD`]: if its first event with data is the
//! answer, the client gets that answer as `application/json`; if it is anything else (a
//! progress notification, a request to the client such as an elicitation), or nothing
//! comes within [`HOLD`], or the stream ends or breaks first, or more than [`MAX_HELD`]
//! bytes come without an answer, the client gets the SSE stream as it was, from its
//! priming event on, with no event lost or reordered. A long run thus still gets its
//! priming event (and so can be resumed) after [`HOLD`], and its output as it comes.

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use std::time::Duration;

/// How long a request's stream is held for its answer. Calls that take longer pay the
/// new connection once against their own time; under it, a stream's first bytes reach
/// the client at most this late.
pub(crate) const HOLD: Duration = Duration::from_millis(100);

/// The most bytes held while waiting for the answer; past it the stream goes on as SSE.
pub(crate) const MAX_HELD: usize = 8 << 20;

/// What one SSE event is, as far as answering whole goes.
#[derive(Debug, PartialEq)]
enum Event {
    /// No data: a priming event (an id and a `retry`) or a comment (keep-alive).
    Empty,
    /// A JSON-RPC response (a result or an error): its text.
    Answer(String),
    /// Anything else: a notification, a request to the client, or text not understood.
    Other,
}

/// Classify one event's text (its lines, without the blank line that ends it).
fn classify(event: &str) -> Event {
    let mut data: Option<String> = None;
    for line in event.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() || line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "data" => match &mut data {
                Some(text) => {
                    text.push('\n');
                    text.push_str(value);
                }
                None => data = Some(value.to_string()),
            },
            "id" | "retry" => {}
            "event" if value == "message" => {}
            _ => return Event::Other,
        }
    }
    let Some(data) = data.filter(|d| !d.is_empty()) else {
        return Event::Empty;
    };
    let Ok(serde_json::Value::Object(message)) = serde_json::from_str(&data) else {
        return Event::Other;
    };
    let answer = !message.contains_key("method")
        && message.get("id").is_some_and(|id| !id.is_null())
        && (message.contains_key("result") || message.contains_key("error"));
    if answer {
        Event::Answer(data)
    } else {
        Event::Other
    }
}

/// The end of the first whole event in `text` (just past its blank line), if any.
fn event_end(text: &[u8]) -> Option<usize> {
    text.windows(2).position(|w| w == b"\n\n").map(|at| at + 2)
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
}

/// Answer a `POST` whose SSE stream brings its answer first and within [`HOLD`] with
/// that answer as one JSON body; any other response goes on unchanged.
pub(crate) async fn whole_answers(request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let response = next.run(request).await;
    if response.status() != StatusCode::OK || !is_event_stream(response.headers()) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let mut stream = body.into_data_stream();
    let mut held: Vec<u8> = Vec::new();
    // Where the events not yet looked at begin.
    let mut looked = 0;
    let deadline = tokio::time::sleep(HOLD);
    tokio::pin!(deadline);
    let broken = loop {
        let chunk = tokio::select! {
            chunk = stream.next() => chunk,
            _ = &mut deadline => break None,
        };
        let chunk = match chunk {
            Some(Ok(chunk)) => chunk,
            Some(Err(error)) => break Some(error),
            None => {
                // Ended without an answer first: what came, as it came.
                parts.headers.remove(header::CONTENT_LENGTH);
                return Response::from_parts(parts, Body::from(held));
            }
        };
        held.extend_from_slice(&chunk);
        let mut stream_on = false;
        while let Some(end) = event_end(&held[looked..]) {
            let text = String::from_utf8_lossy(&held[looked..looked + end - 2]).into_owned();
            match classify(&text) {
                Event::Empty => looked += end,
                Event::Answer(answer) => {
                    parts.headers.insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    );
                    parts.headers.remove(header::CONTENT_LENGTH);
                    parts.headers.remove(header::CACHE_CONTROL);
                    parts.headers.remove("x-accel-buffering");
                    // The stream (and what it holds) is dropped: it ends with its answer.
                    return Response::from_parts(parts, Body::from(answer));
                }
                Event::Other => {
                    stream_on = true;
                    break;
                }
            }
        }
        if stream_on || held.len() > MAX_HELD {
            break None;
        }
    };
    // As a stream: what was held, then the rest (or the error that broke it).
    let first = futures::stream::iter([Ok::<_, axum::Error>(Bytes::from(held))]);
    let body = match broken {
        Some(error) => Body::from_stream(first.chain(futures::stream::iter([Err(error)]))),
        None => Body::from_stream(first.chain(stream)),
    };
    Response::from_parts(parts, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_told_from_priming_events_notifications_and_requests() {
        assert_eq!(classify("id: 0/1\nretry: 3000\ndata:"), Event::Empty);
        assert_eq!(classify(":"), Event::Empty);
        let result = r#"{"jsonrpc":"2.0","id":7,"result":{}}"#;
        assert_eq!(
            classify(&format!("data: {result}\nid: 1/1")),
            Event::Answer(result.to_string())
        );
        let error = r#"{"jsonrpc":"2.0","id":"x","error":{"code":-1,"message":"no"}}"#;
        assert_eq!(
            classify(&format!("event: message\ndata: {error}")),
            Event::Answer(error.to_string())
        );
        for other in [
            r#"data: {"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#,
            r#"data: {"jsonrpc":"2.0","id":1,"method":"elicitation/create","params":{}}"#,
            r#"data: {"jsonrpc":"2.0","id":null,"error":{"code":-1,"message":"no"}}"#,
            "data: not json",
            "data: {\"jsonrpc\":\"2.0\",\ndata: \"id\":1,\"result\":{}}x",
            r#"event: other
data: {"jsonrpc":"2.0","id":7,"result":{}}"#,
        ] {
            assert_eq!(classify(other), Event::Other, "{other}");
        }
        let split = "data: {\"jsonrpc\":\"2.0\",\ndata: \"id\":1,\"result\":{}}";
        assert!(
            matches!(classify(split), Event::Answer(_)),
            "data lines join"
        );
    }

    #[test]
    fn an_event_ends_at_its_blank_line() {
        assert_eq!(event_end(b"id: 0\ndata:\n\nrest"), Some(13));
        assert_eq!(event_end(b"data: {}\n"), None);
    }
}
