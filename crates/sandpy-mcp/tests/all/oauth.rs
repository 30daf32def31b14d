//! `sandpy serve --http` behind an OAuth issuer (`sandpy.auth`): an issuer made here (its
//! own keys: RSA from `tests/fixtures/oauth_rsa_key.pem`, P-256 made in the test; its
//! metadata and JWKS served on loopback by a small server of the test) signs the tokens,
//! good and forged. Each attack is named by the boundary it crosses and asserts the exact
//! refusal (`error_description`); each test ends with the server still serving a good
//! token.

use crate::{block_on, config, sandbox, text};
use axum::body::Body;
use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::get;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair, RsaKeyPair};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::ServiceExt;
use sandpy_mcp::{HttpListener, SandpyServer};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The audience every good token names: the server's resource URI (its port is not known
/// when the token is made, and need not be: it is an identifier).
const AUDIENCE: &str = "https://sandpy.test/mcp";

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

/// The issuer's keys: RSA (`rsa-1`) and P-256 (`ec-1`), and an attacker's RSA-like key
/// is never needed: a bad signature is a good key's signature over other bytes.
struct Keys {
    rsa: RsaKeyPair,
    ec: EcdsaKeyPair,
    rng: SystemRandom,
}

impl Keys {
    fn new() -> Keys {
        let pem = include_str!("../fixtures/oauth_rsa_key.pem");
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(body)
            .expect("PEM body");
        let rsa = RsaKeyPair::from_pkcs8(&der).expect("the fixture RSA key");
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).expect("a P-256 key");
        let ec = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).expect("P-256 key");
        Keys { rsa, ec, rng }
    }

    /// The RSA public key as a JWK.
    fn rsa_jwk(&self, kid: &str) -> Value {
        let public = signature::RsaPublicKeyComponents::<Vec<u8>>::from(self.rsa.public());
        json!({"kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid,
               "n": b64(&public.n), "e": b64(&public.e)})
    }

    /// The P-256 public key as a JWK.
    fn ec_jwk(&self, kid: &str) -> Value {
        let point = self.ec.public_key().as_ref();
        json!({"kty": "EC", "crv": "P-256", "use": "sig", "kid": kid,
               "x": b64(&point[1..33]), "y": b64(&point[33..65])})
    }

    /// The issuer's key set.
    fn jwks(&self) -> Value {
        json!({"keys": [self.rsa_jwk("rsa-1"), self.ec_jwk("ec-1")]})
    }

    /// A JWT with `header` and `claims`, signed as `header.alg` says: RS256 and ES256 with
    /// the issuer's keys, HS256 with `secret`, `none` not at all.
    fn sign_with(&self, header: &Value, claims: &Value, secret: &[u8]) -> String {
        let message = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let signature = match header["alg"].as_str() {
            Some("RS256") => {
                let mut signature = vec![0; self.rsa.public().modulus_len()];
                self.rsa
                    .sign(
                        &signature::RSA_PKCS1_SHA256,
                        &self.rng,
                        message.as_bytes(),
                        &mut signature,
                    )
                    .expect("RSA signature");
                signature
            }
            Some("ES256") => self
                .ec
                .sign(&self.rng, message.as_bytes())
                .expect("ECDSA signature")
                .as_ref()
                .to_vec(),
            Some("HS256") => {
                let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
                ring::hmac::sign(&key, message.as_bytes()).as_ref().to_vec()
            }
            _ => Vec::new(),
        };
        format!("{message}.{}", b64(&signature))
    }

    fn sign(&self, header: &Value, claims: &Value) -> String {
        self.sign_with(header, claims, b"")
    }
}

/// What the issuer's little server serves, and what it counts.
struct IssuerState {
    issuer: String,
    jwks: Mutex<String>,
    /// A key set this many bytes long, sent in chunks without a length, instead.
    huge: Option<usize>,
    /// Bytes of the huge key set the server asked for.
    huge_sent: AtomicUsize,
    jwks_fetches: AtomicUsize,
}

/// The issuer: RFC 8414 metadata at `/.well-known/oauth-authorization-server` naming
/// `/jwks`, on a free loopback port.
struct Issuer {
    url: String,
    state: Arc<IssuerState>,
}

async fn metadata(State(state): State<Arc<IssuerState>>) -> axum::response::Response {
    let document = json!({
        "issuer": state.issuer,
        "jwks_uri": format!("{}/jwks", state.issuer),
        "authorization_endpoint": format!("{}/authorize", state.issuer),
        "token_endpoint": format!("{}/token", state.issuer),
        "response_types_supported": ["code"],
    });
    ([("content-type", "application/json")], document.to_string()).into_response()
}

async fn jwks(State(state): State<Arc<IssuerState>>) -> axum::response::Response {
    state.jwks_fetches.fetch_add(1, Ordering::SeqCst);
    if let Some(size) = state.huge {
        // `{"keys": [` then padding without end, counted as it is read.
        let chunk = " ".repeat(16 * 1024);
        let counted = state.clone();
        let head =
            futures::stream::once(async { Ok::<_, std::io::Error>(r#"{"keys": ["#.to_string()) });
        let body = futures::stream::iter((0..size / chunk.len()).map(move |_| {
            counted.huge_sent.fetch_add(chunk.len(), Ordering::SeqCst);
            Ok(chunk.clone())
        }));
        return Body::from_stream(futures::StreamExt::chain(head, body)).into_response();
    }
    let document = state.jwks.lock().expect("jwks").clone();
    ([("content-type", "application/json")], document).into_response()
}

impl Issuer {
    async fn start(keys: &Keys, huge: Option<usize>) -> Issuer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the issuer");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let state = Arc::new(IssuerState {
            issuer: url.clone(),
            jwks: Mutex::new(keys.jwks().to_string()),
            huge,
            huge_sent: AtomicUsize::new(0),
            jwks_fetches: AtomicUsize::new(0),
        });
        let app = axum::Router::new()
            .route("/.well-known/oauth-authorization-server", get(metadata))
            .route("/jwks", get(jwks))
            .with_state(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Issuer { url, state }
    }

    fn fetches(&self) -> usize {
        self.state.jwks_fetches.load(Ordering::SeqCst)
    }

    /// Good claims for `subject`, valid for an hour.
    fn claims(&self, subject: &str) -> Value {
        json!({"iss": self.url, "aud": AUDIENCE, "sub": subject,
               "iat": now(), "exp": now() + 3600, "jti": format!("{subject}-{}", now())})
    }
}

/// `sandpy serve --http` on a free loopback port behind `issuer`, with `extra` keys in
/// `sandpy.auth` and an audit log in `dir`.
async fn serve(issuer: &Issuer, extra: Value, dir: &std::path::Path) -> SocketAddr {
    serve_with(issuer, extra, json!({}), dir).await.0
}

/// [`serve`] with `sandpy` keys besides `auth` and `audit_log`; also the server, to save
/// its sessions as a drain does.
async fn serve_with(
    issuer: &Issuer,
    extra: Value,
    sandpy: Value,
    dir: &std::path::Path,
) -> (SocketAddr, SandpyServer) {
    let mut auth = json!({"issuer": issuer.url, "audience": AUDIENCE, "tenant_claim": "sub"});
    if let (Value::Object(auth), Value::Object(extra)) = (&mut auth, extra) {
        auth.extend(extra);
    }
    let audit = dir.join("audit.jsonl");
    let mut section = json!({"auth": auth, "audit_log": audit});
    if let (Value::Object(section), Value::Object(sandpy)) = (&mut section, sandpy) {
        section.extend(sandpy);
    }
    let config = config(&json!({"mcpServers": {}, "sandpy": section}).to_string());
    let hub = sandpy_mcp::Hub::start(&config).await;
    let resolved = config.settings.resolve(None).expect("resolved");
    let server = SandpyServer::new(sandbox().clone(), hub, &resolved).expect("server");
    let listener = HttpListener::bind_with_oauth(
        ([127, 0, 0, 1], 0).into(),
        None,
        &resolved.settings.tenants,
        config.auth.clone(),
    )
    .await
    .expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(listener.serve(server.clone(), std::future::pending()));
    (address, server)
}

/// A plain HTTP client (reqwest over http needs the process's rustls provider all the
/// same).
fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#;

/// `POST /mcp` with `body`, `token` and `session`: the status, the `WWW-Authenticate`
/// header, the `Mcp-Session-Id` header.
async fn post(
    address: SocketAddr,
    token: Option<&str>,
    session: Option<&str>,
    body: &str,
) -> (u16, String, Option<String>) {
    let mut request = http()
        .post(format!("http://{address}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let response = request.send().await.expect("an answer");
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let challenge = header("www-authenticate").unwrap_or_default();
    let session = header("mcp-session-id");
    (response.status().as_u16(), challenge, session)
}

/// The challenge of a refused token: `error="invalid_token"` and the reason.
fn refused_because(challenge: &str) -> &str {
    let (_, description) = challenge
        .split_once(", error=\"invalid_token\", error_description=\"")
        .unwrap_or_else(|| panic!("not an invalid_token challenge: {challenge:?}"));
    description.trim_end_matches('"')
}

/// An rmcp client with `token` calling `tool` with `arguments`; the result.
async fn call_as(address: SocketAddr, token: &str, tool: &str, arguments: Value) -> Value {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = StreamableHttpClientTransportConfig::with_uri(format!("http://{address}/mcp"))
        .auth_header(token.to_string());
    let client = ().serve(StreamableHttpClientTransport::from_config(config)).await;
    let client = client.expect("initialize with the token");
    let result = crate::tool_result(&client, tool, arguments).await;
    let _ = client.cancel().await;
    result
}

/// An rmcp client with `token`: initialize, list the tools, run `code`; the result's text.
async fn run_as(address: SocketAddr, token: &str, code: &str) -> String {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = StreamableHttpClientTransportConfig::with_uri(format!("http://{address}/mcp"))
        .auth_header(token.to_string());
    let client = ().serve(StreamableHttpClientTransport::from_config(config)).await;
    let client = client.expect("initialize with the token");
    let tools = client.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().any(|t| t.name == "run_python"), "{tools:?}");
    let result = crate::tool_result(
        &client,
        "run_python",
        json!({"code": code, "session_id": "main"}),
    )
    .await;
    let _ = client.cancel().await;
    text(&result).to_string()
}

#[test]
fn a_good_token_initializes_lists_and_runs_as_the_tenant_its_claim_names() {
    block_on(async {
        let keys = Keys::new();
        let issuer = Issuer::start(&keys, None).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let address = serve(&issuer, json!({}), dir.path()).await;
        let rs = json!({"alg": "RS256", "typ": "at+jwt", "kid": "rsa-1"});
        let es = json!({"alg": "ES256", "kid": "ec-1"});
        let alice = keys.sign(&rs, &issuer.claims("alice@example.com"));
        let ran = run_as(address, &alice, "x = 41\nx + 1").await;
        assert!(ran.contains("42"), "{ran}");
        // Another token of the same person (ES256 this time), another MCP session: the
        // same tenant, so the same `run_python` session.
        let mut later = issuer.claims("alice@example.com");
        later["jti"] = json!("another");
        let alice_again = keys.sign(&es, &later);
        let ran = run_as(address, &alice_again, "x + 100").await;
        assert!(ran.contains("141"), "the claim is the tenant: {ran}");
        // Another person does not reach it.
        let bob = keys.sign(&rs, &issuer.claims("bob"));
        let ran = run_as(address, &bob, "x").await;
        assert!(ran.contains("NameError"), "bob has his own sessions: {ran}");
        let audit = std::fs::read_to_string(dir.path().join("audit.jsonl")).expect("audit");
        let tenants: Vec<String> = audit
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("JSON line")["tenant"].to_string())
            .collect();
        assert_eq!(
            tenants,
            [
                "\"oauth:alice@example.com\"",
                "\"oauth:alice@example.com\"",
                "\"oauth:bob\""
            ]
        );
        assert_eq!(
            issuer.fetches(),
            1,
            "the keys were fetched once, then cached"
        );
    });
}

#[test]
fn without_a_token_the_answer_is_401_naming_the_resource_metadata_which_names_the_issuer() {
    block_on(async {
        let keys = Keys::new();
        let issuer = Issuer::start(&keys, None).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let address = serve(
            &issuer,
            json!({"scopes_supported": ["mcp:run"]}),
            dir.path(),
        )
        .await;
        let (status, challenge, _) = post(address, None, None, INITIALIZE).await;
        assert_eq!(status, 401);
        let metadata_url = "https://sandpy.test/.well-known/oauth-protected-resource/mcp";
        assert_eq!(
            challenge,
            format!("Bearer resource_metadata=\"{metadata_url}\"")
        );
        let expected = json!({
            "resource": AUDIENCE,
            "authorization_servers": [issuer.url],
            "bearer_methods_supported": ["header"],
            "resource_name": "sandpy",
            "scopes_supported": ["mcp:run"],
        });
        for path in [
            "/.well-known/oauth-protected-resource",
            "/.well-known/oauth-protected-resource/mcp",
        ] {
            let response = http()
                .get(format!("http://{address}{path}"))
                .header("origin", "https://inspector.example")
                .send()
                .await
                .expect("metadata");
            assert_eq!(response.status(), 200, "{path} is open");
            assert_eq!(response.headers()["access-control-allow-origin"], "*");
            let document: Value = response.json().await.expect("JSON");
            assert_eq!(document, expected, "{path}");
        }
        // Another scheme than Bearer is no token.
        let response = http()
            .post(format!("http://{address}/mcp"))
            .header("authorization", "Basic YTpi")
            .body(INITIALIZE)
            .send()
            .await
            .expect("answer");
        assert_eq!(response.status(), 401);
        assert_eq!(issuer.fetches(), 0, "nothing to verify, nothing fetched");
    });
}

/// Every token the issuer did not issue for this server, now: refused with 401,
/// `error="invalid_token"` and the reason.
#[test]
fn forged_misdirected_and_stale_tokens_are_refused_with_their_reason() {
    block_on(async {
        let keys = Keys::new();
        let issuer = Issuer::start(&keys, None).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let address = serve(&issuer, json!({"leeway_s": 30}), dir.path()).await;
        let rs = json!({"alg": "RS256", "kid": "rsa-1"});
        let good = issuer.claims("mallory");
        let with = |key: &str, value: Value| {
            let mut claims = good.clone();
            claims[key] = value;
            claims
        };
        let without = |key: &str| {
            let mut claims = good.clone();
            claims.as_object_mut().expect("object").remove(key);
            claims
        };
        let signed = keys.sign(&rs, &good);
        let (head, _) = signed.rsplit_once('.').expect("three parts");
        let other_claims = keys.sign(&rs, &with("sub", json!("alice")));
        let (_, other_signature) = other_claims.rsplit_once('.').expect("three parts");
        // The issuer's public key, as published, used as an HMAC secret.
        let public_pem = keys.rsa_jwk("rsa-1").to_string();
        let attacks: Vec<(&str, String, &str)> = vec![
            (
                "wrong audience",
                keys.sign(&rs, &with("aud", json!("https://other.test/mcp"))),
                "the token is not for this server (its audience)",
            ),
            (
                "audience list without this server",
                keys.sign(
                    &rs,
                    &with("aud", json!(["https://a.test", "https://b.test"])),
                ),
                "the token is not for this server (its audience)",
            ),
            (
                "no audience",
                keys.sign(&rs, &without("aud")),
                "the token has no `aud` claim",
            ),
            (
                "wrong issuer",
                keys.sign(&rs, &with("iss", json!("https://evil.test"))),
                "the token is not from the configured issuer",
            ),
            (
                "expired past the leeway",
                keys.sign(&rs, &with("exp", json!(now() - 60))),
                "the token has expired",
            ),
            (
                "no expiry",
                keys.sign(&rs, &without("exp")),
                "the token has no `exp` claim",
            ),
            (
                "not valid yet",
                keys.sign(&rs, &with("nbf", json!(now() + 600))),
                "the token is not valid yet",
            ),
            (
                "nbf of the wrong type (skipped by a lax reader)",
                keys.sign(&rs, &with("nbf", json!("9999999999"))),
                "the token's claims are not valid",
            ),
            (
                "exp of the wrong type",
                keys.sign(&rs, &with("exp", json!("9999999999"))),
                "the token's claims are not valid",
            ),
            (
                "bad signature (another token's)",
                format!("{head}.{other_signature}"),
                "the signature is not the issuer's",
            ),
            (
                "alg none",
                keys.sign(&json!({"alg": "none", "kid": "rsa-1"}), &good),
                "tokens signed with 'none' are not taken",
            ),
            (
                "alg none, no key id",
                keys.sign(&json!({"alg": "none"}), &good),
                "tokens signed with 'none' are not taken",
            ),
            (
                "no issuer",
                keys.sign(&rs, &without("iss")),
                "the token has no `iss` claim",
            ),
            (
                "HS256 signed with the issuer's public key",
                keys.sign_with(
                    &json!({"alg": "HS256", "kid": "rsa-1"}),
                    &good,
                    public_pem.as_bytes(),
                ),
                "tokens signed with 'HS256' are not taken",
            ),
            (
                "RS256 header on the EC key",
                keys.sign(&json!({"alg": "RS256", "kid": "ec-1"}), &good),
                "the issuer's key 'ec-1' is not for RS256",
            ),
            (
                "no key id with two keys published",
                keys.sign(&json!({"alg": "RS256"}), &good),
                "the token names no key id (`kid`) and the issuer has several keys",
            ),
            (
                "crit header",
                keys.sign(
                    &json!({"alg": "RS256", "kid": "rsa-1", "crit": ["exp"]}),
                    &good,
                ),
                "tokens signed with 'RS256 with `crit`' are not taken",
            ),
            (
                "no tenant claim",
                keys.sign(&rs, &without("sub")),
                "the token's `sub` claim is missing or not a name",
            ),
            (
                "tenant claim not a string",
                keys.sign(&rs, &with("sub", json!(42))),
                "the token's `sub` claim is missing or not a name",
            ),
            (
                "tenant claim with a line break",
                keys.sign(&rs, &with("sub", json!("a\nb"))),
                "the token's `sub` claim is missing or not a name",
            ),
            (
                "not a JWT",
                "not-a-jwt".to_string(),
                "the token is not a JWT",
            ),
            (
                "too long",
                "a".repeat(17 * 1024),
                "the token is longer than 16384 bytes",
            ),
        ];
        for (attack, token, reason) in &attacks {
            let (status, challenge, session) = post(address, Some(token), None, INITIALIZE).await;
            assert_eq!(status, 401, "{attack}: {challenge}");
            assert!(session.is_none(), "{attack}: no session made");
            assert!(
                challenge.starts_with(
                    "Bearer resource_metadata=\"https://sandpy.test/.well-known/oauth-protected-resource/mcp\""
                ),
                "{attack}: {challenge}"
            );
            assert_eq!(refused_because(&challenge), *reason, "{attack}");
        }
        // Within the leeway, an expired token still passes (clocks drift).
        let late = keys.sign(&rs, &with("exp", json!(now() - 5)));
        let (status, challenge, _) = post(address, Some(&late), None, INITIALIZE).await;
        assert_eq!(status, 200, "{challenge}");
        let (status, _, _) = post(address, Some(&keys.sign(&rs, &good)), None, INITIALIZE).await;
        assert_eq!(status, 200, "the server still takes a good token");
    });
}

/// RFC 7515 allows `crit` only as a list of extensions; `"crit": null` is no list, and a
/// header that has `crit` at all is refused, whatever its value (it was taken as none).
#[test]
fn a_crit_header_of_null_or_any_value_is_refused() {
    block_on(async {
        let keys = Keys::new();
        let issuer = Issuer::start(&keys, None).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let address = serve(&issuer, json!({}), dir.path()).await;
        let good = issuer.claims("mallory");
        for crit in [json!(null), json!([]), json!("exp"), json!({})] {
            let header = json!({"alg": "RS256", "kid": "rsa-1", "crit": crit});
            let token = keys.sign(&header, &good);
            let (status, challenge, session) = post(address, Some(&token), None, INITIALIZE).await;
            assert_eq!(status, 401, "crit {crit}: {challenge}");
            assert!(session.is_none(), "crit {crit}: no session made");
            assert_eq!(
                refused_because(&challenge),
                "tokens signed with 'RS256 with `crit`' are not taken",
                "crit {crit}"
            );
        }
        let rs = json!({"alg": "RS256", "kid": "rsa-1"});
        let (status, _, _) = post(address, Some(&keys.sign(&rs, &good)), None, INITIALIZE).await;
        assert_eq!(status, 200, "the server still takes a good token");
    });
}

#[test]
fn unknown_key_ids_refetch_the_keys_at_most_once_per_interval() {
    block_on(async {
        let keys = Keys::new();
        let issuer = Issuer::start(&keys, None).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let address = serve(
            &issuer,
            json!({"jwks_refetch_s": 2, "jwks_cache_s": 600}),
            dir.path(),
        )
        .await;
        let good = issuer.claims("carol");
        let rs = json!({"alg": "RS256", "kid": "rsa-1"});
        let (status, _, _) = post(address, Some(&keys.sign(&rs, &good)), None, INITIALIZE).await;
        assert_eq!((status, issuer.fetches()), (200, 1));
        // A flood of made-up key ids: at most one fetch more for the whole flood.
        for i in 0..40 {
            let kid = json!({"alg": "RS256", "kid": format!("made-up-{i}")});
            let (status, challenge, _) =
                post(address, Some(&keys.sign(&kid, &good)), None, INITIALIZE).await;
            assert_eq!(status, 401);
            assert_eq!(
                refused_because(&challenge),
                format!("the issuer has no key 'made-up-{i}'")
            );
        }
        assert!(
            issuer.fetches() <= 2,
            "{} fetches for 40 unknown key ids",
            issuer.fetches()
        );
        // The issuer rotates: a token with the new key id is taken once the interval has
        // passed.
        *issuer.state.jwks.lock().expect("jwks") =
            json!({"keys": [keys.rsa_jwk("rsa-2")]}).to_string();
        tokio::time::sleep(Duration::from_millis(2100)).await;
        let rotated = json!({"alg": "RS256", "kid": "rsa-2"});
        let (status, challenge, _) =
            post(address, Some(&keys.sign(&rotated, &good)), None, INITIALIZE).await;
        assert_eq!(status, 200, "{challenge}");
        assert!(issuer.fetches() <= 3, "{}", issuer.fetches());
    });
}

#[test]
fn an_oversized_key_set_is_not_read_whole_and_no_token_passes() {
    block_on(async {
        let keys = Keys::new();
        let huge = 64 * 1024 * 1024;
        let issuer = Issuer::start(&keys, Some(huge)).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let address = serve(&issuer, json!({}), dir.path()).await;
        let rs = json!({"alg": "RS256", "kid": "rsa-1"});
        let token = keys.sign(&rs, &issuer.claims("dave"));
        let response = http()
            .post(format!("http://{address}/mcp"))
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(INITIALIZE)
            .send()
            .await
            .expect("an answer");
        assert_eq!(
            response.status(),
            503,
            "the server's problem, not the token's"
        );
        assert_eq!(response.headers()["retry-after"], "10");
        let sent = issuer.state.huge_sent.load(Ordering::SeqCst);
        assert!(
            sent < huge / 4, // what the kernel's socket buffers took, not the server
            "{sent} bytes of a {huge}-byte key set were asked for"
        );
        // The server still answers, and refuses to fetch again before the interval.
        let (status, _, _) = post(address, Some(&token), None, INITIALIZE).await;
        assert_eq!((status, issuer.fetches()), (503, 1));
        let (status, _, _) = post(address, None, None, INITIALIZE).await;
        assert_eq!(status, 401);
    });
}

#[test]
fn a_token_for_another_tenant_cannot_use_its_mcp_session() {
    block_on(async {
        let keys = Keys::new();
        let issuer = Issuer::start(&keys, None).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let tenants = json!({"tenants": {"agent-a": {"token": "token-a"}}});
        let (address, _) = serve_with(&issuer, json!({}), tenants, dir.path()).await;
        let rs = json!({"alg": "RS256", "kid": "rsa-1"});
        let alice = keys.sign(&rs, &issuer.claims("alice"));
        let (status, _, session) = post(address, Some(&alice), None, INITIALIZE).await;
        assert_eq!(status, 200);
        let session = session.expect("Mcp-Session-Id");
        let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
        let list = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#;
        // Bob's valid token with Alice's session id: answered as a session that does not
        // exist, whatever the request.
        let bob = keys.sign(&rs, &issuer.claims("bob"));
        for body in [initialized, list] {
            let (status, _, _) = post(address, Some(&bob), Some(&session), body).await;
            assert_eq!(status, 404, "bob on alice's session: {body}");
        }
        let response = http()
            .delete(format!("http://{address}/mcp"))
            .bearer_auth(&bob)
            .header("mcp-session-id", &session)
            .send()
            .await
            .expect("answer");
        assert_eq!(response.status(), 404, "bob cannot close it either");
        // A configured tenant's token is held to the same rule, both ways.
        let (status, _, _) = post(address, Some("token-a"), Some(&session), list).await;
        assert_eq!(status, 404, "a configured tenant on alice's session");
        let (status, _, agents) = post(address, Some("token-a"), None, INITIALIZE).await;
        assert_eq!(status, 200);
        let agents = agents.expect("Mcp-Session-Id");
        let (status, _, _) = post(address, Some(&alice), Some(&agents), list).await;
        assert_eq!(status, 404, "alice on a configured tenant's session");
        // Alice with a new token (a refresh): the same person, her session.
        let mut refreshed = issuer.claims("alice");
        refreshed["jti"] = json!("refreshed");
        let alice_again = keys.sign(&rs, &refreshed);
        let (status, _, _) = post(address, Some(&alice_again), Some(&session), initialized).await;
        assert_eq!(status, 202, "alice's new token reaches her session");
        let (status, _, _) = post(address, Some(&alice_again), Some(&session), list).await;
        assert_eq!(status, 200);
    });
}

#[test]
fn an_oauth_tenants_sessions_are_saved_on_drain_and_restored_by_that_person_only() {
    block_on(async {
        let keys = Keys::new();
        let issuer = Issuer::start(&keys, None).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let saved = tempfile::tempdir().expect("save_dir");
        let sessions = json!({"sessions": {"save_dir": saved.path()}});
        let (address, server) = serve_with(&issuer, json!({}), sessions, dir.path()).await;
        let rs = json!({"alg": "RS256", "kid": "rsa-1"});
        let alice = keys.sign(&rs, &issuer.claims("alice@example.com"));
        let ran = run_as(address, &alice, "x = 7\nx").await;
        assert!(ran.contains('7'), "{ran}");
        assert_eq!(server.save_sessions().await, 1, "alice's one session");
        // In the folder named by a hash of the claim (a claim may hold any character).
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(b"alice@example.com");
        let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        let file = saved.path().join(format!("oauth-{hex}/main.session.json"));
        assert!(file.is_file(), "{} missing", file.display());
        // Alice, with another token, restores it; Bob cannot.
        let restore = json!({"name": "main", "session_id": "copy"});
        let bob = keys.sign(&rs, &issuer.claims("bob"));
        let refused = call_as(address, &bob, "restore_session", restore.clone()).await;
        assert_eq!(text(&refused), "no saved session \"main\"", "{refused}");
        let mut later = issuer.claims("alice@example.com");
        later["jti"] = json!("later");
        let alice_again = keys.sign(&rs, &later);
        let restored = call_as(address, &alice_again, "restore_session", restore).await;
        assert_eq!(restored["isError"], json!(false), "{restored}");
        let copy = json!({"code": "x * 6", "session_id": "copy"});
        let ran = call_as(address, &alice_again, "run_python", copy).await;
        assert_eq!(ran["structuredContent"]["return_value"], 42, "{ran}");
    });
}
