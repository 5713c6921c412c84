//! What can go wrong with the CA, a leaf, or the roots trusted for origins. Every
//! message about the CA's files names the file and the fix.

use std::path::PathBuf;

/// The CA cannot be created, read or used.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// A file of the CA does not exist.
    #[error("no CA {what} at {path}: run `proxypool ca init` (or set [tls] ca_cert and ca_key)")]
    Missing {
        /// "certificate" or "key".
        what: &'static str,
        path: PathBuf,
    },
    /// A file exists but cannot be read (or written).
    #[error("CA {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// The key may be read by other users.
    #[error(
        "CA key {path} is readable by group or others (mode {mode:04o}): run `chmod 600 {path}`"
    )]
    KeyReadable { path: PathBuf, mode: u32 },
    /// A file is there but holds no usable certificate or key.
    #[error("CA {what} {path}: {why}")]
    Invalid {
        what: &'static str,
        path: PathBuf,
        why: String,
    },
    /// The key is not the certificate's.
    #[error("CA key {key} does not match the certificate {cert}: copy both files of one CA, or run `proxypool ca init --force` for a new one")]
    Mismatch { cert: PathBuf, key: PathBuf },
    /// The certificate is outside its validity.
    #[error("CA certificate {path} {why}: run `proxypool ca init --force` for a new one (clients must then trust it again)")]
    Expired { path: PathBuf, why: String },
    /// `ca init` would replace an existing CA.
    #[error("{path} exists: pass --force to replace the CA (every client trusting the old one must then trust the new one)")]
    Exists { path: PathBuf },
    /// rcgen could not build a certificate.
    #[error("cannot build the CA certificate: {0}")]
    Build(#[source] rcgen::Error),
    /// The CA loads but a leaf it signs does not verify against it.
    #[error("CA certificate {path} cannot sign usable leaf certificates: {why}")]
    Unusable { path: PathBuf, why: String },
}

/// A leaf certificate cannot be minted.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LeafError {
    /// The name is no DNS name or IP literal a certificate could be for.
    #[error("no certificate for {name:?}: {why}")]
    BadName { name: String, why: &'static str },
    /// Signing failed (rcgen's message).
    #[error("cannot sign a certificate for {name}: {why}")]
    Sign { name: String, why: String },
}

/// The PEM file of further roots trusted for origins (`[tls] extra_roots`) is unusable.
#[derive(Debug, thiserror::Error)]
pub enum RootsError {
    /// Unreadable.
    #[error("[tls] extra_roots {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Not PEM certificates, or one rustls refuses as a root.
    #[error("[tls] extra_roots {path}: {why}")]
    Invalid { path: PathBuf, why: String },
    /// rustls refused the configuration.
    #[error("origin TLS setup: {0}")]
    Rustls(#[from] rustls::Error),
}
