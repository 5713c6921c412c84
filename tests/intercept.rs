//! HTTPS interception through the real daemon (docs/intercept.md): the gateway ends the
//! client's TLS with this install's CA, sends each request through an upstream (real
//! tinyproxy instances leaving from their own loopback addresses) to a real nginx origin
//! whose certificate is verified, and judges what comes back. A ban inside HTTPS is seen,
//! retried around and kept for that pair.

mod common;

use std::net::{IpAddr, Ipv4Addr};

use common::curl::{Curl, CurlOut};
use common::intercepting::{setup, Setup};
use common::origin::{self, NginxOrigin, ALLOWED_BODY};
use common::upstreams::tinyproxy_bound;
use serde_json::Value;

/// Origin `o`, one tinyproxy leaving from `addr` in front of it, and a daemon whose gateway
/// intercepts through it (`extra`: more `[[gateway]]` keys); None when a tool is missing
/// (outside CI).
async fn one_upstream(
    o: Option<NginxOrigin>,
    addr: Ipv4Addr,
    extra: &str,
) -> Option<(NginxOrigin, common::tools::ToolDaemon, Setup)> {
    origin::need_hosts();
    let o = o?;
    let up = tinyproxy_bound(addr, &[o.https_port]).await?;
    let s = setup(&o, &[&up], extra);
    Some((o, up, s))
}

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn endpoint_of(out: &CurlOut) -> Option<i64> {
    out.header("x-proxypool-endpoint")?.trim().parse().ok()
}

#[tokio::test]
async fn a_ban_inside_https_is_seen_retried_around_and_kept_for_that_pair() {
    origin::need_hosts();
    let banned = ip("127.0.1.2");
    let Some(o) = NginxOrigin::banning(&[IpAddr::V4(banned)]).await else {
        return;
    };
    let Some(bad) = tinyproxy_bound(banned, &[o.https_port]).await else {
        return;
    };
    let Some(good) = tinyproxy_bound(ip("127.0.1.3"), &[o.https_port]).await else {
        return;
    };
    let s = setup(&o, &[&bad, &good], "");
    let Some(curl) = s.curl() else { return };
    let url = o.https_url("origin.test", "/guarded");
    for i in 0..20 {
        let out = curl.clone().get(&url).await;
        assert!(out.is(200), "request {i}: {out}");
        assert_eq!(out.text(), ALLOWED_BODY, "request {i}: {out}");
        assert_eq!(endpoint_of(&out), Some(2), "request {i}: {out}");
    }
    // The pool learnt: the banned upstream's pair is cooling for the site, the other's is not.
    let states = s.states_for("origin.test");
    assert_eq!(
        states,
        vec![(1, "cooling".to_string()), (2, "available".to_string())],
        "{}",
        s.daemon.log_tail(20)
    );
    // Every request reached the origin through the good upstream but the one that was banned.
    let seen: Vec<String> = o
        .requests()
        .iter()
        .map(|r| r["ip"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        seen.iter().filter(|a| *a == "127.0.1.2").count(),
        1,
        "{seen:?}"
    );
    assert_eq!(
        seen.iter().filter(|a| *a == "127.0.1.3").count(),
        20,
        "{seen:?}"
    );
}

#[tokio::test]
async fn both_protocols_on_both_sides_and_the_endpoint_header_inside_tls() {
    let Some((o, _up, s)) = one_upstream(NginxOrigin::start().await, ip("127.0.1.4"), "").await
    else {
        return;
    };
    let Some(curl) = s.curl() else { return };
    let url = o.https_url("origin.test", "/whoami");
    for (c, version) in [(curl.clone().http2(), "2"), (curl.clone().http1(), "1.1")] {
        let out = c.get(&url).await;
        assert!(out.is(200), "{out}");
        assert_eq!(out.version, version, "{out}");
        assert_eq!(endpoint_of(&out), Some(1), "{out}");
        let who: Value = serde_json::from_slice(&out.body).unwrap();
        // The origin met the gateway's TLS client, through the upstream, over HTTP/2.
        assert_eq!(who["ip"], "127.0.1.4", "{who}");
        assert_eq!(who["sni"], "origin.test", "{who}");
        assert_eq!(who["alpn"], "h2", "{who}");
    }
    let metrics = s.page("/metrics").await;
    assert!(
        metrics.contains("proxypool_gateway_intercepted_total{pool=\"default\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("proxypool_gateway_leaf_certificates 1"),
        "{metrics}"
    );
    // What clients are told to trust is what the daemon signs with.
    assert_eq!(
        s.page("/ca.pem").await,
        std::fs::read_to_string(&s.ca).unwrap()
    );
}

/// `TE: trailers` reaches the origin and the origin's trailers come back to the client,
/// HTTP/2 on both sides (gRPC's way).
#[tokio::test]
async fn trailers_cross_an_intercepted_connection() {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let Some((o, _up, s)) = one_upstream(NginxOrigin::start().await, ip("127.0.1.4"), "").await
    else {
        return;
    };
    let tunnel = connect_through(s.gateway, &format!("origin.test:{}", o.https_port)).await;
    let tls = tls_over(tunnel, &s.ca, "origin.test", &[b"h2"]).await;
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .expect("HTTP/2 with the gateway");
    tokio::spawn(conn);
    let req = hyper::Request::get(o.https_url("origin.test", "/trailers"))
        .header("te", "trailers")
        .body(Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.expect("an answer");
    assert_eq!(resp.status(), 200);
    let te = resp.headers().get("x-te").map(|v| v.to_str().unwrap());
    assert_eq!(
        te,
        Some("trailers"),
        "the TE the origin got: {:?}",
        resp.headers()
    );
    let body = resp.into_body().collect().await.expect("the body");
    let trailers = body.trailers().cloned();
    assert_eq!(body.to_bytes(), origin::OK_BODY.as_bytes());
    let trailers = trailers.expect("the origin's trailers");
    assert_eq!(trailers["x-check"], "done", "{trailers:?}");
}

/// An origin that ends each HTTP/2 connection after two requests (`GOAWAY`, as nginx does
/// at `keepalive_requests`): a request that meets a connection on its way out (kept, or
/// just made and shared at once) goes again on a new one through the same upstream, and
/// nobody is blamed, also when the connection broke under it as nginx closed it.
#[tokio::test]
async fn an_origin_that_ends_its_http2_connections_blames_nobody() {
    let cfg = origin::OriginCfg {
        keepalive_requests: 2,
        ..origin::OriginCfg::default()
    };
    // A response head that never comes is a recorded failure well before curl gives up
    // (20 s), so that a hang names its side.
    let extra = r#"response_timeout = "5s""#;
    let Some((o, _up, s)) =
        one_upstream(NginxOrigin::with(cfg).await, ip("127.0.1.4"), extra).await
    else {
        return;
    };
    let Some(curl) = s.curl() else { return };
    let url = o.https_url("origin.test", "/ok");
    // Eight clients at once, so requests meet the shared connection as it goes.
    let clients = (0..8).map(|_| {
        let (curl, url) = (curl.clone().http2(), url.clone());
        async move {
            let mut outs = Vec::new();
            for _ in 0..8 {
                outs.push(curl.clone().get(&url).await);
            }
            outs
        }
    });
    let outs = futures_util::future::join_all(clients).await;
    let failures: Vec<Value> = s
        .home
        .events()
        .into_iter()
        .filter(|e| e["reason"].is_string())
        .collect();
    for out in outs.iter().flatten() {
        assert!(
            out.is(200),
            "{out}\nfailures: {failures:?}\nthe daemon's last lines:\n{}\nthe origin's requests: {}",
            s.daemon.log_tail(40),
            o.requests().len()
        );
        assert_eq!(endpoint_of(out), Some(1), "{out}");
    }
    assert!(failures.is_empty(), "{failures:?}");
    let listed = s.home.listed(1);
    assert_eq!(listed["state"], "available", "{listed}");
    // nginx did end connections under the clients: more than one was opened.
    let connections: std::collections::HashSet<String> = o
        .requests()
        .iter()
        .filter_map(|r| r["connection"].as_str().map(str::to_string))
        .collect();
    assert!(connections.len() > 1, "{connections:?}");
}

/// A TLS client trusting only `ca` (the daemon's CA), with `alpn`, over `io` to `name`.
async fn tls_over<S>(
    io: S,
    ca: &std::path::Path,
    name: &'static str,
    alpn: &[&[u8]],
) -> tokio_rustls::client::TlsStream<S>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let pem = std::fs::read(ca).unwrap();
    common::fakes::tls_client(io, &pem, name, alpn)
        .await
        .expect("TLS with the gateway's leaf")
}

/// A CONNECT through the gateway, answered `200`.
async fn connect_through(gateway: u16, authority: &str) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", gateway))
        .await
        .unwrap();
    s.write_all(format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).await.unwrap(), 1, "gateway closed: {head:?}");
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    s
}

#[tokio::test]
async fn a_websocket_inside_an_intercepted_connection_is_relayed() {
    use common::websocket::{WsClient, CLOSE};
    let Some((o, _up, s)) = one_upstream(NginxOrigin::start().await, ip("127.0.1.5"), "").await
    else {
        return;
    };
    let tunnel = connect_through(s.gateway, &format!("origin.test:{}", o.https_port)).await;
    let tls = tls_over(tunnel, &s.ca, "origin.test", &[b"http/1.1"]).await;
    let mut ws = WsClient::connect(tls, "origin.test", "/ws").await;
    assert!(
        ws.head
            .to_ascii_lowercase()
            .contains("x-proxypool-endpoint: 1"),
        "{}",
        ws.head
    );
    let long = "y".repeat(70_000);
    assert_eq!(ws.echo(&long).await, long);
    assert_eq!(ws.echo("short").await, "short");
    ws.send(CLOSE, &1000u16.to_be_bytes()).await;
    assert_eq!(ws.recv().await.unwrap().opcode, CLOSE);
    drop(ws);
    // The upgrade went through the upstream, and its lease came back when it closed.
    common::eventually(
        std::time::Duration::from_secs(10),
        "the lease is given back",
        || {
            let st = s.daemon.status();
            (st["leases"] == 0).then_some(()).ok_or(st.to_string())
        },
    );
    // nginx logs an upgraded request once it has closed.
    let what = "the upgrade is logged";
    let ws = common::eventually(std::time::Duration::from_secs(10), what, || {
        let ws: Vec<Value> = o
            .requests()
            .into_iter()
            .filter(|r| r["uri"] == "/ws")
            .collect();
        if ws.len() == 1 {
            Ok(ws)
        } else {
            Err(format!("{ws:?}"))
        }
    });
    assert_eq!(
        (ws[0]["ip"].as_str(), ws[0]["status"].as_str()),
        (Some("127.0.1.5"), Some("101"))
    );
}

#[tokio::test]
async fn an_upgrade_the_origin_refuses_is_judged_like_any_answer() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let banned = ip("127.1.0.6");
    let origin = NginxOrigin::banning(&[IpAddr::V4(banned)]).await;
    let Some((o, _up, s)) = one_upstream(origin, banned, "").await else {
        return;
    };
    let tunnel = connect_through(s.gateway, &format!("origin.test:{}", o.https_port)).await;
    let mut tls = tls_over(tunnel, &s.ca, "origin.test", &[b"http/1.1"]).await;
    let req = "GET /guarded HTTP/1.1\r\nHost: origin.test\r\nUpgrade: websocket\r\n\
               Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
               Sec-WebSocket-Version: 13\r\n\r\n";
    tls.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tls.read(&mut buf).await.unwrap();
        assert!(
            n > 0,
            "closed before the answer: {:?}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&got).to_string();
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    // The 403 is a ban like any other answer's: that pair cools for the site.
    let what = "the upgrade's 403 banned the pair";
    common::eventually(std::time::Duration::from_secs(10), what, || {
        let states = s.states_for("origin.test");
        (states == vec![(1, "cooling".to_string())])
            .then_some(())
            .ok_or(format!("{states:?}"))
    });
}

#[tokio::test]
async fn rotate_request_spreads_one_keep_alive_connection_over_every_upstream() {
    origin::need_hosts();
    let Some(o) = NginxOrigin::start().await else {
        return;
    };
    let mut ups = Vec::new();
    for a in ["127.0.1.6", "127.0.1.7", "127.0.1.8"] {
        let Some(u) = tinyproxy_bound(ip(a), &[o.https_port]).await else {
            return;
        };
        ups.push(u);
    }
    let s = setup(&o, &ups.iter().collect::<Vec<_>>(), "rotate = \"request\"");
    let url = o.https_url("origin.test", "/ip");
    let text = s.curl_many(&url, 9).await;
    let mut seen: Vec<&str> = text.lines().collect();
    assert_eq!(seen.len(), 9, "{text}");
    seen.sort();
    seen.dedup();
    assert_eq!(seen, ["127.0.1.6", "127.0.1.7", "127.0.1.8"], "{text}");
    // Without it, one connection keeps one upstream.
    drop(s);
    let s = setup(&o, &ups.iter().collect::<Vec<_>>(), "");
    let text = s.curl_many(&url, 9).await;
    let mut seen: Vec<&str> = text.lines().collect();
    assert_eq!(seen.len(), 9, "{text}");
    seen.dedup();
    assert_eq!(seen.len(), 1, "one upstream per connection: {text}");
}

#[tokio::test]
async fn socks5_connects_are_intercepted_too() {
    let Some((o, _up, s)) = one_upstream(NginxOrigin::start().await, ip("127.0.1.9"), "").await
    else {
        return;
    };
    let Some(curl) = Curl::new() else { return };
    let out = curl
        .cacert(&s.ca)
        .proxy(&format!("socks5h://127.0.0.1:{}", s.gateway))
        .get(&o.https_url("origin.test", "/ip"))
        .await;
    assert!(out.is(200), "{out}");
    assert_eq!(out.text(), "127.0.1.9\n");
    assert_eq!(endpoint_of(&out), Some(1), "{out}");
}

/// A SOCKS5 client that resolves names itself (`socks5://`, an address in the request)
/// still sends the name as SNI and `Host`: the connection is served by that name.
#[tokio::test]
async fn a_socks5_client_that_resolved_the_name_itself_is_served_by_name() {
    origin::need_hosts();
    let Some(o) = NginxOrigin::start().await else {
        return;
    };
    let Some(up) = tinyproxy_bound(ip("127.0.1.9"), &[o.https_port]).await else {
        return;
    };
    let s = common::intercepting::setup_everything(&o, &[&up]);
    let Some(curl) = Curl::new() else { return };
    let out = curl
        .cacert(&s.ca)
        .proxy(&format!("socks5://127.0.0.1:{}", s.gateway))
        .get(&o.https_url("origin.test", "/whoami"))
        .await;
    assert!(out.is(200), "{out}");
    let who: Value = serde_json::from_slice(&out.body).unwrap();
    assert_eq!(who["ip"], "127.0.1.9", "{who}");
    assert_eq!(who["sni"], "origin.test", "{who}");
    assert_eq!(who["host"], "origin.test", "{who}");
    assert_eq!(endpoint_of(&out), Some(1), "{out}");
}

#[tokio::test]
async fn a_client_that_never_finishes_its_handshake_is_closed_and_others_are_served() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some((o, _up, s)) = one_upstream(NginxOrigin::start().await, ip("127.0.1.10"), "").await
    else {
        return;
    };
    let authority = format!("origin.test:{}", o.https_port);
    // Half a TLS record header, then silence; and plain garbage where TLS should be.
    let mut silent = connect_through(s.gateway, &authority).await;
    silent.write_all(&[0x16, 0x03]).await.unwrap();
    let mut garbage = connect_through(s.gateway, &authority).await;
    garbage
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // Refused at once: a TLS alert at most, then the close.
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        garbage.read_to_end(&mut answer),
    )
    .await
    .expect("garbage where TLS should be is closed");
    assert!(
        answer.is_empty() || answer[0] == 0x15,
        "not an alert: {answer:?}"
    );
    // Meanwhile another client is served at once.
    let out = s
        .curl()
        .unwrap()
        .get(&o.https_url("origin.test", "/ok"))
        .await;
    assert!(out.is(200), "{out}");
    // The silent one is closed by the gateway's first-request deadline (10 s).
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        silent.read_to_end(&mut rest),
    )
    .await
    .expect("the gateway closes a handshake that never ends");
    assert!(rest.is_empty(), "closed without an answer: {rest:?}");
    assert_eq!(
        s.daemon.status()["leases"],
        0,
        "nothing was leased for them"
    );
}
