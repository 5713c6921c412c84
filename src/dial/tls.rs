//! The one TLS client setup: web PKI roots plus optional extra CAs.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;

use super::{BoxIo, DialFailure};
use crate::health::{Phase, Reason};

/// A TLS client that cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// The extra CA file could not be read or holds no certificate.
    #[error("ca_file {path}: {msg}")]
    CaFile {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        msg: String,
    },
    /// rustls refused the configuration.
    #[error("TLS setup: {0}")]
    Rustls(#[from] rustls::Error),
}

/// Client config trusting the web PKI roots and, when given, the PEM certificates of
/// `ca_file` (for destinations with a private CA).
pub fn client_config(ca_file: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, TlsSetupError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(root_store(ca_file)?)
        .with_no_client_auth();
    Ok(Arc::new(cfg))
}

/// The web PKI roots (Mozilla's set) and the PEM certificates of `ca_file`, if given.
pub fn root_store(ca_file: Option<&Path>) -> Result<rustls::RootCertStore, TlsSetupError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = ca_file {
        let ca_err = |msg: String| TlsSetupError::CaFile {
            path: path.to_path_buf(),
            msg,
        };
        let data = std::fs::read(path).map_err(|e| ca_err(e.to_string()))?;
        let mut found = 0usize;
        for cert in rustls_pemfile::certs(&mut data.as_slice()) {
            let cert = cert.map_err(|e| ca_err(format!("bad PEM: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| ca_err(format!("bad certificate: {e}")))?;
            found += 1;
        }
        if found == 0 {
            return Err(ca_err("no PEM certificate found".into()));
        }
    }
    Ok(roots)
}

/// A connector over [`client_config`].
pub fn connector(ca_file: Option<&Path>) -> Result<TlsConnector, TlsSetupError> {
    Ok(TlsConnector::from(client_config(ca_file)?))
}

/// TLS over `io` to `host`; a failure is `tls_failed` at `phase`.
pub async fn handshake(
    tls: &TlsConnector,
    io: BoxIo,
    host: &str,
    phase: Phase,
) -> Result<BoxIo, DialFailure> {
    let name = ServerName::try_from(host.to_string()).map_err(|e| {
        DialFailure::new(
            Reason::TlsFailed,
            phase,
            format!("bad TLS server name {host:?}: {e}"),
        )
    })?;
    match tls.connect(name, io).await {
        Ok(s) => Ok(Box::new(s)),
        // A peer that hangs up mid-handshake is as much a TLS failure as a bad
        // certificate: both mean this path cannot carry TLS.
        Err(e) => Err(DialFailure::new(
            Reason::TlsFailed,
            phase,
            format!("TLS: {}", tls_detail(&e)),
        )),
    }
}

fn tls_detail(e: &io::Error) -> String {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => tls.to_string(),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_ca_file_is_a_setup_error() {
        let e = client_config(Some(Path::new("/nonexistent/ca.pem"))).unwrap_err();
        assert!(matches!(e, TlsSetupError::CaFile { .. }), "{e}");
    }
}
