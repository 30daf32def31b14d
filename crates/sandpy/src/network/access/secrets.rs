//! Secrets in a run's requests: a placeholder becomes the secret's value only on its way
//! to a host the secret goes to. (Answers have the value turned back into the placeholder
//! by the network's [`crate::network::scrub::Scrubber`], as they are read.)

use crate::network::allow::Destination;
use crate::network::{Secret, SECRET_PREFIX};

/// `value` with each placeholder of a secret that goes to `to` replaced by the secret's
/// value; other placeholders stay as they are. A placeholder is a whole name:
/// `sandpy-secret:TOKEN_2` is `TOKEN_2`'s, never `TOKEN`'s followed by `_2`.
pub(super) fn with_secrets(value: &str, secrets: &[Secret], to: &Destination<'_>) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some((before, name, after)) = next_placeholder(rest) {
        out.push_str(before);
        match secrets.iter().find(|s| s.name == name && s.sends_to(to)) {
            Some(secret) => out.push_str(&secret.value),
            None => {
                out.push_str(SECRET_PREFIX);
                out.push_str(name);
            }
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// The first placeholder in `text`: what comes before it, its whole name (every letter,
/// digit and `_` after the prefix) and what comes after.
fn next_placeholder(text: &str) -> Option<(&str, &str, &str)> {
    let at = text.find(SECRET_PREFIX)?;
    let after_prefix = &text[at + SECRET_PREFIX.len()..];
    let end = after_prefix
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(after_prefix.len());
    Some((&text[..at], &after_prefix[..end], &after_prefix[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::allow::{AllowRule, Host};

    fn to(scheme: &'static str, host: &'static str, port: u16) -> Destination<'static> {
        Destination {
            method: "GET",
            scheme,
            host: Host::Name(host),
            port,
            path: "/",
        }
    }

    #[test]
    fn secrets_go_only_to_their_hosts_over_https() {
        let hosts = vec![AllowRule::parse("api.github.com").unwrap()];
        let secret = Secret::new("GH", "s3cr3t-value".into(), hosts).unwrap();
        let secrets = [secret.clone()];
        let header = "Bearer sandpy-secret:GH";
        let github = to("https", "api.github.com", 443);
        assert_eq!(
            with_secrets(header, &secrets, &github),
            "Bearer s3cr3t-value"
        );
        for other in [
            to("https", "evil.example", 443),
            to("http", "api.github.com", 80),
            to("https", "api.github.com", 8443),
        ] {
            assert_eq!(with_secrets(header, &secrets, &other), header, "{other}");
        }
        let http = [secret.allow_http(true)];
        assert_eq!(
            with_secrets(header, &http, &to("http", "api.github.com", 80)),
            "Bearer s3cr3t-value"
        );
        assert_eq!(
            with_secrets(header, &http, &to("http", "api.github.com", 8080)),
            header
        );
    }

    #[test]
    fn secrets_placeholders_are_whole_names() {
        let hosts = vec![AllowRule::parse("api.github.com").unwrap()];
        let short = Secret::new("TOK", "short-value".into(), hosts.clone()).unwrap();
        let long = Secret::new("TOKL", "long-value".into(), hosts).unwrap();
        let github = to("https", "api.github.com", 443);
        let only_short = [short.clone()];
        for header in [
            "sandpy-secret:TOKL",
            "x sandpy-secret:TOK_2 y",
            "sandpy-secret:TOKx",
        ] {
            assert_eq!(with_secrets(header, &only_short, &github), header);
        }
        let both = [short, long];
        assert_eq!(
            with_secrets(
                "sandpy-secret:TOK,sandpy-secret:TOKL sandpy-secret:",
                &both,
                &github
            ),
            "short-value,long-value sandpy-secret:"
        );
    }
}
