//! What goes over a runner's socket: frames (an 8-byte little-endian length, then that
//! many bytes of JSON) bounded by [`MAX_FRAME_BYTES`], the one-byte handshake between
//! them, and the messages the frames carry ([`Request`], [`Answer`]).
//!
//! A frame's length is checked before any of its body is read, and a frame cut short is an
//! error ([`FrameError::Truncated`]), so a peer can make neither side hold more than the
//! bound nor wait for bytes that will not come once it has closed its end.

use base64::Engine;
use sandpy::files::{InputFile, Mount};
use sandpy::{Execution, LimitOverrides, RunOptions, Stream};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Key;

/// Largest request or answer either side reads, and the most that the requests a runner
/// holds at once add up to (a request waits for room before it is read): the run's own
/// limits (output, files, code size) keep real ones far under it.
pub(crate) const MAX_FRAME_BYTES: u64 = 1 << 30;
/// The runner's byte after a request: it takes the run.
pub(crate) const TAKEN: u8 = b'+';
/// The client's byte after [`TAKEN`]: run it (a client that gave up waiting sends none,
/// so that no run is left behind that it then runs again itself).
pub(crate) const GO: u8 = b'!';

/// How the wire carries bytes.
const BASE64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum FrameError {
    /// Its length is over [`MAX_FRAME_BYTES`]: refused before its body is read (or, for
    /// one being sent, before it is written).
    #[error("a frame of {bytes} bytes, over the bound of {MAX_FRAME_BYTES}")]
    TooLarge {
        /// The length it has or announced.
        bytes: u64,
    },
    /// The peer closed its end before the frame's last byte.
    #[error("the frame ended after {read} of its {length} bytes")]
    Truncated {
        /// The bytes that came (of the body; 0 for a cut header).
        read: u64,
        /// The length its header announced (8 for a cut header).
        length: u64,
    },
    /// Reading or writing failed.
    #[error("the socket failed")]
    Io(#[from] std::io::Error),
}

impl From<FrameError> for std::io::Error {
    fn from(error: FrameError) -> std::io::Error {
        match error {
            FrameError::Io(e) => e,
            FrameError::Truncated { .. } => {
                std::io::Error::new(std::io::ErrorKind::UnexpectedEof, error)
            }
            FrameError::TooLarge { .. } => {
                std::io::Error::new(std::io::ErrorKind::InvalidData, error)
            }
        }
    }
}

/// The length a frame's header announces, refused over the bound.
pub(crate) fn checked_length(header: [u8; 8]) -> Result<u64, FrameError> {
    let length = u64::from_le_bytes(header);
    if length > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge { bytes: length });
    }
    Ok(length)
}

/// Write `body` as one frame.
pub(crate) fn write(writer: &mut impl Write, body: &[u8]) -> Result<(), FrameError> {
    writer.write_all(&header(body)?)?;
    writer.write_all(body)?;
    Ok(())
}

/// Read one frame's body.
pub(crate) fn read(reader: &mut impl Read) -> Result<Vec<u8>, FrameError> {
    let mut header = [0u8; 8];
    read_header(reader, &mut header)?;
    let length = checked_length(header)?;
    let mut body = Vec::new();
    reader.take(length).read_to_end(&mut body)?;
    whole(body, length)
}

/// [`write`] on an async writer.
pub(crate) async fn write_async(
    writer: &mut (impl tokio::io::AsyncWrite + Unpin),
    body: &[u8],
) -> Result<(), FrameError> {
    writer.write_all(&header(body)?).await?;
    writer.write_all(body).await?;
    Ok(())
}

/// The length of the next frame on an async reader, refused over the bound before any
/// of its body is read (a server makes room for it first, then reads it with
/// [`read_body_async`]).
pub(crate) async fn read_length_async(
    reader: &mut (impl tokio::io::AsyncRead + Unpin),
) -> Result<u64, FrameError> {
    let mut header = [0u8; 8];
    match reader.read_exact(&mut header).await {
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Err(FrameError::Truncated { read: 0, length: 8 })
        }
        Err(e) => Err(e.into()),
        Ok(_) => checked_length(header),
    }
}

/// The body of a frame of `length` bytes (from [`read_length_async`]).
pub(crate) async fn read_body_async(
    reader: &mut (impl tokio::io::AsyncRead + Unpin),
    length: u64,
) -> Result<Vec<u8>, FrameError> {
    let mut body = Vec::new();
    reader.take(length).read_to_end(&mut body).await?;
    whole(body, length)
}

/// The header of a frame holding `body`, refused over the bound.
fn header(body: &[u8]) -> Result<[u8; 8], FrameError> {
    let bytes = body.len() as u64;
    if bytes > MAX_FRAME_BYTES {
        return Err(FrameError::TooLarge { bytes });
    }
    Ok(bytes.to_le_bytes())
}

fn read_header(reader: &mut impl Read, header: &mut [u8; 8]) -> Result<(), FrameError> {
    reader.read_exact(header).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => FrameError::Truncated { read: 0, length: 8 },
        _ => e.into(),
    })
}

/// `body`, if it is all `length` bytes.
fn whole(body: Vec<u8>, length: u64) -> Result<Vec<u8>, FrameError> {
    let read = body.len() as u64;
    if read != length {
        return Err(FrameError::Truncated { read, length });
    }
    Ok(body)
}

/// One run as a command hands it over: the parts of [`RunOptions`] that are per run (the
/// rest comes from the runner's settings, equal to the command's by the key).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Request {
    /// The runner this request is for.
    pub(crate) key: Key,
    /// The program.
    pub(crate) code: String,
    /// A function of the program to call (`sandpy call`), instead of running it.
    pub(crate) call: Option<Call>,
    /// [`RunOptions::filename`].
    pub(crate) filename: Option<String>,
    /// [`RunOptions::stdin`], base64 (empty: none).
    pub(crate) stdin_base64: String,
    /// [`RunOptions::limit_overrides`].
    pub(crate) limit_overrides: LimitOverrides,
    /// [`RunOptions::allowed_tools`].
    pub(crate) allowed_tools: Option<Vec<String>>,
    /// [`RunOptions::files`].
    pub(crate) files: Vec<InputFile>,
    /// [`RunOptions::mounts`].
    pub(crate) mounts: Vec<Mount>,
    /// Whether the runner sends the run's output as it is written (for a command that
    /// prints it so), besides the execution that holds it.
    #[serde(default)]
    pub(crate) stream_output: bool,
}

impl Request {
    /// The request for `code` (or `call` of it) with the per-run part of `options`.
    pub(crate) fn new(key: Key, code: &str, call: Option<Call>, options: &RunOptions) -> Request {
        Request {
            key,
            code: code.to_string(),
            call,
            filename: options.filename.clone(),
            stdin_base64: options
                .stdin
                .as_deref()
                .map(|stdin| BASE64.encode(stdin))
                .unwrap_or_default(),
            limit_overrides: options.limit_overrides.clone(),
            allowed_tools: options.allowed_tools.clone(),
            files: options.files.clone(),
            mounts: options.mounts.clone(),
            stream_output: options.on_output.is_some(),
        }
    }

    /// The request's stdin (`None` when it has none); an error when it is not base64.
    pub(crate) fn stdin(&self) -> Result<Option<Vec<u8>>, base64::DecodeError> {
        let stdin = BASE64.decode(&self.stdin_base64)?;
        Ok(Some(stdin).filter(|stdin| !stdin.is_empty()))
    }
}

/// A function call a request asks for, as [`sandpy::Sandbox::call_function`] takes it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Call {
    /// The function's name.
    pub(crate) function: String,
    /// Its JSON arguments: a list (positional) or an object (keywords).
    pub(crate) arguments: serde_json::Value,
}

/// One frame of a runner's answer.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Answer {
    /// A write of the program's, as it happened (requests with `stream_output`).
    Output {
        /// Written to stderr (else stdout).
        stderr: bool,
        /// What was written, base64.
        base64: String,
    },
    /// The run's end.
    Done(Box<Execution>),
}

impl Answer {
    /// The answer that carries one write of the program's.
    pub(crate) fn output(stream: Stream, bytes: &[u8]) -> Answer {
        Answer::Output {
            stderr: stream == Stream::Stderr,
            base64: BASE64.encode(bytes),
        }
    }

    /// An [`Answer::Output`]'s stream and bytes; an error when they are not base64.
    pub(crate) fn decode_output(
        stderr: bool,
        base64: &str,
    ) -> Result<(Stream, Vec<u8>), base64::DecodeError> {
        let stream = if stderr {
            Stream::Stderr
        } else {
            Stream::Stdout
        };
        Ok((stream, BASE64.decode(base64)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[test]
    fn a_frame_reads_back_as_it_was_written() {
        let mut wire = Vec::new();
        write(&mut wire, b"{\"a\": 1}").expect("write");
        write(&mut wire, b"").expect("write an empty frame");
        assert_eq!(wire[..8], 8u64.to_le_bytes());
        let mut reader = Cursor::new(wire);
        assert_eq!(read(&mut reader).expect("read"), b"{\"a\": 1}");
        assert_eq!(read(&mut reader).expect("read"), b"");
        assert!(matches!(
            read(&mut reader),
            Err(FrameError::Truncated { read: 0, length: 8 })
        ));
    }

    #[tokio::test]
    async fn a_frame_reads_back_as_it_was_written_async() {
        let mut wire = Vec::new();
        write_async(&mut wire, b"[1, 2]").await.expect("write");
        let mut reader = Cursor::new(wire);
        let length = read_length_async(&mut reader).await.expect("length");
        assert_eq!(length, 6);
        let body = read_body_async(&mut reader, length).await.expect("body");
        assert_eq!(body, b"[1, 2]");
    }

    /// A header over the bound is refused when read, with none of the body read (a reader
    /// that has the body would otherwise hand over a gibibyte first).
    #[test]
    fn a_frame_over_the_bound_is_refused_before_its_body_is_read() {
        let mut wire = (MAX_FRAME_BYTES + 1).to_le_bytes().to_vec();
        wire.extend([b'x'; 64]);
        let mut reader = Cursor::new(wire.clone());
        assert!(matches!(
            read(&mut reader),
            Err(FrameError::TooLarge { bytes }) if bytes == MAX_FRAME_BYTES + 1
        ));
        assert_eq!(reader.position(), 8, "only the header was read");
        let mut reader = Cursor::new(wire);
        let refused = block_on(read_length_async(&mut reader));
        assert!(matches!(refused, Err(FrameError::TooLarge { .. })));
        assert_eq!(reader.position(), 8, "only the header was read");
        // The bound itself is a frame's largest size.
        assert_eq!(
            checked_length(MAX_FRAME_BYTES.to_le_bytes()).expect("at the bound"),
            MAX_FRAME_BYTES
        );
    }

    /// A frame whose peer closed before its end is an error at once, as is a cut header.
    #[test]
    fn a_truncated_frame_is_an_error() {
        let mut wire = 100u64.to_le_bytes().to_vec();
        wire.extend([b'x'; 10]);
        let cut = read(&mut Cursor::new(wire.clone()));
        assert!(
            matches!(
                cut,
                Err(FrameError::Truncated {
                    read: 10,
                    length: 100
                })
            ),
            "{cut:?}"
        );
        let cut = read(&mut Cursor::new(vec![1, 0, 0]));
        assert!(matches!(
            cut,
            Err(FrameError::Truncated { read: 0, length: 8 })
        ));
        let mut reader = Cursor::new(wire);
        let cut = block_on(async {
            let length = read_length_async(&mut reader).await?;
            read_body_async(&mut reader, length).await
        });
        assert!(matches!(
            cut,
            Err(FrameError::Truncated {
                read: 10,
                length: 100
            })
        ));
        let io = std::io::Error::from(FrameError::Truncated {
            read: 10,
            length: 100,
        });
        assert_eq!(io.kind(), std::io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_request_and_an_answer_survive_the_wire() {
        let options = RunOptions {
            stdin: Some(b"\x00stdin\xff".to_vec()),
            filename: Some("job.py".into()),
            files: vec![InputFile {
                path: "data.bin".into(),
                content: vec![0, 1, 2, 255],
            }],
            ..RunOptions::default()
        };
        let call = Call {
            function: "f".into(),
            arguments: serde_json::json!([1, "two"]),
        };
        let request = Request::new(Key::from_text("k"), "print(1)", Some(call), &options);
        let mut wire = Vec::new();
        write(&mut wire, &serde_json::to_vec(&request).expect("json")).expect("write");
        let body = read(&mut Cursor::new(wire)).expect("read");
        let back: Request = serde_json::from_slice(&body).expect("a request");
        assert_eq!(back.key, Key::from_text("k"));
        assert_eq!(back.code, "print(1)");
        assert_eq!(back.stdin().expect("base64"), options.stdin);
        assert_eq!(back.files, options.files);
        assert_eq!(back.filename.as_deref(), Some("job.py"));
        let call = back.call.expect("the call");
        assert_eq!(
            (call.function.as_str(), call.arguments),
            ("f", serde_json::json!([1, "two"]))
        );
        assert!(!back.stream_output);

        let answer =
            serde_json::to_vec(&Answer::output(Stream::Stderr, b"\xffwritten")).expect("json");
        match serde_json::from_slice(&answer).expect("an answer") {
            Answer::Output { stderr, base64 } => {
                let (stream, bytes) = Answer::decode_output(stderr, &base64).expect("base64");
                assert_eq!(
                    (stream, bytes.as_slice()),
                    (Stream::Stderr, &b"\xffwritten"[..])
                );
            }
            Answer::Done(_) => panic!("an output answer"),
        }
    }

    fn block_on<F: std::future::Future>(future: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
            .block_on(future)
    }
}
