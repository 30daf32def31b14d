//! A `POST /mcp` body that is not one JSON-RPC message is answered as JSON-RPC says: 400
//! with a `-32700` parse error for text that is not JSON or nests deeper than
//! [`MAX_DEPTH`] (which no parser of the server reads), and a `-32600` invalid request for
//! a batch (an array: MCP 2025-06-18 removed batching). rmcp's transport answered each
//! 415 with plain text, which a client cannot tell from a wrong `Content-Type`.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// JSON-RPC's code for text that is not JSON.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's code for JSON that is not a request this server takes.
const INVALID_REQUEST: i64 = -32600;

/// The deepest nesting of arrays and objects a body may have: serde_json's own limit,
/// past which rmcp cannot parse the message.
pub(crate) const MAX_DEPTH: usize = 128;

/// Answer a JSON `POST` whose body is not JSON, or is a batch, with the JSON-RPC error;
/// let every other request through (the body was read whole before, within its limits).
pub(crate) async fn jsonrpc_parse_errors(request: Request, next: Next) -> Response {
    let json = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/json")
        });
    if request.method() != Method::POST || !json {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return error(PARSE_ERROR, "the request body could not be read");
    };
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
        return error(PARSE_ERROR, &format!("the request body is not JSON: {e}"));
    }
    if deeper_than(&bytes, MAX_DEPTH) {
        let message =
            format!("the request body nests arrays and objects deeper than {MAX_DEPTH} levels");
        return error(PARSE_ERROR, &message);
    }
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        return error(
            INVALID_REQUEST,
            "JSON-RPC batches are not supported (MCP 2025-06-18 removed them): send one message per request",
        );
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Whether the JSON text `json` (valid JSON) nests arrays and objects deeper than `max`;
/// brackets inside strings do not count.
fn deeper_than(json: &[u8], max: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &byte in json {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

fn error(code: i64, message: &str) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": code, "message": message},
    });
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_counts_brackets_outside_strings_only() {
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(!deeper_than(nested(MAX_DEPTH).as_bytes(), MAX_DEPTH));
        assert!(deeper_than(nested(MAX_DEPTH + 1).as_bytes(), MAX_DEPTH));
        let in_string = format!(r#"{{"a": "{}\\\"{}"}}"#, "[".repeat(500), "{".repeat(500));
        assert!(!deeper_than(in_string.as_bytes(), 2), "{in_string}");
        assert!(deeper_than(br#"{"a": {"b": "]]]", "c": [1]}}"#, 2));
    }
}
