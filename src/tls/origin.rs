//! The TLS client the gateway speaks to origins with, once it intercepts: the Mozilla
//! roots plus `[tls] extra_roots`, ALPN `h2` and `http/1.1`, no check at all for the
//! gateway's `insecure_origins`. When it refuses a certificate the caller learns why and
//! which certificate was presented (`OriginTlsFailure`), so that the same origin seen
//! through several upstreams tells a proxy that substitutes its own certificate from an
//! origin whose own certificate is bad.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, OtherError, SignatureScheme};
use x509_cert::der::Decode;

use super::RootsError;
use crate::config::HostPatterns;

/// A client config for origins: `extra_roots` trusted besides the built-in roots, no
/// verification for hosts in `insecure`.
pub fn origin_config(
    extra_roots: Option<&Path>,
    insecure: &HostPatterns,
) -> Result<Arc<ClientConfig>, RootsError> {
    let roots = crate::dial::root_store(extra_roots).map_err(|e| match e {
        crate::dial::TlsSetupError::CaFile { path, msg } => RootsError::Invalid { path, why: msg },
        crate::dial::TlsSetupError::Rustls(r) => RootsError::Rustls(r),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| RootsError::Rustls(rustls::Error::General(e.to_string())))?;
    let verifier = Arc::new(OriginVerifier {
        inner,
        insecure: insecure.clone(),
    });
    let mut cfg = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// Why a TLS handshake with an origin failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OriginTlsCause {
    /// The chain leads to no trusted root: a proxy presenting its own CA's certificate
    /// (an intercepting proxy), or an origin with a private or self-signed one.
    UnknownIssuer,
    /// A trusted chain, for another name: someone else's certificate.
    WrongName,
    /// Past its end.
    Expired,
    /// Before its start (or this machine's clock is off).
    NotYetValid,
    /// Revoked.
    Revoked,
    /// A signature in the chain does not verify.
    BadSignature,
    /// Refused for another reason (encoding, purpose, an unknown critical extension).
    BadCertificate,
    /// No verdict on a certificate: an alert from the far side, a closed connection, a
    /// protocol error.
    Handshake,
}

impl OriginTlsCause {
    /// Snake-case name, for a report's detail.
    pub fn as_str(self) -> &'static str {
        match self {
            OriginTlsCause::UnknownIssuer => "unknown_issuer",
            OriginTlsCause::WrongName => "wrong_name",
            OriginTlsCause::Expired => "expired",
            OriginTlsCause::NotYetValid => "not_yet_valid",
            OriginTlsCause::Revoked => "revoked",
            OriginTlsCause::BadSignature => "bad_signature",
            OriginTlsCause::BadCertificate => "bad_certificate",
            OriginTlsCause::Handshake => "handshake",
        }
    }

    /// Whether a certificate was presented and refused (as opposed to a handshake that
    /// broke before or beside that).
    pub fn is_certificate(self) -> bool {
        self != OriginTlsCause::Handshake
    }

    fn of(e: &CertificateError) -> OriginTlsCause {
        use CertificateError as C;
        match e {
            C::UnknownIssuer => OriginTlsCause::UnknownIssuer,
            C::NotValidForName | C::NotValidForNameContext { .. } => OriginTlsCause::WrongName,
            C::Expired | C::ExpiredContext { .. } => OriginTlsCause::Expired,
            C::NotValidYet | C::NotValidYetContext { .. } => OriginTlsCause::NotYetValid,
            C::Revoked => OriginTlsCause::Revoked,
            C::BadSignature => OriginTlsCause::BadSignature,
            _ => OriginTlsCause::BadCertificate,
        }
    }
}

impl fmt::Display for OriginTlsCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the caller of a failed origin handshake learns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginTlsFailure {
    /// Why.
    pub cause: OriginTlsCause,
    /// SHA-256 of the end-entity certificate presented, when one was refused: the same
    /// value through two upstreams is the origin's own certificate; different ones mean
    /// someone in between presented theirs.
    pub presented: Option<[u8; 32]>,
    /// The refused certificate's issuer, e.g. `CN=mitmproxy,O=mitmproxy`.
    pub issuer: Option<String>,
    /// One line for a report's detail.
    pub detail: String,
}

impl OriginTlsFailure {
    /// Read a failed handshake's error (tokio-rustls hands rustls' error inside an
    /// `io::Error`).
    pub fn from_io(e: &std::io::Error) -> OriginTlsFailure {
        match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            Some(r) => OriginTlsFailure::from_rustls(r),
            None => OriginTlsFailure {
                cause: OriginTlsCause::Handshake,
                presented: None,
                issuer: None,
                detail: e.to_string(),
            },
        }
    }

    /// Read a rustls error.
    pub fn from_rustls(e: &rustls::Error) -> OriginTlsFailure {
        let rustls::Error::InvalidCertificate(ce) = e else {
            return OriginTlsFailure {
                cause: OriginTlsCause::Handshake,
                presented: None,
                issuer: None,
                detail: e.to_string(),
            };
        };
        if let CertificateError::Other(OtherError(inner)) = ce {
            if let Some(r) = inner.downcast_ref::<Refused>() {
                return OriginTlsFailure {
                    cause: r.cause,
                    presented: Some(r.presented),
                    issuer: r.issuer.clone(),
                    detail: r.to_string(),
                };
            }
        }
        OriginTlsFailure {
            cause: OriginTlsCause::of(ce),
            presented: None,
            issuer: None,
            detail: e.to_string(),
        }
    }
}

/// A refused certificate, as the verifier reports it through rustls.
struct Refused {
    cause: OriginTlsCause,
    presented: [u8; 32],
    issuer: Option<String>,
    error: CertificateError,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "certificate refused ({}): {}", self.cause, self.error)?;
        if let Some(i) = &self.issuer {
            write!(f, "; issued by {i}")?;
        }
        let short: String = self.presented[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        write!(f, "; sha256 {short}…")
    }
}

// rustls shows the error inside its own with `{:?}`: the same one line.
impl fmt::Debug for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for Refused {}

/// The built-in verifier, except for `insecure` hosts; a refusal says what was presented.
#[derive(Debug)]
struct OriginVerifier {
    inner: Arc<WebPkiServerVerifier>,
    insecure: HostPatterns,
}

impl ServerCertVerifier for OriginVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if !self.insecure.is_empty() && self.insecure.matches(&host_of(server_name)) {
            return Ok(ServerCertVerified::assertion());
        }
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
            .map_err(|e| match e {
                rustls::Error::InvalidCertificate(error) => {
                    let digest = ring::digest::digest(&ring::digest::SHA256, end_entity);
                    let mut presented = [0u8; 32];
                    presented.copy_from_slice(digest.as_ref());
                    let refused = Refused {
                        cause: OriginTlsCause::of(&error),
                        presented,
                        issuer: issuer_of(end_entity),
                        error,
                    };
                    rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(
                        Arc::new(refused),
                    )))
                }
                e => e,
            })
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// A server name in the form host lists match: lower case, an address as text.
fn host_of(name: &ServerName<'_>) -> String {
    match name {
        ServerName::DnsName(d) => d.as_ref().trim_end_matches('.').to_ascii_lowercase(),
        ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
        _ => String::new(),
    }
}

fn issuer_of(der: &[u8]) -> Option<String> {
    let cert = x509_cert::Certificate::from_der(der).ok()?;
    let full = cert.tbs_certificate.issuer.to_string();
    let mut s: String = full.chars().take(200).collect();
    if s.len() < full.len() {
        s.push('…');
    }
    Some(s)
}
