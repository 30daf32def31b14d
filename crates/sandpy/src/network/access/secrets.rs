//! Secrets in a run's requests and answers: a placeholder becomes the secret's value
//! only on its way to a host the secret goes to, and every answer has the value turned
//! back into the placeholder before the code reads it.

use crate::network::allow::Destination;
use crate::network::Secret;

/// `value` with each placeholder of a secret that goes to `to` replaced by the secret's
/// value; other placeholders stay as they are.
pub(super) fn with_secrets(value: &str, secrets: &[Secret], to: &Destination<'_>) -> String {
    let mut value = value.to_string();
    for secret in secrets {
        let placeholder = secret.placeholder();
        if value.contains(&placeholder) && secret.sends_to(to) {
            value = value.replace(&placeholder, &secret.value);
        }
    }
    value
}

/// `body` with every secret's value replaced by its placeholder, in the forms a server
/// or the code's request could turn it into (see [`crate::network::scrub`]).
pub(super) fn scrub(body: Vec<u8>, secrets: &[Secret]) -> Vec<u8> {
    secrets.iter().fold(body, |body, secret| {
        crate::network::scrub::scrub(
            body,
            secret.value.as_bytes(),
            secret.placeholder().as_bytes(),
        )
    })
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
    fn secrets_go_only_to_their_hosts_over_https_and_are_scrubbed_from_answers() {
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
        assert_eq!(
            scrub(b"you sent s3cr3t-value, s3cr3t%2dvalue".to_vec(), &secrets),
            b"you sent sandpy-secret:GH, sandpy-secret:GH"
        );
    }
}
