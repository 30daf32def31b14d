//! A small MCP server for tests and benchmarks (crate feature `test-server`): one `echo`
//! tool at `/mcp` on loopback, over http or https, optionally behind a bearer token, with
//! certificates from a throwaway CA made on the spot.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use sandpy_mcp::test_server::{TestCa, TestServer};
//! let ca = TestCa::new();
//! std::fs::write("ca.pem", ca.pem())?;
//! let server = TestServer::start(Some(ca.issue(&["localhost"])), Some("secret")).await?;
//! // {"url": server.url(), "ca_file": "ca.pem", "headers": {"Authorization": "Bearer secret"}}
//! server.stop().await;
//! # Ok(()) }
//! ```

use crate::http::{mcp_router, Access};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::{tool, tool_handler, tool_router, ServerHandler};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use schemars::JsonSchema;
use serde::Deserialize;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// A certificate authority that lives as long as the test: it signs server certificates,
/// and its own certificate is what a `ca_file` holds.
pub struct TestCa {
    pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A server's certificate (signed by a [`TestCa`]) and its private key.
pub struct ServerCertificate {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Default for TestCa {
    fn default() -> Self {
        TestCa::new()
    }
}

impl TestCa {
    /// A new CA with a fresh P-256 key and a name of its own (a verifier looks an issuer
    /// up by name: two CAs of one name would be told apart only by a bad signature).
    pub fn new() -> TestCa {
        static MADE: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "sandpy test CA {}-{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::Relaxed)
        );
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("no names");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("a P-256 key");
        let certificate = params.self_signed(&key).expect("a self-signed CA");
        TestCa {
            pem: certificate.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// The CA's certificate as PEM, for a `ca_file`.
    pub fn pem(&self) -> String {
        self.pem.clone()
    }

    /// A certificate for `names` (DNS names or IP addresses), valid from a day ago for a
    /// year.
    pub fn issue(&self, names: &[&str]) -> ServerCertificate {
        let now = std::time::SystemTime::now();
        self.issue_valid(names, now - DAY, now + 365 * DAY)
    }

    /// A certificate for `names` that expired a day ago.
    pub fn issue_expired(&self, names: &[&str]) -> ServerCertificate {
        let now = std::time::SystemTime::now();
        self.issue_valid(names, now - 30 * DAY, now - DAY)
    }

    fn issue_valid(
        &self,
        names: &[&str],
        not_before: std::time::SystemTime,
        not_after: std::time::SystemTime,
    ) -> ServerCertificate {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("valid names");
        params.not_before = not_before.into();
        params.not_after = not_after.into();
        let key = KeyPair::generate().expect("a P-256 key");
        let certificate = params
            .signed_by(&key, &self.issuer)
            .expect("a signed certificate");
        ServerCertificate {
            chain: vec![certificate.der().clone()],
            key: PrivatePkcs8KeyDer::from(key.serialize_der()).into(),
        }
    }
}

impl ServerCertificate {
    /// A self-signed certificate for `names` marked `CA:TRUE`, as the usual recipe
    /// `openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=host -addext
    /// subjectAltName=...` makes one (valid from a day ago for a year, or expired a day
    /// ago), and its PEM for a `ca_file`.
    pub fn self_signed_ca(names: &[&str], expired: bool) -> (ServerCertificate, String) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("valid names");
        params.distinguished_name.push(DnType::CommonName, "host");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let now = std::time::SystemTime::now();
        let (not_before, not_after) = if expired {
            (now - 30 * DAY, now - DAY)
        } else {
            (now - DAY, now + 365 * DAY)
        };
        params.not_before = not_before.into();
        params.not_after = not_after.into();
        let key = KeyPair::generate().expect("a P-256 key");
        let certificate = params.self_signed(&key).expect("a self-signed certificate");
        let pem = certificate.pem();
        let server = ServerCertificate {
            chain: vec![certificate.der().clone()],
            key: PrivatePkcs8KeyDer::from(key.serialize_der()).into(),
        };
        (server, pem)
    }
}

const DAY: Duration = Duration::from_secs(86_400);

/// `echo`'s arguments.
#[derive(Deserialize, JsonSchema)]
struct EchoArgs {
    /// what to send back
    message: String,
}

/// The server's one tool.
#[derive(Clone)]
struct Echo {
    tools: ToolRouter<Echo>,
}

#[tool_router(router = echo_tools)]
impl Echo {
    #[tool(description = "Send back the message, as `Echo: <message>`.")]
    async fn echo(&self, Parameters(args): Parameters<EchoArgs>) -> String {
        format!("Echo: {}", args.message)
    }
}

#[tool_handler(router = self.tools, name = "sandpy-test-echo")]
impl ServerHandler for Echo {}

/// A running test server; stopped by [`TestServer::stop`] or when dropped.
pub struct TestServer {
    addr: SocketAddr,
    https: bool,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    /// Serve the `echo` tool on a free port of 127.0.0.1: over https with `certificate`,
    /// else over http; every request must carry `Authorization: Bearer <token>` when a token
    /// is given (else it is answered 401).
    pub async fn start(
        certificate: Option<ServerCertificate>,
        token: Option<&str>,
    ) -> std::io::Result<TestServer> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let echo = Echo {
            tools: Echo::echo_tools(),
        };
        let access = Access::token(token.map(str::to_string));
        let (app, cancel) = mcp_router(
            move || echo.clone(),
            access,
            true,
            &crate::HttpLimits::default(),
            crate::http::Extras::default(),
        );
        let stop = CancellationToken::new();
        let shutdown = {
            let stop = stop.clone();
            async move {
                stop.cancelled().await;
                cancel.cancel();
            }
        };
        let https = certificate.is_some();
        let task = match certificate {
            None => {
                let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                    let _ = tcp.set_nodelay(true);
                });
                tokio::spawn(async move {
                    let _ = axum::serve(listener, app)
                        .with_graceful_shutdown(shutdown)
                        .await;
                })
            }
            Some(certificate) => {
                let config = rustls::ServerConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .map_err(std::io::Error::other)?
                .with_no_client_auth()
                .with_single_cert(certificate.chain, certificate.key)
                .map_err(std::io::Error::other)?;
                let listener = TlsListener::new(listener, TlsAcceptor::from(Arc::new(config)));
                tokio::spawn(async move {
                    let _ = axum::serve(listener, app)
                        .with_graceful_shutdown(shutdown)
                        .await;
                })
            }
        };
        Ok(TestServer {
            addr,
            https,
            stop,
            task,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http(s)://localhost:<port>/mcp`.
    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://localhost:{}/mcp", self.addr.port())
    }

    /// Stop serving and wait (5 s at most) for the server to end.
    pub async fn stop(mut self) {
        self.stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut self.task).await;
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// TLS connections for `axum::serve`: handshakes run each in a task of its own, so that a
/// client that stalls or fails its handshake holds up no other; those that fail are dropped.
struct TlsListener {
    handshaken: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    addr: SocketAddr,
    acceptor: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    fn new(listener: TcpListener, tls: TlsAcceptor) -> TlsListener {
        let addr = listener.local_addr().expect("a bound listener");
        let (sender, handshaken) = mpsc::channel(64);
        let acceptor = tokio::spawn(async move {
            loop {
                let Ok((tcp, peer)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let _ = tcp.set_nodelay(true);
                let (tls, sender) = (tls.clone(), sender.clone());
                tokio::spawn(async move {
                    let handshake = tokio::time::timeout(Duration::from_secs(10), tls.accept(tcp));
                    if let Ok(Ok(stream)) = handshake.await {
                        let _ = sender.send((stream, peer)).await;
                    }
                });
            }
        });
        TlsListener {
            handshaken,
            addr,
            acceptor,
        }
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.handshaken.recv().await {
            Some(connection) => connection,
            // The acceptor task ended (never, short of a panic): accept nothing more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}
