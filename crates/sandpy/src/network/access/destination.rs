//! Where a request goes, and whether it may: the parts of its URL the rules look at, the
//! check against the operator's list and the policy's, and the internal addresses a name
//! may still resolve to.

use super::FetchError;
use crate::network::allow::{confined, AllowRule, Destination, Host};
use std::net::IpAddr;

/// Whether the operator's list, and the policy's when there is one, allow `to`; the
/// refusal names the list that refused.
pub(in crate::network) fn check(
    allow: &[AllowRule],
    narrowed: Option<&[AllowRule]>,
    to: &Destination<'_>,
) -> Result<(), FetchError> {
    let by = if !allow.iter().any(|r| r.allows(to)) {
        "sandpy.network.allow"
    } else if narrowed.is_some_and(|list| !list.iter().any(|r| r.allows(to))) {
        "the policy's `network_allow`"
    } else {
        return Ok(());
    };
    let mut message = format!("{} {to} is not allowed by {by}", to.method);
    if !confined(to.path) {
        message.push_str(
            " (a URL pattern never matches a path with an encoded `/`, `\\` or `%`, or a \
             `.` or `..` segment)",
        );
    }
    Err(FetchError::Refused(message))
}

/// The internal addresses a name in `to` may resolve to and still be reached: those an
/// entry of the operator's list names that allows `to` with the address in place of the
/// name (its port, method and path included), and that the policy's list allows so too.
pub(in crate::network) fn reachable(
    allow: &[AllowRule],
    narrowed: Option<&[AllowRule]>,
    to: &Destination<'_>,
) -> Vec<IpAddr> {
    if matches!(to.host, Host::Ip(_)) {
        return Vec::new();
    }
    let mut addresses: Vec<IpAddr> = allow
        .iter()
        .filter_map(AllowRule::address)
        .filter(|ip| {
            let by_address = Destination {
                host: Host::Ip(*ip),
                ..*to
            };
            check(allow, narrowed, &by_address).is_ok()
        })
        .collect();
    addresses.sort();
    addresses.dedup();
    addresses
}

/// The parts of `url` the rules look at; only http and https.
pub(in crate::network) fn destination<'a>(
    url: &'a reqwest::Url,
    method: &'a str,
) -> Result<Destination<'a>, FetchError> {
    let scheme = url.scheme();
    if scheme != "http" && scheme != "https" {
        return Err(FetchError::Refused(format!(
            "{scheme}: URLs are not supported (http and https are)"
        )));
    }
    let host = match url.host() {
        Some(url::Host::Domain(name)) => Host::Name(name.trim_end_matches('.')),
        Some(url::Host::Ipv4(ip)) => Host::Ip(IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => Host::Ip(IpAddr::V6(ip)),
        None => return Err(FetchError::Refused(format!("{url} names no host"))),
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(FetchError::Refused(
            "credentials in the URL are not sent; use a header (and a secret)".into(),
        ));
    }
    Ok(Destination {
        method,
        scheme,
        host,
        port: url.port_or_known_default().unwrap_or(0),
        path: url.path(),
    })
}

/// The URL as the audit log shows it when it cannot be parsed: cut at the query.
pub(super) fn shown_url(url: &str) -> String {
    let end = url.find(['?', '#']).unwrap_or(url.len());
    url[..end].chars().take(2048).collect()
}
