//! The `Host` check of every route (`/mcp`, `/metrics`, `/healthz`, `/readyz`, the OAuth
//! metadata), against DNS rebinding: a web page whose name comes to resolve to this
//! server's address sends its own name as `Host`, so a server that answers only its own
//! names cannot be read or driven by it, whatever the route.
//!
//! Allowed: the names of `sandpy.allowed_hosts` (`host` for any port, or `host:port`), and,
//! on a server that listens on loopback, the loopback names (`localhost`, `127.0.0.0/8`,
//! `[::1]`, any port). Beyond loopback with no names configured, any `Host` (the server is
//! reached by names it does not know; the token guards `/mcp`, and the open routes name
//! no tenant). A request with no `Host` (nor `:authority`) is refused where the check
//! applies.

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// The `Host` values a server answers.
#[derive(Debug, Clone, Default)]
pub(crate) struct Hosts {
    /// Configured names: `(host, port)`, lower case, without brackets; no port: any.
    allowed: Vec<(String, Option<u16>)>,
    /// Whether the loopback names are allowed (the server listens on loopback).
    loopback: bool,
}

impl Hosts {
    /// `allowed` (`host` or `host:port`), and the loopback names when `loopback`.
    pub(crate) fn new(allowed: &[String], loopback: bool) -> Hosts {
        Hosts {
            allowed: allowed.iter().filter_map(|h| authority(h)).collect(),
            loopback,
        }
    }

    /// Whether every `Host` is taken (beyond loopback, no names configured).
    fn takes_any(&self) -> bool {
        !self.loopback && self.allowed.is_empty()
    }

    /// Whether a request with `Host: host` may go on.
    fn admits(&self, host: &str) -> bool {
        let Some((name, port)) = authority(host) else {
            return false;
        };
        let configured = self
            .allowed
            .iter()
            .any(|(allowed, p)| *allowed == name && p.is_none_or(|p| Some(p) == port));
        configured || (self.loopback && is_loopback(&name))
    }
}

/// `host[:port]` as `(host, port)`: lower case, an IPv6 address without its brackets;
/// `None` when it is not an authority (a path, a user, a bad port).
fn authority(text: &str) -> Option<(String, Option<u16>)> {
    let authority: axum::http::uri::Authority = text.trim().parse().ok()?;
    if authority.as_str().contains('@') {
        return None;
    }
    let host = authority
        .host()
        .trim_matches(['[', ']'])
        .to_ascii_lowercase();
    Some((host, authority.port_u16()))
}

/// `localhost`, or an address in `127.0.0.0/8` or `::1`.
fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// 403 for a request whose `Host` is not one the server answers (400 for none); every
/// other request goes on.
pub(crate) async fn check_host(
    State(hosts): State<Arc<Hosts>>,
    request: Request,
    next: Next,
) -> Response {
    if hosts.takes_any() {
        return next.run(request).await;
    }
    let host = match request.headers().get(header::HOST) {
        Some(value) => value.to_str().ok().map(str::to_string),
        // HTTP/2 carries it in `:authority`.
        None => request.uri().authority().map(|a| a.as_str().to_string()),
    };
    match host {
        Some(host) if hosts.admits(&host) => next.run(request).await,
        Some(host) => {
            tracing::warn!(%host, "refused a request for another Host (DNS rebinding?)");
            (
                StatusCode::FORBIDDEN,
                "Forbidden: this Host is not one the server answers (sandpy.allowed_hosts)\n",
            )
                .into_response()
        }
        None => (StatusCode::BAD_REQUEST, "Bad Request: no Host header\n").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_pass_on_loopback_only_and_configured_ones_always() {
        let local = Hosts::new(&["MCP.example.com".into(), "proxy.test:8443".into()], true);
        for ok in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:3000",
            "127.9.9.9",
            "[::1]:6274",
            "mcp.example.com",
            "mcp.example.com:1",
            "proxy.test:8443",
        ] {
            assert!(local.admits(ok), "{ok}");
        }
        for refused in [
            "evil.example.com",
            "localhost.evil.example.com",
            "127.0.0.1.nip.io",
            "user@localhost",
            "proxy.test:8444",
            "proxy.test",
            "",
            "localhost/x",
            "[::2]",
        ] {
            assert!(!local.admits(refused), "{refused}");
        }
        let public = Hosts::new(&[], false);
        assert!(public.takes_any());
        let named = Hosts::new(&["mcp.example.com".into()], false);
        assert!(!named.takes_any());
        assert!(!named.admits("localhost"));
        assert!(named.admits("mcp.example.com:443"));
    }
}
