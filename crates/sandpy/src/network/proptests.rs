//! The allowlist matcher, URL handling and scrubbing against a plain model of the rules,
//! on random URLs (hosts in several spellings, ports, percent-encoded and dot segments),
//! entries and policies. 256 cases each: a few seconds in CI.
//!
//! The model says, without the matcher's code: a host entry matches a name equal to it
//! (any case, a trailing dot), `*.d` the names ending in `.d`, `*` every name, an address
//! the same address however it is spelled; an entry's port (a URL pattern's default) must
//! be the URL's; a pattern's method and scheme must be the request's, and its path prefix
//! the path's. A policy's list must match too. A name may resolve to an internal address
//! only where an address entry of both lists matches the request with that address. Paths
//! are either plain (then the prefix decides) or tricky (encoded separators, dot segments
//! in any spelling); for those the model asks only that a path a pattern let through stays
//! under its prefix as a server reads it (decoded once, `\` as `/`, `;` parameters cut,
//! dot segments resolved).
//!
//! `reflected.rs`: a secret's value reflected by its own host, in every place an answer's
//! bytes reach the code.

use super::access::{check, destination, reachable};
use super::address::is_internal;
use super::allow::{AllowRule, Host};
use super::scrub::Scrubber;
use proptest::prelude::*;
use std::net::IpAddr;

mod reflected;

/// Names the URLs and the entries draw from, so that they meet often.
const NAMES: &[&str] = &["a.test", "b.a.test", "x.b.a.test", "localhost", "other.org"];
/// `(spelling in a URL, the address)`.
const ADDRESSES: &[(&str, &str)] = &[
    ("127.0.0.1", "127.0.0.1"),
    ("2130706433", "127.0.0.1"),
    ("[::ffff:127.0.0.1]", "127.0.0.1"),
    ("[::1]", "::1"),
    ("10.0.0.7", "10.0.0.7"),
    ("0x0a.0.0.7", "10.0.0.7"),
    ("93.184.216.34", "93.184.216.34"),
];
const PORTS: &[u16] = &[80, 443, 8080, 8081];
const PREFIXES: &[&str] = &["/simple/", "/api/v1/"];
/// Segments every reading of a path agrees on.
const PLAIN: &[&str] = &[
    "simple", "api", "v1", "numpy", "admin", "a%20b", "x.y", "..e",
];
/// Segments that servers read in other ways than their text.
const TRICKY: &[&str] = &[
    "..",
    ".",
    "%2e%2e",
    "%2E%2e",
    ".%2e",
    "%2e",
    "..%2f",
    "..%2Fadmin",
    "%2e%2e%2f",
    "..%5c",
    "%5Cadmin",
    "..;",
    "%2e%2e;x",
    "%252e%252e%252f",
    "a%2fb",
    "..%00",
];

#[derive(Debug, Clone)]
enum Target {
    Any,
    Name(usize),
    Subdomains(usize),
    Address(usize),
}

#[derive(Debug, Clone)]
struct Entry {
    target: Target,
    port: Option<u16>,
    /// `(method, https, prefix)`: a URL pattern `METHOD scheme://host[:port]PREFIX*`.
    pattern: Option<(Option<&'static str>, bool, &'static str)>,
}

impl Entry {
    fn text(&self) -> String {
        let host = match self.target {
            Target::Any => "*".to_string(),
            Target::Name(i) => NAMES[i].to_string(),
            Target::Subdomains(i) => format!("*.{}", NAMES[i]),
            Target::Address(i) => match ADDRESSES[i].1.parse::<IpAddr>() {
                Ok(IpAddr::V6(ip)) => format!("[{ip}]"),
                _ => ADDRESSES[i].1.to_string(),
            },
        };
        let authority = match self.port {
            Some(port) => format!("{host}:{port}"),
            None => host,
        };
        match self.pattern {
            None => authority,
            Some((method, https, prefix)) => format!(
                "{} {}://{authority}{prefix}*",
                method.unwrap_or("*"),
                if https { "https" } else { "http" }
            ),
        }
    }

    /// The model: whether this entry matches the request.
    fn matches(&self, request: &Model) -> bool {
        let host = match (&self.target, &request.host) {
            (Target::Any, UrlHost::Name(_)) => true,
            (Target::Name(i), UrlHost::Name(n)) => NAMES[*i] == *n,
            (Target::Subdomains(i), UrlHost::Name(n)) => n.ends_with(&format!(".{}", NAMES[*i])),
            (Target::Address(i), UrlHost::Address(ip)) => address(*i) == *ip,
            _ => false,
        };
        let default_port = self
            .pattern
            .map(|(_, https, _)| if https { 443 } else { 80 });
        let port = self.port.or(default_port).is_none_or(|p| p == request.port);
        let pattern = self.pattern.is_none_or(|(method, https, prefix)| {
            method.is_none_or(|m| m == request.method)
                && https == request.https
                && request.plain
                && request.path.starts_with(prefix)
        });
        host && port && pattern
    }
}

fn address(i: usize) -> IpAddr {
    ADDRESSES[i]
        .1
        .parse::<IpAddr>()
        .map(|ip| ip.to_canonical())
        .unwrap_or(IpAddr::from([0, 0, 0, 0]))
}

#[derive(Debug, Clone, PartialEq)]
enum UrlHost {
    Name(&'static str),
    Address(IpAddr),
}

/// A request as the model sees it.
#[derive(Debug, Clone)]
struct Model {
    method: &'static str,
    https: bool,
    host: UrlHost,
    port: u16,
    path: String,
    /// Whether the path has only plain segments.
    plain: bool,
}

/// A random request: the URL as the code writes it, and the model's view of it.
fn request() -> impl Strategy<Value = (String, Model)> {
    let host = prop_oneof![
        (0..NAMES.len(), any::<bool>(), any::<bool>()).prop_map(|(i, upper, dot)| {
            let mut written = if upper {
                NAMES[i].to_ascii_uppercase()
            } else {
                NAMES[i].to_string()
            };
            if dot {
                written.push('.');
            }
            (written, UrlHost::Name(NAMES[i]))
        }),
        (0..ADDRESSES.len())
            .prop_map(|i| (ADDRESSES[i].0.to_string(), UrlHost::Address(address(i)))),
    ];
    let segment = prop_oneof![
        3 => (0..PLAIN.len()).prop_map(|i| (PLAIN[i], true)),
        1 => (0..TRICKY.len()).prop_map(|i| (TRICKY[i], false)),
    ];
    (
        prop_oneof![Just("GET"), Just("POST")],
        any::<bool>(),
        host,
        prop::option::of(0..PORTS.len()),
        0..PREFIXES.len() + 1,
        prop::collection::vec(segment, 0..4),
        any::<bool>(),
    )
        .prop_map(
            |(method, https, (written, host), port, prefix, segments, query)| {
                let scheme = if https { "https" } else { "http" };
                let default = if https { 443 } else { 80 };
                let port_text = port.map_or(String::new(), |i| format!(":{}", PORTS[i]));
                let mut path = PREFIXES.get(prefix).copied().unwrap_or("/").to_string();
                let plain = segments.iter().all(|(_, plain)| *plain);
                let texts: Vec<&str> = segments.iter().map(|(text, _)| *text).collect();
                path.push_str(&texts.join("/"));
                let mut url = format!("{scheme}://{written}{port_text}{path}");
                if query {
                    url.push_str("?next=..%2f..&x=/simple/");
                }
                let model = Model {
                    method,
                    https,
                    host,
                    port: port.map_or(default, |i| PORTS[i]),
                    path,
                    plain,
                };
                (url, model)
            },
        )
}

fn entry() -> impl Strategy<Value = Entry> {
    let target = prop_oneof![
        Just(Target::Any),
        (0..NAMES.len()).prop_map(Target::Name),
        (0..NAMES.len()).prop_map(Target::Subdomains),
        (0..ADDRESSES.len()).prop_map(Target::Address),
    ];
    let pattern = prop::option::of((
        prop_oneof![Just(None), Just(Some("GET")), Just(Some("POST"))],
        any::<bool>(),
        (0..PREFIXES.len()).prop_map(|i| PREFIXES[i]),
    ));
    (target, prop::option::of(0..PORTS.len()), pattern).prop_map(|(target, port, pattern)| Entry {
        target,
        port: port.map(|i| PORTS[i]),
        pattern,
    })
}

/// The path as a server that decodes once and then normalises reads it.
fn as_a_server_reads(path: &str) -> String {
    let decoded = String::from_utf8_lossy(&super::allow::percent_decode(path)).replace('\\', "/");
    let mut out: Vec<&str> = Vec::new();
    for segment in decoded.split('/') {
        match segment.split(';').next().unwrap_or("") {
            ".." => {
                out.pop();
            }
            "." => {}
            _ => out.push(segment),
        }
    }
    out.join("/")
}

fn parse_all(entries: &[Entry]) -> Vec<AllowRule> {
    entries
        .iter()
        .map(|e| AllowRule::parse(&e.text()).expect("the model writes valid entries"))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_matcher_agrees_with_the_model(
        (url, model) in request(),
        operator in prop::collection::vec(entry(), 0..5),
        policy in prop::option::of(prop::collection::vec(entry(), 0..4)),
    ) {
        let allow = parse_all(&operator);
        let narrowed = policy.as_deref().map(parse_all);
        let parsed = reqwest::Url::parse(&url).expect("the model writes valid URLs");
        let to = destination(&parsed, model.method).expect("http or https");
        let allowed = check(&allow, narrowed.as_deref(), &to).is_ok();
        let in_both = |m: &Model| {
            operator.iter().any(|e| e.matches(m))
                && policy.as_ref().is_none_or(|p| p.iter().any(|e| e.matches(m)))
        };
        if model.plain {
            prop_assert_eq!(allowed, in_both(&model), "{} {:?} {:?}", url, operator, policy);
        } else if allowed {
            // Let through a tricky path: only by an entry that does not confine the path,
            // or under the prefix as a server reads it.
            let server = as_a_server_reads(to.path);
            let confined_ok = |entries: &[Entry]| entries.iter().any(|e| {
                let unconfined = Entry { pattern: None, ..e.clone() };
                let plain = Model { plain: true, ..model.clone() };
                match e.pattern {
                    None => unconfined.matches(&model),
                    Some((_, _, prefix)) => e.matches(&Model { path: server.clone(), ..plain })
                        && server.starts_with(prefix),
                }
            });
            prop_assert!(confined_ok(&operator[..]), "{} read as {} by {:?}", url, server, operator);
            if let Some(policy) = &policy {
                prop_assert!(confined_ok(&policy[..]), "{} read as {} by {:?}", url, server, policy);
            }
        }
        // The internal addresses a name may resolve to: those an address entry of both
        // lists matches with the address in place of the name.
        if let (UrlHost::Name(_), true) = (&model.host, model.plain) {
            let mut expected: Vec<IpAddr> = (0..ADDRESSES.len())
                .map(address)
                .filter(|ip| is_internal(*ip))
                .filter(|ip| in_both(&Model { host: UrlHost::Address(*ip), ..model.clone() }))
                .collect();
            expected.sort();
            expected.dedup();
            let mut got: Vec<IpAddr> = reachable(&allow, narrowed.as_deref(), &to)
                .into_iter()
                .filter(|ip| is_internal(*ip))
                .collect();
            got.sort();
            prop_assert_eq!(got, expected, "{} {:?} {:?}", url, operator, policy);
        }
    }

    #[test]
    fn any_text_is_a_refusal_or_a_checked_destination(url in "\\PC{0,60}", method in "[A-Z]{1,7}") {
        let allow = parse_all(&[Entry { target: Target::Any, port: None, pattern: None }]);
        if let Ok(parsed) = reqwest::Url::parse(&url) {
            if let Ok(to) = destination(&parsed, &method) {
                // `*` is every name, never an address given by number.
                let by_address = matches!(to.host, Host::Ip(_));
                prop_assert_eq!(check(&allow, None, &to).is_err(), by_address);
                prop_assert!(!to.to_string().contains('?'));
            }
        }
    }

    #[test]
    fn a_value_is_scrubbed_whatever_each_byte_is_written_as(
        value in "[ -~]{8,24}",
        forms in prop::collection::vec(0u8..5, 24),
        before in "[a-z0-9 %+=/]{0,20}",
        after in "[a-z0-9 %+=/]{0,20}",
    ) {
        let written: String = value.bytes().zip(forms.iter()).map(|(b, form)| match form {
            1 => format!("%{b:02X}"),
            2 => format!("%{b:02x}"),
            3 if b == b' ' => "+".to_string(),
            4 => format!("\\u{:04x}", b),
            _ => (b as char).to_string(),
        }).collect();
        let text = format!("{before}{written}{after}");
        let scrubber = Scrubber::new([(value.as_bytes(), b"sandpy-secret:T".to_vec())]);
        let out = scrubber.scrub(text.as_bytes());
        let out = String::from_utf8_lossy(&out);
        prop_assert!(out.contains("sandpy-secret:T"), "{}", out);
        prop_assert!(!out.contains(&written), "{}", out);
    }
}
