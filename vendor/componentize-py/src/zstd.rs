//! sandpy: the zstd decoding this crate needs (its bundled libraries and archives), by
//! ruzstd, a decoder in Rust, instead of the zstd crate, whose build compiles libzstd's C
//! (vendor/README.md). The names are the zstd crate's.

use std::io::{self, Read};

use ruzstd::decoding::{FrameDecoder, StreamingDecoder};

/// A reader of the decompressed bytes of the zstd frame `source` holds.
pub fn decoder<R: Read>(source: R) -> io::Result<StreamingDecoder<R, FrameDecoder>> {
    StreamingDecoder::new(source).map_err(io::Error::other)
}

/// The decompressed bytes of the zstd frame `source` holds.
pub fn decode_all<R: Read>(source: R) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    decoder(source)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}
