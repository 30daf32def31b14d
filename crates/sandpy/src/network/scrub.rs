//! A secret's value taken out of what comes back, in the forms the code can make a server
//! send it in: raw; percent-encoded, any byte encoded or not, in either case (`%2F`, `%2f`),
//! with `+` for a space (form encoding); JSON-escaped (`\u002b`, `\/`); and base64 (either
//! alphabet, at any of the three byte alignments, so inside a longer encoded text too).
//!
//! Compression and byte ranges are kept out by the request (`Accept-Encoding: identity`,
//! no `Range`), not undone here; a server that transforms the value in other ways
//! (reversed, split, encrypted) is not caught: give secrets to hosts you trust with them.

use base64::Engine as _;

/// `text` with every form of `value` replaced by `placeholder`.
pub(super) fn scrub(text: Vec<u8>, value: &[u8], placeholder: &[u8]) -> Vec<u8> {
    if value.is_empty() {
        return text;
    }
    let text = replace_encoded(text, value, placeholder);
    base64_forms(value)
        .iter()
        .fold(text, |text, form| replace_raw(text, form, placeholder))
}

/// Each match of `value` where every byte may be written raw or in an encoded form.
fn replace_encoded(text: Vec<u8>, value: &[u8], placeholder: &[u8]) -> Vec<u8> {
    let first = value[0];
    let mut out: Option<Vec<u8>> = None;
    let mut copied = 0;
    let mut i = 0;
    while i < text.len() {
        let could_start = matches!(text[i], b'%' | b'+' | b'\\') || text[i] == first;
        match could_start.then(|| match_at(&text, i, value)).flatten() {
            Some(end) => {
                let out = out.get_or_insert_with(|| Vec::with_capacity(text.len()));
                out.extend_from_slice(&text[copied..i]);
                out.extend_from_slice(placeholder);
                copied = end;
                i = end;
            }
            None => i += 1,
        }
    }
    match out {
        None => text,
        Some(mut out) => {
            out.extend_from_slice(&text[copied..]);
            out
        }
    }
}

/// The end of the longest match of `value` in `text` from `start`: the positions reached
/// after each byte of the value, kept as a small set (a byte's forms may overlap).
fn match_at(text: &[u8], start: usize, value: &[u8]) -> Option<usize> {
    let mut at = vec![start];
    for &byte in value {
        let mut next = Vec::new();
        for &position in &at {
            for end in forms_at(text, position, byte).into_iter().flatten() {
                if !next.contains(&end) {
                    next.push(end);
                }
            }
        }
        if next.is_empty() {
            return None;
        }
        at = next;
    }
    at.into_iter().max()
}

/// Where each form of `byte` that starts at `position` ends: raw, `%XX`, `+` for a space,
/// `\uXXXX` for an ASCII byte, `\/` for `/`.
fn forms_at(text: &[u8], position: usize, byte: u8) -> [Option<usize>; 5] {
    let rest = &text[position.min(text.len())..];
    let hex = |digits: &[u8]| {
        digits.iter().try_fold(0u32, |n, d| {
            (*d as char).to_digit(16).map(|digit| n * 16 + digit)
        })
    };
    let raw = (rest.first() == Some(&byte)).then_some(position + 1);
    let percent = (rest.len() >= 3 && rest[0] == b'%' && hex(&rest[1..3]) == Some(byte.into()))
        .then_some(position + 3);
    let plus = (byte == b' ' && rest.first() == Some(&b'+')).then_some(position + 1);
    let json = (rest.len() >= 6 && rest[..2] == *b"\\u" && hex(&rest[2..6]) == Some(byte.into()))
        .then_some(position + 6);
    let slash = (byte == b'/' && rest.starts_with(b"\\/")).then_some(position + 2);
    [raw, percent, plus, json, slash]
}

/// Each raw match of `form`.
fn replace_raw(text: Vec<u8>, form: &[u8], placeholder: &[u8]) -> Vec<u8> {
    if form.is_empty() || !text.windows(form.len()).any(|w| w == form) {
        return text;
    }
    let mut out = Vec::with_capacity(text.len());
    let mut rest = &text[..];
    while let Some(at) = rest.windows(form.len()).position(|w| w == form) {
        out.extend_from_slice(&rest[..at]);
        out.extend_from_slice(placeholder);
        rest = &rest[at + form.len()..];
    }
    out.extend_from_slice(rest);
    out
}

/// The base64 characters that depend on `value`'s bytes only, for each of the three
/// alignments it can have in an encoded text, in both alphabets; none for values under
/// 7 bytes (their few characters would match unrelated text).
fn base64_forms(value: &[u8]) -> Vec<Vec<u8>> {
    if value.len() < 7 {
        return Vec::new();
    }
    let mut forms = Vec::new();
    for align in 0..3usize {
        let mut padded = vec![0u8; align];
        padded.extend_from_slice(value);
        let encoded = base64::engine::general_purpose::STANDARD_NO_PAD.encode(&padded);
        // Character `c` holds bits 6c..6c+6 of the padded bytes; the value's are
        // 8*align..8*(align+len).
        let first = (8 * align).div_ceil(6);
        let end = (8 * (align + value.len())) / 6;
        let Some(core) = encoded.as_bytes().get(first..end) else {
            continue;
        };
        let url_safe: Vec<u8> = core
            .iter()
            .map(|&c| match c {
                b'+' => b'-',
                b'/' => b'_',
                c => c,
            })
            .collect();
        if url_safe != core {
            forms.push(url_safe);
        }
        forms.push(core.to_vec());
    }
    forms
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};

    const VALUE: &str = "tok+en/with=odd chars~";
    const PLACEHOLDER: &str = "sandpy-secret:T";

    fn scrubbed(text: &str) -> String {
        String::from_utf8(scrub(text.into(), VALUE.as_bytes(), PLACEHOLDER.as_bytes()))
            .expect("utf-8")
    }

    #[test]
    fn every_common_encoding_of_the_value_is_scrubbed() {
        let form: String = url_encode(VALUE, true, true);
        for (encoded, what) in [
            (VALUE.to_string(), "raw"),
            (url_encode(VALUE, false, false), "percent, upper case"),
            (
                url_encode(VALUE, false, false).to_lowercase(),
                "percent, lower case",
            ),
            (form, "form encoding"),
            (
                VALUE.replace('/', "\\/").replace('+', "\\u002B"),
                "JSON escapes",
            ),
            (STANDARD.encode(VALUE), "base64"),
            (URL_SAFE.encode(VALUE), "base64, URL-safe"),
            (
                STANDARD.encode(format!("user:{VALUE}")),
                "base64 at an offset",
            ),
            (
                STANDARD.encode(format!("us:{VALUE}!")),
                "base64 at another offset",
            ),
        ] {
            let text = format!("Location: https://x/?t={encoded}&u=1");
            let out = scrubbed(&text);
            assert!(out.contains(PLACEHOLDER), "{what}: {out}");
            assert!(!out.contains(&encoded), "{what}: {out}");
        }
        // Mixed forms in one value.
        let mixed = "tok%2Ben%2fwith=odd+chars~";
        assert_eq!(scrubbed(mixed), PLACEHOLDER);
        assert_eq!(scrubbed("nothing here %2 + \\u"), "nothing here %2 + \\u");
    }

    /// Percent-encoding of everything but unreserved characters; `+` for a space in form
    /// encoding.
    fn url_encode(text: &str, lower: bool, form: bool) -> String {
        text.bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                b' ' if form => "+".to_string(),
                b if lower => format!("%{b:02x}"),
                b => format!("%{b:02X}"),
            })
            .collect()
    }
}
