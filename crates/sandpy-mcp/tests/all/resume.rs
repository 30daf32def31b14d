//! Resuming a request's SSE stream over real HTTP (reqwest against `HttpListener`): a
//! `tools/call` whose response stream is cut after its priming event or its first event,
//! then a `GET` with `Last-Event-ID` that must bring the rest, the result included; and an
//! event id of another session, which must bring nothing of it.

use crate::block_on;
use crate::http_limits::serve;
use sandpy_mcp::HttpLimits;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;

/// One SSE event: its id and its data (empty for a priming event).
#[derive(Debug)]
struct Event {
    id: Option<String>,
    data: String,
}

/// Reads the SSE events of a response as they come.
struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    /// The next event, or `None` when the stream ends (or stays silent for 30 s).
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut event = Event {
                    id: None,
                    data: String::new(),
                };
                let mut fields = 0;
                for line in block.lines() {
                    if let Some(id) = line.strip_prefix("id:") {
                        event.id = Some(id.trim().to_string());
                        fields += 1;
                    } else if let Some(data) = line.strip_prefix("data:") {
                        event.data.push_str(data.trim());
                        fields += 1;
                    }
                }
                if fields == 0 {
                    continue; // a keep-alive comment or a bare `retry:`
                }
                return Some(event);
            }
            let chunk = tokio::time::timeout(Duration::from_secs(30), self.response.chunk());
            match chunk.await {
                Ok(Ok(Some(bytes))) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                _ => return None,
            }
        }
    }

    /// Every event until the stream ends.
    async fn rest(mut self) -> Vec<Event> {
        let mut events = Vec::new();
        while let Some(event) = self.next().await {
            events.push(event);
        }
        events
    }
}

/// A client of one MCP session, as its tenant `token`, over HTTP/1.1 with nothing but
/// reqwest (so that the test decides when a connection is cut).
struct Session {
    http: reqwest::Client,
    url: String,
    token: &'static str,
    id: String,
}

impl Session {
    async fn open(address: SocketAddr, token: &'static str) -> Session {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::new();
        let url = format!("http://{address}/mcp");
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "resume-test", "version": "0"}}});
        let response = post(&http, &url, token, None, &initialize).await;
        let id = response.headers()["mcp-session-id"]
            .to_str()
            .expect("a session id")
            .to_string();
        // Answered whole (JSON) or as a stream: either way it names the server.
        let answer = response.text().await.expect("the answer");
        assert!(answer.contains("serverInfo"), "{answer}");
        let session = Session {
            http,
            url,
            token,
            id,
        };
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let response = session.post(&initialized).await;
        assert_eq!(response.status(), 202);
        session
    }

    async fn post(&self, body: &Value) -> reqwest::Response {
        post(&self.http, &self.url, self.token, Some(&self.id), body).await
    }

    /// `GET /mcp` with `Last-Event-ID: last`, in session `id` (this one's unless given).
    async fn resume(&self, last: &str) -> Events {
        let response = self
            .http
            .get(&self.url)
            .bearer_auth(self.token)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &self.id)
            .header("mcp-protocol-version", "2025-11-25")
            .header("last-event-id", last)
            .send()
            .await
            .expect("GET");
        assert_eq!(response.status(), 200);
        Events {
            response,
            buffer: String::new(),
        }
    }

    /// A `tools/call` of `run_python` with `code` (with a progress token: its output
    /// comes as events before the result); its response stream.
    async fn run(&self, code: &str) -> Events {
        let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "run_python", "arguments": {"code": code},
            "_meta": {"progressToken": "p"}}});
        let response = self.post(&call).await;
        assert_eq!(response.status(), 200);
        Events {
            response,
            buffer: String::new(),
        }
    }
}

async fn post(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    session: Option<&str>,
    body: &Value,
) -> reqwest::Response {
    let mut request = http
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25");
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    request.body(body.to_string()).send().await.expect("POST")
}

/// The result of request 7 among `events`, if there.
fn result(events: &[Event]) -> Option<Value> {
    events.iter().find_map(|e| {
        let message: Value = serde_json::from_str(&e.data).ok()?;
        (message["id"] == 7).then(|| message["result"].clone())
    })
}

/// Whether `event` is a progress notification whose message has `text`.
fn progress(event: &Event, text: &str) -> bool {
    event.data.contains("notifications/progress") && event.data.contains(text)
}

/// Code that prints, then runs for a while, then returns.
const SLOW: &str =
    "import time\nprint('first', flush=True)\ntime.sleep(1)\nprint('second')\n'done'";

#[test]
fn a_stream_cut_after_its_priming_event_is_resumed_with_the_result() {
    block_on(async {
        let address = serve(HttpLimits::default()).await;
        let session = Session::open(address, "a").await;

        // Cut after the priming event (an id, no data), while the run goes on; resume at
        // once: the stream is followed to its end.
        let mut events = session.run(SLOW).await;
        let priming = events.next().await.expect("a priming event");
        assert_eq!(priming.data, "", "{priming:?}");
        let last = priming.id.expect("the priming event's id");
        drop(events);
        let resumed = session.resume(&last).await.rest().await;
        let answer = result(&resumed).expect("the result after reconnecting");
        assert_eq!(
            answer["structuredContent"]["return_value"], "done",
            "{answer}"
        );
        assert!(resumed.iter().any(|e| progress(e, "first")), "{resumed:?}");

        // Cut after the first event with data (the first output), and resume once the
        // run has ended and its answer was written to nobody: replayed, without the
        // event the client had.
        let mut events = session.run(SLOW).await;
        let _priming = events.next().await.expect("a priming event");
        let first = events.next().await.expect("a first event");
        assert!(progress(&first, "first"), "{first:?}");
        let last = first.id.expect("an id");
        drop(events);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let resumed = session.resume(&last).await.rest().await;
        let answer = result(&resumed).expect("the result after reconnecting");
        assert_eq!(
            answer["structuredContent"]["return_value"], "done",
            "{answer}"
        );
        let index = |id: &Option<String>| -> u64 {
            let id = id.as_deref().expect("an id");
            id.split('/')
                .next()
                .and_then(|i| i.parse().ok())
                .expect("index/stream")
        };
        assert!(
            resumed
                .iter()
                .all(|e| index(&e.id) > index(&Some(last.clone()))),
            "only what came after the client's last event: {resumed:?}"
        );
        assert!(!resumed.iter().any(|e| progress(e, "first")), "{resumed:?}");
        // The same id again (the client lost the resumed stream too): the same events.
        let again = session.resume(&last).await.rest().await;
        assert_eq!(again.len(), resumed.len(), "{again:?}");
    });
}

#[test]
fn an_event_id_of_another_session_brings_nothing_of_it() {
    block_on(async {
        let address = serve(HttpLimits::default()).await;
        let (mine, theirs) = (
            Session::open(address, "a").await,
            Session::open(address, "b").await,
        );
        // Output streamed first (past the size sent at once), so that the answer comes as
        // a stream (with ids), not whole.
        let mut events = theirs
            .run("print('x' * 5000, flush=True)\nimport time\ntime.sleep(0.05)\n'their secret'")
            .await;
        let priming = events.next().await.expect("a priming event");
        let last = priming.id.expect("an id");
        drop(events);
        tokio::time::sleep(Duration::from_secs(2)).await;
        // Their id in my session, and made-up ids: an empty stream that ends at once.
        for forged in [last.as_str(), "0/0", "1/0", "99/99", "0/", "zzz/1"] {
            let got = mine.resume(forged).await.rest().await;
            assert!(
                got.iter().all(|e| !e.data.contains("their secret")),
                "{forged}: {got:?}"
            );
            assert!(got.is_empty(), "{forged}: {got:?}");
        }
        // The id was theirs to use.
        let got = theirs.resume(&last).await.rest().await;
        let answer = result(&got).expect("their result");
        assert_eq!(answer["structuredContent"]["return_value"], "their secret");
    });
}
