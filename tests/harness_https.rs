//! The HTTPS harness proves itself: the nginx origin (HTTP/1.1 and HTTP/2 with the harness
//! CA, every location), the bad origin, upstream proxies that leave from their own loopback
//! addresses, mitmproxy intercepting with its own CA, HAProxy as a hop and the WebSocket
//! echo. Every check is a real transfer by curl (or a raw client) with a real outcome.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use common::curl::{Curl, EXIT_PEER_CERT};
use common::haproxy::{haproxy_tcp, haproxy_tcp_from};
use common::mitm::Mitmproxy;
use common::origin::{self, big_body, NginxOrigin, CHALLENGE_MARKER, OK_BODY};
use common::upstreams::{dante_bound, microsocks_bound, tinyproxy_bound};
use common::websocket::{accept_key, WsClient, CLOSE, PING, PONG};

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

/// curl trusting the harness CA, with every name of the certificate resolved to 127.0.0.1.
fn client(o: &NginxOrigin) -> Option<Curl> {
    let mut c = Curl::new()?.cacert(&o.ca_pem);
    for n in ["origin.test", "shop.test", "www.example.test", "other.test"] {
        c = c.resolve(n, o.https_port).resolve(n, o.http_port);
    }
    Some(c)
}

#[tokio::test]
async fn origin_speaks_http2_and_http1_with_the_harness_ca_for_every_name() {
    let Some(o) = NginxOrigin::start().await else {
        return;
    };
    let Some(curl) = client(&o) else { return };
    for host in ["origin.test", "shop.test", "www.example.test", "127.0.0.1"] {
        let url = o.https_url(host, "/ok");
        let h2 = curl.clone().http2().get(&url).await;
        assert!(h2.is(200) && h2.version == "2", "{h2}");
        assert_eq!(h2.text(), OK_BODY);
        let h1 = curl.clone().http1().get(&url).await;
        assert!(h1.is(200) && h1.version == "1.1", "{h1}");
        assert_eq!(h1.text(), OK_BODY);
    }
    let plain = curl.get(&o.http_url("origin.test", "/ok")).await;
    assert!(plain.is(200) && plain.version == "1.1", "{plain}");
    assert_eq!(plain.text(), OK_BODY);
    // What nginx saw: the SNI and protocol of each HTTPS request, none for the IP literal.
    let who = curl
        .clone()
        .http2()
        .get(&o.https_url("shop.test", "/whoami"))
        .await;
    let who: serde_json::Value = serde_json::from_slice(&who.body).unwrap();
    assert_eq!(who["sni"], "shop.test", "{who}");
    assert_eq!(who["alpn"], "h2", "{who}");
    assert_eq!(who["protocol"], "HTTP/2.0", "{who}");
    assert_eq!(who["scheme"], "https", "{who}");
    let log = o.requests();
    assert_eq!(log.len(), 10, "{log:?}");
    assert!(log
        .iter()
        .any(|r| r["sni"] == "" && r["host"] == "127.0.0.1"));
}

#[tokio::test]
async fn origin_certificate_is_refused_without_the_ca_or_for_another_name() {
    let Some(o) = NginxOrigin::start().await else {
        return;
    };
    let Some(curl) = client(&o) else { return };
    // A name the certificate does not carry.
    let other = curl.get(&o.https_url("other.test", "/ok")).await;
    assert_eq!(other.exit, EXIT_PEER_CERT, "{other}");
    // The system's roots only: the harness CA is not among them.
    let bare = Curl::new()
        .unwrap()
        .resolve("origin.test", o.https_port)
        .get(&o.https_url("origin.test", "/ok"))
        .await;
    assert_eq!(bare.exit, EXIT_PEER_CERT, "{bare}");
    assert!(o.requests().is_empty(), "{:?}", o.requests());
}

#[tokio::test]
async fn origin_locations_answer_as_documented() {
    let Some(o) = NginxOrigin::start().await else {
        return;
    };
    let Some(curl) = client(&o) else { return };
    let get = |path: &str| curl.clone().get(&o.https_url("origin.test", path));
    let ipt = get("/ip").await;
    assert!(ipt.is(200) && ipt.text() == "127.0.0.1\n", "{ipt}");
    let ipj = get("/ip.json").await;
    assert!(ipj.is(200), "{ipj}");
    let ipj: serde_json::Value = serde_json::from_slice(&ipj.body).unwrap();
    assert_eq!(ipj, serde_json::json!({"ip": "127.0.0.1"}));
    for s in origin::STATUSES {
        let r = get(&format!("/status/{s}")).await;
        assert_eq!((r.exit, r.status), (0, *s), "{r}");
    }
    let missing = get("/nothing-here").await;
    assert_eq!(missing.status, 404, "{missing}");

    let blocked = get("/challenge").await;
    assert!(blocked.is(403), "{blocked}");
    assert_eq!(blocked.header("cf-mitigated").as_deref(), Some("challenge"));
    assert!(blocked.text().contains(CHALLENGE_MARKER), "{blocked}");
    let passed = get("/challenge-200").await;
    assert!(passed.is(200), "{passed}");
    assert_eq!(passed.header("cf-mitigated").as_deref(), Some("challenge"));
    assert!(passed.text().contains(CHALLENGE_MARKER), "{passed}");
    let page = get("/challenge-page").await;
    assert!(
        page.is(200) && page.header("cf-mitigated").is_none(),
        "{page}"
    );
    assert!(page.text().contains(CHALLENGE_MARKER), "{page}");

    let big = get("/big").await;
    assert!(big.is(200), "{}", big.stderr);
    assert_eq!(big.body.len(), o.cfg.big_bytes);
    assert!(
        big.body == big_body(o.cfg.big_bytes),
        "the /big body differs"
    );
}

#[tokio::test]
async fn challenge_page_is_gzipped_for_a_client_that_asks() {
    let Some(o) = NginxOrigin::start().await else {
        return;
    };
    let Some(curl) = client(&o) else { return };
    for path in ["/challenge", "/challenge-page"] {
        let url = o.https_url("origin.test", path);
        // Asked by hand, curl leaves the body as it came: gzip's magic bytes, not HTML.
        let raw = curl
            .clone()
            .http2()
            .header("Accept-Encoding: gzip")
            .get(&url)
            .await;
        assert_eq!(
            raw.header("content-encoding").as_deref(),
            Some("gzip"),
            "{raw}"
        );
        assert_eq!(&raw.body[..2], &[0x1f, 0x8b], "{raw}");
        assert!(!raw.text().contains(CHALLENGE_MARKER));
        let decoded = curl.clone().http1().compressed().get(&url).await;
        assert_eq!(decoded.header("content-encoding").as_deref(), Some("gzip"));
        assert!(decoded.text().contains(CHALLENGE_MARKER), "{decoded}");
        assert!(decoded.body.len() > raw.body.len() * 3, "{decoded}");
    }
    // A client that does not ask gets it plain.
    let plain = curl
        .get(&o.https_url("origin.test", "/challenge-page"))
        .await;
    assert!(plain.header("content-encoding").is_none(), "{plain}");
    assert!(plain.text().contains(CHALLENGE_MARKER));
}

#[tokio::test]
async fn bad_origin_is_refused_with_the_harness_ca_and_only_its_issuer_is_wrong() {
    let Some(bad) = NginxOrigin::bad().await else {
        return;
    };
    let Some(curl) = client(&bad) else { return };
    let url = bad.https_url("origin.test", "/ok");
    let refused = curl.clone().verbose().get(&url).await;
    assert_eq!(refused.exit, EXIT_PEER_CERT, "{refused}");
    assert!(refused.stderr.contains("self-signed"), "{refused}");
    // Trusting its own certificate instead, the same request verifies: names and dates
    // are right, the issuer alone is not the harness CA.
    let own = Curl::new()
        .unwrap()
        .cacert(&bad.cert_pem)
        .resolve("origin.test", bad.https_port)
        .get(&url)
        .await;
    assert!(own.is(200) && own.text() == OK_BODY, "{own}");
}

/// A proxy, its URL for curl and the address it leaves from.
struct Exit {
    bind: Ipv4Addr,
    proxy: String,
    _daemon: common::tools::ToolDaemon,
}

#[tokio::test]
async fn bound_proxies_reach_the_origin_from_their_own_addresses() {
    let Some(o) = NginxOrigin::start().await else {
        return;
    };
    let Some(curl) = client(&o) else { return };
    let ports = [o.https_port, o.http_port];
    let mut exits = Vec::new();
    for bind in [ip("127.0.1.2"), ip("127.0.1.3"), ip("127.0.2.2")] {
        let Some(tp) = tinyproxy_bound(bind, &ports).await else {
            return;
        };
        let proxy = format!("http://alice:s3cret@127.0.0.1:{}", tp.port);
        exits.push(Exit {
            bind,
            proxy,
            _daemon: tp,
        });
    }
    let Some(ms) = microsocks_bound(ip("127.0.3.4")).await else {
        return;
    };
    let proxy = format!("socks5h://alice:s3cret@127.0.0.1:{}", ms.port);
    exits.push(Exit {
        bind: ip("127.0.3.4"),
        proxy,
        _daemon: ms,
    });
    let Some(dt) = dante_bound(ip("127.0.4.5")).await else {
        return;
    };
    let proxy = format!("socks5h://127.0.0.1:{}", dt.port);
    exits.push(Exit {
        bind: ip("127.0.4.5"),
        proxy,
        _daemon: dt,
    });
    // By address (the certificate's IP SAN): no name for the proxies to resolve.
    for e in &exits {
        for url in [
            o.https_url("127.0.0.1", "/ip"),
            o.http_url("127.0.0.1", "/ip"),
        ] {
            let r = curl.clone().proxy(&e.proxy).get(&url).await;
            assert!(r.is(200), "{} {r}", e.proxy);
            assert_eq!(r.text(), format!("{}\n", e.bind), "{} {url}", e.proxy);
        }
    }
}

#[tokio::test]
async fn guarded_location_refuses_one_exit_and_serves_the_other() {
    let Some(()) = origin::need_hosts() else {
        return;
    };
    let denied = ip("127.0.1.2");
    let Some(mut o) = NginxOrigin::banning(&[IpAddr::V4(denied)]).await else {
        return;
    };
    let Some(curl) = client(&o) else { return };
    let ports = [o.https_port];
    let Some(bad_exit) = tinyproxy_bound(denied, &ports).await else {
        return;
    };
    let Some(good_exit) = tinyproxy_bound(ip("127.0.1.3"), &ports).await else {
        return;
    };
    let via = |tp: &common::tools::ToolDaemon| {
        curl.clone()
            .http2()
            .proxy(&format!("http://alice:s3cret@127.0.0.1:{}", tp.port))
    };
    let url = o.https_url("shop.test", "/guarded");
    let no = via(&bad_exit).get(&url).await;
    assert!(no.is(403) && no.text() == origin::DENIED_BODY, "{no}");
    let yes = via(&good_exit).get(&url).await;
    assert!(yes.is(200) && yes.text() == origin::ALLOWED_BODY, "{yes}");
    let direct = curl.clone().get(&url).await;
    assert!(direct.is(200), "{direct}");
    // The site lifts the ban: the same exit is served.
    o.set_banned(&[]).await;
    let lifted = via(&bad_exit).get(&url).await;
    assert!(
        lifted.is(200) && lifted.text() == origin::ALLOWED_BODY,
        "{lifted}"
    );
    let seen: Vec<(String, String)> = o
        .requests()
        .iter()
        .map(|r| (r["ip"].to_string(), r["status"].to_string()))
        .collect();
    assert!(
        seen.contains(&("\"127.0.1.2\"".into(), "\"403\"".into())),
        "{seen:?}"
    );
}

#[tokio::test]
async fn mitmproxy_presents_its_own_ca_and_is_caught_by_verification() {
    let Some(()) = origin::need_hosts() else {
        return;
    };
    let Some(o) = NginxOrigin::start().await else {
        return;
    };
    let Some(curl) = client(&o) else { return };
    let Some(m) = Mitmproxy::start().await else {
        return;
    };
    let url = o.https_url("origin.test", "/ok");
    let caught = curl.clone().proxy(&m.url()).get(&url).await;
    assert_eq!(caught.exit, EXIT_PEER_CERT, "{caught}\n{}", m.log_text());
    // What it presented instead, unchecked: a leaf for the name from mitmproxy's CA.
    let seen = curl
        .clone()
        .proxy(&m.url())
        .insecure()
        .verbose()
        .get(&url)
        .await;
    assert!(seen.is(200), "{seen}");
    assert!(seen.stderr.contains("subject: CN=origin.test"), "{seen}");
    assert!(seen.stderr.contains("issuer: CN=mitmproxy"), "{seen}");
    // Trusting mitmproxy's CA, the interception verifies, and the origin answered it.
    let trusted = Curl::new()
        .unwrap()
        .cacert(&m.ca_pem)
        .resolve("origin.test", o.https_port)
        .proxy(&m.url())
        .http2()
        .get(&url)
        .await;
    assert!(trusted.is(200) && trusted.text() == OK_BODY, "{trusted}");
    let plain = curl
        .clone()
        .proxy(&m.url())
        .get(&o.http_url("origin.test", "/ok"))
        .await;
    assert!(plain.is(200) && plain.text() == OK_BODY, "{plain}");
    let served = o.requests();
    assert!(
        served.iter().any(|r| r["sni"] == "origin.test"),
        "{served:?}"
    );
    // Without its credentials mitmproxy answers 407.
    let anon = curl
        .clone()
        .proxy(&format!("http://127.0.0.1:{}", m.port))
        .get(&url)
        .await;
    assert!(anon.head.contains(" 407"), "{anon}");
}

#[tokio::test]
async fn mitmproxy_bound_leaves_from_its_address() {
    let Some(o) = NginxOrigin::start().await else {
        return;
    };
    let Some(m) = Mitmproxy::bound(ip("127.0.5.6")).await else {
        return;
    };
    // CONNECT 127.0.0.1:PORT, TLS for origin.test: no name for mitmproxy to resolve.
    let r = Curl::new()
        .unwrap()
        .cacert(&m.ca_pem)
        .connect_to("origin.test", o.https_port)
        .proxy(&m.url())
        .get(&o.https_url("origin.test", "/ip"))
        .await;
    assert!(
        r.is(200) && r.text() == "127.0.5.6\n",
        "{r}\n{}",
        m.log_text()
    );
}

#[tokio::test]
async fn haproxy_hop_carries_tls_untouched_and_leaves_from_its_source() {
    let Some(o) = NginxOrigin::start().await else {
        return;
    };
    let Some(curl) = Curl::new() else { return };
    let to = SocketAddr::from(([127, 0, 0, 1], o.https_port));
    let Some(hop) = haproxy_tcp(to).await else {
        return;
    };
    let Some(sourced) = haproxy_tcp_from(to, Some(ip("127.0.6.7"))).await else {
        return;
    };
    for (d, want) in [(&hop, "127.0.0.1\n"), (&sourced, "127.0.6.7\n")] {
        let r = curl
            .clone()
            .cacert(&o.ca_pem)
            .resolve("origin.test", d.port)
            .http2()
            .get(&format!("https://origin.test:{}/ip", d.port))
            .await;
        assert!(r.is(200) && r.version == "2", "{r}\n{}", d.log_text());
        assert_eq!(r.text(), want);
    }
}

#[test]
fn websocket_accept_key_matches_rfc_6455() {
    assert_eq!(
        accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
        "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    );
}

#[tokio::test]
async fn websocket_echo_through_the_origin_over_http_and_https() {
    let Some(o) = NginxOrigin::start().await else {
        return;
    };
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", o.http_port))
        .await
        .unwrap();
    let mut ws = WsClient::connect(tcp, "origin.test", "/ws").await;
    assert_eq!(ws.echo("over plain HTTP").await, "over plain HTTP");
    drop(ws);

    let tls = tls_to(&o, "origin.test").await;
    let mut ws = WsClient::connect(tls, "origin.test", "/ws").await;
    let long = "x".repeat(70_000);
    assert_eq!(ws.echo(&long).await, long);
    ws.send(PING, b"are you there").await;
    let pong = ws.recv().await.unwrap();
    assert_eq!(
        (pong.opcode, pong.payload.as_slice()),
        (PONG, &b"are you there"[..])
    );
    ws.send(CLOSE, &1000u16.to_be_bytes()).await;
    let close = ws.recv().await.unwrap();
    assert_eq!(close.opcode, CLOSE);
    drop(ws);
    // nginx logs an upgraded request when it ends.
    common::eventually_async(Duration::from_secs(10), "both upgrades logged", || {
        let log = o.requests();
        let n = log
            .iter()
            .filter(|r| r["uri"] == "/ws" && r["status"] == "101")
            .count();
        async move { (n == 2).then_some(()).ok_or(format!("{log:?}")) }
    })
    .await;
}

/// TLS to the origin trusting the harness CA, ALPN http/1.1 (WebSocket's).
async fn tls_to(
    o: &NginxOrigin,
    name: &'static str,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", o.https_port))
        .await
        .unwrap();
    let pem = std::fs::read(&o.ca_pem).unwrap();
    common::fakes::tls_client(tcp, &pem, name, &[b"http/1.1"])
        .await
        .unwrap()
}

#[tokio::test]
async fn python_requests_verifies_the_origin_with_the_harness_ca_through_a_bound_proxy() {
    let Some(()) = origin::need_hosts() else {
        return;
    };
    let Some(py) = common::mitm::python_with("requests") else {
        return;
    };
    let Some(o) = NginxOrigin::start().await else {
        return;
    };
    let Some(tp) = tinyproxy_bound(ip("127.0.1.9"), &[o.https_port]).await else {
        return;
    };
    let proxy = format!("http://alice:s3cret@127.0.0.1:{}", tp.port);
    let script = "import sys, requests\n\
                  url, proxy, ca = sys.argv[1:]\n\
                  p = {'https': proxy}\n\
                  r = requests.get(url, proxies=p, verify=ca, timeout=20)\n\
                  print(r.status_code, r.text.strip())\n\
                  try:\n\
                  \x20   requests.get(url, proxies=p, timeout=20)\n\
                  \x20   print('default roots: accepted')\n\
                  except requests.exceptions.SSLError:\n\
                  \x20   print('default roots: refused')\n";
    let url = o.https_url("www.example.test", "/ip");
    let ca = o.ca_pem.display().to_string();
    let out = tokio::process::Command::new(&py)
        .args(["-c", script, &url, &proxy, &ca])
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text, "200 127.0.1.9\ndefault roots: refused\n");
}
