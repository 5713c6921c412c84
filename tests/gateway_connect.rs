//! CONNECT's two ways in: a head that comes whole with the connection's first bytes is
//! served without hyper; a head after other requests, in pieces or longer than the first
//! look is served by hyper. Both must tunnel alike and answer alike.

mod common;

use std::time::Duration;

use common::fakes::*;
use common::gateway::*;
use proxypool::gateway::Limits;
use proxypool::health::State;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The head without its `date` line (hyper adds one; the quick path does not), lowercase.
fn without_date(head: &str) -> String {
    head.lines()
        .filter(|l| !l.to_ascii_lowercase().starts_with("date:"))
        .map(|l| l.to_ascii_lowercase())
        .collect::<Vec<_>>()
        .join("\n")
}

fn connect_head(port: u16, extra: &str) -> Vec<u8> {
    format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{extra}\r\n")
        .into_bytes()
}

/// Send a CONNECT head on `s` and read the 200 that opens the tunnel (no body follows).
async fn open_on(s: &mut TcpStream, head: &[u8]) -> String {
    s.write_all(head).await.unwrap();
    let (head, early) = read_head(s).await.expect("no CONNECT answer");
    assert!(
        early.is_empty(),
        "bytes after the CONNECT answer: {early:?}"
    );
    head
}

/// A tunnel just answered 200 on `s` carries a request to the destination and back.
async fn tunnel_works(s: &mut TcpStream) {
    s.write_all(b"GET /inside HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let r = read_response(s)
        .await
        .expect("no answer through the tunnel");
    assert_eq!(r.text(), "hello from the destination");
}

#[tokio::test]
async fn a_failed_connect_is_answered_alike_on_both_paths_and_the_connection_stays() {
    let gw = Gw::start(&[], |_| {}).await;
    let mut s = gw.connect().await;
    // The first head comes whole: the quick path answers it...
    let quick = request_on(&mut s, &connect_head(443, "")).await;
    // ...and leaves the connection open for hyper, which reads the next one.
    let hyper = request_on(&mut s, &connect_head(443, "")).await;
    for r in [&quick, &hyper] {
        assert_eq!(r.status(), 503, "{}", r.head);
        assert_eq!(r.header("x-proxypool-error"), Some("pool_empty"));
        assert!(
            r.text().starts_with("proxypool gateway: pool_empty: "),
            "{}",
            r.text()
        );
        let len: usize = r.header("content-length").unwrap().parse().unwrap();
        assert_eq!(len, r.body.len());
    }
    assert!(hyper.header("date").is_some(), "{}", hyper.head);
    assert_eq!(without_date(&quick.head), without_date(&hyper.head));
    assert_eq!(quick.body, hyper.body);
    assert_eq!(
        gw.metric(
            r#"proxypool_gateway_requests_total{protocol="http_connect",outcome="exhausted"}"#
        ),
        2.0
    );
}

#[tokio::test]
async fn a_connect_hyper_reads_tunnels_as_the_quick_one_does() {
    let d = dest(DestCfg::default()).await;
    let up = http_proxy(HttpProxyCfg::default()).await;
    let gw = Gw::start(&[url("http", up.port())], |_| {}).await;
    let port = d.port();

    // Whole in the first bytes: the quick path.
    let (mut s, quick) = connect_tunnel(gw.addr, port, "").await;
    assert_eq!(quick.status(), 200, "{}", quick.head);
    assert_eq!(quick.endpoint(), Some(gw.ids[0]));
    assert_eq!(quick.header("x-proxypool-pool"), Some("default"));
    tunnel_works(&mut s).await;
    drop(s);

    // After an absolute-form request on the same connection: hyper reads the CONNECT.
    let mut s = gw.connect().await;
    let r = request_on(&mut s, &get(port, "/first", "")).await;
    assert_eq!(r.status(), 200, "{}", r.head);
    let hyper = open_on(&mut s, &connect_head(port, "")).await;
    assert!(hyper.starts_with("HTTP/1.1 200 "), "{hyper}");
    assert_eq!(without_date(&quick.head), without_date(&hyper));
    tunnel_works(&mut s).await;
    drop(s);

    // A head longer than the gateway's first look: hyper again.
    let pad = format!("X-Pad: {}\r\n", "p".repeat(4000));
    let mut s = gw.connect().await;
    let long = open_on(&mut s, &connect_head(port, &pad)).await;
    assert!(long.starts_with("HTTP/1.1 200 "), "{long}");
    assert_eq!(without_date(&quick.head), without_date(&long));
    tunnel_works(&mut s).await;
    drop(s);

    gw.until_no_leases().await;
    assert_eq!(
        gw.metric(r#"proxypool_gateway_requests_total{protocol="http_connect",outcome="ok"}"#),
        3.0
    );
    // Every tunnel went through the upstream as a CONNECT of its own.
    let connects = up
        .seen()
        .iter()
        .filter(|h| h.starts_with("CONNECT "))
        .count();
    assert_eq!(connects, 3);
}

#[tokio::test]
async fn the_upstream_connect_carries_only_host_and_the_proxy_credentials() {
    let d = dest(DestCfg::default()).await;
    let up = http_proxy(HttpProxyCfg::default()).await;
    let gw = Gw::start(
        &[format!("http://alice:s3cret@127.0.0.1:{}", up.port())],
        |_| {},
    )
    .await;
    // What the client sends beyond the request line stays with the gateway.
    let (mut s, r) = connect_tunnel(
        gw.addr,
        d.port(),
        "User-Agent: client/1\r\nProxy-Connection: keep-alive\r\n",
    )
    .await;
    assert_eq!(r.status(), 200, "{}", r.head);
    tunnel_works(&mut s).await;
    let head = up
        .seen()
        .into_iter()
        .find(|h| h.starts_with("CONNECT "))
        .unwrap();
    let names: Vec<String> = head
        .lines()
        .skip(1)
        .filter(|l| !l.is_empty())
        .map(|l| l.split(':').next().unwrap().to_ascii_lowercase())
        .collect();
    assert_eq!(names, ["host", "proxy-authorization"], "{head}");
}

#[tokio::test]
async fn after_a_failed_connect_the_connection_keeps_the_keep_alive_limits() {
    // A short first-request limit, a long idle one: the quick path's answer counts as
    // the connection's first request, so the idle limit applies to it from then on.
    let limits = Limits {
        first_request: Duration::from_millis(300),
        idle: Duration::from_secs(30),
        ..Limits::default()
    };
    let gw = Gw::start_with(&[], |_| {}, limits).await;
    let mut s = gw.connect().await;
    let r = request_on(&mut s, &connect_head(443, "")).await;
    assert_eq!(r.status(), 503, "{}", r.head);
    // Well past the first-request limit, the connection is still open...
    let mut buf = [0u8; 1];
    let idle = tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await;
    assert!(idle.is_err(), "closed after its answer: {idle:?}");
    // ...and serves the next request.
    let r = request_on(&mut s, &connect_head(443, "")).await;
    assert_eq!(r.status(), 503, "{}", r.head);
}

#[tokio::test]
async fn a_client_that_leaves_while_its_tunnel_is_dialed_gives_its_lease_back_at_once() {
    // An upstream that never answers the CONNECT, and a dial deadline far away: only the
    // client's leaving can end the wait early.
    let up = silent_upstream().await;
    let gw = Gw::start(&[url("http", up.port())], |g| {
        g.connect_timeout = Duration::from_secs(120)
    })
    .await;
    let mut s = gw.connect().await;
    s.write_all(&connect_head(443, "")).await.unwrap();
    common::eventually_async(
        Duration::from_secs(5),
        "the upstream was asked for the tunnel",
        || {
            let asked = !up.seen().is_empty();
            async move { asked.then_some(()).ok_or_else(|| "not yet".to_string()) }
        },
    )
    .await;
    assert_eq!(gw.leases(), 1);
    drop(s);
    gw.until_no_leases().await;
    // Given back unreported: nothing is known of the upstream.
    assert_eq!(gw.row(gw.ids[0]).state, State::Available);
}

#[tokio::test]
async fn a_connect_that_asks_to_close_is_answered_and_closed() {
    let gw = Gw::start(&[], |_| {}).await;
    let mut s = gw.connect().await;
    let r = request_on(&mut s, &connect_head(443, "Connection: close\r\n")).await;
    assert_eq!(r.status(), 503, "{}", r.head);
    assert_eq!(r.header("connection"), Some("close"), "{}", r.head);
    assert!(until_closed(&mut s, "the connection stayed open")
        .await
        .is_empty());
}

#[tokio::test]
async fn credentials_outside_visible_ascii_are_no_credentials_on_both_paths() {
    let up = http_proxy(HttpProxyCfg::default()).await;
    let gw = Gw::start(&[url("http", up.port())], |g| {
        g.token = Some("s3cret".into())
    })
    .await;
    let good = proxy_auth("user", "s3cret");
    // The same credentials behind an em space: what a lax parser would trim away.
    let odd = good.replacen("Basic ", "\u{2003}Basic ", 1);
    let mut s = gw.connect().await;
    let r = request_on(&mut s, &connect_head(443, &odd)).await;
    assert_eq!(r.status(), 407, "{}", r.head);
    let r = roundtrip(gw.addr, &get(443, "/", &odd)).await;
    assert_eq!(r.status(), 407, "{}", r.head);
    assert!(up.seen().is_empty(), "{:?}", up.seen());
}
