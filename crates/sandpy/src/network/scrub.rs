//! A secret's value taken out of what comes back, in the forms a server can send it in:
//! raw; each byte raw or percent-encoded (either case), `+` for a space (form encoding), or
//! JSON-escaped (`\u002b`, and the short escapes `\"`, `\\`, `\/`, `\n` ...); and base64
//! (either alphabet, at any of the three byte alignments, so inside a longer encoded text
//! too), its characters in the same forms and with line breaks and spaces between them as
//! a wrapped encoding writes them (`base64.encodebytes`, MIME, PEM).
//!
//! One pass over the text finds the longest match of any form of any secret at each
//! position, so it works on a stream too: [`Stream`] holds back only the last bytes a
//! match could still span, and what it lets out is final. Compression and byte ranges are
//! kept out by the request (`Accept-Encoding: identity`, no `Range`) and an encoded answer
//! is refused, not undone here; a server that transforms the value in other ways
//! (reversed, hex, encrypted) is not caught: give secrets to hosts you trust with them.

use base64::Engine as _;

/// Whitespace units (a space, a line break, in any of their forms) a wrapped base64 text
/// may put between two characters: `\r\n`, then a space of a folded line, with room.
const MAX_GAP: usize = 4;

/// The longest a form of one byte can be written (`\u002b`).
const LONGEST_FORM: usize = 6;

/// The secrets' values, each in the forms it is looked for, with what replaces them.
pub(crate) struct Scrubber {
    patterns: Vec<Pattern>,
    placeholders: Vec<Vec<u8>>,
    /// The most bytes one match can span: what a stream holds back.
    window: usize,
    /// The bytes a match can start with.
    starts: [bool; 256],
}

/// One form of a value: its bytes, each of which may be written in any form, and whether
/// whitespace may come between them (base64 forms).
struct Pattern {
    bytes: Vec<u8>,
    placeholder: usize,
    gaps: bool,
}

impl Scrubber {
    /// A scrubber for `secrets`, each `(value, placeholder)`; empty values are skipped.
    pub(crate) fn new<'a>(secrets: impl IntoIterator<Item = (&'a [u8], Vec<u8>)>) -> Scrubber {
        let mut patterns = Vec::new();
        let mut placeholders = Vec::new();
        for (value, placeholder) in secrets {
            if value.is_empty() {
                continue;
            }
            let index = placeholders.len();
            placeholders.push(placeholder);
            patterns.push(Pattern {
                bytes: value.to_vec(),
                placeholder: index,
                gaps: false,
            });
            patterns.extend(base64_forms(value).into_iter().map(|bytes| Pattern {
                bytes,
                placeholder: index,
                gaps: true,
            }));
        }
        let mut starts = [false; 256];
        for special in [b'%', b'+', b'\\'] {
            starts[usize::from(special)] = true;
        }
        for pattern in &patterns {
            if let Some(&first) = pattern.bytes.first() {
                starts[usize::from(first.to_ascii_lowercase())] = true;
                starts[usize::from(first.to_ascii_uppercase())] = true;
            }
        }
        let window = patterns
            .iter()
            .map(|p| {
                let gaps = if p.gaps { MAX_GAP * LONGEST_FORM } else { 0 };
                p.bytes.len() * LONGEST_FORM + p.bytes.len().saturating_sub(1) * gaps
            })
            .max()
            .unwrap_or(0);
        Scrubber {
            patterns,
            placeholders,
            window,
            starts,
        }
    }

    /// Whether there is nothing to look for.
    pub(crate) fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// `text` with every form of every value replaced by its placeholder.
    pub(crate) fn scrub(&self, text: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(text.len());
        self.scan(text, &mut out, true, false);
        out
    }

    /// A header's name scrubbed: names come lowercased (HTTP's are of any case), so a
    /// value in one is matched in any case.
    pub(crate) fn scrub_name(&self, name: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(name.len());
        self.scan(name, &mut out, true, true);
        out
    }

    /// A stream of bytes scrubbed as they come.
    pub(crate) fn stream(&self) -> Stream<'_> {
        Stream {
            scrubber: self,
            pending: Vec::new(),
        }
    }

    /// Scrub `text` into `out`, up to where a match could still run past its end unless
    /// `at_end`, letters of any case when `fold`; the bytes of `text` done.
    fn scan(&self, text: &[u8], out: &mut Vec<u8>, at_end: bool, fold: bool) -> usize {
        if self.patterns.is_empty() {
            out.extend_from_slice(text);
            return text.len();
        }
        let stop = if at_end {
            text.len()
        } else {
            text.len().saturating_sub(self.window)
        };
        let mut i = 0;
        while i < stop {
            let Some(next) = text[i..stop]
                .iter()
                .position(|&b| self.starts[usize::from(b)])
            else {
                out.extend_from_slice(&text[i..stop]);
                i = stop;
                break;
            };
            out.extend_from_slice(&text[i..i + next]);
            i += next;
            let found = self
                .patterns
                .iter()
                .filter_map(|p| match_at(text, i, p, fold).map(|end| (end, p.placeholder)))
                .max_by_key(|(end, _)| *end);
            match found {
                Some((end, placeholder)) => {
                    out.extend_from_slice(&self.placeholders[placeholder]);
                    i = end;
                }
                None => {
                    out.push(text[i]);
                    i += 1;
                }
            }
        }
        i
    }
}

/// Bytes scrubbed as they come: [`Stream::push`] lets out what no later byte can change,
/// [`Stream::finish`] the rest.
pub(crate) struct Stream<'a> {
    scrubber: &'a Scrubber,
    pending: Vec<u8>,
}

impl Stream<'_> {
    /// Take `chunk`; the scrubbed bytes that are final go to `out`.
    pub(crate) fn push(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        if self.pending.is_empty() && self.scrubber.is_empty() {
            out.extend_from_slice(chunk);
            return;
        }
        self.pending.extend_from_slice(chunk);
        let done = self.scrubber.scan(&self.pending, out, false, false);
        self.pending.drain(..done);
    }

    /// The end of the text: the bytes held back go to `out`.
    pub(crate) fn finish(self, out: &mut Vec<u8>) {
        self.scrubber.scan(&self.pending, out, true, false);
    }
}

/// The end of the longest match of `pattern` in `text` from `start`, letters of any case
/// when `fold`: the positions reached after each byte, kept as a small set (a byte's forms
/// may overlap).
fn match_at(text: &[u8], start: usize, pattern: &Pattern, fold: bool) -> Option<usize> {
    let mut at = vec![start];
    let last = pattern.bytes.len().saturating_sub(1);
    for (k, &byte) in pattern.bytes.iter().enumerate() {
        let mut next = Vec::new();
        for &position in &at {
            let forms = forms_at(text, position, byte, fold);
            for end in forms.into_iter().flatten() {
                let end = if pattern.gaps && k < last {
                    skip_gaps(text, end)
                } else {
                    end
                };
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
/// `\uXXXX` for an ASCII byte, a JSON short escape (`\/`, `\"`, `\\`, `\n` ...); a letter
/// in either case when `fold`.
fn forms_at(text: &[u8], position: usize, byte: u8, fold: bool) -> [Option<usize>; 5] {
    let rest = &text[position.min(text.len())..];
    let same = |found: u32| match u8::try_from(found) {
        Ok(found) if fold => found.eq_ignore_ascii_case(&byte),
        Ok(found) => found == byte,
        Err(_) => false,
    };
    let hex = |digits: &[u8]| {
        digits.iter().try_fold(0u32, |n, d| {
            (*d as char).to_digit(16).map(|digit| n * 16 + digit)
        })
    };
    let raw = rest
        .first()
        .is_some_and(|&b| same(b.into()))
        .then_some(position + 1);
    let percent = (rest.len() >= 3 && rest[0] == b'%' && hex(&rest[1..3]).is_some_and(same))
        .then_some(position + 3);
    let plus = (byte == b' ' && rest.first() == Some(&b'+')).then_some(position + 1);
    let json = (rest.len() >= 6 && rest[..2] == *b"\\u" && hex(&rest[2..6]).is_some_and(same))
        .then_some(position + 6);
    let short = match byte {
        b'/' | b'"' | b'\\' => Some(byte),
        b'\n' => Some(b'n'),
        b'\r' => Some(b'r'),
        b'\t' => Some(b't'),
        0x08 => Some(b'b'),
        0x0c => Some(b'f'),
        _ => None,
    };
    let short = short
        .filter(|&c| rest.len() >= 2 && rest[0] == b'\\' && rest[1] == c)
        .map(|_| position + 2);
    [raw, percent, plus, json, short]
}

/// `position` past the whitespace there (a space, tab or line break, raw, percent-encoded
/// or JSON-escaped; never `+`, a base64 character), [`MAX_GAP`] units at most.
fn skip_gaps(text: &[u8], mut position: usize) -> usize {
    for _ in 0..MAX_GAP {
        let unit = [b'\n', b'\r', b' ', b'\t'].iter().find_map(|&space| {
            let [raw, percent, _plus, json, short] = forms_at(text, position, space, false);
            raw.or(percent).or(json).or(short)
        });
        match unit {
            Some(end) => position = end,
            None => break,
        }
    }
    position
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
        String::from_utf8(scrubber().scrub(text.as_bytes())).expect("utf-8")
    }

    fn scrubber() -> Scrubber {
        Scrubber::new([(VALUE.as_bytes(), PLACEHOLDER.as_bytes().to_vec())])
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

    #[test]
    fn secrets_in_wrapped_base64_and_json_short_escapes_are_scrubbed() {
        let encoded = STANDARD.encode(format!("user:{VALUE}"));
        for (wrapped, what) in [
            (
                format!("{}\n{}", &encoded[..9], &encoded[9..]),
                "a line break",
            ),
            (
                format!("{}\r\n {}", &encoded[..13], &encoded[13..]),
                "a folded line",
            ),
            (
                format!("{}\\n{}", &encoded[..9], &encoded[9..]),
                "a JSON-escaped break",
            ),
            (
                format!("{}%0A{}", &encoded[..9], &encoded[9..]),
                "a percent-encoded break",
            ),
            (encoded.replace('/', "\\/"), "JSON-escaped slashes"),
        ] {
            let out = scrubbed(&format!("{{\"auth\": \"{wrapped}\"}}"));
            assert!(out.contains(PLACEHOLDER), "{what}: {out}");
        }
        let quoted = "a \"quote\" and a \\ backslash";
        let scrubber = Scrubber::new([(quoted.as_bytes(), b"P".to_vec())]);
        let json = serde_json::to_string(quoted).expect("a string");
        assert_eq!(scrubber.scrub(json.as_bytes()), b"\"P\"");
    }

    #[test]
    fn a_stream_scrubs_as_the_whole_text_does_whatever_the_chunks() {
        let text = format!(
            "x{VALUE}y{}z{}",
            STANDARD.encode(VALUE),
            url_encode(VALUE, true, false)
        );
        let whole = scrubber().scrub(text.as_bytes());
        for size in [1, 2, 7, 64] {
            let scrubber = scrubber();
            let mut stream = scrubber.stream();
            let mut out = Vec::new();
            for chunk in text.as_bytes().chunks(size) {
                stream.push(chunk, &mut out);
            }
            stream.finish(&mut out);
            assert_eq!(out, whole, "chunks of {size}");
        }
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
