//! The certificates of HTTPS interception through real rustls handshakes: the server
//! config an intercepted client meets (a leaf by SNI, else by the CONNECT host; IP
//! literals; ALPN), checked by a rustls client that trusts the CA alone; hostile SNI names
//! sent as raw ClientHello bytes; and the origin side's client config (extra roots, the
//! reason a certificate is refused, `insecure_origins`).

mod common;

use std::sync::Arc;

use proxypool::config::{CaFiles, Everything, HostPatterns};
use proxypool::tls::{
    origin_config, CertAuthority, FrontTls, LeafName, Leaves, OriginTlsCause, OriginTlsFailure,
};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::{TlsAcceptor, TlsConnector};

struct Setup {
    _dir: tempfile::TempDir,
    ca: Arc<CertAuthority>,
    front: FrontTls,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let ca = Arc::new(CertAuthority::create(&CaFiles::in_dir(dir.path()), false).unwrap());
    let leaves = Arc::new(Leaves::new(ca.clone(), 1000));
    Setup {
        _dir: dir,
        front: FrontTls::new(leaves).unwrap(),
        ca,
    }
}

/// A rustls client trusting `ca` alone, offering `alpn`, sending SNI or not.
fn client(ca: &CertAuthority, alpn: &[&str], sni: bool) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.certificate().der().clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
    cfg.enable_sni = sni;
    TlsConnector::from(Arc::new(cfg))
}

/// One handshake over an in-memory pipe: the client's view (ALPN, the leaf's SANs) or
/// its error, and the server's SNI.
async fn handshake(
    server: Arc<rustls::ServerConfig>,
    client: TlsConnector,
    name: &str,
) -> (Result<Option<Vec<u8>>, String>, Option<String>) {
    let (c, s) = tokio::io::duplex(64 * 1024);
    let name = ServerName::try_from(name.to_string()).unwrap();
    let server = tokio::spawn(async move {
        match TlsAcceptor::from(server).accept(s).await {
            Ok(mut tls) => {
                let sni = tls.get_ref().1.server_name().map(str::to_string);
                let _ = tls.write_all(b"x").await;
                let _ = tls.flush().await;
                sni
            }
            Err(_) => None,
        }
    });
    let got = match client.connect(name, c).await {
        Ok(mut tls) => {
            let mut b = [0u8; 1];
            tls.read_exact(&mut b).await.unwrap();
            Ok(tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec))
        }
        Err(e) => Err(e.to_string()),
    };
    (got, server.await.unwrap())
}

/// (CONNECT host, name the client verifies, client sends SNI, ALPN offered, ALPN agreed)
type Case<'a> = (&'a str, &'a str, bool, &'a [&'a str], Option<&'a str>);

#[tokio::test]
async fn a_client_trusting_only_the_ca_accepts_the_leaf_by_sni_or_connect_host() {
    let s = setup();
    let both = ["h2", "http/1.1"];
    let cases: &[Case] = &[
        ("shop.example", "shop.example", true, &both, Some("h2")),
        (
            "shop.example",
            "shop.example",
            true,
            &["http/1.1"],
            Some("http/1.1"),
        ),
        ("shop.example", "shop.example", true, &[], None),
        // SNI wins over the CONNECT host.
        ("10.0.0.9", "www.shop.example", true, &both, Some("h2")),
        // No SNI: the CONNECT host's leaf.
        ("shop.example", "shop.example", false, &both, Some("h2")),
        // An IP literal: clients send no SNI; the leaf has an IP SAN.
        ("127.0.0.1", "127.0.0.1", true, &both, Some("h2")),
        ("::1", "::1", true, &["http/1.1"], Some("http/1.1")),
    ];
    for &(connect, name, sni, alpn, want) in cases {
        let (got, server_sni) =
            handshake(s.front.config_for(connect), client(&s.ca, alpn, sni), name).await;
        let case = format!("CONNECT {connect}, verify {name}, sni {sni}");
        assert_eq!(got, Ok(want.map(|w| w.as_bytes().to_vec())), "{case}");
        let sent_sni = sni && name.parse::<std::net::IpAddr>().is_err();
        assert_eq!(server_sni.as_deref(), sent_sni.then_some(name), "{case}");
    }
    // A leaf is for its own name only.
    let (got, _) = handshake(
        s.front.config_for("shop.example"),
        client(&s.ca, &both, false),
        "other.example",
    )
    .await;
    assert!(got.unwrap_err().contains("not valid for name"));
    // A client that trusts the usual roots, not this CA, refuses it.
    let public = TlsConnector::from(origin_config(None, &HostPatterns::default()).unwrap());
    let (got, _) = handshake(s.front.config_for("shop.example"), public, "shop.example").await;
    let e = got.unwrap_err();
    assert!(e.contains("unknown_issuer"), "{e}");
    // Without SNI and without a CONNECT host there is nothing to present.
    let (got, _) = handshake(
        s.front.sni_only(),
        client(&s.ca, &both, false),
        "shop.example",
    )
    .await;
    assert!(got.is_err());
    assert_eq!(s.front.leaves().len(), 4, "{:?}", s.front.leaves());
}

/// A ClientHello (TLS 1.3, x25519, ECDSA P-256) whose SNI is `name`, as raw bytes.
fn client_hello(name: &[u8]) -> Vec<u8> {
    fn u16be(n: usize) -> [u8; 2] {
        (n as u16).to_be_bytes()
    }
    let mut sni = Vec::new();
    sni.extend(u16be(name.len() + 3));
    sni.push(0);
    sni.extend(u16be(name.len()));
    sni.extend(name);
    let key: Vec<u8> = (0..32u8)
        .map(|i| i.wrapping_mul(7).wrapping_add(9))
        .collect();
    let mut share = vec![0x00, 0x1d];
    share.extend(u16be(32));
    share.extend(&key);
    let exts: [(u16, Vec<u8>); 5] = [
        (0x0000, sni),
        (0x000a, vec![0, 2, 0x00, 0x1d]),
        (0x000d, vec![0, 2, 0x04, 0x03]),
        (0x002b, vec![2, 0x03, 0x04]),
        (0x0033, [u16be(share.len()).to_vec(), share].concat()),
    ];
    let mut ext_bytes = Vec::new();
    for (ty, body) in exts {
        ext_bytes.extend(ty.to_be_bytes());
        ext_bytes.extend(u16be(body.len()));
        ext_bytes.extend(body);
    }
    let mut body = vec![0x03, 0x03];
    body.extend([0x42u8; 32]);
    body.push(0);
    body.extend([0, 2, 0x13, 0x01]);
    body.extend([1, 0]);
    body.extend(u16be(ext_bytes.len()));
    body.extend(ext_bytes);
    let mut hs = vec![0x01, 0];
    hs.extend(u16be(body.len()));
    hs.extend(body);
    let mut rec = vec![0x16, 0x03, 0x01];
    rec.extend(u16be(hs.len()));
    rec.extend(hs);
    rec
}

/// The type of the server's first record after `hello` (0x16 handshake, 0x15 alert), or
/// `None` when it closed without one.
async fn first_record(server: Arc<rustls::ServerConfig>, hello: Vec<u8>) -> Option<u8> {
    let (mut c, s) = tokio::io::duplex(64 * 1024);
    let task = tokio::spawn(async move { TlsAcceptor::from(server).accept(s).await.is_ok() });
    c.write_all(&hello).await.unwrap();
    let mut head = [0u8; 1];
    let got = c.read_exact(&mut head).await.ok().map(|_| head[0]);
    drop(c);
    assert!(
        !task.await.unwrap(),
        "no handshake completes without a client"
    );
    got
}

#[tokio::test]
async fn hostile_sni_names_are_refused_by_an_alert_and_never_cached() {
    let s = setup();
    let long_ok = format!("{}.example", vec!["a".repeat(60); 3].join("."));
    let refused: Vec<Vec<u8>> = vec![
        vec![b'a'; 300],
        b"a..b".to_vec(),
        b"bad name.example".to_vec(),
        b"x\0y.example".to_vec(),
        b"1.2.3".to_vec(),
        b"-lead.example".to_vec(),
        vec![0xff, 0xfe, b'.', b'x'],
        format!("{}.example", "b".repeat(64)).into_bytes(),
    ];
    for name in &refused {
        let got = first_record(s.front.config_for("shop.example"), client_hello(name)).await;
        assert_eq!(
            got,
            Some(0x15),
            "{:?}: an alert",
            String::from_utf8_lossy(name)
        );
    }
    assert_eq!(
        s.front.leaves().len(),
        0,
        "nothing minted for a refused name"
    );
    // An address sent as SNI counts as no SNI: the CONNECT host's leaf.
    let got = first_record(
        s.front.config_for("shop.example"),
        client_hello(b"10.1.2.3"),
    )
    .await;
    assert_eq!(got, Some(0x16));
    // A long but well-formed name is a name.
    let got = first_record(
        s.front.config_for("shop.example"),
        client_hello(long_ok.as_bytes()),
    )
    .await;
    assert_eq!(got, Some(0x16));
    assert_eq!(s.front.leaves().len(), 2);
    let l = s.front.leaves();
    for n in ["shop.example", long_ok.as_str()] {
        let name = LeafName::parse(n).unwrap();
        assert!(
            Arc::ptr_eq(&l.get(&name).unwrap(), &l.get(&name).unwrap()),
            "{n} cached"
        );
    }
    // The server still serves ordinary clients.
    let (got, _) = handshake(
        s.front.config_for("x"),
        client(&s.ca, &["h2"], true),
        "ok.example",
    )
    .await;
    assert_eq!(got, Ok(Some(b"h2".to_vec())));
}

/// An origin: a TLS server presenting a leaf of `ca` for `name`.
fn origin(ca: &CertAuthority, name: &str) -> Arc<rustls::ServerConfig> {
    let key = ca
        .mint(
            &LeafName::parse(name).unwrap(),
            std::time::SystemTime::now(),
        )
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Fixed(key.key)));
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(cfg)
}

#[derive(Debug)]
struct Fixed(Arc<rustls::sign::CertifiedKey>);

impl rustls::server::ResolvesServerCert for Fixed {
    fn resolve(
        &self,
        _: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }
}

#[tokio::test]
async fn origins_are_verified_against_the_roots_and_a_refusal_says_why() {
    // The origins' CA (trusted through extra_roots) and a stranger's (an intercepting
    // proxy's own CA).
    let (site, stranger) = (setup(), setup());
    let extra = site._dir.path().join("ca.pem");
    let insecure = HostPatterns::parse(&["self-signed.test".into()], Everything::Allowed).unwrap();
    let cfg = origin_config(Some(&extra), &insecure).unwrap();
    assert_eq!(cfg.alpn_protocols, [b"h2".to_vec(), b"http/1.1".to_vec()]);
    let connector = TlsConnector::from(cfg.clone());

    let (got, _) = handshake(
        origin(&site.ca, "shop.example"),
        connector.clone(),
        "shop.example",
    )
    .await;
    assert_eq!(got, Ok(Some(b"h2".to_vec())), "a trusted origin, h2 agreed");

    // (server's CA, name presented, name asked for, cause)
    let cases = [
        (
            &stranger.ca,
            "shop.example",
            "shop.example",
            OriginTlsCause::UnknownIssuer,
        ),
        (
            &site.ca,
            "other.example",
            "shop.example",
            OriginTlsCause::WrongName,
        ),
    ];
    for (ca, presented, asked, cause) in cases {
        let server = origin(ca, presented);
        let (c, s) = tokio::io::duplex(64 * 1024);
        let task = tokio::spawn(async move { TlsAcceptor::from(server).accept(s).await.is_ok() });
        let name = ServerName::try_from(asked.to_string()).unwrap();
        let err = connector.connect(name, c).await.expect_err("refused");
        let f = OriginTlsFailure::from_io(&err);
        assert_eq!(f.cause, cause, "{f:?}");
        assert!(f.cause.is_certificate());
        assert!(f.presented.is_some(), "the refused certificate's digest");
        assert!(
            f.issuer.as_deref().unwrap().contains("proxypool CA"),
            "{f:?}"
        );
        assert!(f.detail.contains(cause.as_str()), "{}", f.detail);
        assert!(!task.await.unwrap());
    }
    // The same certificate refused twice has the same digest; another one another.
    // (What tells an origin's own bad certificate from one a proxy substitutes.)
    let digest = |ca: Arc<CertAuthority>| {
        let c = connector.clone();
        async move {
            let server = origin(&ca, "shop.example");
            let (a, b) = tokio::io::duplex(64 * 1024);
            tokio::spawn(async move { TlsAcceptor::from(server).accept(b).await.is_ok() });
            let e = c
                .connect(ServerName::try_from("shop.example").unwrap(), a)
                .await
                .err()
                .unwrap();
            OriginTlsFailure::from_io(&e).presented.unwrap()
        }
    };
    let stranger2 = setup();
    assert_ne!(
        digest(stranger.ca.clone()).await,
        digest(stranger2.ca.clone()).await
    );

    // insecure_origins: not checked at all.
    let (got, _) = handshake(
        origin(&stranger.ca, "self-signed.test"),
        connector.clone(),
        "self-signed.test",
    )
    .await;
    assert_eq!(got, Ok(Some(b"h2".to_vec())));
    // A handshake that breaks without a certificate verdict.
    let io = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "tls handshake eof");
    assert_eq!(
        OriginTlsFailure::from_io(&io).cause,
        OriginTlsCause::Handshake
    );
    // Without extra_roots the site's private CA is unknown.
    let plain = TlsConnector::from(origin_config(None, &HostPatterns::default()).unwrap());
    let (got, _) = handshake(origin(&site.ca, "shop.example"), plain, "shop.example").await;
    let e = got.unwrap_err();
    assert!(e.contains("unknown_issuer"), "{e}");
    let e = origin_config(
        Some(std::path::Path::new("/nonexistent/roots.pem")),
        &insecure,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("extra_roots /nonexistent/roots.pem"),
        "{e}"
    );
}

/// As `handshake`, the server reading the ClientHello first and choosing its config by it.
async fn lazy_handshake(
    front: FrontTls,
    connect: &'static str,
    client: TlsConnector,
    name: &str,
) -> Result<Option<Vec<u8>>, String> {
    let (c, s) = tokio::io::duplex(64 * 1024);
    let server = tokio::spawn(async move {
        let acceptor = rustls::server::Acceptor::default();
        let start = tokio_rustls::LazyConfigAcceptor::new(acceptor, s)
            .await
            .unwrap();
        let sni = start.client_hello().server_name().map(str::to_string);
        let shared = Arc::ptr_eq(
            &front.config_for_hello(sni.as_deref(), connect),
            &front.sni_only(),
        );
        assert_eq!(
            shared,
            sni.is_some(),
            "the shared config exactly when SNI came"
        );
        let cfg = front.config_for_hello(sni.as_deref(), connect);
        if let Ok(mut tls) = start.into_stream(cfg).await {
            let _ = tls.write_all(b"x").await;
            let _ = tls.flush().await;
        }
    });
    let name = ServerName::try_from(name.to_string()).unwrap();
    let got = match client.connect(name, c).await {
        Ok(mut tls) => {
            let mut b = [0u8; 1];
            tls.read_exact(&mut b).await.unwrap();
            Ok(tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec))
        }
        Err(e) => Err(e.to_string()),
    };
    server.await.unwrap();
    got
}

#[tokio::test]
async fn a_server_that_reads_the_client_hello_first_shares_one_config_for_sni_clients() {
    let s = setup();
    let both = ["h2", "http/1.1"];
    for (connect, name, sni) in [
        ("10.0.0.9", "shop.example", true),
        ("shop.example", "shop.example", false),
        ("127.0.0.1", "127.0.0.1", true),
    ] {
        let got = lazy_handshake(s.front.clone(), connect, client(&s.ca, &both, sni), name).await;
        assert_eq!(
            got,
            Ok(Some(b"h2".to_vec())),
            "CONNECT {connect}, verify {name}, sni {sni}"
        );
    }
}
