//! Which of the code's headers the host drops: those it sets itself, those that tell a
//! server behind a proxy what the proxy saw, and (on a request that carries a secret)
//! those that would let the code read the secret back in pieces or compressed.

/// Headers the host sets itself: the code's values would let it talk to another host than
/// the one checked (`Host`), smuggle a second request (framing) or reach a proxy.
const HOST_SET: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
];

/// Headers that tell a server behind a proxy what the proxy saw (the client, the host, the
/// scheme) or which method or path to use instead: from the code they would steer the
/// request past what was checked. Dropped, with every `X-Forwarded-*`.
const FORWARDING: &[&str] = &[
    "forwarded",
    "via",
    "x-real-ip",
    "x-client-ip",
    "client-ip",
    "true-client-ip",
    "x-cluster-client-ip",
    "x-originating-ip",
    "x-remote-ip",
    "x-remote-addr",
    "x-host",
    "x-original-host",
    "x-original-url",
    "x-rewrite-url",
    "x-original-uri",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "front-end-https",
    "x-url-scheme",
];

/// Whether the host drops the code's header `name` (lowercase).
pub(super) fn dropped(name: &str) -> bool {
    HOST_SET.contains(&name) || FORWARDING.contains(&name) || name.starts_with("x-forwarded-")
}

/// Headers of the code's that would let it read a secret's value back in pieces or
/// compressed (past the scrubbing): dropped from a request that carries a secret, whose
/// `Accept-Encoding` the host sets to `identity`.
pub(super) const SECRET_UNSAFE: &[&str] = &["accept-encoding", "range", "if-range"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarding_headers_are_dropped_as_host_is() {
        for name in [
            "host",
            "x-forwarded-host",
            "x-forwarded-for",
            "x-forwarded-proto",
            "x-forwarded-port",
            "forwarded",
            "x-original-url",
            "x-rewrite-url",
            "x-http-method-override",
            "x-method-override",
            "x-http-method",
        ] {
            assert!(dropped(name), "{name}");
        }
        assert!(!dropped("authorization") && !dropped("x-mine"));
    }
}
