//! Host-side capture of the guest's stdout and stderr, bounded by one shared byte cap.
//!
//! The guest's file descriptors 1 and 2 are these streams, so no guest code (not even
//! `os.write(1, ...)`) can bypass the cap, and host memory stays bounded. The first write
//! past the cap keeps what fits, then traps the guest, which ends the run as
//! `output_limit`.

use crate::options::{OutputSink, Stream};
use bytes::Bytes;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError, StreamResult};

/// Appended to the captured text of a run that hit the output cap (a front end that
/// streamed the output prints it once at the end).
pub const TRUNCATION_MARKER: &str = "\n[sandpy: output truncated: limit reached]\n";

#[derive(Default)]
struct Buffers {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    cap: usize,
    overflowed: bool,
    /// Where what is kept goes as it is written, too.
    sink: Option<OutputSink>,
}

/// Both captured streams of one execution.
#[derive(Clone)]
pub(crate) struct Capture(Arc<Mutex<Buffers>>);

/// What a run printed, after it ended.
pub(crate) struct Captured {
    pub stdout: String,
    pub stderr: String,
    pub truncated: bool,
}

impl Capture {
    /// Empty streams under `cap`, what is kept also handed to `sink` as it is written.
    pub(crate) fn new(cap: usize, sink: Option<OutputSink>) -> Self {
        Capture(Arc::new(Mutex::new(Buffers {
            cap,
            sink,
            ..Buffers::default()
        })))
    }

    fn lock(&self) -> MutexGuard<'_, Buffers> {
        // A poisoned lock only means another writer panicked mid-append: the bytes are
        // still valid, so keep going.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Start afresh for the next call of a session, with a new cap and sink.
    pub(crate) fn reset(&self, cap: usize, sink: Option<OutputSink>) {
        let mut b = self.lock();
        *b = Buffers {
            cap,
            sink,
            ..Buffers::default()
        };
    }

    /// Take what was captured, marking a truncated stream.
    pub(crate) fn finish(&self) -> Captured {
        let mut b = self.lock();
        let mut stdout = String::from_utf8_lossy(&std::mem::take(&mut b.stdout)).into_owned();
        let mut stderr = String::from_utf8_lossy(&std::mem::take(&mut b.stderr)).into_owned();
        if b.overflowed {
            stdout.push_str(TRUNCATION_MARKER);
            stderr.push_str(TRUNCATION_MARKER);
        }
        Captured {
            stdout,
            stderr,
            truncated: b.overflowed,
        }
    }

    /// Append, and hand what is kept to the sink; `false` when the cap was reached
    /// (what fits is kept).
    pub(crate) fn append(&self, which: Stream, bytes: &[u8]) -> bool {
        let mut b = self.lock();
        let used = b.stdout.len() + b.stderr.len();
        let room = b.cap.saturating_sub(used);
        let take = room.min(bytes.len());
        let buf = match which {
            Stream::Stdout => &mut b.stdout,
            Stream::Stderr => &mut b.stderr,
        };
        buf.extend_from_slice(&bytes[..take]);
        let fits = take == bytes.len();
        if !fits {
            b.overflowed = true;
        }
        // Outside the lock: the sink is the front end's code. One guest thread writes
        // both streams, so the order holds.
        let sink = b.sink.clone();
        drop(b);
        if let Some(sink) = sink.filter(|_| take > 0) {
            sink(which, &bytes[..take]);
        }
        fits
    }
}

/// One of the two streams, as handed to WASI.
pub(crate) struct CaptureStream {
    capture: Capture,
    which: Stream,
}

impl CaptureStream {
    fn write_bytes(&self, bytes: &[u8]) -> Result<(), &'static str> {
        if self.capture.append(self.which, bytes) {
            Ok(())
        } else {
            Err("sandpy: output limit reached")
        }
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CaptureStream {
    async fn ready(&mut self) {}
}

impl OutputStream for CaptureStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.write_bytes(&bytes).map_err(StreamError::trap)
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Offer the room left plus one byte, so that one write takes all a program prints
        // (CPython's unbuffered stdio does not retry a partial write: it would silently
        // drop the rest), and a write that does not fit reaches the cap and traps. The
        // host's per-write allocation stays bounded by the cap.
        let b = self.capture.lock();
        if b.overflowed {
            return Err(StreamError::trap("sandpy: output limit reached"));
        }
        Ok(b.cap.saturating_sub(b.stdout.len() + b.stderr.len()) + 1)
    }
}

impl tokio::io::AsyncWrite for CaptureStream {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(
            self.write_bytes(buf)
                .map(|()| buf.len())
                .map_err(|m| std::io::Error::new(std::io::ErrorKind::StorageFull, m)),
        )
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Hands WASI a fresh handle on one of the capture's streams.
pub(crate) struct StreamFactory {
    capture: Capture,
    which: Stream,
}

impl Capture {
    pub(crate) fn stdout_factory(&self) -> StreamFactory {
        StreamFactory {
            capture: self.clone(),
            which: Stream::Stdout,
        }
    }

    pub(crate) fn stderr_factory(&self) -> StreamFactory {
        StreamFactory {
            capture: self.clone(),
            which: Stream::Stderr,
        }
    }
}

impl IsTerminal for StreamFactory {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for StreamFactory {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(CaptureStream {
            capture: self.capture.clone(),
            which: self.which,
        })
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(CaptureStream {
            capture: self.capture.clone(),
            which: self.which,
        })
    }
}
