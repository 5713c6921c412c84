use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rcgen::{BasicConstraints, CertificateParams, DnType, DnValue, IsCa, KeyPair};
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use x509_cert::der::Decode;

use super::*;
use crate::config::CaFiles;

fn new_ca(dir: &std::path::Path) -> (CaFiles, Arc<CertAuthority>) {
    let files = CaFiles::in_dir(dir);
    let ca = CertAuthority::create(&files, false).unwrap();
    (files, Arc::new(ca))
}

/// Verify `chain` for `name` with a verifier trusting `ca` alone, at `now`.
fn verify(
    ca: &CaCertificate,
    chain: &[CertificateDer<'static>],
    name: &str,
    now: SystemTime,
) -> Result<(), rustls::Error> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let v = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .unwrap();
    let at = UnixTime::since_unix_epoch(now.duration_since(SystemTime::UNIX_EPOCH).unwrap());
    let name = ServerName::try_from(name.to_string()).unwrap();
    v.verify_server_cert(&chain[0], &chain[1..], &name, &[], at)
        .map(|_| ())
}

#[test]
fn a_new_ca_is_a_p256_root_named_after_host_and_day() {
    let dir = tempfile::tempdir().unwrap();
    let (files, ca) = new_ca(dir.path());
    let c = ca.certificate();
    let today = &humantime::format_rfc3339_seconds(SystemTime::now()).to_string()[..10];
    assert!(
        c.subject().contains("proxypool CA") && c.subject().contains(today),
        "{}",
        c.subject()
    );
    let x = x509_cert::Certificate::from_der(c.der()).unwrap();
    let alg = x.tbs_certificate.subject_public_key_info.algorithm;
    assert_eq!(alg.oid.to_string(), "1.2.840.10045.2.1", "an EC key");
    assert_eq!(
        alg.parameters
            .unwrap()
            .decode_as::<x509_cert::der::asn1::ObjectIdentifier>()
            .unwrap()
            .to_string(),
        "1.2.840.10045.3.1.7",
        "on P-256"
    );
    let serial = x.tbs_certificate.serial_number.as_bytes().to_vec();
    assert!(
        serial.len() >= 16,
        "a random serial of 16 bytes: {serial:02x?}"
    );
    let key = std::fs::read_to_string(&files.key).unwrap();
    assert!(key.starts_with("-----BEGIN PRIVATE KEY-----"), "PKCS#8");
    let mode = std::fs::metadata(&files.key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(!format!("{ca:?}").contains("PRIVATE"), "Debug shows no key");
    // Two CAs: different serials, names and keys.
    let other = tempfile::tempdir().unwrap();
    let (_, ca2) = new_ca(other.path());
    assert_ne!(ca2.certificate().subject(), c.subject());
    assert_ne!(ca2.certificate().fingerprint(), c.fingerprint());
    assert_eq!(c.fingerprint().len(), 32 * 3 - 1);
}

#[test]
fn loading_refuses_what_cannot_be_used_naming_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let (files, _) = new_ca(&dir.path().join("a"));
    let (other, _) = new_ca(&dir.path().join("b"));
    let load_err = |f: &CaFiles| CertAuthority::load(f).unwrap_err().to_string();

    let missing = CaFiles::in_dir(&dir.path().join("none"));
    assert!(load_err(&missing).contains("run `proxypool ca init`"));
    let no_key = CaFiles {
        cert: files.cert.clone(),
        key: dir.path().join("none.key"),
    };
    assert!(load_err(&no_key).contains("no CA key"));

    let mixed = CaFiles {
        cert: files.cert.clone(),
        key: other.key.clone(),
    };
    let e = load_err(&mixed);
    assert!(e.contains("does not match the certificate"), "{e}");

    std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = load_err(&files);
    assert!(
        e.contains(&format!("chmod 600 {}", files.key.display())),
        "{e}"
    );
    std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(0o600)).unwrap();

    std::fs::write(&other.cert, "not a certificate\n").unwrap();
    assert!(load_err(&other).contains("no PEM certificate"));
    let garbage_key = CaFiles {
        cert: files.cert.clone(),
        key: dir.path().join("g.key"),
    };
    std::fs::write(
        &garbage_key.key,
        "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n",
    )
    .unwrap();
    std::fs::set_permissions(&garbage_key.key, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(load_err(&garbage_key).contains("openssl pkcs8 -topk8"));
    CertAuthority::load(&files).unwrap();
}

/// A CA made elsewhere: written to `dir` with `params` over a new P-256 key.
fn foreign_ca(dir: &std::path::Path, params: CertificateParams) -> CaFiles {
    let key = KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let files = CaFiles::in_dir(dir);
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(&files.cert, cert.pem()).unwrap();
    std::fs::write(&files.key, key.serialize_pem()).unwrap();
    std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(0o600)).unwrap();
    files
}

#[test]
fn a_ca_made_elsewhere_signs_leaves_that_chain_to_it_or_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = CertificateParams::default();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(
        DnType::CountryName,
        DnValue::PrintableString("DE".try_into().unwrap()),
    );
    p.distinguished_name
        .push(DnType::OrganizationName, "Corp GmbH");
    p.distinguished_name.push(
        DnType::CustomDnType(vec![2, 5, 4, 5]),
        DnValue::PrintableString("42".try_into().unwrap()),
    );
    let files = foreign_ca(&dir.path().join("ok"), p.clone());
    let ca = CertAuthority::load(&files).unwrap();
    let leaf = ca
        .mint(&LeafName::Dns("shop.example".into()), SystemTime::now())
        .unwrap();
    verify(
        ca.certificate(),
        &leaf.key.cert,
        "shop.example",
        SystemTime::now(),
    )
    .unwrap();

    let mut not_ca = p.clone();
    not_ca.is_ca = IsCa::NoCa;
    let e = CertAuthority::load(&foreign_ca(&dir.path().join("leaf"), not_ca))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a CA certificate"), "{e}");

    let mut old = p;
    old.not_before = rcgen::date_time_ymd(2001, 1, 1);
    old.not_after = rcgen::date_time_ymd(2002, 1, 1);
    let e = CertAuthority::load(&foreign_ca(&dir.path().join("old"), old))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("expired on 2002-01-01") && e.contains("ca init --force"),
        "{e}"
    );
}

#[test]
fn leaves_chain_to_the_ca_for_names_and_addresses_for_seven_days_at_most() {
    let dir = tempfile::tempdir().unwrap();
    let (_, ca) = new_ca(dir.path());
    let now = SystemTime::now();
    for (name, as_client) in [
        ("shop.example", "shop.example"),
        ("127.0.0.1", "127.0.0.1"),
        ("::1", "::1"),
    ] {
        let leaf = ca.mint(&LeafName::parse(name).unwrap(), now).unwrap();
        assert_eq!(leaf.key.cert.len(), 2, "leaf, then the CA");
        assert_eq!(leaf.key.cert[1], *ca.certificate().der());
        verify(ca.certificate(), &leaf.key.cert, as_client, now).unwrap();
        // A minute ago (a client clock behind) and six days on: still valid.
        verify(
            ca.certificate(),
            &leaf.key.cert,
            as_client,
            now - Duration::from_secs(60),
        )
        .unwrap();
        verify(
            ca.certificate(),
            &leaf.key.cert,
            as_client,
            now + Duration::from_secs(6 * 86400),
        )
        .unwrap();
        let e = verify(
            ca.certificate(),
            &leaf.key.cert,
            as_client,
            now + Duration::from_secs(7 * 86400),
        )
        .unwrap_err();
        assert!(e.to_string().contains("expired"), "{e}");
        let x = x509_cert::Certificate::from_der(&leaf.key.cert[0]).unwrap();
        let v = x.tbs_certificate.validity;
        let span = v
            .not_after
            .to_system_time()
            .duration_since(v.not_before.to_system_time())
            .unwrap();
        assert!(span <= LEAF_LIFETIME, "{span:?}");
        assert!(v.not_before.to_system_time() < now);
    }
    let leaf = ca
        .mint(&LeafName::parse("shop.example").unwrap(), now)
        .unwrap();
    assert!(verify(ca.certificate(), &leaf.key.cert, "other.example", now).is_err());
    let long = format!("{}.example", ["abcdefghij"; 20].join("."));
    let leaf = ca.mint(&LeafName::parse(&long).unwrap(), now).unwrap();
    verify(ca.certificate(), &leaf.key.cert, &long, now).unwrap();
}

#[test]
fn the_cache_is_bounded_least_recently_used_first() {
    let dir = tempfile::tempdir().unwrap();
    let (_, ca) = new_ca(dir.path());
    let leaves = Leaves::new(ca, 3);
    let name = |s: &str| LeafName::parse(s).unwrap();
    let a = leaves.get(&name("a.test")).unwrap();
    assert!(
        Arc::ptr_eq(&a, &leaves.get(&name("A.test.")).unwrap()),
        "one leaf for one name"
    );
    leaves.get(&name("b.test")).unwrap();
    leaves.get(&name("c.test")).unwrap();
    leaves.get(&name("a.test")).unwrap(); // a is now the most recent
    leaves.get(&name("d.test")).unwrap(); // b goes
    assert_eq!((leaves.len(), leaves.capacity()), (3, 3));
    assert!(
        Arc::ptr_eq(&a, &leaves.get(&name("a.test")).unwrap()),
        "a kept"
    );
    let b2 = leaves.get(&name("b.test")).unwrap();
    assert_eq!(leaves.len(), 3);
    // b was minted again: a new serial.
    let serial = |k: &rustls::sign::CertifiedKey| {
        x509_cert::Certificate::from_der(&k.cert[0])
            .unwrap()
            .tbs_certificate
            .serial_number
    };
    assert_ne!(serial(&b2), serial(&a));
}

static OFFSET: AtomicU64 = AtomicU64::new(0);
fn moved_clock() -> SystemTime {
    SystemTime::now() + Duration::from_secs(OFFSET.load(Ordering::Relaxed))
}

#[test]
fn a_leaf_is_minted_again_a_day_before_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let (_, ca) = new_ca(dir.path());
    let leaves = Leaves::with_clock(ca, 10, moved_clock);
    let n = LeafName::parse("shop.example").unwrap();
    let first = leaves.get(&n).unwrap();
    OFFSET.store(5 * 86400, Ordering::Relaxed);
    assert!(
        Arc::ptr_eq(&first, &leaves.get(&n).unwrap()),
        "5 days on: the same"
    );
    OFFSET.store(6 * 86400 - 3000, Ordering::Relaxed);
    let second = leaves.get(&n).unwrap();
    assert!(!Arc::ptr_eq(&first, &second), "under a day left: a new one");
    assert_eq!(leaves.len(), 1);
}

#[test]
fn concurrent_asks_for_one_new_name_mint_once() {
    let dir = tempfile::tempdir().unwrap();
    let (_, ca) = new_ca(dir.path());
    let leaves = Arc::new(Leaves::new(ca, 100));
    for round in 0..20 {
        let host = format!("h{round}.example");
        let barrier = Arc::new(std::sync::Barrier::new(8));
        let got: Vec<_> = (0..8)
            .map(|_| {
                let (leaves, barrier, host) = (leaves.clone(), barrier.clone(), host.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    leaves.get(&LeafName::parse(&host).unwrap()).unwrap()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        assert!(
            got.iter().all(|k| Arc::ptr_eq(k, &got[0])),
            "round {round}: one leaf"
        );
    }
}
