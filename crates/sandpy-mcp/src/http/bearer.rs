//! The bearer check in front of `/mcp`: the single token, the tenants' tokens (each
//! naming its tenant) and the OAuth issuer's access tokens ([`super::oauth`]).

use super::mcp_sessions::CheckedBearer;
use super::oauth;
use crate::identity::TokenTenantName;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// Equal-time comparison, so the token cannot be guessed byte by byte from timings.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token of an `Authorization` header value `Bearer <token>`; the scheme's case does
/// not matter (RFC 9110, section 11.1), so `bearer` and `BEARER` are accepted too.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start_matches(' '))
}

/// The tokens that let a client in: the single one, the tenants' (each with the
/// tenant's name), and the OAuth issuer's access tokens ([`oauth`]).
#[derive(Default)]
pub(crate) struct Access {
    pub(super) token: Option<String>,
    pub(super) tenants: Vec<(String, Arc<str>)>,
    pub(super) oauth: Option<Arc<oauth::Verifier>>,
}

impl Access {
    /// Only `token`, if any (the test server's access).
    #[cfg(feature = "test-server")]
    pub(crate) fn token(token: Option<String>) -> Access {
        Access {
            token,
            tenants: Vec::new(),
            oauth: None,
        }
    }

    pub(super) fn is_open(&self) -> bool {
        self.token.is_none() && self.tenants.is_empty() && self.oauth.is_none()
    }

    /// Whom `presented` lets in: `Some(None)` for the single token, `Some(Some(name))` for
    /// a tenant's. Every token is compared, in equal time, whichever matches.
    fn admit(&self, presented: &str) -> Option<Option<Arc<str>>> {
        let presented = presented.as_bytes();
        let mut found = None;
        if let Some(token) = &self.token {
            if same(presented, token.as_bytes()) {
                found = Some(None);
            }
        }
        for (token, name) in &self.tenants {
            if same(presented, token.as_bytes()) {
                found = Some(Some(name.clone()));
            }
        }
        found
    }
}

/// Let in a request with a known bearer token; one with a tenant's token carries the
/// tenant's name on ([`TokenTenantName`]), one with the OAuth issuer's access token the
/// tenant its claim names ([`ClaimedTenant`](crate::identity::ClaimedTenant)).
pub(super) async fn require_bearer(
    State(access): State<Arc<Access>>,
    mut request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    let admitted = presented.and_then(|token| access.admit(token));
    match (admitted, presented, &access.oauth) {
        (Some(tenant), _, _) => {
            if let Some(name) = tenant {
                request.extensions_mut().insert(TokenTenantName(name));
            }
        }
        (None, Some(token), Some(verifier)) => match verifier.verify(token).await {
            Ok(claimed) => drop(request.extensions_mut().insert(claimed)),
            Err(refusal) => return verifier.refuse(Some(&refusal)),
        },
        (None, None, Some(verifier)) => return verifier.refuse(None),
        (None, _, None) => {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "missing or wrong bearer token\n",
            )
                .into_response()
        }
    }
    request.extensions_mut().insert(CheckedBearer);
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for value in [
            "Bearer s3cret",
            "bearer s3cret",
            "BEARER s3cret",
            "bEaReR  s3cret",
        ] {
            assert_eq!(bearer_token(value), Some("s3cret"), "{value:?}");
        }
        for value in ["s3cret", "Basic s3cret", "Bearers3cret", "Token s3cret", ""] {
            assert_eq!(bearer_token(value), None, "{value:?}");
        }
    }

    #[test]
    fn every_token_is_checked_and_a_tenants_names_it() {
        let access = Access {
            token: Some("single".into()),
            tenants: vec![("ta".into(), "a".into()), ("tb".into(), "b".into())],
            oauth: None,
        };
        assert_eq!(access.admit("single"), Some(None));
        assert_eq!(access.admit("tb"), Some(Some("b".into())));
        for wrong in ["", "t", "tab", "Single", "ta "] {
            assert_eq!(access.admit(wrong), None, "{wrong:?}");
        }
    }
}
