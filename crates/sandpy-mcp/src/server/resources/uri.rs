//! The URIs kept files are read by: `sandpy://runs/<run-id>/files/<path>` and
//! `sandpy://runs/<run-id>/outputs/<n>.<ext>`, made from a random run id and a
//! percent-encoded path, and read back only as far as the run id: the store compares the
//! whole URI with those it handed out, so nothing in the path is ever interpreted.

use super::{Leftover, LeftoverKind, Resource};

/// The scheme and authority every URI here starts with.
pub(crate) const PREFIX: &str = "sandpy://runs/";
/// Longest URI looked up: longer ones name nothing (the paths a run can write are shorter).
const MAX_URI_BYTES: usize = 16 << 10;

/// `leftover` as kept under run `id`: its URI, and its name (the path under `/output`,
/// or `output <n>`).
pub(super) fn resource(id: &str, leftover: Leftover) -> Resource {
    let (path, name) = match &leftover.kind {
        LeftoverKind::File(path) => (format!("files/{}", encode_path(path)), path.clone()),
        LeftoverKind::Output(n, ext) => (format!("outputs/{n}.{ext}"), format!("output {n}")),
    };
    Resource {
        uri: format!("{PREFIX}{id}/{path}"),
        name,
        mime_type: leftover.mime_type,
        content: leftover.content,
    }
}

/// The run id a URI names, if it is one of ours and not too long to look up.
pub(super) fn run_id_of(uri: &str) -> Option<&str> {
    if uri.len() > MAX_URI_BYTES {
        return None;
    }
    let (id, _) = uri.strip_prefix(PREFIX)?.split_once('/')?;
    Some(id)
}

/// 128 random bits as 32 lowercase hex digits: a run id no other client can guess.
pub(super) fn run_id() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A path relative to `/output` as a URI path: each segment percent-encoded (every byte
/// but letters, digits and `-._~`), segments joined by `/`.
fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for (i, segment) in path.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        for byte in segment.bytes() {
            if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                out.push(char::from(byte));
            } else {
                out.push_str(&format!("%{byte:02X}"));
            }
        }
    }
    out
}

/// `text` cut to at most `max` bytes, on a character boundary.
pub(super) fn cut(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}
