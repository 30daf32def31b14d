//! https upstreams: a local MCP server behind rustls with certificates made by the test
//! (`sandpy_mcp::test_server`), reached by the hub and called from Python in the sandbox;
//! and every way the connection is refused, each named in the server's status and in the
//! `ToolError` the guest gets.

use crate::{block_on, run_with_hub};
use sandpy::{RunOptions, Status};
use sandpy_mcp::test_server::{ServerCertificate, TestCa, TestServer};
use sandpy_mcp::{CaFile, CaFileError, ConfigError, ConfigFile, Hub, ServerSpec};
use serde_json::json;
use std::path::Path;

const TOKEN: &str = "s3cret-token";

/// A config file in `dir` with one server `web` at `url`: bearer `token`, and the CA in
/// `ca.pem` as its `ca_file` when `ca_file` is set.
fn web_config(dir: &Path, url: &str, token: &str, ca_file: bool) -> ConfigFile {
    let ca = if ca_file {
        r#", "ca_file": "ca.pem""#
    } else {
        ""
    };
    let text = format!(
        r#"{{"mcpServers": {{"web": {{"url": "{url}", "headers": {{"Authorization": "Bearer {token}"}}{ca}}}}}}}"#
    );
    let path = dir.join(".mcp.json");
    std::fs::write(&path, text).expect("write the config");
    ConfigFile::load(&path).expect("a valid config")
}

/// The hub's status of `web` and what Python gets calling its `echo` tool, with the server
/// serving `certificate` behind [`TOKEN`], and `token` (and `ca_file` if set) in the config.
fn connect(certificate: ServerCertificate, ca: &TestCa, token: &str, ca_file: bool) -> Outcome {
    connect_trusting(certificate, &ca.pem(), token, ca_file)
}

/// [`connect`] with `trusted` (PEM) as the `ca_file`'s content.
fn connect_trusting(
    certificate: ServerCertificate,
    trusted: &str,
    token: &str,
    ca_file: bool,
) -> Outcome {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("ca.pem"), trusted).expect("write the CA");
    block_on(async {
        let server = TestServer::start(Some(certificate), Some(TOKEN))
            .await
            .expect("the server starts");
        let hub = Hub::start(&web_config(dir.path(), &server.url(), token, ca_file)).await;
        let status = hub.servers()[0].status.clone();
        let code =
            "try:\n    r = ['ok', call_mcp_tool('mcp__web__echo', {'message': 'over https'})]\n\
                    except ToolError as e:\n    r = ['ToolError', str(e)]\nr";
        let e = run_with_hub(&hub, code, RunOptions::default()).await;
        hub.shutdown().await;
        let port = server.addr().port();
        server.stop().await;
        assert_eq!(e.status, Status::Ok, "{e:#?}");
        let value = e.return_value.expect("a value");
        Outcome {
            status,
            guest: (
                value[0].as_str().unwrap().to_string(),
                value[1].as_str().unwrap().to_string(),
            ),
            host: format!("localhost:{port}"),
        }
    })
}

struct Outcome {
    /// `Hub::servers`' status of `web`.
    status: String,
    /// `("ok", value)` or `("ToolError", message)`.
    guest: (String, String),
    /// `localhost:<port>`.
    host: String,
}

impl Outcome {
    /// The server is unavailable with `reason`, which the guest's `ToolError` shows too.
    fn assert_refused(&self, reason: &str) {
        let expected = format!("unavailable: {reason}");
        assert!(
            self.status.starts_with(&expected),
            "status {:?} does not start with {expected:?}",
            self.status
        );
        assert_eq!(self.guest.0, "ToolError", "{:?}", self.guest);
        assert!(
            self.guest.1.contains(&format!("web ({})", self.status)),
            "the guest's error names the server and why: {:?}",
            self.guest.1
        );
    }
}

#[test]
fn python_calls_an_https_upstream_trusted_through_its_ca_file() {
    let ca = TestCa::new();
    let outcome = connect(ca.issue(&["localhost"]), &ca, TOKEN, true);
    assert_eq!(outcome.status, "ready (1 tools)");
    assert_eq!(
        outcome.guest,
        ("ok".to_string(), "Echo: over https".to_string())
    );
}

#[test]
fn without_its_ca_file_the_certificate_has_an_unknown_issuer() {
    let ca = TestCa::new();
    let outcome = connect(ca.issue(&["localhost"]), &ca, TOKEN, false);
    outcome.assert_refused(&format!(
        "server web: the TLS certificate of {} was rejected: unknown issuer: it chains to none of the ",
        outcome.host
    ));
    assert!(
        outcome
            .status
            .contains("for a private CA, set `ca_file` in the server's entry"),
        "{}",
        outcome.status
    );
}

#[test]
fn a_ca_file_that_did_not_sign_the_certificate_is_named() {
    let (ca, other) = (TestCa::new(), TestCa::new());
    let outcome = connect(other.issue(&["localhost"]), &ca, TOKEN, true);
    outcome.assert_refused(&format!(
        "server web: the TLS certificate of {} was rejected: unknown issuer: it chains neither to the ",
        outcome.host
    ));
    assert!(
        outcome
            .status
            .contains("nor to the 1 certificate(s) of `ca_file` `")
            && outcome.status.contains("ca.pem`"),
        "{}",
        outcome.status
    );
}

#[test]
fn a_certificate_for_another_name_is_a_name_mismatch() {
    let ca = TestCa::new();
    let outcome = connect(ca.issue(&["elsewhere.test"]), &ca, TOKEN, true);
    outcome.assert_refused(&format!(
        "server web: the TLS certificate of {} was rejected: name mismatch: it was issued for \
         elsewhere.test, not \"localhost\"; use one of those names in the server's `url`, or \
         reissue the certificate with subjectAltName for \"localhost\"",
        outcome.host
    ));
}

#[test]
fn an_expired_certificate_is_named_expired() {
    let ca = TestCa::new();
    let outcome = connect(ca.issue_expired(&["localhost"]), &ca, TOKEN, true);
    outcome.assert_refused(&format!(
        "server web: the TLS certificate of {} was rejected: expired: not valid after 20",
        outcome.host
    ));
    assert!(
        outcome
            .status
            .ends_with(" UTC; renew the server's certificate"),
        "{}",
        outcome.status
    );
}

/// The usual recipe for an internal server's certificate (`openssl req -x509 -newkey
/// rsa:2048 -nodes -subj /CN=host -addext subjectAltName=...`) makes a self-signed
/// certificate marked `CA:TRUE`, which webpki refuses as a server's own. Named as trusted
/// in `ca_file`, that exact certificate is accepted, as curl, Python and Node accept it.
#[test]
fn a_self_signed_ca_certificate_named_in_ca_file_is_accepted() {
    let (certificate, pem) = ServerCertificate::self_signed_ca(&["localhost"], false);
    let outcome = connect_trusting(certificate, &pem, TOKEN, true);
    assert_eq!(outcome.status, "ready (1 tools)");
    assert_eq!(
        outcome.guest,
        ("ok".to_string(), "Echo: over https".to_string())
    );
}

/// Attack on the pinning: a server presenting another self-signed CA certificate (its
/// own key, the same names) than the one in `ca_file` is refused, with the fix named.
#[test]
fn tls_boundary_another_self_signed_ca_certificate_is_refused() {
    let (_, trusted) = ServerCertificate::self_signed_ca(&["localhost"], false);
    let (impostor, _) = ServerCertificate::self_signed_ca(&["localhost"], false);
    let outcome = connect_trusting(impostor, &trusted, TOKEN, true);
    outcome.assert_refused(&format!(
        "server web: the TLS certificate of {} was rejected: the server's certificate is \
         itself a CA certificate (CA:TRUE, as a self-signed `openssl req -x509` certificate \
         is), and it is not one of the trusted certificates; to trust exactly this \
         certificate, put it in `ca_file` `",
        outcome.host
    ));
}

/// A trusted self-signed certificate still holds only for the names it lists.
#[test]
fn a_trusted_self_signed_certificate_for_another_name_is_a_name_mismatch() {
    let (certificate, pem) = ServerCertificate::self_signed_ca(&["elsewhere.test"], false);
    let outcome = connect_trusting(certificate, &pem, TOKEN, true);
    outcome.assert_refused(&format!(
        "server web: the TLS certificate of {} was rejected: name mismatch: it was issued for \
         elsewhere.test, not \"localhost\"",
        outcome.host
    ));
}

/// ... and only while it is valid: the pinning relies on webpki checking the dates before
/// it refuses a CA certificate, which this holds it to.
#[test]
fn an_expired_self_signed_certificate_is_expired_even_when_trusted() {
    let (certificate, pem) = ServerCertificate::self_signed_ca(&["localhost"], true);
    let outcome = connect_trusting(certificate, &pem, TOKEN, true);
    outcome.assert_refused(&format!(
        "server web: the TLS certificate of {} was rejected: expired: not valid after 20",
        outcome.host
    ));
}

#[test]
fn a_wrong_bearer_token_is_a_401_naming_the_server() {
    let ca = TestCa::new();
    let outcome = connect(ca.issue(&["localhost"]), &ca, "wrong-token", true);
    let url = format!("https://{}/mcp", outcome.host);
    outcome.assert_refused(&format!(
        "server web answered 401 Unauthorized at {url}: it wants credentials that were not sent or were refused. \
         sandpy does not implement MCP's OAuth flow; give the server a token in its `headers`"
    ));
}

#[test]
fn plain_http_is_refused_on_an_https_url() {
    let dir = tempfile::tempdir().expect("tempdir");
    let status = block_on(async {
        let server = TestServer::start(None, None)
            .await
            .expect("the server starts");
        let url = server.url().replace("http://", "https://");
        let text = format!(r#"{{"mcpServers": {{"web": {{"url": "{url}"}}}}}}"#);
        std::fs::write(dir.path().join(".mcp.json"), text).expect("write");
        let hub = Hub::start(&ConfigFile::load(&dir.path().join(".mcp.json")).unwrap()).await;
        let status = hub.servers()[0].status.clone();
        server.stop().await;
        (status, url)
    });
    let (status, url) = status;
    let host = url.trim_start_matches("https://").trim_end_matches("/mcp");
    assert!(
        status.starts_with(&format!(
            "unavailable: server web: TLS handshake with {host} failed (received corrupt message"
        )) && status.ends_with("does it serve https on that port?"),
        "{status}"
    );
}

#[test]
fn the_test_server_over_http_answers_too() {
    let value = block_on(async {
        let server = TestServer::start(None, Some(TOKEN)).await.expect("starts");
        let text = format!(
            r#"{{"mcpServers": {{"web": {{"url": "{}", "headers": {{"Authorization": "Bearer {TOKEN}"}}}}}}}}"#,
            server.url()
        );
        let hub = Hub::start(&crate::config(&text)).await;
        let e = run_with_hub(
            &hub,
            "tools.web.echo(message='over http')",
            RunOptions::default(),
        )
        .await;
        hub.shutdown().await;
        server.stop().await;
        e.return_value
    });
    assert_eq!(value, Some(json!("Echo: over http")));
}

/// The config error of `ca_file` set to `file` (written with `content` unless `None`).
fn ca_file_error(url: &str, file: &str, content: Option<&str>) -> (String, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    if let Some(content) = content {
        std::fs::write(dir.path().join(file), content).expect("write");
    }
    let path = dir.path().join(".mcp.json");
    let text = format!(r#"{{"mcpServers": {{"web": {{"url": "{url}", "ca_file": "{file}"}}}}}}"#);
    match ConfigFile::parse(&text, &path) {
        Err(ConfigError::Invalid {
            path: p,
            key,
            message,
        }) => {
            assert_eq!(p, path, "the error names the config file");
            let shown = dir.path().join(file).display().to_string();
            (key, message, shown)
        }
        other => panic!("expected an invalid config, got {other:?}"),
    }
}

#[test]
fn ca_file_errors_name_the_config_the_key_and_the_file() {
    let https = "https://localhost:1/mcp";
    let (key, message, file) = ca_file_error(https, "missing.pem", None);
    assert_eq!(key, "mcpServers.web.ca_file");
    assert!(
        message.starts_with(&format!("cannot read `{file}`: ")),
        "{message}"
    );
    let (key, message, file) = ca_file_error(https, "notes.txt", Some("just words\n"));
    assert_eq!(key, "mcpServers.web.ca_file");
    assert_eq!(
        message,
        format!("`{file}` holds no PEM certificate (`-----BEGIN CERTIFICATE-----`)")
    );
    let broken = "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n";
    let (_, message, file) = ca_file_error(https, "broken.pem", Some(broken));
    assert!(
        message.starts_with(&format!("`{file}` is not a PEM file: ")),
        "{message}"
    );
    let garbage = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    let (_, message, file) = ca_file_error(https, "garbage.pem", Some(garbage));
    assert!(
        message.starts_with(&format!("certificate 1 of `{file}`: ")),
        "{message}"
    );
    let (key, message, _) = ca_file_error(
        "http://localhost:1/mcp",
        "ca.pem",
        Some(&TestCa::new().pem()),
    );
    assert_eq!(key, "mcpServers.web.ca_file");
    assert!(
        message.contains("only `https` servers use a CA file"),
        "{message}"
    );
}

#[test]
fn ca_file_errors_are_typed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        path
    };
    let missing = dir.path().join("missing.pem");
    assert!(
        matches!(CaFile::read(&missing), Err(CaFileError::Read { path, .. }) if path == missing)
    );
    let words = write("words.txt", "just words\n");
    assert!(matches!(
        CaFile::read(&words),
        Err(CaFileError::NoCertificate { .. })
    ));
    let broken = write(
        "broken.pem",
        "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
    );
    assert!(matches!(
        CaFile::read(&broken),
        Err(CaFileError::NotPem { .. })
    ));
    let two = format!(
        "{}-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        TestCa::new().pem()
    );
    let garbage = write("second-bad.pem", &two);
    assert!(matches!(
        CaFile::read(&garbage),
        Err(CaFileError::BadCertificate { number: 2, .. })
    ));
}

#[test]
fn ca_file_is_read_relative_to_the_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("certs")).expect("mkdir");
    std::fs::write(dir.path().join("certs/ca.pem"), TestCa::new().pem()).expect("write");
    let text =
        r#"{"mcpServers": {"web": {"url": "https://localhost:1/mcp", "ca_file": "certs/ca.pem"}}}"#;
    let config = ConfigFile::parse(text, &dir.path().join(".mcp.json")).expect("valid");
    let ServerSpec::Http {
        ca_file: Some(ca), ..
    } = &config.servers["web"]
    else {
        panic!("{:?}", config.servers["web"])
    };
    assert_eq!(ca.path, dir.path().join("certs/ca.pem"));
    assert_eq!(ca.len(), 1);
}
