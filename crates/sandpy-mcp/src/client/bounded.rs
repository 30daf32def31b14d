//! What a stdio upstream can make the hub hold: its messages pass through [`BoundedLines`]
//! on their way to rmcp, which refuses a message over the size limit *while reading it*
//! and cuts JSON nested deeper than rmcp's parser would take.
//!
//! rmcp's own stdio reader drops a line over its limit and reads on: a call whose answer
//! was dropped waits for its timeout and is then reported as "timed out". Here the
//! oversized answer is replaced by a JSON-RPC error for the same request id, so the call
//! fails at once with a message the hub turns into a `ToolError` naming the tool, the size
//! and the limit ([`Refusal`]). A line is never held past the limit: the rest of it is only
//! scanned (for its top-level `id`) and discarded.
//!
//! Nesting deeper than [`MAX_DEPTH`] containers would make rmcp's parse fail (serde_json
//! stops at 128) and the whole message be ignored: one tool with a deep schema would make
//! `tools/list` never answer. The reader replaces such a subtree by the string
//! [`DEPTH_MARKER`], so the message parses and the hub can skip just that tool (or refuse
//! just that result).

use process_wrap::tokio::{ChildWrapper, CommandWrap};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::Transport;
use rmcp::RoleClient;
use serde_json::Value;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::process::{ChildStdin, ChildStdout};

/// Containers deeper than this are cut from a message (serde_json's parser stops at 128).
pub(crate) const MAX_DEPTH: usize = 100;

/// What a cut subtree is replaced by: a string no tool sends by accident.
pub(crate) const DEPTH_MARKER: &str = "\u{0}sandpy: nested deeper than 100 levels";

/// `DEPTH_MARKER` as JSON text.
const DEPTH_MARKER_JSON: &[u8] = b"\"\\u0000sandpy: nested deeper than 100 levels\"";

/// The `data.sandpy` tag of the error that replaces an oversized answer.
const REFUSED_TAG: &str = "too_large";

/// JSON-RPC error code of the replacement (in the range JSON-RPC leaves to servers).
const REFUSED_CODE: i32 = -32099;

/// An upstream answer the reader refused for its size, as the hub reads it back from the
/// replacement error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The answer's size in bytes: exact when the whole line was read before the call was
    /// answered, else how much had been read (at least the limit).
    pub bytes: usize,
    /// Whether `bytes` is the whole size.
    pub exact: bool,
    /// The limit it went over.
    pub limit: usize,
}

impl Refusal {
    /// The refusal carried by an error `data`, if it is one of ours.
    pub(crate) fn from_data(data: Option<&Value>) -> Option<Refusal> {
        let data = data?.get("sandpy")?;
        if data.get("refused")?.as_str()? != REFUSED_TAG {
            return None;
        }
        Some(Refusal {
            bytes: usize::try_from(data.get("bytes")?.as_u64()?).ok()?,
            exact: data.get("exact")?.as_bool()?,
            limit: usize::try_from(data.get("limit")?.as_u64()?).ok()?,
        })
    }
}

/// Per-line scan state: the top-level keys (to find the `id` and whether the message is a
/// response), the nesting depth, and what has been held of the line.
#[derive(Default)]
struct Scan {
    /// Bytes of this line read so far.
    bytes: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// The next string at depth 1 is a key.
    expect_key: bool,
    /// The top-level key being read (only its first bytes matter).
    key: Option<Vec<u8>>,
    last_key: Vec<u8>,
    /// The raw text of the top-level `id` value, while and after it is read.
    id: Vec<u8>,
    reading_id: bool,
    id_done: bool,
    is_response: bool,
    has_method: bool,
    /// Skipping a subtree nested too deep: the depth it started at.
    skip: Option<usize>,
    /// Over the limit: nothing more of this line is held.
    over: bool,
    /// The replacement error was sent for this line.
    answered: bool,
}

/// An [`AsyncRead`] over an upstream's stdout that hands on whole lines of at most `limit`
/// bytes, replaces a longer response by an error for its id, and cuts nesting deeper than
/// [`MAX_DEPTH`].
pub(crate) struct BoundedLines<R> {
    inner: R,
    limit: usize,
    name: String,
    chunk: Box<[u8]>,
    /// Bytes ready for the reader, from `done`.
    out: Vec<u8>,
    done: usize,
    /// The line being read (cut subtrees left out).
    line: Vec<u8>,
    scan: Scan,
    eof: bool,
}

impl<R> BoundedLines<R> {
    /// Read `inner` (the stdout of upstream `name`), refusing lines over `limit` bytes.
    pub(crate) fn new(inner: R, name: &str, limit: usize) -> Self {
        BoundedLines {
            inner,
            limit,
            name: name.to_string(),
            chunk: vec![0; 64 * 1024].into_boxed_slice(),
            out: Vec::new(),
            done: 0,
            line: Vec::new(),
            scan: Scan::default(),
            eof: false,
        }
    }

    fn feed(&mut self, b: u8) {
        if b == b'\n' {
            self.end_line();
            return;
        }
        let s = &mut self.scan;
        s.bytes += 1;
        if s.reading_id {
            let ends = !s.in_string && s.depth == 1 && (b == b',' || b == b'}');
            if ends {
                s.reading_id = false;
                s.id_done = true;
            } else if s.id.len() < 256 {
                s.id.push(b);
            } else {
                // Not an id a request of ours has: no call to answer.
                s.reading_id = false;
                s.id.clear();
            }
        }
        let mut hold = s.skip.is_none();
        if s.in_string {
            if s.escaped {
                s.escaped = false;
            } else if b == b'\\' {
                s.escaped = true;
            } else if b == b'"' {
                s.in_string = false;
                if let Some(key) = s.key.take() {
                    s.last_key = key;
                }
            } else if let Some(key) = &mut s.key {
                if key.len() < 16 {
                    key.push(b);
                }
            }
        } else {
            match b {
                b'"' => {
                    s.in_string = true;
                    if s.depth == 1 && s.expect_key {
                        s.key = Some(Vec::new());
                        s.expect_key = false;
                    }
                }
                b'{' | b'[' => {
                    if s.skip.is_none() && s.depth >= MAX_DEPTH {
                        s.skip = Some(s.depth);
                        hold = false;
                        if !s.over {
                            self.line.extend_from_slice(DEPTH_MARKER_JSON);
                        }
                    }
                    s.depth += 1;
                    if b == b'{' && s.depth == 1 {
                        s.expect_key = true;
                    }
                }
                b'}' | b']' => {
                    s.depth = s.depth.saturating_sub(1);
                    if s.skip == Some(s.depth) {
                        s.skip = None;
                        hold = false;
                    }
                }
                b':' if s.depth == 1 => match s.last_key.as_slice() {
                    b"id" => {
                        s.reading_id = true;
                        s.id.clear();
                    }
                    b"result" | b"error" => s.is_response = true,
                    b"method" => s.has_method = true,
                    _ => {}
                },
                b',' if s.depth == 1 => s.expect_key = true,
                _ => {}
            }
        }
        if hold && !self.scan.over {
            self.line.push(b);
        }
        self.check_size();
    }

    /// Feed a run of plain string bytes (no quote, backslash or newline) at once: a large
    /// text costs a copy, not a step per byte.
    fn feed_plain(&mut self, run: &[u8]) {
        self.scan.bytes += run.len();
        if self.scan.skip.is_none() && !self.scan.over {
            self.line.extend_from_slice(run);
        }
        self.check_size();
    }

    fn feed_all(&mut self, mut bytes: &[u8]) {
        while let Some((&first, rest)) = bytes.split_first() {
            let s = &self.scan;
            if s.in_string && !s.escaped && s.key.is_none() && !s.reading_id {
                let run = memchr::memchr3(b'"', b'\\', b'\n', bytes).unwrap_or(bytes.len());
                if run > 0 {
                    self.feed_plain(&bytes[..run]);
                    bytes = &bytes[run..];
                    continue;
                }
            }
            self.feed(first);
            bytes = rest;
        }
    }

    /// Past the limit: let go of the line, and answer its request if its id is known.
    fn check_size(&mut self) {
        let s = &mut self.scan;
        if !s.over && s.bytes > self.limit {
            s.over = true;
            self.line = Vec::new();
        }
        // Answered at once when the id is known, unless the line is about to end anyway
        // (then its exact size is known).
        if s.over && !s.answered && s.id_done && s.is_response && !s.has_method && s.depth > 0 {
            self.refuse(false);
        }
    }

    /// Queue the error that answers the refused line's request.
    fn refuse(&mut self, exact: bool) {
        let s = &mut self.scan;
        s.answered = true;
        let id = String::from_utf8_lossy(&s.id).trim().to_string();
        let Ok(id) = serde_json::from_str::<Value>(&id) else {
            return;
        };
        if !(id.is_number() || id.is_string()) {
            return;
        }
        let bytes = if exact { s.bytes } else { self.limit };
        let message = serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {
                "code": REFUSED_CODE,
                "message": format!("the answer is over the limit of {} bytes", self.limit),
                "data": {"sandpy": {"refused": REFUSED_TAG, "bytes": bytes, "exact": exact, "limit": self.limit}},
            }
        });
        tracing::warn!(
            "upstream {}: refused an answer over {} bytes (request id {id})",
            self.name,
            self.limit
        );
        self.out.extend_from_slice(message.to_string().as_bytes());
        self.out.push(b'\n');
    }

    fn end_line(&mut self) {
        let s = &self.scan;
        if s.over {
            if !s.answered && s.id_done && !s.has_method {
                self.refuse(true);
            } else if !s.answered {
                tracing::warn!(
                    "upstream {}: dropped a message of {} bytes, over the limit of {} bytes",
                    self.name,
                    s.bytes,
                    self.limit
                );
            }
        } else {
            if self.out.len() == self.done {
                self.out.clear();
                self.done = 0;
                std::mem::swap(&mut self.out, &mut self.line);
            } else {
                self.out.extend_from_slice(&self.line);
            }
            self.out.push(b'\n');
        }
        self.line.clear();
        self.scan = Scan::default();
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for BoundedLines<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.done < this.out.len() {
                let n = buf.remaining().min(this.out.len() - this.done);
                buf.put_slice(&this.out[this.done..this.done + n]);
                this.done += n;
                if this.done == this.out.len() {
                    this.out.clear();
                    this.done = 0;
                    if this.out.capacity() > 1 << 20 {
                        this.out = Vec::new();
                    }
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = std::mem::take(&mut this.chunk);
            let mut read = ReadBuf::new(&mut chunk);
            let polled = Pin::new(&mut this.inner).poll_read(cx, &mut read);
            let n = read.filled().len();
            let result = match polled {
                Poll::Ready(result) => result,
                Poll::Pending => {
                    this.chunk = chunk;
                    return Poll::Pending;
                }
            };
            if let Err(e) = result {
                this.chunk = chunk;
                return Poll::Ready(Err(e));
            }
            if n == 0 {
                // An unfinished last line is no message (rmcp drops it too).
                this.eof = true;
            }
            this.feed_all(&chunk[..n]);
            this.chunk = chunk;
        }
    }
}

/// A stdio upstream: its child process (killed, with its process group, when this is
/// dropped or closed) and rmcp's transport over its pipes, reading through
/// [`BoundedLines`].
pub(crate) struct BoundedChild {
    transport: AsyncRwTransport<RoleClient, BoundedLines<ChildStdout>, ChildStdin>,
    child: Option<Box<dyn ChildWrapper>>,
}

impl BoundedChild {
    /// Spawn `command` (stdin and stdout piped, stderr discarded) as upstream `name`, whose
    /// messages may be at most `limit` bytes.
    pub(crate) fn spawn(mut command: CommandWrap, name: &str, limit: usize) -> io::Result<Self> {
        command
            .command_mut()
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        let mut child = command.spawn()?;
        let stdin = child
            .stdin()
            .take()
            .ok_or_else(|| io::Error::other("no stdin pipe"))?;
        let stdout = child
            .stdout()
            .take()
            .ok_or_else(|| io::Error::other("no stdout pipe"))?;
        let reader = BoundedLines::new(stdout, name, limit);
        // Our lines are at most `limit` bytes; rmcp's own cap stays as a backstop.
        let transport = AsyncRwTransport::new(reader, stdin).with_max_line_length(limit + 1);
        Ok(BoundedChild {
            transport,
            child: Some(child),
        })
    }

    /// The child's process id (also its process group's), while it has not been reaped.
    pub(crate) fn id(&self) -> Option<u32> {
        self.child.as_ref().and_then(|child| child.id())
    }
}

impl Transport<RoleClient> for BoundedChild {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.transport.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.transport.receive()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Closing stdin asks the server to exit; a server that does not is killed.
        self.transport.close().await?;
        if let Some(mut child) = self.child.take() {
            let waited = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
            if !matches!(waited, Ok(Ok(_))) {
                Box::into_pin(child.kill()).await?;
            }
        }
        Ok(())
    }
}

impl Drop for BoundedChild {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn through(input: &[u8], limit: usize) -> String {
        let mut reader = BoundedLines::new(input, "t", limit);
        let mut out = Vec::new();
        reader.read_to_end(&mut out).await.expect("read");
        String::from_utf8(out).expect("utf-8")
    }

    #[tokio::test]
    async fn lines_under_the_limit_pass_unchanged() {
        let input =
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"a\":\"x,}\\\"\"}}\n\n{\"b\":[1,2]}\n";
        assert_eq!(through(input, 100).await, String::from_utf8_lossy(input));
    }

    #[tokio::test]
    async fn an_oversized_response_becomes_an_error_for_its_id_id_first_or_last() {
        let big = "x".repeat(5000);
        let first = format!("{{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{{\"t\":\"{big}\"}}}}\n{{\"id\":8,\"result\":{{}}}}\n");
        let out = through(first.as_bytes(), 1000).await;
        let lines: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert_eq!(lines[0]["id"], 7);
        let refusal = Refusal::from_data(lines[0]["error"].get("data")).expect("ours");
        assert_eq!(
            refusal,
            Refusal {
                bytes: 1000,
                exact: false,
                limit: 1000
            }
        );
        assert_eq!(lines[1]["id"], 8, "the next message still arrives");
        let last =
            format!("{{\"result\":{{\"t\":\"{big}\"}},\"jsonrpc\":\"2.0\",\"id\":\"a,b\"}}\n");
        let out = through(last.as_bytes(), 1000).await;
        let line: Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(line["id"], "a,b");
        let refusal = Refusal::from_data(line["error"].get("data")).expect("ours");
        assert_eq!(refusal.bytes, last.len() - 1);
        assert!(refusal.exact);
    }

    #[tokio::test]
    async fn an_oversized_request_or_notification_is_dropped() {
        let big = "x".repeat(5000);
        let input = format!("{{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":3,\"params\":{{\"t\":\"{big}\"}}}}\n{{\"method\":\"n\",\"params\":\"{big}\"}}\n{{\"id\":1,\"result\":1}}\n");
        assert_eq!(
            through(input.as_bytes(), 1000).await,
            "{\"id\":1,\"result\":1}\n"
        );
    }

    #[tokio::test]
    async fn nesting_past_the_depth_limit_is_cut_to_the_marker() {
        let deep = format!("{}{}", "[".repeat(500), "]".repeat(500));
        let input = format!("{{\"id\":1,\"result\":{{\"a\":{deep},\"b\":\"[{{\"}}}}\n");
        let out = through(input.as_bytes(), 1 << 20).await;
        let value: Value = serde_json::from_str(out.trim()).expect("parses");
        assert_eq!(value["result"]["b"], "[{", "brackets in strings are text");
        let mut at = &value["result"]["a"];
        let mut depth = 2;
        while let Some(inner) = at.get(0) {
            at = inner;
            depth += 1;
        }
        assert_eq!(at, &Value::String(DEPTH_MARKER.into()));
        assert_eq!(depth, MAX_DEPTH);
    }
}
