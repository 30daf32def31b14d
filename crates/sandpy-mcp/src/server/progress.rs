//! A run's output as `notifications/progress` while it goes on, for a `tools/call` that
//! carries a `progressToken`, and its tool calls as messages of their own (`calling
//! mcp__fs__read_file`), in the order they happened. The run's sinks fill a bounded buffer;
//! a task sends what it holds every [`INTERVAL`], or as soon as [`SEND_AT`] bytes wait or a
//! tool is called. A buffer that is full leaves the rest out of the stream and says how
//! much in the next message (the result still carries the output, cut as always), so a
//! client that reads slowly costs the server at most [`MAX_BUFFERED`] bytes and
//! [`MAX_CALLS`] call notices per run. A run that ends before anything was sent sends no
//! output at all: its result carries it, and a result with nothing before it goes out as
//! one JSON body (`http/whole_answers.rs`), which clients read whole and keep their
//! connection for.

use crate::metrics::Metrics;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::Peer;
use rmcp::RoleServer;
use sandpy::{OutputSink, ToolCallSink};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::{CancellationToken, DropGuard};

/// How often waiting output is sent.
const INTERVAL: Duration = Duration::from_millis(100);
/// Output that is sent at once, without waiting for the interval.
const SEND_AT: usize = 4096;
/// Output held for the stream at most; what comes past it is left out of the stream.
const MAX_BUFFERED: usize = 64 << 10;
/// Tool-call notices held for the stream at most; more are counted, not held.
const MAX_CALLS: usize = 256;

/// Output and tool calls waiting to be sent.
#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    /// Bytes left out since the last message, because the buffer was full.
    left_out: usize,
    /// Tool calls since the last message: where in `bytes` each came, and its tool.
    calls: Vec<(usize, String)>,
    /// Tool calls left out since the last message, because [`MAX_CALLS`] were held.
    calls_left_out: usize,
}

/// The sending side of one run's stream; [`ProgressStream::finish`] sends the rest. Dropped
/// unfinished (the client cancelled the call, whose future is then dropped), it stops its
/// task: the task would otherwise wake every [`INTERVAL`] for as long as the server runs.
pub(super) struct ProgressStream {
    done: DropGuard,
    task: tokio::task::JoinHandle<()>,
}

impl ProgressStream {
    /// Start sending to `peer` under `token`; the sinks go in the run's options.
    pub(super) fn start(
        peer: Peer<RoleServer>,
        token: ProgressToken,
        metrics: Arc<Metrics>,
    ) -> (ProgressStream, OutputSink, ToolCallSink) {
        let pending = Arc::new(Mutex::new(Pending::default()));
        let full = Arc::new(Notify::new());
        let sink: OutputSink = {
            let (pending, full) = (pending.clone(), full.clone());
            Arc::new(move |_stream, bytes: &[u8]| {
                let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
                let room = MAX_BUFFERED.saturating_sub(p.bytes.len());
                let take = room.min(bytes.len());
                p.bytes.extend_from_slice(&bytes[..take]);
                p.left_out += bytes.len() - take;
                if p.bytes.len() >= SEND_AT {
                    full.notify_one();
                }
            })
        };
        let calls: ToolCallSink = {
            let (pending, full) = (pending.clone(), full.clone());
            Arc::new(move |tool: &str| {
                let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
                if p.calls.len() < MAX_CALLS {
                    let at = p.bytes.len();
                    p.calls.push((at, tool.to_string()));
                    full.notify_one();
                } else {
                    p.calls_left_out += 1;
                }
            })
        };
        let done = CancellationToken::new();
        let task = tokio::spawn(send(peer, token, pending, full, done.clone(), metrics));
        let done = done.drop_guard();
        (ProgressStream { done, task }, sink, calls)
    }

    /// Send what is left, then stop (the run has ended).
    pub(super) async fn finish(self) {
        let ProgressStream { done, task } = self;
        drop(done);
        let _ = task.await;
    }
}

async fn send(
    peer: Peer<RoleServer>,
    token: ProgressToken,
    pending: Arc<Mutex<Pending>>,
    full: Arc<Notify>,
    done: CancellationToken,
    metrics: Arc<Metrics>,
) {
    let mut sent = 0u64;
    loop {
        let last = tokio::select! {
            () = tokio::time::sleep(INTERVAL) => false,
            () = full.notified() => false,
            () = done.cancelled() => true,
        };
        let messages = {
            let mut p = pending.lock().unwrap_or_else(|e| e.into_inner());
            if last && sent == 0 && p.calls.is_empty() && p.calls_left_out == 0 {
                return; // all of it is in the result, which follows at once
            }
            take_messages(&mut p, last)
        };
        for text in messages {
            sent += 1;
            metrics.streamed(text.len());
            let message =
                ProgressNotificationParam::new(token.clone(), sent as f64).with_message(text);
            if peer.notify_progress(message).await.is_err() {
                return; // the client is gone
            }
        }
        if last {
            return;
        }
    }
}

/// The messages to send, in order: the output up to each tool call, the call, and the
/// rest of the output (see [`take_text`]).
fn take_messages(pending: &mut Pending, last: bool) -> Vec<String> {
    let mut messages = Vec::new();
    let mut cut = 0;
    for (at, tool) in std::mem::take(&mut pending.calls) {
        if at > cut {
            messages.push(String::from_utf8_lossy(&pending.bytes[cut..at]).into_owned());
            cut = at;
        }
        messages.push(format!("calling {tool}"));
    }
    pending.bytes.drain(..cut);
    if pending.calls_left_out > 0 {
        let left_out = std::mem::take(&mut pending.calls_left_out);
        messages.push(format!("[... {left_out} more tool calls not streamed]"));
    }
    messages.extend(take_text(pending, last));
    messages
}

/// The waiting text, up to its last whole UTF-8 character (all of it when `last`), and a
/// note of what was left out; `None` when there is nothing to send.
fn take_text(pending: &mut Pending, last: bool) -> Option<String> {
    let whole = match std::str::from_utf8(&pending.bytes) {
        Ok(_) => pending.bytes.len(),
        // An incomplete character at the end waits for its other bytes.
        Err(e) if e.error_len().is_none() && !last => e.valid_up_to(),
        Err(_) => pending.bytes.len(),
    };
    if whole == 0 && pending.left_out == 0 {
        return None;
    }
    let rest = pending.bytes.split_off(whole);
    let bytes = std::mem::replace(&mut pending.bytes, rest);
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if pending.left_out > 0 {
        text.push_str(&format!(
            "[... {} bytes not streamed; the result has them]",
            std::mem::take(&mut pending.left_out)
        ));
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::{take_messages, take_text, Pending};

    #[test]
    fn tool_calls_are_sent_where_they_came_in_the_output() {
        let mut p = Pending {
            bytes: b"one\ntwo\n".to_vec(),
            calls: vec![
                (4, "mcp__fs__read_file".into()),
                (4, "mcp__fs__list".into()),
            ],
            calls_left_out: 3,
            ..Pending::default()
        };
        assert_eq!(
            take_messages(&mut p, false),
            [
                "one\n",
                "calling mcp__fs__read_file",
                "calling mcp__fs__list",
                "[... 3 more tool calls not streamed]",
                "two\n"
            ]
        );
        assert!(take_messages(&mut p, true).is_empty());
    }

    #[test]
    fn text_is_sent_in_whole_characters_and_cuts_are_said() {
        let mut p = Pending {
            bytes: "é".as_bytes()[..1].to_vec(),
            ..Pending::default()
        };
        assert_eq!(take_text(&mut p, false), None);
        p.bytes.extend_from_slice(&"é".as_bytes()[1..]);
        p.bytes.extend_from_slice(b"x");
        assert_eq!(take_text(&mut p, false).as_deref(), Some("éx"));
        p.left_out = 10;
        assert_eq!(
            take_text(&mut p, false).as_deref(),
            Some("[... 10 bytes not streamed; the result has them]")
        );
        p.bytes = vec![0xC3];
        assert_eq!(take_text(&mut p, true).as_deref(), Some("\u{FFFD}"));
        assert_eq!(take_text(&mut p, true), None);
    }
}
