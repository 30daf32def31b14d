//! `sandpy serve --http` behind an OAuth issuer: an OAuth 2.1 resource server, as the MCP
//! authorization page (2025-11-25) asks of remote servers.
//!
//! - A request without a valid access token gets 401 with `WWW-Authenticate: Bearer
//!   resource_metadata="<url>"` (RFC 9728, section 5.1), and `error="invalid_token"` when it
//!   presented one that was refused (RFC 6750, section 3.1).
//! - `/.well-known/oauth-protected-resource` (and its form with the MCP endpoint's path,
//!   `/.well-known/oauth-protected-resource/mcp`) says which resource this is and which
//!   authorization server issues its tokens ([`metadata`]).
//! - A token is taken only when it is a JWT signed by one of the issuer's keys
//!   ([`keys`]: fetched, cached and refetched within bounds) with an asymmetric algorithm
//!   (never `none`, never HS*), `iss` exactly the issuer, `aud` containing this server's
//!   resource URI, `exp` not past and `nbf` (if any) not ahead, within the leeway. Claims
//!   are read into typed fields: a claim of the wrong type (`"nbf": "tomorrow"`) refuses
//!   the token rather than being skipped.
//! - The claim `tenant_claim` (default `sub`) names the tenant ([`ClaimedTenant`]): the
//!   owner of the `run_python` sessions the token's calls make, as a configured token's
//!   tenant is, and the client whose MCP sessions the token may use.
//!
//! Static tokens (`--token`, `sandpy.tenants`) still work beside it: a presented token is
//! compared with them first.

pub(crate) mod config;
pub(crate) mod keys;

use crate::identity::ClaimedTenant;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use base64::Engine;
use config::OAuthConfig;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use keys::{KeyError, Keys, ALLOWED};
use serde::Deserialize;
use std::str::FromStr;
use std::sync::Arc;

/// The longest access token read; a longer one is refused before it is decoded.
pub(crate) const MAX_TOKEN: usize = 16 * 1024;
/// The longest tenant name a claim may give.
pub(crate) const MAX_TENANT: usize = 256;

/// Why an access token was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum Refusal {
    /// Longer than [`MAX_TOKEN`].
    #[error("the token is longer than {MAX_TOKEN} bytes")]
    TooLong,
    /// Not three base64url parts with a JSON header.
    #[error("the token is not a JWT")]
    Malformed,
    /// Signed with an algorithm not taken (`none`, HS*, ...), or with `crit` headers.
    #[error("tokens signed with {0:?} are not taken")]
    Algorithm(String),
    /// No key for it.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The signature does not verify.
    #[error("the signature is not the issuer's")]
    Signature,
    /// Its claims are not the JSON expected (a claim of the wrong type).
    #[error("the token's claims are not valid")]
    Claims(#[source] jsonwebtoken::errors::Error),
    /// A claim it must have (`iss`, `aud`, `exp`) is missing.
    #[error("the token has no `{0}` claim")]
    Missing(&'static str),
    /// Another issuer's.
    #[error("the token is not from the configured issuer")]
    Issuer,
    /// Not for this server.
    #[error("the token is not for this server (its audience)")]
    Audience,
    /// Past its `exp`.
    #[error("the token has expired")]
    Expired,
    /// Before its `nbf`.
    #[error("the token is not valid yet")]
    NotYet,
    /// The tenant claim is missing or not a name.
    #[error("the token's `{0}` claim is missing or not a name")]
    Tenant(String),
    /// Another check of the JWT library failed.
    #[error("the token is not valid")]
    Invalid(#[source] jsonwebtoken::errors::Error),
}

impl Refusal {
    /// The server's problem (the issuer's keys cannot be had), not the token's.
    fn is_unavailable(&self) -> bool {
        matches!(self, Refusal::Key(KeyError::Unavailable(_)))
    }
}

/// The header of a JWT, read before any key is looked for.
#[derive(Deserialize)]
struct RawHeader {
    alg: String,
    kid: Option<String>,
    /// Whether the header has `crit` at all: any value, `null` too, is refused (RFC 7515
    /// allows only a non-empty list, of extensions this server does not know).
    #[serde(default, deserialize_with = "present")]
    crit: bool,
}

/// `true` for a field that is there, whatever its value (`null` too).
fn present<'de, D: serde::Deserializer<'de>>(field: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(field).map(|_| true)
}

/// The claims a token must have, typed: a wrong type is a refusal, not a skipped check.
#[derive(Deserialize)]
struct Claims {
    iss: Option<String>,
    aud: Option<Audience>,
    exp: Option<f64>,
    nbf: Option<f64>,
    #[serde(flatten)]
    other: serde_json::Map<String, serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

/// Checks access tokens of the configured issuer.
pub(crate) struct Verifier {
    config: OAuthConfig,
    keys: Keys,
    /// `Bearer resource_metadata="..."`, the challenge of a request without a token.
    challenge: HeaderValue,
}

/// The chain of `error`'s messages, for the log.
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(source) = next {
        text.push_str(": ");
        text.push_str(&source.to_string());
        next = source.source();
    }
    text
}

/// Text safe inside a quoted `WWW-Authenticate` parameter (RFC 6750's `error_description`
/// characters), at most 200 of them.
fn quotable(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '"' | '\\' => '\'',
            ' '..='~' => c,
            _ => '?',
        })
        .take(200)
        .collect()
}

impl Verifier {
    /// A verifier of `config`'s tokens; keys are fetched when the first token comes.
    pub(crate) fn new(config: OAuthConfig) -> Result<Verifier, keys::FetchError> {
        let keys = Keys::new(&config)?;
        let challenge = format!(
            "Bearer resource_metadata=\"{}\"",
            quotable(&config.resource_metadata_url())
        );
        let challenge =
            HeaderValue::from_str(&challenge).unwrap_or(HeaderValue::from_static("Bearer"));
        Ok(Verifier {
            config,
            keys,
            challenge,
        })
    }

    /// The tenant `token` names, if it is a valid access token for this server.
    pub(crate) async fn verify(&self, token: &str) -> Result<ClaimedTenant, Refusal> {
        if token.len() > MAX_TOKEN {
            return Err(Refusal::TooLong);
        }
        let header = token.split('.').next().ok_or(Refusal::Malformed)?;
        let header = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(header)
            .map_err(|_| Refusal::Malformed)?;
        let header: RawHeader = serde_json::from_slice(&header).map_err(|_| Refusal::Malformed)?;
        let alg = Algorithm::from_str(&header.alg)
            .ok()
            .filter(|alg| ALLOWED.contains(alg))
            .ok_or_else(|| Refusal::Algorithm(quotable(&header.alg)))?;
        if header.crit {
            return Err(Refusal::Algorithm(format!("{alg:?} with `crit`")));
        }
        let key = self.keys.find(header.kid.as_deref(), alg).await?;
        let config = &self.config;
        let mut validation = Validation::new(alg);
        validation.set_issuer(&[&config.issuer]);
        validation.set_audience(&[&config.audience]);
        validation.leeway = config.leeway.as_secs();
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let claims = match jsonwebtoken::decode::<Claims>(token, &key, &validation) {
            Ok(data) => data.claims,
            Err(e) => {
                return Err(match e.kind() {
                    ErrorKind::InvalidSignature => Refusal::Signature,
                    ErrorKind::ExpiredSignature => Refusal::Expired,
                    ErrorKind::ImmatureSignature => Refusal::NotYet,
                    ErrorKind::InvalidIssuer => Refusal::Issuer,
                    ErrorKind::InvalidAudience => Refusal::Audience,
                    ErrorKind::MissingRequiredClaim(claim) => match claim.as_str() {
                        "iss" => Refusal::Missing("iss"),
                        "aud" => Refusal::Missing("aud"),
                        _ => Refusal::Missing("exp"),
                    },
                    ErrorKind::Json(_) => Refusal::Claims(e),
                    ErrorKind::Base64(_) | ErrorKind::Utf8(_) | ErrorKind::InvalidToken => {
                        Refusal::Malformed
                    }
                    _ => Refusal::Invalid(e),
                })
            }
        };
        // The library's checks, again on the typed claims: the library skips a claim it
        // cannot read as a number, these fields would not have parsed.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let leeway = config.leeway.as_secs_f64();
        if claims.iss.ok_or(Refusal::Missing("iss"))? != config.issuer {
            return Err(Refusal::Issuer);
        }
        let audience = match claims.aud.ok_or(Refusal::Missing("aud"))? {
            Audience::One(one) => one == config.audience,
            Audience::Many(many) => many.iter().any(|a| a == &config.audience),
        };
        if !audience {
            return Err(Refusal::Audience);
        }
        let exp = claims.exp.ok_or(Refusal::Missing("exp"))?;
        if !exp.is_finite() || exp + leeway < now {
            return Err(Refusal::Expired);
        }
        if claims
            .nbf
            .is_some_and(|nbf| !nbf.is_finite() || nbf - leeway > now)
        {
            return Err(Refusal::NotYet);
        }
        let tenant = claims
            .other
            .get(&config.tenant_claim)
            .and_then(|v| v.as_str())
            .filter(|name| {
                !name.is_empty() && name.len() <= MAX_TENANT && !name.chars().any(char::is_control)
            })
            .ok_or_else(|| Refusal::Tenant(config.tenant_claim.clone()))?;
        Ok(ClaimedTenant(Arc::from(tenant)))
    }

    /// The answer to a request without a valid token: 401 with the challenge (and
    /// `error="invalid_token"` when one was refused), or 503 when the issuer's keys could
    /// not be had.
    pub(crate) fn refuse(&self, refusal: Option<&Refusal>) -> Response {
        let Some(refusal) = refusal else {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, self.challenge.clone())],
                "missing bearer token: get an access token from the issuer the resource \
                 metadata names\n",
            )
                .into_response();
        };
        if refusal.is_unavailable() {
            tracing::warn!("OAuth: a token could not be checked: {}", chain(refusal));
            let mut response = (
                StatusCode::SERVICE_UNAVAILABLE,
                "the issuer's keys cannot be fetched now; try again later\n",
            )
                .into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("10"));
            return response;
        }
        tracing::debug!("OAuth: token refused: {}", chain(refusal));
        let description = quotable(&refusal.to_string());
        let challenge = format!(
            "{}, error=\"invalid_token\", error_description=\"{description}\"",
            self.challenge.to_str().unwrap_or("Bearer")
        );
        let challenge =
            HeaderValue::from_str(&challenge).unwrap_or_else(|_| self.challenge.clone());
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, challenge)],
            format!("invalid access token: {description}\n"),
        )
            .into_response()
    }

    /// The protected resource metadata routes: `/.well-known/oauth-protected-resource`,
    /// and the same with the audience's path and with `/mcp` after it. Open (no token) and
    /// readable from any origin, as discovery needs.
    pub(crate) fn routes(&self) -> Router {
        let document = metadata(&self.config).to_string();
        let serve = move || {
            let document = document.clone();
            async move {
                (
                    [
                        (header::CONTENT_TYPE, "application/json"),
                        (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
                        (header::CACHE_CONTROL, "max-age=3600"),
                    ],
                    document,
                )
            }
        };
        let base = "/.well-known/oauth-protected-resource";
        let mut paths = vec![base.to_string(), format!("{base}/mcp")];
        if let Ok(audience) = reqwest::Url::parse(&self.config.audience) {
            let path = audience.path().trim_end_matches('/');
            if !path.is_empty() && !paths.contains(&format!("{base}{path}")) {
                paths.push(format!("{base}{path}"));
            }
        }
        let mut router = Router::new();
        for path in paths {
            router = router.route(&path, get(serve.clone()));
        }
        router
    }
}

/// The protected resource metadata document (RFC 9728, section 2).
pub(crate) fn metadata(config: &OAuthConfig) -> serde_json::Value {
    let mut document = serde_json::json!({
        "resource": config.audience,
        "authorization_servers": [config.issuer],
        "bearer_methods_supported": ["header"],
        "resource_name": "sandpy",
    });
    if !config.scopes_supported.is_empty() {
        document["scopes_supported"] = serde_json::json!(config.scopes_supported);
    }
    document
}
