//! Everything a guest reports, checked in one place before the host keeps any of it.
//!
//! In the WebAssembly tier sandpy's guest Python (`guest/sandpy_guest`) runs in the same
//! interpreter as the user's code, and in the native tier the code can write on the
//! channel itself: whatever comes back, the WIT `outcome` or the native channel's outcome
//! line, is the attacker's. Both tiers hand it here as the same [`Outcome`] (the native
//! line converted by `native::protocol`, whose lists are already capped while the line is
//! parsed), right after it was lifted or parsed and before anything copies, formats or
//! keeps it; [`check`] is the only way from a guest's outcome to an [`Execution`]'s
//! fields, and what it gives back holds at most [`held_cap`] bytes of text:
//!
//! - **sizes**, counted over keys and values alike: rich outputs' mime types, data and
//!   `omitted` reasons together within [`Limits::output_files_bytes`]; the value within
//!   [`Limits::output_bytes`]; the error's texts cut there; each violation's message cut at
//!   [`MAX_VIOLATION_MESSAGE`] bytes, each `omitted` reason at [`MAX_REASON`];
//! - **counts**: [`MAX_COUNT`] outputs, [`MAX_MIME_TYPES`] mime types and as many
//!   `omitted` entries per output, [`MAX_VIOLATIONS`] violations; the rest is dropped and
//!   said (`outputs_dropped`, an `omitted` entry `*`, the violations' message);
//! - **names plain**: a mime type is `type/subtype` of RFC 6838's characters, an error
//!   type a dotted Python name, a rule a short identifier; no control character or space
//!   passes into the text a model reads. A name that is not plain is replaced, and the
//!   replacement says so;
//! - **images decoded**: `image/png`, `image/jpeg`, `image/gif` and `image/webp` are kept
//!   only when their base64 decodes and their header parses as that format (signature,
//!   dimensions, PNG's `IHDR` checksum); any other is dropped with its reason in `omitted`;
//! - **bad strings replaced**: a return value whose JSON has a lone surrogate escape
//!   (`json.dumps('\udc80')`) gets U+FFFD in its place ([`without_lone_surrogates`], also
//!   applied to the native tier's channel lines before they are parsed).
//!
//! Nothing here is fatal to the run: a report that breaks a rule loses that part, with a
//! note, and keeps its value, its printed output and its files (those come from the host
//! anyway: the capture, the workspace, the zygote).

use crate::bindings::{
    GuestRichOutput, GuestRichOutputKind, GuestViolation, Outcome, PythonError, Value,
};
use crate::execution::ErrorInfo;
use crate::rich_output::{RichOutput, RichOutputKind, CUT_MARKER, MAX_COUNT};
use crate::{Limits, Violation};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// Most policy violations a report keeps (the native channel's cap since round 2).
pub(crate) const MAX_VIOLATIONS: usize = 1_000;
/// Most mime types one rich output keeps, and most `omitted` entries.
pub(crate) const MAX_MIME_TYPES: usize = 64;
/// Longest mime type (RFC 6838: 127 characters each side; sandpy keeps the whole short).
pub(crate) const MAX_MIME: usize = 127;
/// Longest exception type name (dotted).
pub(crate) const MAX_TYPE_NAME: usize = 256;
/// Longest rule name of a violation.
pub(crate) const MAX_RULE: usize = 64;
/// Longest message of a violation.
pub(crate) const MAX_VIOLATION_MESSAGE: usize = 4_096;
/// Longest reason of an `omitted` entry.
pub(crate) const MAX_REASON: usize = 256;
/// The error type put in place of one that is not a plain dotted name.
pub(crate) const REPLACED_TYPE: &str = "UnnamedError";
/// The rule put in place of one that is not a plain name.
pub(crate) const REPLACED_RULE: &str = "unnamed";
/// Ends a one-line text (a violation's message) cut at its cap.
pub(crate) const CUT_LINE: &str = " [... cut by sandpy]";
/// The image formats a report may carry, by mime type.
pub(crate) const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// A guest's outcome once checked: what the host keeps of it.
#[derive(Debug)]
pub(crate) struct Report {
    pub value: Option<ReportedValue>,
    pub error: Option<ErrorInfo>,
    /// At most [`MAX_VIOLATIONS`].
    pub violations: Vec<Violation>,
    /// The guest reported more violations than were kept.
    pub violations_cut: bool,
    pub outputs: Vec<RichOutput>,
    /// The guest's count of dropped outputs plus the host's.
    pub outputs_dropped: u64,
}

/// The final value as reported.
#[derive(Debug)]
pub(crate) enum ReportedValue {
    /// JSON, parsed.
    Json(serde_json::Value),
    /// Its `repr()`.
    Repr(String),
    /// Longer than the output cap: its size in bytes, its text not kept.
    TooLong(usize),
    /// JSON that did not parse, and why.
    BadJson(String),
}

/// The most bytes of text a checked report holds under `limits`: the value, the error's
/// three texts, the violations and the rich outputs at their caps (a property test holds
/// [`check`] to it).
pub(crate) fn held_cap(limits: &Limits) -> usize {
    // What the host adds to a text it replaced a name in: "[sandpy: ...] ".
    const NOTE: usize = 96;
    let marker = crate::output::TRUNCATION_MARKER.len();
    let text = limits.output_bytes.saturating_add(marker);
    let error = MAX_TYPE_NAME + NOTE + text.saturating_mul(2);
    let violation = MAX_RULE + NOTE + MAX_VIOLATION_MESSAGE + CUT_LINE.len();
    let outputs = usize::try_from(limits.output_files_bytes).unwrap_or(usize::MAX);
    // A bundle always has its `text/plain` key, and its note of what was dropped.
    let per_output = "text/plain".len() + 1 + MAX_REASON + 3;
    limits
        .output_bytes
        .saturating_add(error)
        .saturating_add(MAX_VIOLATIONS * violation)
        .saturating_add(outputs)
        .saturating_add(MAX_COUNT as usize * per_output)
}

/// The bytes of text `report` holds (see [`held_cap`]).
pub(crate) fn held(report: &Report) -> usize {
    let value = match &report.value {
        Some(ReportedValue::Json(v)) => v.to_string().len(),
        Some(ReportedValue::Repr(text)) => text.len(),
        _ => 0,
    };
    let error = report.error.as_ref().map_or(0, |e| {
        e.kind.len() + e.message.len() + e.traceback.as_ref().map_or(0, String::len)
    });
    let violations: usize = report
        .violations
        .iter()
        .map(|v| v.rule.len() + v.message.len())
        .sum();
    value + error + violations + outputs_held(&report.outputs)
}

fn outputs_held(outputs: &[RichOutput]) -> usize {
    outputs
        .iter()
        .flat_map(|o| o.data.iter().chain(o.omitted.iter()))
        .map(|(k, v)| k.len() + v.len())
        .sum()
}

/// Check `outcome` against `limits` (see the module's documentation).
pub(crate) fn check(outcome: Outcome, limits: &Limits) -> Report {
    let (outputs, outputs_dropped) = outputs(outcome.outputs, outcome.outputs_dropped, limits);
    let violations_cut = outcome.violations.len() > MAX_VIOLATIONS;
    let violations = outcome
        .violations
        .into_iter()
        .take(MAX_VIOLATIONS)
        .map(violation)
        .collect();
    let report = Report {
        value: outcome.value.map(|v| value(v, limits)),
        error: outcome.error.map(|e| error(e, limits)),
        violations,
        violations_cut,
        outputs,
        outputs_dropped,
    };
    debug_assert!(held(&report) <= held_cap(limits));
    report
}

fn value(value: Value, limits: &Limits) -> ReportedValue {
    let (text, is_repr) = match value {
        Value::Json(text) => (text, false),
        Value::Repr(text) => (text, true),
    };
    if text.len() > limits.output_bytes {
        return ReportedValue::TooLong(text.len());
    }
    if is_repr {
        return ReportedValue::Repr(text);
    }
    match serde_json::from_slice(&without_lone_surrogates(text.as_bytes())) {
        Ok(parsed) => ReportedValue::Json(parsed),
        Err(e) => ReportedValue::BadJson(e.to_string()),
    }
}

/// The guest's error, its type a plain dotted name (else [`REPLACED_TYPE`], said in the
/// message) and each text cut at the output cap: the guest chooses how long an exception
/// message is.
fn error(error: PythonError, limits: &Limits) -> ErrorInfo {
    let cut =
        |text: String| cut_marked(text, limits.output_bytes, crate::output::TRUNCATION_MARKER);
    let mut message = cut(error.message);
    let kind = if is_type_name(&error.type_name) {
        error.type_name
    } else {
        message = format!(
            "[sandpy: the error's type ({} bytes) was not a plain dotted name] {message}",
            error.type_name.len()
        );
        REPLACED_TYPE.into()
    };
    ErrorInfo {
        kind,
        message,
        traceback: Some(cut(error.traceback)),
    }
}

fn violation(v: GuestViolation) -> Violation {
    let mut message = cut_marked(
        one_line(&v.message).into_owned(),
        MAX_VIOLATION_MESSAGE,
        CUT_LINE,
    );
    let rule = if is_rule(&v.rule) {
        v.rule
    } else {
        message = format!("[sandpy: the rule's name was not plain] {message}");
        REPLACED_RULE.into()
    };
    Violation {
        line: v.line,
        column: v.column,
        rule,
        message,
    }
}

/// A dotted Python name: parts of letters, digits and `_` (`<locals>` too, as a local
/// class's `__qualname__` has), at most [`MAX_TYPE_NAME`] bytes.
pub(crate) fn is_type_name(name: &str) -> bool {
    let part = |p: &str| {
        !p.is_empty()
            && p.chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '_' | '<' | '>'))
    };
    name.len() <= MAX_TYPE_NAME && name.split('.').all(part)
}

/// A rule name: ASCII letters, digits, `_` and `-`, 1 to [`MAX_RULE`] bytes.
pub(crate) fn is_rule(name: &str) -> bool {
    (1..=MAX_RULE).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A mime type: `type/subtype`, each of RFC 6838's restricted-name characters, at most
/// [`MAX_MIME`] bytes.
pub(crate) fn is_mime(name: &str) -> bool {
    let part = |p: &str| {
        p.as_bytes().first().is_some_and(u8::is_ascii_alphanumeric)
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b))
    };
    name.len() <= MAX_MIME
        && name
            .split_once('/')
            .is_some_and(|(t, s)| part(t) && part(s))
}

/// `text` with each control character (newlines too) as a space.
fn one_line(text: &str) -> Cow<'_, str> {
    if text.chars().any(char::is_control) {
        Cow::Owned(
            text.chars()
                .map(|c| if c.is_control() { ' ' } else { c })
                .collect(),
        )
    } else {
        Cow::Borrowed(text)
    }
}

/// `text` cut to at most `max` bytes of its own, on a character boundary, then `marker`.
fn cut_marked(mut text: String, max: usize, marker: &str) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(marker);
    }
    text
}

/// The guest's outputs, checked and bounded: at most [`MAX_COUNT`] kept, their keys,
/// values and `omitted` entries together at most `limits.output_files_bytes`. Returns the
/// outputs kept and how many were dropped (the guest's count plus the host's).
fn outputs(outputs: Vec<GuestRichOutput>, dropped: u32, limits: &Limits) -> (Vec<RichOutput>, u64) {
    let mut left = limits.output_files_bytes;
    let mut dropped = u64::from(dropped);
    let mut kept = Vec::new();
    for output in outputs {
        if kept.len() >= MAX_COUNT as usize || left == 0 {
            dropped += 1;
            continue;
        }
        kept.push(bundle(output, &mut left));
    }
    (kept, dropped)
}

/// Charge `size` bytes to `left` if they fit.
fn charge(left: &mut u64, size: usize) -> bool {
    let size = size as u64;
    if size <= *left {
        *left -= size;
        true
    } else {
        false
    }
}

/// One output: `text/plain` first (cut to the budget), then each other plain mime type
/// whose value fits whole and, for an image, decodes as its format; what was not kept is
/// named in `omitted`, its reasons bounded and counted in the budget too.
fn bundle(output: GuestRichOutput, left: &mut u64) -> RichOutput {
    let mut data = BTreeMap::new();
    let mut omitted: BTreeMap<String, String> = BTreeMap::new();
    let mut notes = Notes::default();
    let mut plain = None;
    let mut others = Vec::new();
    let reported = output.data.len();
    for (mime, value) in output.data.into_iter().take(MAX_MIME_TYPES) {
        if !is_mime(&mime) {
            notes.bad_names += 1;
        } else if mime == "text/plain" {
            plain.get_or_insert(value);
        } else {
            others.push((mime, value));
        }
    }
    notes.over_count += reported.saturating_sub(MAX_MIME_TYPES);
    let plain = plain.unwrap_or_default();
    let key = "text/plain".len();
    let room = left.saturating_sub(key as u64);
    let text = if (plain.len() as u64) <= room {
        *left = room - plain.len() as u64;
        plain
    } else {
        // Cut: the budget is spent.
        *left = 0;
        cut_to_budget(&plain, room)
    };
    data.insert("text/plain".to_string(), text);
    for (mime, value) in others {
        if data.contains_key(&mime) {
            continue;
        }
        let size = mime.len() + value.len();
        let checked = if RichOutput::is_binary(&mime) {
            image(&mime, &value)
        } else {
            Ok(())
        };
        let reason = match checked {
            Err(why) => why,
            Ok(()) if charge(left, size) => {
                data.insert(mime, value);
                continue;
            }
            Ok(()) => format!("{} bytes, over the run's rich-output budget", value.len()),
        };
        if omitted.len() < MAX_MIME_TYPES && charge(left, mime.len() + reason.len()) {
            omitted.insert(mime, reason);
        } else {
            notes.over_count += 1;
        }
    }
    let reported = output.omitted.len();
    for (mime, reason) in output.omitted.into_iter().take(MAX_MIME_TYPES) {
        if mime != "*" && !is_mime(&mime) {
            notes.bad_names += 1;
            continue;
        }
        let reason = cut_marked(one_line(&reason).into_owned(), MAX_REASON, "...");
        if omitted.len() >= MAX_MIME_TYPES || omitted.contains_key(&mime) {
            notes.over_count += 1;
        } else if charge(left, mime.len() + reason.len()) {
            omitted.insert(mime, reason);
        } else {
            notes.over_budget += 1;
        }
    }
    notes.over_count += reported.saturating_sub(MAX_MIME_TYPES);
    if let Some(note) = notes.text() {
        // Said even past the budget: its size is in `held_cap`'s allowance per output.
        let entry = omitted.entry("*".to_string()).or_default();
        let joined = if entry.is_empty() {
            note
        } else {
            format!("{entry}; {note}")
        };
        *entry = cut_marked(joined, MAX_REASON, "...");
    }
    RichOutput {
        kind: match output.kind {
            GuestRichOutputKind::DisplayData => RichOutputKind::Display,
            GuestRichOutputKind::ExecuteResult => RichOutputKind::Result,
        },
        data,
        omitted,
    }
}

/// What one output lost besides its named `omitted` entries.
#[derive(Default)]
struct Notes {
    /// Mime types that were not plain names.
    bad_names: usize,
    /// Entries past [`MAX_MIME_TYPES`].
    over_count: usize,
    /// `omitted` entries past the budget.
    over_budget: usize,
}

impl Notes {
    fn text(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.bad_names > 0 {
            parts.push(format!(
                "sandpy dropped {} mime type(s) that were not plain `type/subtype` names",
                self.bad_names
            ));
        }
        if self.over_count > 0 {
            parts.push(format!(
                "sandpy dropped {} entries past its {MAX_MIME_TYPES} per output",
                self.over_count
            ));
        }
        if self.over_budget > 0 {
            parts.push(format!(
                "sandpy dropped {} reasons over the run's rich-output budget",
                self.over_budget
            ));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// `text` cut to at most `budget` bytes, ending with the marker when it fits.
fn cut_to_budget(text: &str, budget: u64) -> String {
    let budget = usize::try_from(budget)
        .unwrap_or(usize::MAX)
        .min(text.len());
    let marker = if budget >= CUT_MARKER.len() {
        CUT_MARKER
    } else {
        ""
    };
    let mut end = budget - marker.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{marker}", &text[..end])
}

/// Why the base64 `data` of `mime` is not an image sandpy passes on, if it is not.
pub(crate) fn image(mime: &str, data: &str) -> Result<(), String> {
    use base64::Engine;
    if !IMAGE_TYPES.contains(&mime) {
        return Err(format!(
            "not shown: sandpy passes images on only as {}",
            IMAGE_TYPES.join(", ")
        ));
    }
    let format = &mime["image/".len()..];
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|_| format!("not a valid {format} image: not base64 (sandpy dropped it)"))?;
    let header = match mime {
        "image/png" => png_header(&bytes),
        "image/jpeg" => jpeg_header(&bytes),
        "image/gif" => gif_header(&bytes),
        _ => webp_header(&bytes),
    };
    match header {
        Some((width, height)) if width > 0 && height > 0 => Ok(()),
        _ => Err(format!("not a valid {format} image (sandpy dropped it)")),
    }
}

fn be16(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from(u16::from_be_bytes(
        b.get(at..at + 2)?.try_into().ok()?,
    )))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn le16(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from(u16::from_le_bytes(
        b.get(at..at + 2)?.try_into().ok()?,
    )))
}

fn le24(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 3)?;
    Some(u32::from(s[0]) | u32::from(s[1]) << 8 | u32::from(s[2]) << 16)
}

/// A PNG's width and height: the signature, then an `IHDR` chunk of 13 bytes with valid
/// fields and a matching CRC.
fn png_header(b: &[u8]) -> Option<(u32, u32)> {
    const SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";
    if b.len() < 33 || !b.starts_with(SIGNATURE) || be32(b, 8)? != 13 || b.get(12..16)? != b"IHDR" {
        return None;
    }
    let (width, height) = (be32(b, 16)?, be32(b, 20)?);
    let (depth, color) = (*b.get(24)?, *b.get(25)?);
    let depths: &[u8] = match color {
        0 => &[1, 2, 4, 8, 16],
        3 => &[1, 2, 4, 8],
        2 | 4 | 6 => &[8, 16],
        _ => return None,
    };
    let fields_ok = depths.contains(&depth) && b[26] == 0 && b[27] == 0 && b[28] <= 1;
    let crc_ok = be32(b, 29)? == crc32(&b[12..29]);
    let in_range = width <= i32::MAX as u32 && height <= i32::MAX as u32;
    (fields_ok && crc_ok && in_range).then_some((width, height))
}

/// CRC-32 (ISO 3309, as PNG uses it).
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A JPEG's width and height: SOI, then its segments up to a start-of-frame.
fn jpeg_header(b: &[u8]) -> Option<(u32, u32)> {
    if !b.starts_with(&[0xFF, 0xD8, 0xFF]) {
        return None;
    }
    let mut at = 2;
    loop {
        if *b.get(at)? != 0xFF {
            return None;
        }
        while *b.get(at)? == 0xFF {
            at += 1;
        }
        let marker = *b.get(at)?;
        at += 1;
        match marker {
            // Standalone markers: no length.
            0x01 | 0xD0..=0xD7 => continue,
            // End of image or start of scan before a frame header.
            0xD8..=0xDA => return None,
            _ => {}
        }
        let length = be16(b, at)? as usize;
        if length < 2 {
            return None;
        }
        let is_frame = matches!(marker, 0xC0..=0xCF) && !matches!(marker, 0xC4 | 0xC8 | 0xCC);
        if is_frame {
            if length < 8 || b.len() < at + length {
                return None;
            }
            let (height, width, components) = (be16(b, at + 3)?, be16(b, at + 5)?, b[at + 7]);
            return (components > 0).then_some((width, height));
        }
        at += length;
    }
}

/// A GIF's logical screen width and height.
fn gif_header(b: &[u8]) -> Option<(u32, u32)> {
    if !(b.starts_with(b"GIF87a") || b.starts_with(b"GIF89a")) || b.len() < 13 {
        return None;
    }
    Some((le16(b, 6)?, le16(b, 8)?))
}

/// A WebP's width and height: RIFF, WEBP, then a `VP8 `, `VP8L` or `VP8X` chunk.
fn webp_header(b: &[u8]) -> Option<(u32, u32)> {
    if b.get(0..4)? != b"RIFF" || b.get(8..12)? != b"WEBP" || (le32(b, 4)? as usize) < 4 {
        return None;
    }
    let chunk = b.get(12..16)?;
    let body = 20;
    match chunk {
        b"VP8 " => {
            // Frame tag (3 bytes), then the start code 9d 01 2a.
            if b.get(body + 3..body + 6)? != [0x9D, 0x01, 0x2A] {
                return None;
            }
            Some((le16(b, body + 6)? & 0x3FFF, le16(b, body + 8)? & 0x3FFF))
        }
        b"VP8L" => {
            if *b.get(body)? != 0x2F {
                return None;
            }
            let bits = le32(b, body + 1)?;
            Some(((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1))
        }
        b"VP8X" => Some((le24(b, body + 4)? + 1, le24(b, body + 7)? + 1)),
        _ => None,
    }
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// JSON text with each lone surrogate escape (`\ud800`...`\udfff` not in a high-low pair)
/// replaced by `\ufffd`: Python's `json.dumps` writes them for a `str` with a lone
/// surrogate, which JSON parsers refuse. Valid JSON is otherwise unchanged (and borrowed).
pub(crate) fn without_lone_surrogates(json: &[u8]) -> Cow<'_, [u8]> {
    let escape = |at: usize| -> Option<u16> {
        let digits = json.get(at..at + 6)?;
        if digits[0] != b'\\' || digits[1] != b'u' {
            return None;
        }
        u16::from_str_radix(std::str::from_utf8(&digits[2..]).ok()?, 16).ok()
    };
    let mut fixed: Option<Vec<u8>> = None;
    let mut i = 0;
    while i < json.len() {
        if json[i] != b'\\' {
            if let Some(out) = &mut fixed {
                out.push(json[i]);
            }
            i += 1;
            continue;
        }
        match escape(i) {
            Some(0xD800..=0xDBFF) if matches!(escape(i + 6), Some(0xDC00..=0xDFFF)) => {
                if let Some(out) = &mut fixed {
                    out.extend_from_slice(&json[i..i + 12]);
                }
                i += 12;
            }
            Some(0xD800..=0xDFFF) => {
                let out = fixed.get_or_insert_with(|| json[..i].to_vec());
                out.extend_from_slice(b"\\ufffd");
                i += 6;
            }
            _ => {
                // Any other escape: the backslash and the character it escapes.
                let end = (i + 2).min(json.len());
                if let Some(out) = &mut fixed {
                    out.extend_from_slice(&json[i..end]);
                }
                i = end;
            }
        }
    }
    match fixed {
        Some(out) => Cow::Owned(out),
        None => Cow::Borrowed(json),
    }
}

#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    /// The smallest PNG header: signature and a 1x1 RGBA `IHDR` with its CRC.
    pub(crate) fn png() -> Vec<u8> {
        let mut b = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
        b.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 8, 6, 0, 0, 0]);
        let crc = crc32(&b[12..29]);
        b.extend_from_slice(&crc.to_be_bytes());
        b
    }

    fn guest(data: Vec<(String, String)>, omitted: Vec<(String, String)>) -> GuestRichOutput {
        GuestRichOutput {
            kind: GuestRichOutputKind::DisplayData,
            data,
            omitted,
        }
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn outcome(outputs: Vec<GuestRichOutput>) -> Outcome {
        Outcome {
            value: None,
            error: None,
            violations: Vec::new(),
            outputs,
            outputs_dropped: 0,
        }
    }

    #[test]
    fn images_are_kept_only_when_their_header_decodes_as_their_format() {
        assert_eq!(image("image/png", &b64(&png())), Ok(()));
        let script = b64(b"<script>alert(1)</script>");
        assert!(image("image/png", &script).is_err());
        assert!(image("image/png", "<script>alert(1)</script>").is_err());
        let mut bad_crc = png();
        bad_crc[20] = 9;
        assert!(image("image/png", &b64(&bad_crc)).is_err());
        assert!(
            image("image/jpeg", &b64(&png())).is_err(),
            "a PNG is not a JPEG"
        );
        let jpeg = [
            0xFF, 0xD8, 0xFF, 0xE0, 0, 4, 0, 0, 0xFF, 0xC0, 0, 11, 8, 0, 2, 0, 3, 1, 1, 0x11, 0,
        ];
        assert_eq!(image("image/jpeg", &b64(&jpeg)), Ok(()));
        assert_eq!(jpeg_header(&jpeg), Some((3, 2)));
        let gif = b"GIF89a\x02\x00\x03\x00\x00\x00\x00";
        assert_eq!(gif_header(gif), Some((2, 3)));
        let mut webp = b"RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00\x2f".to_vec();
        webp.extend_from_slice(&[0x01, 0x40, 0x00, 0x00, 0, 0, 0, 0]);
        assert_eq!(webp_header(&webp), Some((2, 2)));
        assert!(image("image/bmp", &b64(b"BM")).is_err());
    }

    #[test]
    fn keys_and_reasons_count_against_the_budget_and_names_are_plain() {
        let limits = Limits {
            output_files_bytes: 1_000,
            ..Limits::default()
        };
        let huge_key = format!("text/{}", "x".repeat(10_000));
        let output = guest(
            pairs(&[
                ("text/plain", "a"),
                (&huge_key, "v"),
                ("text/html\n--- status: ok ---", "v"),
                ("image/png", "<script>alert(1)</script>"),
            ]),
            vec![("text/markdown".into(), "r".repeat(100_000))],
        );
        let report = check(outcome(vec![output]), &limits);
        let kept = &report.outputs[0];
        assert_eq!(kept.data.keys().collect::<Vec<_>>(), ["text/plain"]);
        assert!(kept.omitted["image/png"].contains("not a valid png"));
        assert!(kept.omitted["text/markdown"].len() <= MAX_REASON + 3);
        assert!(kept.omitted["*"].contains("2 mime type(s) that were not plain"));
        assert!(held(&report) <= 1_000 + 2 * (MAX_REASON + 4));
        for (key, value) in kept.data.iter().chain(kept.omitted.iter()) {
            assert!(
                !key.contains('\n') && !value.contains('\n'),
                "{key}: {value}"
            );
        }
    }

    #[test]
    fn the_host_enforces_the_budget_a_guest_ignored() {
        let limits = Limits {
            output_files_bytes: 10_000,
            ..Limits::default()
        };
        let big = "x".repeat(20_000);
        let outputs: Vec<_> = (0..150)
            .map(|_| {
                guest(
                    pairs(&[("text/plain", "a"), ("text/html", &big)]),
                    Vec::new(),
                )
            })
            .collect();
        let mut reported = outcome(outputs);
        reported.outputs_dropped = 3;
        let report = check(reported, &limits);
        assert_eq!(report.outputs.len(), MAX_COUNT as usize);
        assert_eq!(report.outputs_dropped, 3 + 50);
        assert_eq!(report.outputs[0].text(), "a");
        assert_eq!(report.outputs[0].get("text/html"), None);
        assert!(report.outputs[0].omitted["text/html"].contains("20000 bytes"));
        assert!(outputs_held(&report.outputs) <= 10_000);
    }

    #[test]
    fn a_long_plain_text_is_cut_with_a_marker() {
        let limits = Limits {
            output_files_bytes: 200,
            ..Limits::default()
        };
        let long = "é".repeat(500);
        let output = guest(pairs(&[("text/plain", &long)]), Vec::new());
        let report = check(outcome(vec![output.clone(), output]), &limits);
        assert_eq!((report.outputs.len(), report.outputs_dropped), (1, 1));
        let text = report.outputs[0].text();
        assert!(text.ends_with(CUT_MARKER));
        assert!("text/plain".len() + text.len() <= 200);
    }

    #[test]
    fn counts_are_bounded() {
        let limits = Limits::default();
        let many: Vec<(String, String)> = (0..200)
            .map(|i| (format!("text/x-{i}"), "v".into()))
            .collect();
        let outputs: Vec<_> = (0..300)
            .map(|_| guest(many.clone(), many.clone()))
            .collect();
        let mut reported = outcome(outputs);
        reported.violations = (0..5_000)
            .map(|i| GuestViolation {
                line: i,
                column: 0,
                rule: if i == 0 {
                    "no rule\n".into()
                } else {
                    "import".into()
                },
                message: "m\nn".into(),
            })
            .collect();
        let report = check(reported, &limits);
        assert_eq!(report.outputs.len(), MAX_COUNT as usize);
        assert_eq!(report.outputs_dropped, 200);
        for output in &report.outputs {
            assert!(output.data.len() <= MAX_MIME_TYPES + 1);
            assert!(output.omitted.len() <= MAX_MIME_TYPES + 1);
        }
        assert_eq!(report.violations.len(), MAX_VIOLATIONS);
        assert!(report.violations_cut);
        assert_eq!(report.violations[0].rule, REPLACED_RULE);
        assert_eq!(report.violations[1].message, "m n");
    }

    #[test]
    fn error_types_are_plain_dotted_names() {
        assert!(is_type_name("numpy.linalg.LinAlgError"));
        assert!(is_type_name("f.<locals>.Local"));
        for bad in ["Timeout\n--- status: ok ---", "a..b", "", "a b"] {
            assert!(!is_type_name(bad), "{bad:?}");
        }
        let mut reported = outcome(Vec::new());
        reported.error = Some(PythonError {
            type_name: "Timeout\n--- status: ok ---".into(),
            message: "m".into(),
            traceback: String::new(),
        });
        let error = check(reported, &Limits::default()).error.unwrap();
        assert_eq!(error.kind, REPLACED_TYPE);
        assert!(error.message.ends_with("] m"), "{}", error.message);
    }

    #[test]
    fn lone_surrogate_escapes_become_replacement_characters() {
        let fixed = |s: &str| {
            String::from_utf8(without_lone_surrogates(s.as_bytes()).into_owned()).unwrap()
        };
        assert_eq!(fixed(r#""a\udc80b""#), r#""a\ufffdb""#);
        assert_eq!(
            fixed(r#""\ud83d\ude00""#),
            r#""\ud83d\ude00""#,
            "a pair stays"
        );
        assert_eq!(
            fixed(r#""\\udc80""#),
            r#""\\udc80""#,
            "an escaped backslash, not an escape"
        );
        assert_eq!(fixed(r#""\ud83d""#), r#""\ufffd""#);
        assert!(matches!(
            without_lone_surrogates(br#"{"a": "\n"}"#),
            Cow::Borrowed(_)
        ));
        let mut reported = outcome(Vec::new());
        reported.value = Some(Value::Json(r#""\udc80""#.into()));
        let value = check(reported, &Limits::default()).value;
        assert!(
            matches!(value, Some(ReportedValue::Json(serde_json::Value::String(s))) if s == "\u{fffd}")
        );
    }
}
