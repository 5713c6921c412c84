//! The CA's certificate as read from its PEM file: what `ca show` prints and what
//! loading the CA checks (one certificate, a CA, within its validity), and the issuer
//! name leaves are signed under, rebuilt exactly as the certificate encodes it.

use std::path::Path;
use std::time::SystemTime;

use base64::Engine as _;
use rcgen::{DistinguishedName, DnType, DnValue, KeyIdMethod};
use rustls::pki_types::CertificateDer;
use x509_cert::der::{Decode, Encode, Tag, Tagged};
use x509_cert::ext::pkix::{BasicConstraints, SubjectKeyIdentifier};

use super::CaError;

/// A parsed CA certificate.
#[derive(Debug, Clone)]
pub struct CaCertificate {
    der: CertificateDer<'static>,
    pem: String,
    subject: String,
    not_before: SystemTime,
    not_after: SystemTime,
    spki_der: Vec<u8>,
    is_ca: bool,
    key_id: Option<Vec<u8>>,
    issuer_name: Result<DistinguishedName, String>,
}

impl CaCertificate {
    /// Read and parse the certificate file `path` (exactly one PEM certificate).
    pub fn read(path: &Path) -> Result<CaCertificate, CaError> {
        let bytes = super::files::read_cert(path)?;
        CaCertificate::from_pem(&bytes).map_err(|why| CaError::Invalid {
            what: "certificate",
            path: path.to_path_buf(),
            why,
        })
    }

    /// Parse PEM text holding one certificate.
    pub fn from_pem(bytes: &[u8]) -> Result<CaCertificate, String> {
        let mut ders = Vec::new();
        for c in rustls_pemfile::certs(&mut &bytes[..]) {
            ders.push(c.map_err(|e| format!("bad PEM: {e}"))?);
        }
        let der = match ders.len() {
            0 => return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into()),
            1 => ders.remove(0),
            n => {
                return Err(format!(
                    "holds {n} certificates; it must hold the CA's alone"
                ))
            }
        };
        let cert = x509_cert::Certificate::from_der(&der)
            .map_err(|e| format!("not an X.509 certificate: {e}"))?;
        let tbs = &cert.tbs_certificate;
        let basic = tbs
            .get::<BasicConstraints>()
            .map_err(|e| format!("bad basic constraints: {e}"))?;
        let key_id = tbs
            .get::<SubjectKeyIdentifier>()
            .map_err(|e| format!("bad subject key identifier: {e}"))?
            .map(|(_, k)| k.0.as_bytes().to_vec());
        let spki_der = tbs
            .subject_public_key_info
            .to_der()
            .map_err(|e| format!("bad public key: {e}"))?;
        Ok(CaCertificate {
            pem: pem_of(&der),
            subject: tbs.subject.to_string(),
            not_before: tbs.validity.not_before.to_system_time(),
            not_after: tbs.validity.not_after.to_system_time(),
            spki_der,
            is_ca: basic.is_some_and(|(_, b)| b.ca),
            key_id,
            issuer_name: issuer_name(&tbs.subject),
            der,
        })
    }

    /// The certificate in DER.
    pub fn der(&self) -> &CertificateDer<'static> {
        &self.der
    }

    /// The certificate in PEM, as served at `/ca.pem`.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// The subject, e.g. `CN=proxypool CA host 2026-12-01 1a2b3c4d,O=proxypool`.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// The end of its validity.
    pub fn not_after(&self) -> SystemTime {
        self.not_after
    }

    /// The start of its validity.
    pub fn not_before(&self) -> SystemTime {
        self.not_before
    }

    /// SHA-256 of the certificate, `AB:CD:…` (as `openssl x509 -fingerprint -sha256`).
    pub fn fingerprint(&self) -> String {
        let d = ring::digest::digest(&ring::digest::SHA256, &self.der);
        let hex: Vec<String> = d.as_ref().iter().map(|b| format!("{b:02X}")).collect();
        hex.join(":")
    }

    /// Base64 of the SHA-256 of its SubjectPublicKeyInfo: what Chromium's
    /// `--ignore-certificate-errors-spki-list` takes.
    pub fn spki_sha256(&self) -> String {
        let d = ring::digest::digest(&ring::digest::SHA256, &self.spki_der);
        base64::engine::general_purpose::STANDARD.encode(d.as_ref())
    }

    pub(super) fn spki_der(&self) -> &[u8] {
        &self.spki_der
    }

    pub(super) fn is_ca(&self) -> bool {
        self.is_ca
    }

    /// How leaves name their issuer: the subject, attribute by attribute as encoded,
    /// and the key identifier the certificate states (else rcgen's default, derived from
    /// the key as `ca init` derives it).
    pub(super) fn issuer(&self) -> Result<(DistinguishedName, KeyIdMethod), String> {
        let name = self.issuer_name.clone()?;
        let id = match &self.key_id {
            Some(id) => KeyIdMethod::PreSpecified(id.clone()),
            None => KeyIdMethod::Sha256,
        };
        Ok((name, id))
    }
}

fn pem_of(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// The subject as rcgen writes an issuer name: one attribute per RDN, each type once, in
/// order, each value in its own string type. A name rcgen cannot write the same way (a
/// multi-valued RDN, a type twice) is refused: leaves would not chain to the CA.
fn issuer_name(subject: &x509_cert::name::Name) -> Result<DistinguishedName, String> {
    let mut dn = DistinguishedName::new();
    let mut seen: Vec<DnType> = Vec::new();
    for rdn in &subject.0 {
        let mut attrs = rdn.0.iter();
        let (Some(attr), None) = (attrs.next(), attrs.next()) else {
            return Err("its subject has a multi-valued name part".into());
        };
        let arcs: Vec<u64> = attr.oid.arcs().map(u64::from).collect();
        let ty = DnType::from_oid(&arcs);
        if seen.contains(&ty) {
            return Err(format!("its subject names {} twice", attr.oid));
        }
        seen.push(ty.clone());
        dn.push(ty, dn_value(&attr.value)?);
    }
    Ok(dn)
}

fn dn_value(v: &x509_cert::der::Any) -> Result<DnValue, String> {
    let bytes = v.value().to_vec();
    let text = || String::from_utf8(bytes.clone()).map_err(|_| "a name part is not text");
    let bad = |e: rcgen::Error| format!("a name part cannot be rewritten: {e}");
    Ok(match v.tag() {
        Tag::Utf8String => DnValue::Utf8String(text()?),
        Tag::PrintableString => DnValue::PrintableString(text()?.try_into().map_err(bad)?),
        Tag::Ia5String => DnValue::Ia5String(text()?.try_into().map_err(bad)?),
        Tag::TeletexString => DnValue::TeletexString(text()?.try_into().map_err(bad)?),
        Tag::BmpString => DnValue::BmpString(rcgen::BmpString::from_utf16be(bytes).map_err(bad)?),
        t => return Err(format!("a name part is a {t}, not a string")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_files_that_are_not_one_certificate_are_refused() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "no PEM certificate"),
            (b"hello\n", "no PEM certificate"),
            (
                b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                "not an X.509 certificate",
            ),
        ];
        for (pem, want) in cases {
            let e = CaCertificate::from_pem(pem).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
        let key = rcgen::KeyPair::generate().unwrap();
        let one = rcgen::CertificateParams::new(vec!["a.test".into()])
            .unwrap()
            .self_signed(&key)
            .unwrap()
            .pem();
        let two = format!("{one}{one}");
        let e = CaCertificate::from_pem(two.as_bytes()).unwrap_err();
        assert!(e.contains("holds 2 certificates"), "{e}");
        let c = CaCertificate::from_pem(one.as_bytes()).unwrap();
        assert!(!c.is_ca(), "no basic constraints: not a CA");
        assert_eq!(c.pem().trim(), one.trim());
    }
}
