//! The issuer's signing keys (its JWKS), fetched and cached within bounds.
//!
//! The keys come from `jwks_uri`: the configured one, else the one the issuer's metadata
//! names (RFC 8414's `/.well-known/oauth-authorization-server`, then OpenID Connect
//! discovery), whose `issuer` must be the configured issuer. Every document is read
//! within [`MAX_DOCUMENT`] bytes and [`FETCH_TIMEOUT`]; a key set holds at most
//! [`MAX_KEYS`] keys. Keys are used for `jwks_cache` and fetched again after; a token whose
//! key id is not in the set makes the server fetch again, but never sooner than
//! `jwks_refetch` after the last fetch, whatever the outcome, and one fetch at a time: a
//! stream of tokens with made-up key ids costs the issuer one request per `jwks_refetch`.
//! When a fetch fails, the keys already held are used until one succeeds.
//!
//! Only signing keys sandpy verifies with are kept: RSA (RS256/384/512, PS256/384/512) and
//! EC on P-256 (ES256) or P-384 (ES384). Symmetric (`oct`) keys are never taken, so no
//! published value can become an HMAC secret.

use super::config::{safe_url, OAuthConfig};
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use reqwest::Url;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The most bytes of a metadata or key set document read; past it the fetch fails.
pub(crate) const MAX_DOCUMENT: usize = 64 * 1024;
/// The most keys a key set may hold (issuers publish a few, rotating).
pub(crate) const MAX_KEYS: usize = 32;
/// How long one fetch may take, connection and body.
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the issuer's keys could not be fetched.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum FetchError {
    /// The HTTP client could not be set up.
    #[error("cannot set up the HTTP client for the issuer: {0}")]
    Client(String),
    /// The request failed (connection, TLS, reading the body).
    #[error("cannot fetch `{url}`")]
    Request {
        /// What was fetched.
        url: String,
        /// Why.
        #[source]
        source: reqwest::Error,
    },
    /// The answer was not a success.
    #[error("`{url}` answered {status}")]
    Status {
        /// What was fetched.
        url: String,
        /// The HTTP status.
        status: reqwest::StatusCode,
    },
    /// The document is larger than [`MAX_DOCUMENT`].
    #[error("`{url}` is larger than {MAX_DOCUMENT} bytes")]
    TooLarge {
        /// What was fetched.
        url: String,
    },
    /// The fetch took longer than [`FETCH_TIMEOUT`].
    #[error("`{url}` took longer than {} s", FETCH_TIMEOUT.as_secs())]
    Timeout {
        /// What was fetched.
        url: String,
    },
    /// The document is not the JSON expected.
    #[error("`{url}` is not a valid {what}")]
    Json {
        /// What was fetched.
        url: String,
        /// What it should have been.
        what: &'static str,
        /// Why not.
        #[source]
        source: serde_json::Error,
    },
    /// The metadata is another issuer's (RFC 8414, section 3.3).
    #[error("the metadata at `{url}` is issuer {found:?}'s, not {expected:?}'s")]
    OtherIssuer {
        /// The metadata document.
        url: String,
        /// Its `issuer`.
        found: String,
        /// The configured issuer.
        expected: String,
    },
    /// The metadata names no usable `jwks_uri`.
    #[error("the metadata at `{url}` names no https `jwks_uri`")]
    NoJwksUri {
        /// The metadata document.
        url: String,
    },
    /// No metadata document was found at any of the well-known places.
    #[error("no authorization server metadata at {}", .tried.join(", "))]
    NoMetadata {
        /// The URLs tried.
        tried: Vec<String>,
    },
    /// The key set holds more than [`MAX_KEYS`] keys.
    #[error("`{url}` holds {count} keys, more than {MAX_KEYS}")]
    TooManyKeys {
        /// The key set.
        url: String,
        /// How many it holds.
        count: usize,
    },
    /// The key set holds no key sandpy verifies with.
    #[error("`{url}` holds no RSA or EC (P-256, P-384) signing key")]
    NoUsableKey {
        /// The key set.
        url: String,
    },
}

/// Why no key could be had for a token.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum KeyError {
    /// The issuer's key set has no key with the token's key id (even after fetching it
    /// again, when that was allowed).
    #[error("the issuer has no key {0:?}")]
    Unknown(String),
    /// The token names no key id and the issuer has several keys.
    #[error("the token names no key id (`kid`) and the issuer has several keys")]
    NoKeyId,
    /// The key with the token's id is not for the token's algorithm.
    #[error("the issuer's key {kid:?} is not for {alg:?}")]
    WrongAlgorithm {
        /// The key id.
        kid: String,
        /// The token's algorithm.
        alg: Algorithm,
    },
    /// The server holds no keys: the fetch failed (the server's or the issuer's problem,
    /// not the token's).
    #[error("the issuer's keys are not available")]
    Unavailable(#[source] Arc<FetchError>),
}

/// One usable key of the set.
#[derive(Clone)]
struct Key {
    kid: Option<String>,
    /// The algorithms it verifies: the one its `alg` names, else its family's.
    algorithms: &'static [Algorithm],
    /// Its own `alg`, when it names one.
    alg: Option<Algorithm>,
    key: DecodingKey,
}

/// A fetched key set.
struct KeySet {
    keys: Vec<Key>,
    fetched: Instant,
}

const RSA: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
];
const P256: &[Algorithm] = &[Algorithm::ES256];
const P384: &[Algorithm] = &[Algorithm::ES384];

/// The algorithms a token may be signed with: asymmetric ones only (never `none`, never
/// HS*, whose "secret" would be a published key).
pub(crate) const ALLOWED: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
];

impl KeySet {
    /// The key for a token with `kid` and `alg`; `None` when the set has no key `kid`.
    fn find(&self, kid: Option<&str>, alg: Algorithm) -> Option<Result<DecodingKey, KeyError>> {
        let key = match kid {
            Some(kid) => self.keys.iter().find(|k| k.kid.as_deref() == Some(kid))?,
            None => match self.keys.as_slice() {
                [only] => only,
                _ => return Some(Err(KeyError::NoKeyId)),
            },
        };
        if !key.algorithms.contains(&alg) || key.alg.is_some_and(|own| own != alg) {
            let kid = kid.unwrap_or_default().to_string();
            return Some(Err(KeyError::WrongAlgorithm { kid, alg }));
        }
        Some(Ok(key.key.clone()))
    }
}

/// What the fetches remember between them.
#[derive(Default)]
struct Fetching {
    /// When the last fetch began, whatever its outcome.
    last: Option<Instant>,
    /// Why it failed, if it did.
    failed: Option<Arc<FetchError>>,
    /// The `jwks_uri` the metadata named (found again after a failed fetch).
    discovered: Option<Url>,
}

/// The issuer's keys, fetched when needed.
pub(crate) struct Keys {
    client: reqwest::Client,
    issuer: String,
    configured: Option<Url>,
    cache: Duration,
    refetch: Duration,
    current: Mutex<Option<Arc<KeySet>>>,
    /// Held while fetching: one fetch at a time, the others wait for its keys.
    fetching: tokio::sync::Mutex<Fetching>,
}

impl Keys {
    /// Keys of `config`'s issuer; none fetched yet.
    pub(crate) fn new(config: &OAuthConfig) -> Result<Keys, FetchError> {
        let configured = config.jwks_uri.as_deref().and_then(|u| Url::parse(u).ok());
        let https = config.issuer.starts_with("https://")
            || configured.as_ref().is_some_and(|u| u.scheme() == "https");
        let client = crate::client::tls::http_client(https, config.ca_file.as_ref())
            .map_err(FetchError::Client)?;
        Ok(Keys {
            client,
            issuer: config.issuer.clone(),
            configured,
            cache: config.jwks_cache,
            refetch: config.jwks_refetch,
            current: Mutex::new(None),
            fetching: tokio::sync::Mutex::new(Fetching::default()),
        })
    }

    fn current(&self) -> Option<Arc<KeySet>> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The key that verifies a token with `kid` and `alg`: from the keys held while they
    /// are fresh, else after fetching them again (at most once per `jwks_refetch`).
    pub(crate) async fn find(
        &self,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<DecodingKey, KeyError> {
        if let Some(set) = self.current() {
            if set.fetched.elapsed() < self.cache {
                if let Some(found) = set.find(kid, alg) {
                    return found;
                }
            }
        }
        let mut fetching = self.fetching.lock().await;
        if fetching
            .last
            .is_none_or(|last| last.elapsed() >= self.refetch)
        {
            fetching.last = Some(Instant::now());
            match self.fetch(&mut fetching).await {
                Ok(set) => {
                    fetching.failed = None;
                    *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(set));
                }
                Err(e) => {
                    tracing::warn!("OAuth: the issuer's keys: {}", super::chain(&e));
                    fetching.failed = Some(Arc::new(e));
                }
            }
        }
        let failed = fetching.failed.clone();
        drop(fetching);
        match (self.current(), failed) {
            (Some(set), _) => match set.find(kid, alg) {
                Some(found) => found,
                None => Err(KeyError::Unknown(kid.unwrap_or_default().to_string())),
            },
            (None, Some(failed)) => Err(KeyError::Unavailable(failed)),
            (None, None) => Err(KeyError::Unavailable(Arc::new(FetchError::NoMetadata {
                tried: Vec::new(),
            }))),
        }
    }

    /// Fetch the key set (finding its URL in the issuer's metadata first if need be).
    async fn fetch(&self, fetching: &mut Fetching) -> Result<KeySet, FetchError> {
        let url = match (&self.configured, &fetching.discovered) {
            (Some(url), _) | (None, Some(url)) => url.clone(),
            (None, None) => {
                let url = self.discover().await?;
                fetching.discovered = Some(url.clone());
                url
            }
        };
        let fetched = self
            .document(&url)
            .await
            .and_then(|body| parse_set(&url, &body));
        if fetched.is_err() {
            fetching.discovered = None; // the metadata may name another one now
        }
        fetched
    }

    /// The `jwks_uri` of the issuer's metadata, from the first well-known place that has
    /// it: RFC 8414's, then OpenID Connect's with the path inserted, then appended (the
    /// order of the MCP authorization page).
    async fn discover(&self) -> Result<Url, FetchError> {
        let issuer = Url::parse(&self.issuer).map_err(|_| FetchError::NoMetadata {
            tried: vec![self.issuer.clone()],
        })?;
        let origin = issuer.origin().ascii_serialization();
        let path = issuer.path().trim_end_matches('/');
        let mut places = vec![
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{origin}/.well-known/openid-configuration{path}"),
        ];
        if !path.is_empty() {
            places.push(format!("{origin}{path}/.well-known/openid-configuration"));
        }
        #[derive(serde::Deserialize)]
        struct Metadata {
            issuer: String,
            jwks_uri: Option<String>,
        }
        for place in &places {
            let Ok(url) = Url::parse(place) else { continue };
            let body = match self.document(&url).await {
                Ok(body) => body,
                Err(FetchError::Status { status, .. }) if status.is_client_error() => continue,
                Err(e) => return Err(e),
            };
            let metadata: Metadata =
                serde_json::from_slice(&body).map_err(|source| FetchError::Json {
                    url: place.clone(),
                    what: "authorization server metadata document",
                    source,
                })?;
            if metadata.issuer != self.issuer {
                return Err(FetchError::OtherIssuer {
                    url: place.clone(),
                    found: metadata.issuer,
                    expected: self.issuer.clone(),
                });
            }
            return metadata
                .jwks_uri
                .and_then(|uri| Url::parse(&uri).ok())
                .filter(safe_url)
                .ok_or(FetchError::NoJwksUri { url: place.clone() });
        }
        Err(FetchError::NoMetadata { tried: places })
    }

    /// The body of `url`, at most [`MAX_DOCUMENT`] bytes, within [`FETCH_TIMEOUT`].
    async fn document(&self, url: &Url) -> Result<Vec<u8>, FetchError> {
        let named = || url.to_string();
        let read = async {
            let request = self.client.get(url.clone());
            let request = request.header(reqwest::header::ACCEPT, "application/json");
            let mut response = request.send().await.map_err(|source| FetchError::Request {
                url: named(),
                source,
            })?;
            if !response.status().is_success() {
                let status = response.status();
                return Err(FetchError::Status {
                    url: named(),
                    status,
                });
            }
            if response
                .content_length()
                .is_some_and(|n| n > MAX_DOCUMENT as u64)
            {
                return Err(FetchError::TooLarge { url: named() });
            }
            let mut body = Vec::new();
            while let Some(chunk) =
                response
                    .chunk()
                    .await
                    .map_err(|source| FetchError::Request {
                        url: named(),
                        source,
                    })?
            {
                if body.len() + chunk.len() > MAX_DOCUMENT {
                    return Err(FetchError::TooLarge { url: named() });
                }
                body.extend_from_slice(&chunk);
            }
            Ok(body)
        };
        tokio::time::timeout(FETCH_TIMEOUT, read)
            .await
            .unwrap_or_else(|_| Err(FetchError::Timeout { url: named() }))
    }
}

/// The usable keys of a JWKS document (RFC 7517): signing keys of the kinds sandpy
/// verifies with; the others are left out.
fn parse_set(url: &Url, body: &[u8]) -> Result<KeySet, FetchError> {
    #[derive(serde::Deserialize)]
    struct RawSet {
        keys: Vec<serde_json::Value>,
    }
    let raw: RawSet = serde_json::from_slice(body).map_err(|source| FetchError::Json {
        url: url.to_string(),
        what: "JWKS document",
        source,
    })?;
    if raw.keys.len() > MAX_KEYS {
        return Err(FetchError::TooManyKeys {
            url: url.to_string(),
            count: raw.keys.len(),
        });
    }
    let keys: Vec<Key> = raw.keys.into_iter().filter_map(usable).collect();
    if keys.is_empty() {
        return Err(FetchError::NoUsableKey {
            url: url.to_string(),
        });
    }
    Ok(KeySet {
        keys,
        fetched: Instant::now(),
    })
}

/// A JWK as a key to verify with, if it is one sandpy uses.
fn usable(value: serde_json::Value) -> Option<Key> {
    let jwk: Jwk = serde_json::from_value(value).ok()?;
    if jwk
        .common
        .public_key_use
        .as_ref()
        .is_some_and(|u| *u != PublicKeyUse::Signature)
    {
        return None;
    }
    let algorithms = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => RSA,
        AlgorithmParameters::EllipticCurve(ec) => match ec.curve {
            EllipticCurve::P256 => P256,
            EllipticCurve::P384 => P384,
            _ => return None,
        },
        // Symmetric and EdDSA keys: never.
        AlgorithmParameters::OctetKey(_) | AlgorithmParameters::OctetKeyPair(_) => return None,
    };
    let alg = match jwk.common.key_algorithm {
        None => None,
        Some(own) => {
            let alg = match own {
                KeyAlgorithm::RS256 => Algorithm::RS256,
                KeyAlgorithm::RS384 => Algorithm::RS384,
                KeyAlgorithm::RS512 => Algorithm::RS512,
                KeyAlgorithm::PS256 => Algorithm::PS256,
                KeyAlgorithm::PS384 => Algorithm::PS384,
                KeyAlgorithm::PS512 => Algorithm::PS512,
                KeyAlgorithm::ES256 => Algorithm::ES256,
                KeyAlgorithm::ES384 => Algorithm::ES384,
                _ => return None, // HS*, EdDSA, encryption algorithms
            };
            algorithms.contains(&alg).then_some(alg)?;
            Some(alg)
        }
    };
    let key = DecodingKey::from_jwk(&jwk).ok()?;
    Some(Key {
        kid: jwk.common.key_id,
        algorithms,
        alg,
        key,
    })
}
