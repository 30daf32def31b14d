//! The server-certificate verifier of every TLS client sandpy makes: webpki's, plus a server whose
//! certificate is exactly one the operator trusts (see `mod.rs`).

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use std::sync::Arc;

/// webpki's verification, and one more way in: a server whose certificate is byte for byte
/// one of the trusted certificates (`system`, the roots; `own`, the server's `ca_file`) but
/// that webpki refuses only because it is a CA certificate (`CA:TRUE`, as every
/// `openssl req -x509` certificate is). It is then accepted for the names it lists; its
/// dates were checked already (webpki checks validity before basic constraints, and
/// `an_expired_self_signed_certificate_is_expired_even_when_trusted` holds it to that).
/// The handshake's signatures are always checked against the certificate's key.
#[derive(Debug)]
pub(super) struct ChainedOrExact {
    pub chained: Arc<WebPkiServerVerifier>,
    pub system: Arc<[CertificateDer<'static>]>,
    pub own: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for ChainedOrExact {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.chained.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        );
        match verified {
            Err(rustls::Error::InvalidCertificate(CertificateError::Other(ref other)))
                if is_ca_used_as_end_entity(other) && self.trusts_exactly(end_entity) =>
            {
                let certificate = rustls::server::ParsedCertificate::try_from(end_entity)?;
                rustls::client::verify_server_name(&certificate, server_name)?;
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chained.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chained.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chained.supported_verify_schemes()
    }
}

impl ChainedOrExact {
    fn trusts_exactly(&self, certificate: &CertificateDer<'_>) -> bool {
        let same = |trusted: &CertificateDer<'_>| trusted.as_ref() == certificate.as_ref();
        self.own.iter().any(same) || self.system.iter().any(same)
    }
}

/// Whether webpki refused a certificate for being a CA's (rustls passes that on as an
/// `Other` error holding webpki's own).
pub(super) fn is_ca_used_as_end_entity(error: &rustls::OtherError) -> bool {
    matches!(
        error.0.downcast_ref::<webpki::Error>(),
        Some(webpki::Error::CaUsedAsEndEntity)
    )
}
