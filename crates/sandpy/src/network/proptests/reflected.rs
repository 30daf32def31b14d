//! A secret's value reflected by its own host, as data. The value in the forms a server
//! writes it in (raw, percent, form, JSON escapes, base64 in either alphabet at any offset,
//! wrapped in lines or not, percent- or JSON-escaped) is placed in header names, header
//! values (`Location` among them) and the body, which comes in chunks of any size. What
//! reaches the code (headers and body as scrubbed; errors and the record go through the
//! same scrubber; the status's text is its own name, never the server's; trailers are not
//! read) must hold the value under no decoding, in any case, and what is counted against
//! `max_bytes_in` must be the same whatever the value's length. Any header that names a
//! coding, in any form, must refuse the answer unless every coding is plain.

use crate::network::access::head;
use crate::network::scrub::Scrubber;
use proptest::prelude::*;

/// A form a server may reflect a value in.
#[derive(Debug, Clone, Copy)]
enum Form {
    Raw,
    Percent {
        lower: bool,
    },
    Plus,
    Json,
    JsonUnicode,
    /// Base64 of `prefix + value + suffix`, URL-safe or not, wrapped every `width`
    /// characters by `newline` when there is one, percent- or JSON-escaped when asked.
    Base64 {
        url_safe: bool,
        wrap: Option<(usize, &'static str)>,
        escaped: Option<bool>,
    },
}

/// `value` as a server writes it in `form`, with `prefix` and `suffix` bytes around it
/// in base64 forms.
fn reflect(value: &str, form: Form, prefix: &[u8], suffix: &[u8]) -> String {
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};
    use base64::Engine as _;
    let percent = |text: &str, lower: bool, plus: bool| -> String {
        text.bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                b' ' if plus => "+".into(),
                b if lower => format!("%{b:02x}"),
                b => format!("%{b:02X}"),
            })
            .collect()
    };
    match form {
        Form::Raw => value.to_string(),
        Form::Percent { lower } => percent(value, lower, false),
        Form::Plus => percent(value, false, true),
        Form::Json => {
            // Without its quotes (one each side: an escaped `\"` at the end keeps its own).
            let json = serde_json::to_string(value).unwrap_or_default();
            let inner = json.get(1..json.len().saturating_sub(1)).unwrap_or("");
            inner.replace('/', "\\/")
        }
        Form::JsonUnicode => value.bytes().map(|b| format!("\\u{b:04x}")).collect(),
        Form::Base64 {
            url_safe,
            wrap,
            escaped,
        } => {
            let mut bytes = prefix.to_vec();
            bytes.extend_from_slice(value.as_bytes());
            bytes.extend_from_slice(suffix);
            let encoded = if url_safe {
                URL_SAFE.encode(&bytes)
            } else {
                STANDARD.encode(&bytes)
            };
            let wrapped = match wrap {
                Some((width, newline)) => {
                    let lines: Vec<&str> = encoded
                        .as_bytes()
                        .chunks(width)
                        .map(|line| std::str::from_utf8(line).unwrap_or(""))
                        .collect();
                    lines.join(newline)
                }
                None => encoded,
            };
            match escaped {
                Some(true) => percent(&wrapped, false, false),
                Some(false) => wrapped.replace('/', "\\/").replace('\n', "\\n"),
                None => wrapped,
            }
        }
    }
}

fn form() -> impl Strategy<Value = Form> {
    let wrap = prop::option::of((
        4usize..80,
        prop_oneof![Just("\n"), Just("\r\n"), Just("\\n"), Just("\r\n ")],
    ));
    prop_oneof![
        Just(Form::Raw),
        any::<bool>().prop_map(|lower| Form::Percent { lower }),
        Just(Form::Plus),
        Just(Form::Json),
        Just(Form::JsonUnicode),
        (any::<bool>(), wrap, prop::option::of(any::<bool>())).prop_map(
            |(url_safe, wrap, escaped)| Form::Base64 {
                url_safe,
                // A JSON escape inside a URL's encoding is not a form a server writes.
                wrap: wrap.map(|(width, newline)| match (escaped, newline) {
                    (Some(true), "\\n") => (width, "\n"),
                    _ => (width, newline),
                }),
                escaped
            }
        ),
    ]
}

/// Where a reflection goes.
#[derive(Debug, Clone, Copy)]
enum Slot {
    HeaderName,
    HeaderValue,
    Location,
    Body,
}

/// A reflection: where, in which form, with which bytes around it in base64.
type Reflection = (Slot, Form, Vec<u8>, Vec<u8>);

fn reflection() -> impl Strategy<Value = Reflection> {
    let slot = prop_oneof![
        Just(Slot::HeaderName),
        Just(Slot::HeaderValue),
        Just(Slot::Location),
        Just(Slot::Body),
    ];
    let around = prop::collection::vec(any::<u8>(), 0..6);
    (slot, form(), around.clone(), around)
}

/// The answer a server that reflects `value` as `reflections` sends: its headers and its
/// body (between text of lowercase letters and spaces, which no form of a value that
/// starts with a capital letter can run into).
fn answer(value: &str, reflections: &[Reflection]) -> (reqwest::header::HeaderMap, Vec<u8>) {
    use reqwest::header::{HeaderName, HeaderValue};
    let mut headers = reqwest::header::HeaderMap::new();
    let mut body = b"the answer ".to_vec();
    for (i, (slot, form, prefix, suffix)) in reflections.iter().enumerate() {
        let text = reflect(value, *form, prefix, suffix);
        let header = match slot {
            Slot::HeaderName => Some((format!("x-{text}"), "1".to_string())),
            Slot::HeaderValue => Some((format!("x-echo-{i}"), format!("bearer {text} end"))),
            Slot::Location => Some(("location".into(), format!("/next?t={text}&u=1"))),
            Slot::Body => {
                body.extend_from_slice(format!("you sent {text} here ").as_bytes());
                None
            }
        };
        // Only what a server can send: a name and a value HTTP allows.
        if let Some((name, text)) = header {
            if let (Ok(name), Ok(text)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(&text),
            ) {
                headers.append(name, text);
            }
        }
    }
    (headers, body)
}

/// What the code gets of `value` reflected as `reflections`, the body read in `chunk`
/// bytes at a time: the headers and body as text, and the bytes counted.
fn as_the_code_gets_it(value: &str, reflections: &[Reflection], chunk: usize) -> (String, u64) {
    let (headers, body) = answer(value, reflections);
    let scrubber = Scrubber::new([(value.as_bytes(), b"sandpy-secret:T".to_vec())]);
    let (kept, mut counted) = head(&headers, true, &scrubber).expect("no coding named");
    let mut text = String::new();
    for (name, value) in kept {
        text.push_str(&format!("{name}: {}\n", String::from_utf8_lossy(&value)));
    }
    let mut stream = scrubber.stream();
    let mut out = Vec::new();
    for piece in body.chunks(chunk.max(1)) {
        stream.push(piece, &mut out);
    }
    stream.finish(&mut out);
    counted += out.len() as u64;
    text.push_str(&String::from_utf8_lossy(&out));
    (text, counted)
}

/// Every reading of `text` a program could try: as it is, percent-decoded (with `+` as a
/// space or not), JSON-unescaped; each also with every base64 run in it decoded (at each
/// of its four alignments, line breaks and escapes taken out, either alphabet).
fn readings(text: &str) -> Vec<Vec<u8>> {
    let json = unescape_json(text);
    let firsts = vec![
        text.as_bytes().to_vec(),
        crate::network::allow::percent_decode(text),
        crate::network::allow::percent_decode(&text.replace('+', " ")),
        json,
    ];
    let mut all = firsts.clone();
    for first in firsts {
        let joined: Vec<u8> = String::from_utf8_lossy(&first)
            .replace("\\n", "")
            .replace("\\r", "")
            .replace("\\/", "/")
            .bytes()
            .filter(|b| !b.is_ascii_whitespace())
            .collect();
        all.push(decode_base64_runs(&joined));
    }
    all
}

fn unescape_json(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 1 < bytes.len() {
            let short = match bytes[i + 1] {
                b'n' => Some(b'\n'),
                b'r' => Some(b'\r'),
                b't' => Some(b'\t'),
                b'/' | b'"' | b'\\' => Some(bytes[i + 1]),
                _ => None,
            };
            if let Some(byte) = short {
                out.push(byte);
                i += 2;
                continue;
            }
            let hex = text
                .get(i + 2..i + 6)
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            if let (b'u', Some(byte)) = (bytes[i + 1], hex) {
                out.push(byte);
                i += 6;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

/// Each maximal run of base64 characters of either alphabet decoded at each of its four
/// alignments, the decodings one after another.
fn decode_base64_runs(text: &[u8]) -> Vec<u8> {
    let sextet = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' | b'-' => Some(62),
        b'/' | b'_' => Some(63),
        _ => None,
    };
    let mut out = Vec::new();
    for run in text.split(|&c| sextet(c).is_none()) {
        for align in 0..4 {
            let Some(run) = run.get(align..) else {
                continue;
            };
            for quad in run.chunks_exact(4) {
                let n = quad
                    .iter()
                    .fold(0u32, |n, &c| (n << 6) | u32::from(sextet(c).unwrap_or(0)));
                out.extend_from_slice(&n.to_be_bytes()[1..]);
            }
            out.push(0);
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn secrets_reflected_anywhere_in_any_form_never_reach_the_code(
        value in "[A-Z][A-Za-z0-9+/=_ .~\"\\\\-]{11,29}",
        reflections in prop::collection::vec(reflection(), 1..5),
        chunk in 1usize..40,
    ) {
        let (text, _) = as_the_code_gets_it(&value, &reflections, chunk);
        // In any case: header names come lowercased.
        for reading in readings(&text) {
            prop_assert!(
                !reading.windows(value.len()).any(|w| w.eq_ignore_ascii_case(value.as_bytes())),
                "{:?} in {:?}", value, text
            );
        }
    }

    #[test]
    fn secrets_reflected_are_counted_the_same_whatever_their_length(
        short in "[A-Z][A-Za-z0-9+/=_ .~\"\\\\-]{11,19}",
        longer in "[A-Za-z0-9_.~-]{3,15}",
        reflections in prop::collection::vec(reflection(), 1..5),
        chunk in 1usize..40,
    ) {
        // Base64 runs keep what the scrubbing leaves (the characters that mix the value
        // with its neighbours, padding, line breaks): the same for lengths alike modulo 3
        // and texts not wrapped.
        let cut = longer.len() - longer.len() % 3;
        prop_assume!(cut > 0);
        let long = format!("{short}{}", &longer[..cut]);
        // A name the server can send for one value and not the other (standard base64
        // has `/`, which no name has) is no count of its length: left out.
        let unwrapped: Vec<Reflection> = reflections
            .into_iter()
            .filter(|(slot, form, ..)| {
                !matches!((slot, form), (Slot::HeaderName, Form::Base64 { url_safe: false, .. }))
            })
            .map(|(slot, form, prefix, suffix)| match form {
                // Unescaped too: an escaped edge character (`/` as `\/`) is one byte more.
                Form::Base64 { url_safe, .. } => {
                    (slot, Form::Base64 { url_safe, wrap: None, escaped: None }, prefix, suffix)
                }
                form => (slot, form, prefix, suffix),
            })
            .collect();
        let (short_text, short_count) = as_the_code_gets_it(&short, &unwrapped, chunk);
        let (long_text, long_count) = as_the_code_gets_it(&long, &unwrapped, chunk);
        prop_assert_eq!(short_count, long_count, "{:?}\n{:?}", short_text, long_text);
    }

    #[test]
    fn secrets_answers_in_any_coding_header_form_are_refused(
        headers in prop::collection::vec((
            prop_oneof![
                Just("content-encoding"),
                Just("transfer-encoding"),
                Just("content-transfer-encoding"),
                Just("x-content-encoding"),
                Just("x-other"),
            ],
            prop::collection::vec((
                prop_oneof![
                    Just("identity"), Just("chunked"), Just("gzip"), Just("x-gzip"),
                    Just("br"), Just("deflate"), Just("zstd"), Just("compress"),
                    Just("quoted-printable"), Just(""),
                ],
                any::<bool>(),
                prop_oneof![Just(""), Just(" "), Just("\t"), Just(";q=1")],
            ), 1..4),
        ), 0..4),
    ) {
        let mut map = reqwest::header::HeaderMap::new();
        let mut coded = false;
        for (name, items) in &headers {
            let list: Vec<String> = items.iter().map(|(coding, upper, around)| {
                let plain = ["identity", "chunked", ""].contains(coding);
                coded |= *name != "x-other" && !plain;
                let coding = if *upper { coding.to_ascii_uppercase() } else { coding.to_string() };
                match *around {
                    ";q=1" => format!("{coding};q=1"),
                    space => format!("{space}{coding}{space}"),
                }
            }).collect();
            if let Ok(value) = reqwest::header::HeaderValue::from_str(&list.join(",")) {
                map.append(*name, value);
            }
        }
        let scrubber = Scrubber::new([(b"a-secret-value".as_slice(), b"P".to_vec())]);
        let refused = head(&map, true, &scrubber).is_err();
        prop_assert_eq!(refused, coded, "{:?}", map);
        prop_assert!(head(&map, false, &scrubber).is_ok(), "{:?}", map);
    }
}
