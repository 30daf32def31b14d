//! The HTTP server's connections: accepted, timed and counted here, so that idle, slow or
//! half-sent connections cannot hold the server's file descriptors and lock real clients out.
//!
//! - A client has [`HttpLimits::header_timeout`] to send a request's headers, counted from
//!   the connection's start or the end of its previous response (hyper's header timeout),
//!   so a kept-alive connection left idle is closed after the same time. A response being
//!   streamed (an MCP SSE stream) is not idle.
//! - The body of a request must arrive within [`HttpLimits::body_timeout`]
//!   ([`read_body_in_time`], a middleware inside the bearer check).
//! - At most [`HttpLimits::max_connections`] are open, and never more than three quarters
//!   of the process's file-descriptor limit (the rest is for upstreams, runtimes, files).
//!   At the cap, the oldest connection that has not yet been answered anything but 401 is
//!   closed to make room: a scanner's idle sockets give way to a client with the token. When
//!   every open connection has been served, the new one is closed at once.
//! - On shutdown, connections stop taking requests; those still answering get
//!   [`HttpLimits::drain`], then are dropped.

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Limits that keep idle, slow or greedy HTTP clients from taking the server's
/// connections and memory. [`HttpLimits::default`] gives the values each field names.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    /// Time to send a request's headers, from the connection's start or the end of the
    /// previous response; an idle kept-alive connection is closed after it. Default 10 s.
    pub header_timeout: Duration,
    /// Time to send a request's body once its headers are in. Default 30 s.
    pub body_timeout: Duration,
    /// Open connections at most (and at most 3/4 of the file-descriptor limit). Default
    /// 4096.
    pub max_connections: usize,
    /// MCP sessions one client (one bearer token, or one IP address without a token) may
    /// hold; at the cap its least recently used session is closed for the new one.
    /// Default 256.
    pub max_sessions_per_client: usize,
    /// MCP sessions in all; beyond it a new session is refused (503). Default 1024.
    pub max_sessions: usize,
    /// A session unused this long is closed and its memory freed. Default 10 min.
    pub session_idle: Duration,
    /// How long shutdown waits for requests still being answered. Default 5 s.
    pub drain: Duration,
    /// What each MCP session holds of its request streams for clients that reconnect
    /// with `Last-Event-ID` ([`ReplayLimits`](crate::ReplayLimits)).
    pub replay: super::replay::ReplayLimits,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_connections: 4096,
            max_sessions_per_client: 256,
            max_sessions: 1024,
            session_idle: Duration::from_secs(600),
            drain: Duration::from_secs(5),
            replay: super::replay::ReplayLimits::default(),
        }
    }
}

impl HttpLimits {
    /// [`HttpLimits::max_connections`], lowered to 3/4 of the soft file-descriptor limit.
    pub(crate) fn connection_cap(&self) -> usize {
        let cap = match fd_limit() {
            Some(limit) => self.max_connections.min(limit.saturating_mul(3) / 4),
            None => self.max_connections,
        };
        cap.max(1)
    }
}

/// The process's soft limit on open files.
fn fd_limit() -> Option<usize> {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
            return usize::try_from(limit.rlim_cur).ok();
        }
    }
    None
}

/// The body of a request read whole within [`HttpLimits::body_timeout`] (and at most
/// `max` bytes), before the request goes on: a client that sends its headers and then
/// trickles or stops its body gets 408 instead of holding the connection.
pub(crate) async fn read_body_in_time(
    State(limit): State<(Duration, usize)>,
    request: Request,
    next: Next,
) -> Response {
    let (timeout, max) = limit;
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    match tokio::time::timeout(timeout, axum::body::to_bytes(body, max)).await {
        Err(_) => (
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive within {} s\n",
                timeout.as_secs_f64()
            ),
        )
            .into_response(),
        Ok(Err(_)) => (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is unreadable or over {max} bytes\n"),
        )
            .into_response(),
        Ok(Ok(bytes)) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
    }
}

/// One open connection, as the table sees it.
struct Open {
    /// Whether it has been answered anything but 401: an authorized client.
    served: Arc<AtomicBool>,
    /// Cancelled to close it for a newer one.
    evict: CancellationToken,
}

/// The open connections, oldest first.
#[derive(Default)]
struct Table {
    next: u64,
    open: BTreeMap<u64, Open>,
}

impl Table {
    /// Room for one more under `cap`: the oldest unserved connection is evicted if
    /// needed. `false` when every open connection has been served.
    fn make_room(&mut self, cap: usize) -> bool {
        if self.open.len() < cap {
            return true;
        }
        let oldest = self
            .open
            .iter()
            .find(|(_, open)| !open.served.load(Ordering::Relaxed))
            .map(|(id, _)| *id);
        match oldest.and_then(|id| self.open.remove(&id)) {
            Some(open) => {
                open.evict.cancel();
                true
            }
            None => false,
        }
    }
}

/// Serve `app` on `listener` under `limits` until `shutdown` is cancelled, then drain.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: &HttpLimits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let cap = limits.connection_cap();
    let table = Arc::new(Mutex::new(Table::default()));
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors (or a connection reset before accept): wait and go on.
                    tracing::warn!("accepting a connection failed: {error}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        // A response goes out in several writes (headers, the SSE events): with Nagle's
        // algorithm each write after the first waits for the client's delayed ACK (40 ms on
        // Linux) on every request of a kept-alive connection after the first few.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::warn!("setting TCP_NODELAY on the connection from {peer} failed: {error}");
        }
        let served = Arc::new(AtomicBool::new(false));
        let evict = CancellationToken::new();
        let id = {
            let mut table = table.lock().unwrap_or_else(|e| e.into_inner());
            if !table.make_room(cap) {
                tracing::warn!("{cap} connections open, all in use: closing the one from {peer}");
                continue; // `stream` dropped: closed
            }
            let id = table.next;
            table.next += 1;
            let open = Open {
                served: served.clone(),
                evict: evict.clone(),
            };
            table.open.insert(id, open);
            id
        };
        let service = TowerToHyperService::new(app.clone());
        let handler = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            let answer = hyper::service::Service::call(&service, request);
            let served = served.clone();
            async move {
                let response = answer.await?;
                if response.status() != StatusCode::UNAUTHORIZED {
                    served.store(true, Ordering::Relaxed);
                }
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        let (table, shutdown, drain) = (table.clone(), shutdown.clone(), limits.drain);
        let header_timeout = limits.header_timeout;
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let connection = builder.serve_connection(TokioIo::new(stream), handler);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = evict.cancelled() => {}
                _ = shutdown.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(drain, connection.as_mut()).await;
                }
            }
            table
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .open
                .remove(&id);
        });
    }
    // Each connection drains on its own; wait for them as long as one may take.
    let deadline = tokio::time::Instant::now() + limits.drain;
    while tokio::time::Instant::now() < deadline
        && !table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .open
            .is_empty()
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(table: &mut Table, served: bool) -> CancellationToken {
        let evict = CancellationToken::new();
        let id = table.next;
        table.next += 1;
        let open = Open {
            served: Arc::new(AtomicBool::new(served)),
            evict: evict.clone(),
        };
        table.open.insert(id, open);
        evict
    }

    #[test]
    fn at_the_cap_the_oldest_unserved_connection_gives_way_and_served_ones_stay() {
        let mut table = Table::default();
        let served = open(&mut table, true);
        let idle_old = open(&mut table, false);
        let idle_new = open(&mut table, false);
        assert!(table.make_room(4), "below the cap");
        assert!(table.make_room(3));
        assert!(idle_old.is_cancelled() && !idle_new.is_cancelled() && !served.is_cancelled());
        assert!(table.make_room(2));
        assert!(idle_new.is_cancelled() && !served.is_cancelled());
        assert!(
            !table.make_room(1),
            "only served connections: the new one is refused"
        );
        assert!(!served.is_cancelled());
    }

    #[test]
    fn the_connection_cap_stays_below_the_descriptor_limit() {
        let limits = HttpLimits {
            max_connections: usize::MAX,
            ..HttpLimits::default()
        };
        let limit = fd_limit().expect("a descriptor limit");
        assert!(limits.connection_cap() <= limit * 3 / 4);
    }
}
