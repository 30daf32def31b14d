//! The `Origin` check of MCP's streamable HTTP transport: a server MUST validate the
//! `Origin` header of every request and answer 403 when it is present and not allowed, so
//! that a web page a person visits cannot drive a local server (DNS rebinding, cross-site
//! requests). Clients that are not browsers send no `Origin` and are not affected.
//!
//! Allowed: the origins of `sandpy.allowed_origins`, and, on a server that listens on
//! loopback, loopback origins (`http://localhost:3000`, `http://127.0.0.1`, `http://[::1]`).
//! A browser client of an allowed origin (the MCP Inspector's direct mode, a web agent)
//! gets CORS: its preflight `OPTIONS` is answered here, before the token is asked for, and
//! its responses let it read `Mcp-Session-Id` and `WWW-Authenticate`.

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// The origins a server takes requests from.
#[derive(Debug, Clone, Default)]
pub(crate) struct Origins {
    /// Configured origins, lower case, without a trailing `/`.
    allowed: Vec<String>,
    /// Whether loopback origins are allowed (the server listens on loopback).
    loopback: bool,
}

impl Origins {
    /// `allowed` (as `scheme://host[:port]`), and loopback origins when `loopback`.
    pub(crate) fn new(allowed: &[String], loopback: bool) -> Origins {
        Origins {
            allowed: allowed.iter().map(|o| normal(o)).collect(),
            loopback,
        }
    }

    /// Whether a request with `Origin: origin` may go on.
    fn admits(&self, origin: &str) -> bool {
        let origin = normal(origin);
        self.allowed.contains(&origin) || (self.loopback && is_loopback(&origin))
    }
}

fn normal(origin: &str) -> String {
    origin.trim().trim_end_matches('/').to_ascii_lowercase()
}

/// `http(s)://` with a loopback host (any port): `localhost`, `127.0.0.0/8`, `[::1]`.
fn is_loopback(origin: &str) -> bool {
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let host = match rest.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, port)) if port.is_empty() || port.starts_with(':') => host,
            _ => return false,
        },
        None => rest.split(':').next().unwrap_or_default(),
    };
    if host.contains('/') || host.contains('@') {
        return false;
    }
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// What a browser client may send and read (CORS).
const ALLOW_METHODS: &str = "GET, POST, DELETE, OPTIONS";
const ALLOW_HEADERS: &str =
    "authorization, content-type, accept, mcp-session-id, mcp-protocol-version, last-event-id";
const EXPOSE_HEADERS: &str = "mcp-session-id, mcp-protocol-version, www-authenticate";

/// 403 for a request whose `Origin` is present and not allowed (an `Origin` that is not
/// text, or `null`, is not allowed); for an allowed one, the CORS preflight answered and
/// CORS headers on the response; a request without `Origin` goes on as it is.
pub(crate) async fn check_origin(
    State(origins): State<Arc<Origins>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(origin) = request.headers().get(header::ORIGIN).cloned() else {
        return next.run(request).await;
    };
    match origin.to_str() {
        Ok(text) if origins.admits(text) => {
            let mut response = if request.method() == Method::OPTIONS {
                let mut preflight = StatusCode::NO_CONTENT.into_response();
                let headers = preflight.headers_mut();
                headers.insert(
                    header::ACCESS_CONTROL_ALLOW_METHODS,
                    HeaderValue::from_static(ALLOW_METHODS),
                );
                headers.insert(
                    header::ACCESS_CONTROL_ALLOW_HEADERS,
                    HeaderValue::from_static(ALLOW_HEADERS),
                );
                headers.insert(
                    header::ACCESS_CONTROL_MAX_AGE,
                    HeaderValue::from_static("600"),
                );
                preflight
            } else {
                next.run(request).await
            };
            let headers = response.headers_mut();
            headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
            headers.insert(
                header::ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static(EXPOSE_HEADERS),
            );
            headers.append(header::VARY, HeaderValue::from_static("origin"));
            response
        }
        shown => {
            let shown = shown.unwrap_or("(not text)");
            (
                StatusCode::FORBIDDEN,
                format!("Forbidden: Origin `{shown}` is not allowed (sandpy.allowed_origins)\n"),
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_origins_pass_on_loopback_only_and_configured_ones_always() {
        let local = Origins::new(&["https://Agent.Example.com/".into()], true);
        for ok in [
            "http://localhost:3000",
            "http://127.0.0.1",
            "https://127.9.9.9:8443",
            "http://[::1]:6274",
            "https://agent.example.com",
        ] {
            assert!(local.admits(ok), "{ok}");
        }
        for refused in [
            "http://evil.example.com",
            "null",
            "http://localhost.evil.example.com",
            "http://127.0.0.1.evil.example.com",
            "http://user@localhost",
            "file://localhost",
            "http://[::1].evil",
            "https://agent.example.com.evil",
        ] {
            assert!(!local.admits(refused), "{refused}");
        }
        let public = Origins::new(&[], false);
        assert!(!public.admits("http://localhost:3000"));
    }
}
