//! The entries of `sandpy.network.allow`: which requests sandboxed code may make.
//!
//! An entry is a host (`api.github.com`), a host and port (`api.github.com:443`), every
//! subdomain of a domain (`*.example.com`, with or without a port; not `example.com`
//! itself), every host name (`*`), an IP literal (`10.0.0.7`, `[fd00::1]:8080`), or a
//! method and URL pattern (`GET https://pypi.org/simple/*`, `* https://api.example.com/v1/*`;
//! `*` in the path matches any characters, `/` included; the query is not matched).
//! A host name never matches an IP literal: code reaches an address given by number only
//! when an entry names that address.
//!
//! A URL pattern confines the path only if the server reads the path as the pattern does,
//! so a pattern never matches a path a server could read as another: one with an encoded
//! separator (`%2f`, `%5c`), an encoded `%` (`%25`, decoded twice by some servers), a NUL,
//! or a `.`/`..` segment in any spelling (`%2e%2e`, `..;` as Tomcat reads it).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::IpAddr;

/// One entry of an allowlist (see the module docs for the forms).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct AllowRule {
    text: String,
    method: Option<String>,
    target: Target,
    port: Option<u16>,
    /// `Some((scheme, path glob))` for a URL pattern.
    url: Option<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    AnyName,
    Name(String),
    /// `*.suffix`: the part after `*`, with its leading dot.
    Subdomains(String),
    Ip(IpAddr),
}

/// Why an allowlist entry cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{entry:?} is not an allowlist entry: {reason} (forms: `host`, `host:port`, `*.domain`, `10.0.0.7`, `[::1]:8080`, `GET https://host/path/*`)")]
pub struct AllowRuleError {
    /// The entry as written.
    pub entry: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The parts of a request a rule is matched against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Destination<'a> {
    pub method: &'a str,
    pub scheme: &'a str,
    pub host: Host<'a>,
    pub port: u16,
    pub path: &'a str,
}

impl fmt::Display for Destination<'_> {
    /// `scheme://host:port/path`, as the audit record and the refusals show it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}://{}:{}{}",
            self.scheme, self.host, self.port, self.path
        )
    }
}

/// A request's host: a name (lowercase, no trailing dot) or an address.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Host<'a> {
    Name(&'a str),
    Ip(IpAddr),
}

impl fmt::Display for Host<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

impl AllowRule {
    /// Read one entry.
    pub fn parse(entry: &str) -> Result<AllowRule, AllowRuleError> {
        let fail = |reason: &str| AllowRuleError {
            entry: entry.to_string(),
            reason: reason.to_string(),
        };
        let trimmed = entry.trim();
        let (method, rest) = match trimmed.split_once(char::is_whitespace) {
            Some((method, url)) => (Some(method), url.trim()),
            None => (None, trimmed),
        };
        if let Some(method) = method {
            if method != "*" && !method.bytes().all(|b| b.is_ascii_uppercase()) {
                return Err(fail("a method is `*` or upper-case letters, e.g. `GET`"));
            }
        }
        let (url, authority) = match rest.split_once("://") {
            Some((scheme, after)) => {
                let scheme = scheme.to_ascii_lowercase();
                if scheme != "http" && scheme != "https" {
                    return Err(fail("the scheme must be http or https"));
                }
                let (authority, path) = match after.find('/') {
                    Some(at) => (&after[..at], &after[at..]),
                    None => (after, "/*"),
                };
                if path.contains(['?', '#']) {
                    return Err(fail("a URL pattern matches paths only, not queries"));
                }
                (Some((scheme, path.to_string())), authority)
            }
            None if method.is_some() => return Err(fail("after a method comes a URL")),
            None => (None, rest),
        };
        let (host, port) = split_port(authority).map_err(|reason| fail(&reason))?;
        let target = if host == "*" {
            Target::AnyName
        } else if let Ok(ip) = host.parse::<IpAddr>() {
            Target::Ip(ip)
        } else {
            let name = host.trim_end_matches('.').to_ascii_lowercase();
            let (subdomains, bare) = match name.strip_prefix("*.") {
                Some(bare) => (true, bare.to_string()),
                None => (false, name.clone()),
            };
            let label_ok = |label: &str| {
                !label.is_empty()
                    && label.len() <= 63
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            };
            if bare.is_empty() || !bare.split('.').all(label_ok) {
                return Err(fail(
                    "not a host name (letters, digits, `-`, dots; `*.` only as a prefix)",
                ));
            }
            if subdomains {
                Target::Subdomains(format!(".{bare}"))
            } else {
                Target::Name(bare)
            }
        };
        let port = match (port, &url) {
            (Some(port), _) => Some(port),
            (None, Some((scheme, _))) => Some(if scheme == "https" { 443 } else { 80 }),
            (None, None) => None,
        };
        Ok(AllowRule {
            text: trimmed.to_string(),
            method: method.filter(|m| *m != "*").map(str::to_string),
            target,
            port,
            url,
        })
    }

    /// Whether this entry lets code make a request to `to`.
    pub(crate) fn allows(&self, to: &Destination<'_>) -> bool {
        let host_ok = match (&self.target, to.host) {
            (Target::AnyName, Host::Name(_)) => true,
            (Target::Name(name), Host::Name(host)) => name == host,
            (Target::Subdomains(suffix), Host::Name(host)) => host.ends_with(suffix.as_str()),
            (Target::Ip(ip), Host::Ip(host)) => same_address(*ip, host),
            _ => false,
        };
        host_ok
            && self.port.is_none_or(|port| port == to.port)
            && self.method.as_deref().is_none_or(|m| m == to.method)
            && self.url.as_ref().is_none_or(|(scheme, path)| {
                scheme == to.scheme && glob(path, to.path) && confined(to.path)
            })
    }

    /// The address this entry names, if it is an IP literal: a host name that resolves to
    /// it may be reached even when it is a private or loopback address, when this entry
    /// allows the request with that address in place of the name (its port, method and
    /// path too).
    pub(crate) fn address(&self) -> Option<IpAddr> {
        match self.target {
            Target::Ip(ip) => Some(ip.to_canonical()),
            _ => None,
        }
    }

    /// The port it names; a URL pattern names its scheme's default when it names none.
    pub(crate) fn port(&self) -> Option<u16> {
        self.port
    }

    /// Whether it names hosts only (no method, no URL pattern): the forms a secret's
    /// `hosts` take.
    pub(crate) fn is_host_only(&self) -> bool {
        self.url.is_none() && self.method.is_none()
    }
}

impl fmt::Display for AllowRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl TryFrom<String> for AllowRule {
    type Error = AllowRuleError;

    fn try_from(entry: String) -> Result<Self, Self::Error> {
        AllowRule::parse(&entry)
    }
}

impl From<AllowRule> for String {
    fn from(rule: AllowRule) -> String {
        rule.text
    }
}

/// `host`, `host:port`, `[v6]`, `[v6]:port`.
fn split_port(authority: &str) -> Result<(&str, Option<u16>), String> {
    if authority.is_empty() {
        return Err("no host".into());
    }
    if authority.contains('@') {
        return Err("user names and passwords do not belong in an allowlist".into());
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (inside, after) = rest.split_once(']').ok_or("an unclosed `[`")?;
        match after {
            "" => return Ok((inside, None)),
            _ => (
                inside,
                after.strip_prefix(':').ok_or("junk after `]`")?.to_string(),
            ),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => (host, port.to_string()),
            Some(_) => return Ok((authority, None)), // a bare IPv6 address
            None => return Ok((authority, None)),
        }
    };
    match port.parse::<u16>() {
        Ok(port) if port > 0 => Ok((host, Some(port))),
        _ => Err(format!("{port:?} is not a port")),
    }
}

/// The same address, an IPv4-mapped IPv6 address counting as its IPv4 address.
fn same_address(a: IpAddr, b: IpAddr) -> bool {
    a.to_canonical() == b.to_canonical()
}

/// Whether a server reads `path` (as the URL parser left it) as the same path: no encoded
/// separator (`%2f`, `%5c`) or backslash, no encoded `%` (a second decoding), no NUL, and
/// no segment that is `.` or `..` once decoded (a `;` parameter cut off, as Tomcat does).
pub(crate) fn confined(path: &str) -> bool {
    if path.contains('\\') {
        return false;
    }
    path.split('/').all(|segment| {
        let decoded = percent_decode(segment);
        if decoded.iter().any(|b| matches!(b, b'/' | b'\\' | b'%' | 0)) {
            return false;
        }
        let name = match decoded.iter().position(|&b| b == b';') {
            Some(at) => &decoded[..at],
            None => &decoded[..],
        };
        name != b"." && name != b".."
    })
}

/// `text` with each `%XX` (either case) decoded once; a `%` without two hex digits stays.
pub(crate) fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |at: usize| bytes.get(at).and_then(|b| (*b as char).to_digit(16));
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                i += 3;
            }
            (byte, ..) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    out
}

/// `*` matches any run of characters; everything else matches itself.
fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to<'a>(
        method: &'a str,
        scheme: &'a str,
        host: &'a str,
        port: u16,
        path: &'a str,
    ) -> Destination<'a> {
        let host = match host.parse() {
            Ok(ip) => Host::Ip(ip),
            Err(_) => Host::Name(host),
        };
        Destination {
            method,
            scheme,
            host,
            port,
            path,
        }
    }

    #[test]
    fn each_form_matches_what_it_says_and_nothing_more() {
        let rule = |s: &str| AllowRule::parse(s).unwrap();
        let get = |host, port, path| to("GET", "https", host, port, path);
        assert!(rule("api.github.com").allows(&get("api.github.com", 443, "/x")));
        assert!(rule("API.GitHub.com.").allows(&get("api.github.com", 8080, "/")));
        assert!(!rule("api.github.com").allows(&get("github.com", 443, "/")));
        assert!(!rule("api.github.com").allows(&get("api.github.com.evil.io", 443, "/")));
        assert!(rule("*.example.com:443").allows(&get("a.b.example.com", 443, "/")));
        assert!(!rule("*.example.com:443").allows(&get("example.com", 443, "/")));
        assert!(!rule("*.example.com:443").allows(&get("badexample.com", 443, "/")));
        assert!(!rule("*.example.com:443").allows(&get("a.example.com", 80, "/")));
        assert!(rule("*").allows(&get("anything.org", 1, "/")));
        assert!(!rule("*").allows(&get("127.0.0.1", 80, "/")));
        assert!(!rule("localhost").allows(&get("127.0.0.1", 80, "/")));
        assert!(rule("127.0.0.1:8080").allows(&get("127.0.0.1", 8080, "/")));
        assert!(rule("127.0.0.1").allows(&get("::ffff:127.0.0.1", 80, "/")));
        assert!(rule("[::1]:8080").allows(&get("::1", 8080, "/")));
        assert!(!rule("[::1]:8080").allows(&get("::1", 8081, "/")));
        let pypi = rule("GET https://pypi.org/simple/*");
        assert!(pypi.allows(&get("pypi.org", 443, "/simple/numpy/")));
        assert!(!pypi.allows(&get("pypi.org", 443, "/simple")));
        assert!(!pypi.allows(&get("pypi.org", 443, "/pypi/x")));
        assert!(!pypi.allows(&to("POST", "https", "pypi.org", 443, "/simple/x")));
        assert!(!pypi.allows(&to("GET", "http", "pypi.org", 443, "/simple/x")));
        assert!(!pypi.allows(&get("pypi.org", 8443, "/simple/x")));
        assert!(rule("* http://h:8000").allows(&to("DELETE", "http", "h", 8000, "/a/b")));
        assert!(rule("GET https://h/a/*/c").allows(&get("h", 443, "/a/x/y/c")));
        assert!(!rule("GET https://h/a/*/c").allows(&get("h", 443, "/a/x/y/cd")));
    }

    #[test]
    fn a_url_pattern_never_matches_a_path_a_server_reads_as_another() {
        let pattern = AllowRule::parse("GET https://h/simple/*").unwrap();
        let get = |path| to("GET", "https", "h", 443, path);
        assert!(pattern.allows(&get("/simple/numpy/")));
        assert!(pattern.allows(&get("/simple/a%20b/c.d/..e/")));
        for path in [
            "/simple/..%2fadmin/secret.txt",
            "/simple/..%2Fadmin",
            "/simple/%2e%2e%2fadmin",
            "/simple/%2E%2e%5Cadmin",
            "/simple/..%5cadmin",
            "/simple/x/../../admin",
            "/simple/./x",
            "/simple/%2e/x",
            "/simple/.%2E/x",
            "/simple/..;/admin",
            "/simple/%2e%2e;x=1/admin",
            "/simple/%252e%252e%252fadmin",
            "/simple/a%00.txt",
            "/simple/a\\..\\admin",
        ] {
            assert!(!pattern.allows(&get(path)), "{path}");
        }
        // A host entry allows any path: it confines nothing, so it checks nothing.
        assert!(AllowRule::parse("h")
            .unwrap()
            .allows(&get("/simple/..%2fadmin")));
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        for (entry, reason) in [
            ("", "no host"),
            ("get https://x/", "a method is"),
            ("GET x.org", "after a method comes a URL"),
            ("ftp://x.org/", "http or https"),
            ("x.org:0", "is not a port"),
            ("x.org:http", "is not a port"),
            ("a..b", "not a host name"),
            ("*x.org", "not a host name"),
            ("a.*.org", "not a host name"),
            ("https://u:p@x.org/", "user names"),
            ("https://x.org/a?b", "not queries"),
        ] {
            let error = AllowRule::parse(entry).unwrap_err();
            assert!(error.to_string().contains(reason), "{entry:?}: {error}");
        }
    }
}
