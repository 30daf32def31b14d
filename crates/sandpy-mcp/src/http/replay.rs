//! Resuming a request's SSE stream: the events of each MCP session's request streams,
//! held in a bounded buffer, replayed to a client that reconnects with `Last-Event-ID`.
//!
//! rmcp (3.11) gives every event of a request stream the id `<index>/<stream>` and sends a
//! priming event (`retry:` and an id, no data) first, but forgets a stream the moment its
//! answer is written: a client whose connection broke before it read the answer reconnects
//! (`GET` with `Last-Event-ID`) to nothing, and its result is lost. Here each request
//! stream is read to its end by a task of its own ([`Replays::tee`]), whether or not the
//! client still reads; every event is held before it is sent, and a resume
//! ([`Replays::resume`]) replays the held events after the given id, then follows the
//! stream if it is still going. The standalone (`GET`) stream's ids have no `/`: rmcp
//! resumes those from its own cache.
//!
//! The buffer is the session's own, found by the `Mcp-Session-Id` the request came with:
//! an event id of another session (forged, leaked or guessed; ids are counters) names
//! nothing in this one. What it holds is bounded before anything is held:
//! - per session, [`ReplayLimits::events`] events and [`ReplayLimits::bytes`] bytes (an
//!   event's JSON text): to hold one more, the session's oldest events are dropped;
//! - across sessions, [`ReplayLimits::total_bytes`]: past it, new events are sent but not
//!   held;
//! - an event bigger than [`ReplayLimits::bytes`] alone is sent but never held;
//! - the events of a stream that has ended are dropped [`ReplayLimits::keep`] after its
//!   end, and all of a session's when it closes.
//!
//! Past a bound, a resume replays what is still held after the given id, and the server
//! logs how many events of the stream it could not replay. An answer is its stream's last
//! event, so it is the last one dropped; when the answer itself is not held, the resumed
//! stream ends without it and the client has to ask again.

use futures::{Stream, StreamExt};
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use rmcp::transport::streamable_http_server::SessionId;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How much of the sessions' request streams is held for resuming.
/// [`ReplayLimits::default`] gives the values each field names.
#[derive(Debug, Clone, Copy)]
pub struct ReplayLimits {
    /// Events held per MCP session. Default 256.
    pub events: usize,
    /// Bytes (events' JSON text) held per MCP session. Default 8 MiB.
    pub bytes: usize,
    /// Bytes held across all sessions. Default 256 MiB.
    pub total_bytes: usize,
    /// How long the events of an ended stream stay held. Default 60 s (rmcp's own).
    pub keep: Duration,
}

impl Default for ReplayLimits {
    fn default() -> Self {
        ReplayLimits {
            events: 256,
            bytes: 8 << 20,
            total_bytes: 256 << 20,
            keep: Duration::from_secs(60),
        }
    }
}

/// Events waiting for a slow reader of a stream (rmcp's own channel capacity).
const CHANNEL: usize = 16;

/// What an event costs beyond its JSON text: its id and the SSE framing, roughly.
const EVENT_OVERHEAD: usize = 64;

/// A request stream's event id, `<index>/<stream>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct EventId {
    index: usize,
    stream: u64,
}

impl EventId {
    /// The id rmcp gave a request stream's event; `None` for the standalone stream's
    /// (no `/`) and anything else.
    fn parse(text: &str) -> Option<EventId> {
        let (index, stream) = text.split_once('/')?;
        Some(EventId {
            index: index.parse().ok()?,
            stream: stream.parse().ok()?,
        })
    }
}

/// One event held.
struct Held {
    id: EventId,
    bytes: usize,
    event: ServerSseMessage,
}

/// A request stream of a session.
#[derive(Default)]
struct StreamState {
    /// Where its events go now: the client reading it (the first request, then the last
    /// resume), until the stream ends.
    live: Option<mpsc::Sender<ServerSseMessage>>,
    /// When it ended.
    ended: Option<Instant>,
    /// Its events that were sent but are not held (dropped or never held).
    lost: usize,
    /// Its events held now.
    held: usize,
}

/// One session's held events, oldest first.
#[derive(Default)]
struct SessionReplay {
    held: VecDeque<Held>,
    bytes: usize,
    streams: HashMap<u64, StreamState>,
}

struct Book {
    sessions: HashMap<SessionId, SessionReplay>,
    total_bytes: usize,
}

/// The held events of every session, within [`ReplayLimits`].
pub(crate) struct Replays {
    limits: ReplayLimits,
    book: Mutex<Book>,
}

/// Why a stream cannot be resumed here.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum ResumeError {
    /// The session has no stream with this id (another session's, made up, or one whose
    /// events were dropped after it ended).
    #[error("no stream of this session has event `{0}`")]
    Unknown(String),
}

impl Replays {
    /// Nothing held yet, within `limits`.
    pub(crate) fn new(limits: ReplayLimits) -> Replays {
        Replays {
            limits,
            book: Mutex::new(Book {
                sessions: HashMap::new(),
                total_bytes: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Session `id` was made: its streams are held from now on.
    pub(crate) fn open(&self, id: &SessionId) {
        self.lock().sessions.entry(id.clone()).or_default();
    }

    /// Session `id` is gone: so is everything held of it.
    pub(crate) fn close(&self, id: &SessionId) {
        let mut book = self.lock();
        if let Some(session) = book.sessions.remove(id) {
            book.total_bytes = book.total_bytes.saturating_sub(session.bytes);
        }
    }

    /// Bytes held across sessions now.
    #[cfg(test)]
    fn total_bytes(&self) -> usize {
        self.lock().total_bytes
    }

    /// The stream a client reads for a request of session `id`: `events` (rmcp's stream
    /// for the request) read to its end by a task of its own, each event held before it
    /// is passed on, so that a client that reconnects gets what it missed.
    pub(crate) fn tee(
        self: &Arc<Self>,
        id: SessionId,
        events: impl Stream<Item = ServerSseMessage> + Send + 'static,
    ) -> impl Stream<Item = ServerSseMessage> + Send + Sync + 'static {
        let (first, receiver) = mpsc::channel(CHANNEL);
        let replays = self.clone();
        tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            // The first reader, until its stream is known (its first event with an id).
            let mut first = Some(first);
            let mut stream = None;
            while let Some(event) = events.next().await {
                let parsed = event.event_id.as_deref().and_then(EventId::parse);
                let to = match parsed {
                    Some(event_id) => {
                        stream = Some(event_id.stream);
                        let bytes = size_of_event(&event);
                        replays.hold(&id, event_id, bytes, &event, &mut first)
                    }
                    None => None,
                };
                // Not held (no id, or the session is gone): to the first reader.
                let Some(to) = to.or_else(|| first.clone()) else {
                    continue;
                };
                if to.send(event).await.is_err() {
                    if let Some(stream) = stream {
                        replays.reader_gone(&id, stream, &to);
                    }
                }
            }
            if let Some(stream) = stream {
                replays.ended(&id, stream);
            }
        });
        receiver_stream(receiver)
    }

    /// Hold `event` of session `id` within the bounds; where to send it. A stream seen
    /// for the first time takes `first` as its reader.
    fn hold(
        &self,
        id: &SessionId,
        event_id: EventId,
        bytes: usize,
        event: &ServerSseMessage,
        first: &mut Option<mpsc::Sender<ServerSseMessage>>,
    ) -> Option<mpsc::Sender<ServerSseMessage>> {
        let limits = self.limits;
        let mut book = self.lock();
        let book = &mut *book;
        let session = book.sessions.get_mut(id)?;
        let freed = session.forget_ended(limits.keep);
        book.total_bytes = book.total_bytes.saturating_sub(freed);
        let state = session.streams.entry(event_id.stream).or_default();
        if state.live.is_none() && state.ended.is_none() {
            state.live = first.take();
        }
        let to = state.live.clone();
        if bytes > limits.bytes {
            tracing::warn!(
                "an SSE event of {bytes} bytes is past the resume buffer's {} per session: sent, not held",
                limits.bytes
            );
            session.lose(event_id.stream, 1);
            return to;
        }
        // Make room in the session first: its oldest events go.
        while session.held.len() >= limits.events.max(1) || session.bytes + bytes > limits.bytes {
            let Some(old) = session.held.pop_front() else {
                break;
            };
            session.bytes -= old.bytes;
            book.total_bytes = book.total_bytes.saturating_sub(old.bytes);
            session.dropped(old.id.stream);
        }
        if book.total_bytes + bytes > limits.total_bytes {
            tracing::warn!(
                "the resume buffers hold {} bytes, their most: an SSE event is sent, not held",
                book.total_bytes
            );
            session.lose(event_id.stream, 1);
            return to;
        }
        session.held.push_back(Held {
            id: event_id,
            bytes,
            event: event.clone(),
        });
        if let Some(state) = session.streams.get_mut(&event_id.stream) {
            state.held += 1;
        }
        session.bytes += bytes;
        book.total_bytes += bytes;
        to
    }

    /// The reader `gone` of a stream stopped reading (its connection closed): the stream's
    /// events are only held until a client resumes it.
    fn reader_gone(&self, id: &SessionId, stream: u64, gone: &mpsc::Sender<ServerSseMessage>) {
        let mut book = self.lock();
        let state = book
            .sessions
            .get_mut(id)
            .and_then(|s| s.streams.get_mut(&stream));
        if let Some(state) = state {
            if state.live.as_ref().is_some_and(|l| l.same_channel(gone)) {
                state.live = None;
            }
        }
    }

    /// A stream ended (its answer was sent): its reader's stream ends after what it was
    /// sent; its events stay held for [`ReplayLimits::keep`].
    fn ended(&self, id: &SessionId, stream: u64) {
        let mut book = self.lock();
        let Some(session) = book.sessions.get_mut(id) else {
            return;
        };
        let Some(state) = session.streams.get_mut(&stream) else {
            return;
        };
        state.ended = Some(Instant::now());
        state.live = None;
        if state.held == 0 {
            // Nothing to replay: a resume finds nothing either way, and the session's
            // ended streams stay as few as its events.
            session.streams.remove(&stream);
        }
    }

    /// The events of session `id` after `last_event_id`, and then, if the stream is still
    /// going, the rest as it comes (the earlier reader's stream ends). `Ok(None)` when the
    /// id is not a request stream's (the standalone stream's ids are rmcp's to resume).
    pub(crate) fn resume(
        &self,
        id: &SessionId,
        last_event_id: &str,
    ) -> Result<Option<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static>, ResumeError>
    {
        let Some(last) = EventId::parse(last_event_id) else {
            if last_event_id.contains('/') {
                return Err(ResumeError::Unknown(last_event_id.into()));
            }
            return Ok(None);
        };
        let unknown = || ResumeError::Unknown(last_event_id.into());
        let limits = self.limits;
        let mut book = self.lock();
        let book = &mut *book;
        let session = book.sessions.get_mut(id).ok_or_else(unknown)?;
        let freed = session.forget_ended(limits.keep);
        book.total_bytes = book.total_bytes.saturating_sub(freed);
        let state = session.streams.get(&last.stream).ok_or_else(unknown)?;
        let lost = state.lost;
        let ended = state.ended.is_some();
        let replay: Vec<ServerSseMessage> = session
            .held
            .iter()
            .filter(|h| h.id.stream == last.stream && h.id.index > last.index)
            .map(|h| h.event.clone())
            .collect();
        if lost > 0 {
            tracing::warn!(
                "resuming a stream past the resume buffer's bounds: {lost} of its events are not held and not replayed"
            );
        }
        let follow = if ended {
            None
        } else {
            let (sender, receiver) = mpsc::channel(CHANNEL);
            if let Some(state) = session.streams.get_mut(&last.stream) {
                state.live = Some(sender);
            }
            Some(receiver_stream(receiver))
        };
        Ok(Some(
            futures::stream::iter(replay).chain(futures::stream::iter(follow).flatten()),
        ))
    }
}

impl SessionReplay {
    /// Drop the streams that ended more than `keep` ago, with their events; the bytes
    /// freed.
    fn forget_ended(&mut self, keep: Duration) -> usize {
        let old: Vec<u64> = self
            .streams
            .iter()
            .filter(|(_, s)| s.ended.is_some_and(|at| at.elapsed() >= keep))
            .map(|(id, _)| *id)
            .collect();
        if old.is_empty() {
            return 0;
        }
        for stream in &old {
            self.streams.remove(stream);
        }
        let before = self.bytes;
        self.held.retain(|h| {
            let keep = !old.contains(&h.id.stream);
            if !keep {
                self.bytes -= h.bytes;
            }
            keep
        });
        before - self.bytes
    }

    fn lose(&mut self, stream: u64, n: usize) {
        if let Some(state) = self.streams.get_mut(&stream) {
            state.lost += n;
        }
    }

    /// An event of `stream` was dropped to make room; an ended stream left with none is
    /// forgotten (so a session holds at most as many ended streams as events).
    fn dropped(&mut self, stream: u64) {
        let Some(state) = self.streams.get_mut(&stream) else {
            return;
        };
        state.lost += 1;
        state.held = state.held.saturating_sub(1);
        if state.held == 0 && state.ended.is_some() {
            self.streams.remove(&stream);
        }
    }
}

/// A stream of what `receiver` gets.
fn receiver_stream(
    mut receiver: mpsc::Receiver<ServerSseMessage>,
) -> impl Stream<Item = ServerSseMessage> + Send + Sync + 'static {
    futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
}

/// What holding `event` costs: its message's JSON text and [`EVENT_OVERHEAD`], counted
/// without writing the text anywhere.
fn size_of_event(event: &ServerSseMessage) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(EVENT_OVERHEAD);
    if let Some(message) = &event.message {
        // A message that cannot be written as JSON is not sent either: it costs nothing.
        let _ = serde_json::to_writer(&mut count, message.as_ref());
    }
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{NumberOrString, ServerJsonRpcMessage};

    fn answer(id: i64, text: &str) -> ServerJsonRpcMessage {
        let result = rmcp::model::CallToolResult::success(vec![rmcp::model::ContentBlock::text(
            text.to_string(),
        )]);
        ServerJsonRpcMessage::response(
            rmcp::model::ServerResult::CallToolResult(result),
            NumberOrString::Number(id),
        )
    }

    fn event(index: usize, stream: u64, text: &str) -> ServerSseMessage {
        ServerSseMessage::new(format!("{index}/{stream}"), answer(1, text))
    }

    fn texts(events: Vec<ServerSseMessage>) -> Vec<String> {
        events
            .into_iter()
            .map(|e| {
                let value = serde_json::to_value(e.message.as_deref()).expect("JSON");
                value["result"]["content"][0]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    }

    /// Session `id`'s stream 0 carrying `events`, read by nobody; what a resume after
    /// `last` replays.
    async fn replayed(
        replays: &Arc<Replays>,
        id: &SessionId,
        events: Vec<ServerSseMessage>,
        last: &str,
    ) -> Result<Vec<String>, ResumeError> {
        let read = replays.tee(id.clone(), futures::stream::iter(events));
        drop(read); // the client went away at once
        tokio::time::sleep(Duration::from_millis(50)).await;
        let resumed = replays.resume(id, last)?.expect("a request stream's id");
        Ok(texts(resumed.collect().await))
    }

    #[tokio::test]
    async fn a_reader_that_left_gets_the_rest_after_its_last_event_and_no_more() {
        let replays = Arc::new(Replays::new(ReplayLimits::default()));
        let id: SessionId = Arc::from("s");
        replays.open(&id);
        let events = vec![
            ServerSseMessage::priming("0/0", Duration::from_secs(3)),
            event(1, 0, "a"),
            event(2, 0, "b"),
        ];
        let got = replayed(&replays, &id, events, "1/0").await;
        assert_eq!(got, Ok(vec!["b".to_string()]));
        let again = replays.resume(&id, "0/0").expect("known").expect("stream");
        assert_eq!(texts(again.collect().await), ["a", "b"]);
    }

    #[tokio::test]
    async fn another_sessions_or_a_made_up_id_names_nothing() {
        let replays = Arc::new(Replays::new(ReplayLimits::default()));
        let (mine, theirs): (SessionId, SessionId) = (Arc::from("mine"), Arc::from("theirs"));
        replays.open(&mine);
        replays.open(&theirs);
        replayed(&replays, &theirs, vec![event(0, 0, "secret")], "0/0")
            .await
            .expect("their own");
        for forged in ["0/0", "0/7", "x/0", "1/", "/"] {
            let resumed = replays.resume(&mine, forged).map(|s| s.is_some());
            assert_eq!(
                resumed,
                Err(ResumeError::Unknown(forged.into())),
                "{forged}"
            );
        }
        // Ids without `/` are the standalone stream's: rmcp's to resume.
        assert!(matches!(replays.resume(&mine, "3"), Ok(None)));
        let closed: SessionId = Arc::from("closed");
        assert!(replays.resume(&closed, "0/0").is_err());
    }

    #[tokio::test]
    async fn past_the_event_bound_the_oldest_go_and_the_answer_stays() {
        let replays = Arc::new(Replays::new(ReplayLimits {
            events: 2,
            ..ReplayLimits::default()
        }));
        let id: SessionId = Arc::from("s");
        replays.open(&id);
        let events = (0..5).map(|i| event(i, 0, &i.to_string())).collect();
        let got = replayed(&replays, &id, events, "0/0").await;
        assert_eq!(got, Ok(vec!["3".to_string(), "4".to_string()]));
    }

    #[tokio::test]
    async fn past_the_byte_bounds_events_are_sent_but_not_held() {
        let one = size_of_event(&event(0, 0, "x"));
        let replays = Arc::new(Replays::new(ReplayLimits {
            bytes: 3 * one,
            total_bytes: 4 * one,
            ..ReplayLimits::default()
        }));
        let (a, b): (SessionId, SessionId) = (Arc::from("a"), Arc::from("b"));
        replays.open(&a);
        replays.open(&b);
        // Bigger than a session may hold: never held. Then the session's bound.
        let big = "x".repeat(4 * one);
        let events = vec![event(0, 0, &big), event(1, 0, "1"), event(2, 0, "2")];
        let got = replayed(&replays, &a, events, "0/0").await;
        assert_eq!(got, Ok(vec!["1".to_string(), "2".to_string()]));
        let events = (0..5).map(|i| event(i, 1, &i.to_string())).collect();
        let got = replayed(&replays, &a, events, "0/1").await;
        assert_eq!(
            got,
            Ok(vec!["2".to_string(), "3".to_string(), "4".to_string()])
        );
        assert_eq!(replays.total_bytes(), 3 * one);
        // The server's bound: b gets the one place left.
        let events = (1..4).map(|i| event(i, 0, &i.to_string())).collect();
        let got = replayed(&replays, &b, events, "0/0").await;
        assert_eq!(got, Ok(vec!["1".to_string()]));
        replays.close(&a);
        replays.close(&b);
        assert_eq!(replays.total_bytes(), 0);
    }

    #[tokio::test]
    async fn ended_streams_are_no_more_than_the_events_held() {
        let replays = Arc::new(Replays::new(ReplayLimits {
            events: 4,
            ..ReplayLimits::default()
        }));
        let id: SessionId = Arc::from("s");
        replays.open(&id);
        for stream in 0..100 {
            let events = vec![event(0, stream, "a"), event(1, stream, "b")];
            drop(replays.tee(id.clone(), futures::stream::iter(events)));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let streams = replays.lock().sessions[&id].streams.len();
        assert_eq!(streams, 2, "the two streams whose events are held");
        assert!(replays.resume(&id, "0/0").is_err(), "forgotten");
        let last = replays.resume(&id, "0/99").expect("held").expect("stream");
        assert_eq!(texts(last.collect().await), ["b"]);
    }

    #[tokio::test]
    async fn an_ended_stream_is_forgotten_after_keep() {
        let replays = Arc::new(Replays::new(ReplayLimits {
            keep: Duration::from_millis(100),
            ..ReplayLimits::default()
        }));
        let id: SessionId = Arc::from("s");
        replays.open(&id);
        replayed(
            &replays,
            &id,
            vec![event(0, 0, "a"), event(1, 0, "b")],
            "0/0",
        )
        .await
        .expect("held");
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(replays.resume(&id, "0/0").is_err());
        assert_eq!(replays.total_bytes(), 0);
    }

    #[tokio::test]
    async fn a_resume_follows_a_stream_still_going() {
        let replays = Arc::new(Replays::new(ReplayLimits::default()));
        let id: SessionId = Arc::from("s");
        replays.open(&id);
        let (sender, receiver) = mpsc::channel(4);
        let first = replays.tee(id.clone(), receiver_stream(receiver));
        sender.send(event(0, 0, "a")).await.expect("send");
        let mut first = Box::pin(first);
        assert_eq!(texts(vec![first.next().await.expect("a")]), ["a"]);
        drop(first);
        sender.send(event(1, 0, "b")).await.expect("send");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let resumed = replays.resume(&id, "0/0").expect("known").expect("stream");
        sender.send(event(2, 0, "c")).await.expect("send");
        drop(sender);
        assert_eq!(texts(resumed.collect().await), ["b", "c"]);
    }
}
