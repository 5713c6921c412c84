//! The install's own CA: created by `proxypool ca init`, loaded (and checked) from its two
//! files by `serve`, and signing a leaf certificate per intercepted host.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use ring::rand::SecureRandom;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::{CertifiedKey, SigningKey};

use super::{CaCertificate, CaError, LeafError, LeafName};
use crate::config::CaFiles;

/// How long a new CA is valid.
const CA_LIFETIME: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// A leaf's validity starts this far in the past: a client whose clock runs behind
/// still accepts it.
pub const LEAF_BACKDATE: Duration = Duration::from_secs(3600);
/// A leaf's whole validity (backdating included).
pub const LEAF_LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);

/// A loaded, checked CA: its certificate, its key, and the key every leaf it signs
/// carries (made when it is loaded, held in memory only).
pub struct CertAuthority {
    files: CaFiles,
    cert: CaCertificate,
    /// The CA as rcgen names an issuer (its subject and key identifier as the file has
    /// them); signed anew at load, only its parameters are used.
    issuer: rcgen::Certificate,
    issuer_key: KeyPair,
    leaf_key: KeyPair,
    leaf_signer: Arc<dyn SigningKey>,
    /// The CA certificate every leaf's chain ends with (see `load`).
    chain_tail: CertificateDer<'static>,
}

/// A leaf signed for one name.
pub struct Minted {
    /// The leaf and the CA, with the leaf key: what a TLS server presents.
    pub key: Arc<CertifiedKey>,
    /// The end of the leaf's validity.
    pub not_after: SystemTime,
}

impl CertAuthority {
    /// Create a new CA and write it to `files` (the key 0600; an existing file is
    /// replaced only with `force`), then load it back as `serve` would.
    pub fn create(files: &CaFiles, force: bool) -> Result<CertAuthority, CaError> {
        let now = SystemTime::now();
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(CaError::Build)?;
        let mut p = CertificateParams::default();
        p.distinguished_name = ca_name(now);
        p.serial_number = Some(serial());
        p.not_before = (now - LEAF_BACKDATE).into();
        p.not_after = (now + CA_LIFETIME).into();
        // Leaves directly under it, nothing between.
        p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = p.self_signed(&key).map_err(CaError::Build)?;
        super::files::write_ca(files, &cert.pem(), &key.serialize_pem(), force)?;
        CertAuthority::load(files)
    }

    /// Load the CA of `files`: both files there, the key private to its owner and the
    /// certificate's, the certificate a CA within its validity, and a leaf it signs
    /// verifying against it.
    pub fn load(files: &CaFiles) -> Result<CertAuthority, CaError> {
        let cert = CaCertificate::read(&files.cert)?;
        let key_pem = super::files::read_key(&files.key)?;
        let bad_key = |why: String| CaError::Invalid {
            what: "key",
            path: files.key.clone(),
            why,
        };
        let key_text = String::from_utf8(key_pem).map_err(|_| bad_key("is not PEM text".into()))?;
        let issuer_key = KeyPair::from_pem(&key_text).map_err(|e| {
            bad_key(format!(
                "not a PKCS#8 private key ({e}); an `EC PRIVATE KEY` converts with \
                 `openssl pkcs8 -topk8 -nocrypt -in KEY -out KEY.pk8`"
            ))
        })?;
        if issuer_key.public_key_der() != cert.spki_der() {
            return Err(CaError::Mismatch {
                cert: files.cert.clone(),
                key: files.key.clone(),
            });
        }
        check_validity(&cert, &files.cert)?;
        let unusable = |why: String| CaError::Unusable {
            path: files.cert.clone(),
            why,
        };
        if !cert.is_ca() {
            return Err(unusable(
                "it is not a CA certificate (basic constraints CA:TRUE)".into(),
            ));
        }
        let (name, key_id) = cert.issuer().map_err(unusable)?;
        let mut p = CertificateParams::default();
        p.distinguished_name = name;
        p.key_identifier_method = key_id;
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let issuer = p.self_signed(&issuer_key).map_err(CaError::Build)?;
        let (leaf_key, leaf_signer) = leaf_key().map_err(unusable)?;
        let ca = CertAuthority {
            files: files.clone(),
            // One copy per CA loaded, borrowed by the chain of every leaf it signs
            // (leaves are many; a daemon loads its CA once).
            chain_tail: CertificateDer::from(&*Box::leak(cert.der().to_vec().into_boxed_slice())),
            cert,
            issuer,
            issuer_key,
            leaf_key,
            leaf_signer,
        };
        ca.self_test().map_err(unusable)?;
        Ok(ca)
    }

    /// The certificate.
    pub fn certificate(&self) -> &CaCertificate {
        &self.cert
    }

    /// Where it was loaded from.
    pub fn files(&self) -> &CaFiles {
        &self.files
    }

    /// Sign a leaf for `name`, valid from `now` less [`LEAF_BACKDATE`] for
    /// [`LEAF_LIFETIME`] (never past the CA's own end). The chain the server presents is
    /// the leaf and the CA: a client pinning the CA's key (Chromium's
    /// `--ignore-certificate-errors-spki-list`) finds it there.
    pub fn mint(&self, name: &LeafName, now: SystemTime) -> Result<Minted, LeafError> {
        let sign_err = |e: rcgen::Error| LeafError::Sign {
            name: name.to_string(),
            why: e.to_string(),
        };
        let not_before = now - LEAF_BACKDATE;
        let not_after = (not_before + LEAF_LIFETIME).min(self.cert.not_after());
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        let shown = name.to_string();
        // X.509 caps a common name at 64 characters; the SAN is what clients check.
        if shown.len() <= 64 {
            dn.push(DnType::CommonName, shown.as_str());
        }
        dn.push(DnType::OrganizationName, "proxypool");
        p.distinguished_name = dn;
        p.subject_alt_names = vec![match name {
            LeafName::Dns(n) => SanType::DnsName(n.as_str().try_into().map_err(sign_err)?),
            LeafName::Ip(ip) => SanType::IpAddress(*ip),
        }];
        p.serial_number = Some(serial());
        p.not_before = not_before.into();
        p.not_after = not_after.into();
        p.is_ca = IsCa::ExplicitNoCa;
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p.use_authority_key_identifier_extension = true;
        let leaf = p
            .signed_by(&self.leaf_key, &self.issuer, &self.issuer_key)
            .map_err(sign_err)?;
        let chain = vec![leaf.der().clone(), self.chain_tail.clone()];
        Ok(Minted {
            key: Arc::new(CertifiedKey::new(chain, self.leaf_signer.clone())),
            not_after,
        })
    }

    /// A leaf it signs verifies against it alone (its name, key identifier and signature
    /// as a client sees them).
    fn self_test(&self) -> Result<(), String> {
        use rustls::client::danger::ServerCertVerifier;
        let name = LeafName::Dns("proxypool.invalid".into());
        let leaf = self
            .mint(&name, SystemTime::now())
            .map_err(|e| e.to_string())?;
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(self.cert.der().clone())
            .map_err(|e| format!("not usable as a root: {e}"))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier =
            rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| e.to_string())?;
        let server = rustls::pki_types::ServerName::try_from("proxypool.invalid")
            .map_err(|e| e.to_string())?;
        verifier
            .verify_server_cert(
                &leaf.key.cert[0],
                &[],
                &server,
                &[],
                rustls::pki_types::UnixTime::now(),
            )
            .map(|_| ())
            .map_err(|e| format!("a leaf it signs does not verify: {e}"))
    }
}

impl std::fmt::Debug for CertAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("CertAuthority")
            .field("files", &self.files)
            .field("subject", &self.cert.subject())
            .finish_non_exhaustive()
    }
}

fn check_validity(cert: &CaCertificate, path: &std::path::Path) -> Result<(), CaError> {
    let now = SystemTime::now();
    let when = |t: SystemTime| humantime::format_rfc3339_seconds(t).to_string();
    let why = if now >= cert.not_after() {
        format!("expired on {}", when(cert.not_after()))
    } else if now < cert.not_before() {
        format!("is not valid before {}", when(cert.not_before()))
    } else {
        return Ok(());
    };
    Err(CaError::Expired {
        path: path.to_path_buf(),
        why,
    })
}

/// The key every leaf of this process carries: one P-256 key, so that a new leaf costs
/// one signature and no key generation.
fn leaf_key() -> Result<(KeyPair, Arc<dyn SigningKey>), String> {
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| e.to_string())?;
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let signer = rustls::crypto::ring::sign::any_ecdsa_type(&der).map_err(|e| e.to_string())?;
    Ok((key, signer))
}

/// `CN=proxypool CA <host> <date> <id>, O=proxypool`: the host and day it was made, and
/// a random id, so that two CAs made the same day on one host are told apart (a browser's
/// store keys roots by name).
fn ca_name(now: SystemTime) -> DistinguishedName {
    let date = humantime::format_rfc3339_seconds(now).to_string();
    let date = &date[..10];
    let mut id = [0u8; 4];
    let _ = ring::rand::SystemRandom::new().fill(&mut id);
    let id: String = id.iter().map(|b| format!("{b:02x}")).collect();
    // 64 characters at most in all: the host gives way.
    let room = 64 - "proxypool CA   ".len() - date.len() - id.len();
    let host: String = host_name().chars().take(room).collect();
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        format!("proxypool CA {host} {date} {id}"),
    );
    dn.push(DnType::OrganizationName, "proxypool");
    dn
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that much.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match r {
        0 if end > 0 => String::from_utf8_lossy(&buf[..end])
            .chars()
            .filter(|c| c.is_ascii_graphic())
            .collect(),
        _ => "localhost".into(),
    }
}

/// 16 random bytes, positive as a DER integer: unpredictable serials, never two alike.
fn serial() -> SerialNumber {
    let mut b = [0u8; 16];
    if ring::rand::SystemRandom::new().fill(&mut b).is_err() {
        b = fastrand::u128(..).to_be_bytes();
    }
    b[0] = (b[0] & 0x7f) | 0x01;
    SerialNumber::from_slice(&b)
}
