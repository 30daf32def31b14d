//! MCP sessions over HTTP, counted per client and in all, so that one client's stream of
//! `initialize` requests cannot fill the server's memory.
//!
//! Each session costs a worker task, its channels and buffers (some 50 KB). A client is
//! the tenant its OAuth access token names, else the bearer token it presented (a hash of
//! it), or its IP address without one. A client
//! at [`HttpLimits::max_sessions_per_client`](crate::HttpLimits) has its least recently
//! used session closed for the new one: it only ever displaces itself. At
//! [`HttpLimits::max_sessions`](crate::HttpLimits) in all, a new session is refused with
//! 503 and a message. A session unused for `session_idle` is closed by rmcp's keep-alive,
//! which reaches [`CappedSessions::close_session`] like a client's `DELETE`; after many
//! closes, the allocator is asked to return freed memory to the system (glibc keeps it
//! otherwise, and RSS never goes down).
//!
//! A session is bound to the client that made it, as the MCP security best practices ask
//! (bind session ids to the user): a request with another client's checked token and the
//! session's id is answered 404, as an unknown session is, so that a leaked or guessed
//! `Mcp-Session-Id` is no use to another tenant.
//!
//! The count is taken in [`admit`], a middleware inside the bearer check, which reserves a
//! place before rmcp makes the session and hands the reservation on in a task-local:
//! rmcp calls [`SessionManager::create_session`] within the request's own task.
//!
//! Each session's request streams go through its resume buffer ([`Replays`]): a client
//! that reconnects with `Last-Event-ID` gets the events it missed.

use super::connections::HttpLimits;
use super::replay::Replays;
use crate::identity::ClaimedTenant;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, SessionError,
};
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use rmcp::transport::streamable_http_server::{SessionId, SessionManager};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Marks a request whose bearer token was checked: only then does the token say who the
/// client is (an unchecked one, on a loopback server without tokens, could be made up per
/// request to dodge a per-client cap).
#[derive(Clone, Copy, Debug)]
pub(crate) struct CheckedBearer;

/// Who holds a session: a hash of the bearer token, or of the IP address.
type ClientKey = [u8; 32];

/// After this many sessions closed, freed memory goes back to the system.
const TRIM_AFTER: usize = 64;

tokio::task_local! {
    /// The place [`admit`] reserved for the session this request may create.
    static RESERVED: Arc<Reservation>;
}

#[derive(Default)]
struct ClientSessions {
    /// Sessions held and places reserved.
    held: usize,
    /// Each session's last use.
    used: HashMap<SessionId, Instant>,
}

#[derive(Default)]
struct Book {
    clients: HashMap<ClientKey, ClientSessions>,
    total: usize,
    owner: HashMap<SessionId, ClientKey>,
    closed_since_trim: usize,
}

/// Why a place could not be reserved.
#[derive(Debug)]
enum Full {
    /// The client is at its cap, every place of it a session still being made.
    Client,
    /// The server is at its cap.
    Total,
}

/// A reserved place, and the client's session it was taken from, to close.
type Reserved = (Arc<Reservation>, Option<SessionId>);

/// The counts, shared by the middleware and the session manager.
struct SessionBook {
    per_client: usize,
    total: usize,
    state: Mutex<Book>,
}

/// A place for one session; given back when dropped unless a session took it.
struct Reservation {
    book: Arc<SessionBook>,
    client: ClientKey,
    kept: AtomicBool,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if !self.kept.load(Ordering::Relaxed) {
            self.book.lock().release(&self.client);
        }
    }
}

impl Book {
    /// Count a closed session; returns whether it is time to trim the heap.
    fn note_closed(&mut self) -> bool {
        self.closed_since_trim += 1;
        if self.closed_since_trim >= TRIM_AFTER {
            self.closed_since_trim = 0;
            return true;
        }
        false
    }

    fn release(&mut self, client: &ClientKey) {
        self.total = self.total.saturating_sub(1);
        if let Some(sessions) = self.clients.get_mut(client) {
            sessions.held = sessions.held.saturating_sub(1);
            if sessions.held == 0 {
                self.clients.remove(client);
            }
        }
    }
}

impl SessionBook {
    fn lock(&self) -> std::sync::MutexGuard<'_, Book> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a new session of `client`; at its cap, the place of its least
    /// recently used session, which the caller then closes (taken here, at once, so that
    /// concurrent requests never pick the same one).
    fn reserve(self: &Arc<Self>, client: ClientKey) -> Result<Reserved, Full> {
        let evicted = {
            let mut book = self.lock();
            let book = &mut *book;
            match book.clients.get_mut(&client) {
                Some(sessions) if sessions.held >= self.per_client => {
                    let lru = sessions
                        .used
                        .iter()
                        .min_by_key(|(_, used)| **used)
                        .map(|(id, _)| id.clone())
                        .ok_or(Full::Client)?;
                    sessions.used.remove(&lru);
                    book.owner.remove(&lru);
                    Some(lru)
                }
                _ if book.total >= self.total => return Err(Full::Total),
                _ => {
                    book.total += 1;
                    book.clients.entry(client).or_default().held += 1;
                    None
                }
            }
        };
        // Made with the lock released: a reservation takes it when dropped.
        let reservation = Arc::new(Reservation {
            book: self.clone(),
            client,
            kept: AtomicBool::new(false),
        });
        Ok((reservation, evicted))
    }

    /// Session `id` was made: it takes the reservation of the request that made it.
    fn made(self: &Arc<Self>, id: &SessionId) {
        let reservation = RESERVED.try_with(Arc::clone).ok();
        let mut book = self.lock();
        let client = match &reservation {
            Some(reserved) if !reserved.kept.swap(true, Ordering::Relaxed) => reserved.client,
            // Not made through `admit` (nothing else makes sessions): counted all the same.
            _ => {
                book.total += 1;
                let client = [0; 32];
                book.clients.entry(client).or_default().held += 1;
                client
            }
        };
        book.owner.insert(id.clone(), client);
        if let Some(sessions) = book.clients.get_mut(&client) {
            sessions.used.insert(id.clone(), Instant::now());
        }
    }

    /// Session `id` is gone; returns whether it is time to trim the heap.
    fn closed(&self, id: &SessionId) -> bool {
        let mut book = self.lock();
        let Some(client) = book.owner.remove(id) else {
            return false;
        };
        if let Some(sessions) = book.clients.get_mut(&client) {
            sessions.used.remove(id);
        }
        book.release(&client);
        book.note_closed()
    }

    /// Whether session `id` is not another client's than `client` (a session the book
    /// does not know is left to rmcp, which answers it as missing).
    fn held_by(&self, id: &str, client: &ClientKey) -> bool {
        self.lock()
            .owner
            .get(id)
            .is_none_or(|owner| owner == client)
    }

    fn touch(&self, id: &str) {
        let mut book = self.lock();
        if let Some(client) = book.owner.get(id).copied() {
            if let Some(used) = book
                .clients
                .get_mut(&client)
                .and_then(|c| c.used.get_mut(id))
            {
                *used = Instant::now();
            }
        }
    }
}

/// Give freed heap memory back to the system (glibc keeps it otherwise).
fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    tokio::task::spawn_blocking(|| {
        // SAFETY: malloc_trim only walks the allocator's own free lists.
        unsafe { libc::malloc_trim(0) };
    });
}

/// rmcp's [`LocalSessionManager`] with the counts of [`SessionBook`].
pub(crate) struct CappedSessions {
    inner: LocalSessionManager,
    book: Arc<SessionBook>,
    replays: Arc<Replays>,
}

impl CappedSessions {
    /// Sessions under `limits`, closed after `limits.session_idle` unused.
    pub(crate) fn new(limits: &HttpLimits) -> CappedSessions {
        let mut inner = LocalSessionManager::default();
        inner.session_config.keep_alive = Some(limits.session_idle);
        CappedSessions {
            inner,
            book: Arc::new(SessionBook {
                per_client: limits.max_sessions_per_client.max(1),
                total: limits.max_sessions.max(1),
                state: Mutex::new(Book::default()),
            }),
            replays: Arc::new(Replays::new(limits.replay)),
        }
    }

    /// Close session `id` and forget what its streams held.
    async fn close(&self, id: &SessionId) -> Result<(), LocalSessionManagerError> {
        self.replays.close(id);
        self.inner.close_session(id).await
    }

    /// How many sessions are open or being made.
    pub(crate) fn count(&self) -> usize {
        self.book.lock().total
    }
}

impl SessionManager for CappedSessions {
    type Error = LocalSessionManagerError;
    type Transport = <LocalSessionManager as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.inner.create_session().await?;
        self.replays.open(&id);
        self.book.made(&id);
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        let closed = self.close(id).await;
        if self.book.closed(id) {
            trim_heap();
        }
        closed
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let events = self.inner.create_stream(id, message).await?;
        Ok(self.replays.tee(id.clone(), events))
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.inner.accept_message(id, message).await
    }

    fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> impl std::future::Future<
        Output = Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error>,
    > + Send {
        self.inner.create_standalone_stream(id)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        match self.replays.resume(id, &last_event_id) {
            Ok(Some(replayed)) => Ok(replayed.left_stream()),
            Ok(None) => Ok(self.inner.resume(id, last_event_id).await?.right_stream()),
            Err(unknown) => {
                tracing::debug!("resume refused: {unknown}");
                Err(LocalSessionManagerError::SessionError(
                    SessionError::InvalidEventId,
                ))
            }
        }
    }
}

/// The client a request comes from: the tenant its OAuth access token names (a new token
/// of the same person is the same client), else its bearer token when the server checked
/// it, else its IP address.
fn client_key(request: &Request) -> ClientKey {
    let mut hash = Sha256::new();
    if let Some(claimed) = request.extensions().get::<ClaimedTenant>() {
        hash.update(b"oauth\0");
        hash.update(claimed.0.as_bytes());
        return hash.finalize().into();
    }
    let checked = request.extensions().get::<CheckedBearer>().is_some();
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .map(|(_, token)| token.trim_start_matches(' '))
        .filter(|_| checked);
    match (token, request.extensions().get::<ConnectInfo<SocketAddr>>()) {
        (Some(token), _) => {
            hash.update(b"token\0");
            hash.update(token.as_bytes());
        }
        (None, Some(ConnectInfo(peer))) => {
            hash.update(b"ip\0");
            hash.update(peer.ip().to_string().as_bytes());
        }
        (None, None) => hash.update(b"unknown"),
    }
    hash.finalize().into()
}

fn refuse(status: StatusCode, message: String) -> Response {
    let mut response = (status, message).into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    response
}

/// Count a request that may make a session (a `POST` without `Mcp-Session-Id`), within
/// the caps; mark a session's use otherwise.
pub(crate) async fn admit(
    State(sessions): State<Arc<CappedSessions>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(id) = request
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
    {
        // A session is its maker's: another client's token (another tenant's, another
        // person's) cannot use it, and is answered as for a session that does not exist.
        let checked = request.extensions().get::<CheckedBearer>().is_some();
        if checked && !sessions.book.held_by(id, &client_key(&request)) {
            return (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response();
        }
        sessions.book.touch(id);
        return next.run(request).await;
    }
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let client = client_key(&request);
    let book = &sessions.book;
    let reservation = match book.reserve(client) {
        Ok((reservation, None)) => reservation,
        Ok((reservation, Some(lru))) => {
            tracing::info!(
                "a client is at its {} MCP sessions: closing its least recently used",
                book.per_client
            );
            let _ = sessions.close(&lru).await;
            if book.lock().note_closed() {
                trim_heap();
            }
            reservation
        }
        Err(Full::Client) => {
                return refuse(
                    StatusCode::TOO_MANY_REQUESTS,
                    format!(
                        "this client already holds {} MCP sessions, the most one client may; close some (DELETE) first\n",
                        book.per_client
                    ),
                )
            }
        Err(Full::Total) => {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the server holds {} MCP sessions, its most; try again when some have closed\n",
                    book.total
                ),
            )
        }
    };
    RESERVED.scope(reservation, next.run(request)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn book(per_client: usize, total: usize) -> Arc<SessionBook> {
        Arc::new(SessionBook {
            per_client,
            total,
            state: Mutex::new(Book::default()),
        })
    }

    fn make(book: &Arc<SessionBook>, client: ClientKey, id: &str) -> SessionId {
        let (reservation, _) = book.reserve(client).expect("a place");
        let id: SessionId = Arc::from(id);
        let made = async { book.made(&id) };
        futures::executor::block_on(RESERVED.scope(reservation, made));
        id
    }

    #[test]
    fn a_client_at_its_cap_gives_up_its_least_recently_used_session() {
        let book = book(2, 10);
        let a = make(&book, [1; 32], "a");
        let b = make(&book, [1; 32], "b");
        book.touch("a");
        let (held, lru) = book.reserve([1; 32]).expect("a place");
        assert_eq!(lru, Some(b.clone()), "the least recently used");
        assert!(
            book.reserve([2; 32]).is_ok(),
            "another client is not at its cap"
        );
        let (_also_held, next) = book.reserve([1; 32]).expect("a place");
        assert_eq!(next, Some(a), "never the same session twice");
        assert!(
            matches!(book.reserve([1; 32]), Err(Full::Client)),
            "every place of the client is a session being made"
        );
        drop(held);
        assert!(!book.closed(&b), "already given up");
    }

    #[test]
    fn the_total_cap_refuses_and_unused_reservations_are_given_back() {
        let book = book(10, 2);
        make(&book, [1; 32], "a");
        let held = book.reserve([2; 32]).expect("a place");
        assert!(matches!(book.reserve([3; 32]), Err(Full::Total)));
        drop(held); // the request made no session
        assert!(book.reserve([3; 32]).is_ok());
        assert_eq!(book.lock().owner.len(), 1);
    }

    #[test]
    fn closing_every_session_empties_the_book() {
        let sessions = CappedSessions::new(&HttpLimits::default());
        let ids: Vec<SessionId> = (0..100)
            .map(|i| make(&sessions.book, [i as u8; 32], &i.to_string()))
            .collect();
        assert_eq!(sessions.count(), 100);
        for id in &ids {
            sessions.book.closed(id);
        }
        let book = sessions.book.lock();
        assert_eq!(
            (book.total, book.clients.len(), book.owner.len()),
            (0, 0, 0)
        );
    }

    #[test]
    fn a_bearer_value_the_server_did_not_check_does_not_make_a_new_client() {
        let request = |token: &str, checked: bool| {
            let mut request = Request::builder()
                .header(header::AUTHORIZATION, format!("Bearer {token}"))
                .body(axum::body::Body::empty())
                .expect("a request");
            let peer: SocketAddr = ([10, 0, 0, 7], 4000).into();
            request.extensions_mut().insert(ConnectInfo(peer));
            if checked {
                request.extensions_mut().insert(CheckedBearer);
            }
            request
        };
        assert_eq!(
            client_key(&request("made-up-1", false)),
            client_key(&request("made-up-2", false)),
            "unchecked: the peer's address says who it is"
        );
        assert_ne!(
            client_key(&request("token-a", true)),
            client_key(&request("token-b", true)),
            "checked tokens are clients of their own"
        );
    }
}
