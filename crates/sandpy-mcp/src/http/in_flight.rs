//! A request whose JSON-RPC id is that of a request still in flight in the same MCP
//! session is refused at once: JSON-RPC ids tell a session's requests apart, and rmcp
//! (3.11) keeps one answer channel per id, so the second request took the first one's
//! place and one of the two was never answered (its stream stayed open on keep-alives
//! until the client gave up). A request is in flight from its `POST` until its answer's
//! body has been sent or dropped.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Deserialize;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// The `(MCP session, JSON-RPC id)` pairs of requests in flight.
#[derive(Default)]
pub(crate) struct InFlight {
    ids: Mutex<HashSet<(String, String)>>,
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<(String, String)>> {
        // One insert or remove at a time: a panic leaves the set consistent.
        self.ids.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What is read of a message: a request has a method and an id.
#[derive(Deserialize)]
struct Message {
    method: Option<serde::de::IgnoredAny>,
    id: Option<serde_json::Value>,
}

/// A request's pair, held in the set until dropped.
struct Held {
    in_flight: Arc<InFlight>,
    key: (String, String),
}

impl Drop for Held {
    fn drop(&mut self) {
        self.in_flight.lock().remove(&self.key);
    }
}

/// Refuse a `POST` in an MCP session of a request whose id is in flight there (400, a
/// JSON-RPC `-32600` error with that id); hold the id of every other request until its
/// answer's body is done. Runs after the body was found to be one JSON message.
pub(crate) async fn refuse_duplicate_ids(
    State(in_flight): State<Arc<InFlight>>,
    request: Request,
    next: Next,
) -> Response {
    let session = request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let (Some(session), true) = (session, request.method() == Method::POST) else {
        return next.run(request).await;
    };
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let id = match serde_json::from_slice::<Message>(&bytes) {
        Ok(Message {
            method: Some(_),
            id: Some(id),
        }) if !id.is_null() => id,
        _ => {
            return next
                .run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
    };
    let key = (session, id.to_string());
    if !in_flight.lock().insert(key.clone()) {
        return duplicate(&id);
    }
    let held = Held { in_flight, key };
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    response.map(|body| {
        let stream = body.into_data_stream().map(move |chunk| {
            let _held = &held;
            chunk
        });
        Body::from_stream(stream)
    })
}

/// 400 with JSON-RPC's invalid request error, for the id given.
fn duplicate(id: &serde_json::Value) -> Response {
    let message = format!(
        "request id {id} is already used by a request of this MCP session still in flight: give each request its own id"
    );
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": -32600, "message": message},
    });
    (
        StatusCode::BAD_REQUEST,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}
