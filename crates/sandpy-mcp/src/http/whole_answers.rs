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
//! comes within [`HOLD`], or the stream ends or breaks first, or a chunk would take what is
//! held past [`MAX_HELD`] bytes (checked before the chunk is held), the client gets the
//! SSE stream as it was, from its priming event on, with no event lost or reordered. A
//! long run thus still gets its priming event (and so can be resumed) after [`HOLD`], and
//! its output as it comes.

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

/// Whether a chunk of `chunk` bytes may be held beside `held` bytes: not past [`MAX_HELD`].
fn fits(held: usize, chunk: usize) -> bool {
    held.saturating_add(chunk) <= MAX_HELD
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
    // A chunk read but not held: it would have taken `held` past [`MAX_HELD`].
    let mut over: Option<Bytes> = None;
    // Where the events not yet looked at begin.
    let mut looked = 0;
    // Where the search for the next event's end goes on: each byte is searched once,
    // not again with every chunk of a long event.
    let mut searched = 0;
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
        if !fits(held.len(), chunk.len()) {
            // Past the bound before it is held: the stream goes on from what is held.
            over = Some(chunk);
            break None;
        }
        held.extend_from_slice(&chunk);
        let mut stream_on = false;
        loop {
            let from = searched.max(looked);
            let Some(at) = event_end(&held[from..]) else {
                // The blank line may begin with this chunk's last byte.
                searched = held.len().saturating_sub(1).max(looked);
                break;
            };
            let end = from + at;
            let text = String::from_utf8_lossy(&held[looked..end - 2]).into_owned();
            match classify(&text) {
                Event::Empty => looked = end,
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
        if stream_on {
            break None;
        }
    };
    // As a stream: what was held, the chunk that would have passed the bound, then the
    // rest (or the error that broke it).
    let first = std::iter::once(Bytes::from(held)).chain(over);
    let first = futures::stream::iter(first.map(Ok::<_, axum::Error>));
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
    fn a_chunk_that_would_pass_max_held_is_not_held() {
        assert!(fits(0, MAX_HELD));
        assert!(fits(MAX_HELD - 10, 10));
        assert!(!fits(MAX_HELD - 10, 11));
        assert!(!fits(0, MAX_HELD + 1));
        assert!(!fits(usize::MAX, 1));
    }

    /// `sse` answered to a `POST` through [`whole_answers`], in chunks of `chunk` bytes;
    /// the response as the middleware returns it, and how many bytes it had read by then.
    async fn through_whole_answers(sse: Bytes, chunk: usize) -> (Response, usize) {
        use hyper::service::Service;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let read = Arc::new(AtomicUsize::new(0));
        let counter = read.clone();
        let handler = move || {
            let (body, counter) = (sse.clone(), counter.clone());
            async move {
                let chunks = (0..body.len()).step_by(chunk).map(move |at| {
                    let piece = body.slice(at..(at + chunk).min(body.len()));
                    counter.fetch_add(piece.len(), Ordering::SeqCst);
                    Ok::<_, std::io::Error>(piece)
                });
                let mut response = Response::new(Body::from_stream(futures::stream::iter(chunks)));
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/event-stream"),
                );
                response
            }
        };
        let router = axum::Router::new()
            .route("/mcp", axum::routing::post(handler))
            .layer(axum::middleware::from_fn(whole_answers));
        let service = hyper_util::service::TowerToHyperService::new(router);
        let request = axum::http::Request::post("/mcp")
            .body(Body::empty())
            .unwrap();
        let response = service.call(request).await.unwrap();
        let read_ahead = read.load(Ordering::SeqCst);
        (response, read_ahead)
    }

    /// An answer bigger than [`MAX_HELD`] cannot come whole within the bound: it comes as
    /// the SSE stream it was, every byte in order, and the middleware reads no more than
    /// [`MAX_HELD`] and one chunk ahead of the client.
    #[tokio::test]
    async fn an_answer_past_max_held_arrives_whole_as_sse_with_bounded_read_ahead() {
        const CHUNK: usize = 64 << 10;
        let text = "x".repeat(MAX_HELD + (1 << 20));
        let answer = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{{"text":"{text}"}}}}"#);
        let sent = Bytes::from(format!(
            "id: 0/1\nretry: 3000\ndata:\n\nid: 1/1\ndata: {answer}\n\n"
        ));
        let (response, read_ahead) = through_whole_answers(sent.clone(), CHUNK).await;
        assert!(
            read_ahead <= MAX_HELD + CHUNK,
            "{read_ahead} bytes read before the client got the response"
        );
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "text/event-stream"
        );
        let got = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        assert_eq!(got.len(), sent.len());
        assert!(got == sent, "the stream's bytes, in order");
    }

    /// Events cut anywhere, their blank lines too, are still found: the answer comes whole.
    #[tokio::test]
    async fn an_answer_cut_into_bytes_comes_whole_as_json() {
        let answer = r#"{"jsonrpc":"2.0","id":3,"result":{"content":[]}}"#;
        let sent = format!("id: 0/1\nretry: 3000\ndata:\n\nid: 1/1\ndata: {answer}\n\n");
        let (response, _) = through_whole_answers(Bytes::from(sent), 1).await;
        assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
        let got = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        assert_eq!(got, answer.as_bytes());
    }

    #[test]
    fn an_event_ends_at_its_blank_line() {
        assert_eq!(event_end(b"id: 0\ndata:\n\nrest"), Some(13));
        assert_eq!(event_end(b"data: {}\n"), None);
    }
}
