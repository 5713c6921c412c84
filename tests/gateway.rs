//! The rotating gateway against hand-written fakes: retries, errors, reports, sessions,
//! rotation, authentication on every front path, limits and hostile clients.

mod common;

use std::time::Duration;

use common::fakes::*;
use common::gateway::*;
use proxypool::config::PlainHttp;
use proxypool::gateway::Limits;
use proxypool::health::{Phase, Reason, State};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn http_upstream() -> Fake {
    http_proxy(HttpProxyCfg::default()).await
}

async fn dead() -> String {
    url("http", closed_port())
}

#[tokio::test]
async fn connect_dials_first_and_tunnels() {
    let d = dest(DestCfg::default()).await;
    let up = http_upstream().await;
    let gw = Gw::start(&[url("http", up.port())], |_| {}).await;
    let (mut s, resp) = connect_tunnel(gw.addr, d.port(), "").await;
    assert_eq!(resp.status(), 200, "{}", resp.head);
    assert_eq!(resp.endpoint(), Some(gw.ids[0]));
    // The upstream was asked for the tunnel before the client heard 200.
    assert!(up.seen()[0].starts_with(&format!("CONNECT 127.0.0.1:{}", d.port())));
    assert_eq!(gw.leases(), 1, "the tunnel holds its lease");
    s.write_all(b"GET /inside HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let r = read_response(&mut s).await.unwrap();
    assert_eq!(r.text(), "hello from the destination");
    drop(s);
    gw.until_no_leases().await;
    assert_eq!(gw.row(gw.ids[0]).state, State::Available);
}

/// Read from `s` until `needle` has arrived or the stream ends; everything read.
async fn read_until(s: &mut tokio::net::TcpStream, needle: &str) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains(needle) {
        match tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!(
                "nothing more within 10 s; got {:?}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn bytes_sent_with_the_request_and_half_closes_cross_the_tunnel() {
    // Two answers per connection, then it closes after the client's end of file.
    let d = dest(DestCfg {
        keep_alive: Some(2),
        ..DestCfg::default()
    })
    .await;
    let up = http_upstream().await;
    let gw = Gw::start(&[url("http", up.port())], |_| {}).await;
    let get = "GET /inside HTTP/1.1\r\nHost: x\r\n\r\n";

    // CONNECT and the first request in one write, before any answer (what a client that
    // pipelines its TLS hello does): the request must reach the destination after 200.
    let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let port = d.port();
    s.write_all(
        format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n{get}")
            .as_bytes(),
    )
    .await
    .unwrap();
    let got = read_until(&mut s, "hello from the destination").await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(got.contains("hello from the destination"), "{got}");
    // A second request on the same tunnel, then the client's half-close: the tunnel
    // carries the answer, passes the end on, and closes once the far side has closed.
    s.write_all(get.as_bytes()).await.unwrap();
    s.shutdown().await.unwrap();
    let rest = read_until(&mut s, "\u{0}never").await;
    assert!(rest.contains("hello from the destination"), "{rest}");
    gw.until_no_leases().await;

    // The same over SOCKS5: greeting, request and the first bytes in one write.
    let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let mut hello = vec![5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1];
    hello.extend_from_slice(&port.to_be_bytes());
    hello.extend_from_slice(get.as_bytes());
    s.write_all(&hello).await.unwrap();
    let mut replies = [0u8; 12];
    s.read_exact(&mut replies).await.unwrap();
    assert_eq!((replies[1], replies[3]), (0, 0), "{replies:?}");
    let got = read_until(&mut s, "hello from the destination").await;
    assert!(got.contains("hello from the destination"), "{got}");
    s.shutdown().await.unwrap();
    read_until(&mut s, "\u{0}never").await;
    gw.until_no_leases().await;
}

#[tokio::test]
async fn dead_upstreams_are_reported_and_retried_around() {
    let d = dest(DestCfg::default()).await;
    let up = http_upstream().await;
    let urls = [dead().await, dead().await, url("http", up.port())];
    let gw = Gw::start(&urls, |g| g.retries = 2).await;
    let (_s, resp) = connect_tunnel(gw.addr, d.port(), "").await;
    assert_eq!(resp.status(), 200, "{}", resp.head);
    assert_eq!(resp.endpoint(), Some(gw.ids[2]));
    for id in &gw.ids[..2] {
        let row = gw.row(*id);
        assert_eq!(row.state, State::Cooling);
        // Exactly what a probe would say about a closed port.
        assert_eq!(
            (row.reason, row.phase),
            (Some(Reason::ConnectRefused), Some(Phase::Connect))
        );
    }
    // Absolute-form is retried the same way.
    let gw2 = Gw::start(&[dead().await, url("http", up.port())], |_| {}).await;
    let r = roundtrip(gw2.addr, &get(d.port(), "/a", "Connection: close\r\n")).await;
    assert_eq!(r.status(), 200, "{}", r.head);
    assert_eq!(r.endpoint(), Some(gw2.ids[1]));
    assert_eq!(r.text(), "hello from the destination");
}

#[tokio::test]
async fn all_dead_is_502_with_the_reason_then_503_with_retry_after() {
    let d = dest(DestCfg::default()).await;
    let urls = [dead().await, dead().await, dead().await];
    let gw = Gw::start(&urls, |g| g.retries = 1).await;
    let (_s, resp) = connect_tunnel(gw.addr, d.port(), "").await;
    assert_eq!(resp.status(), 502, "{}", resp.head);
    assert_eq!(resp.header("x-proxypool-error"), Some("connect_refused"));
    // retries = 1: two tried, the third untouched.
    let states: Vec<State> = gw.rows().iter().map(|r| r.state).collect();
    assert_eq!(
        states.iter().filter(|s| **s == State::Cooling).count(),
        2,
        "{states:?}"
    );
    let r = roundtrip(gw.addr, &get(d.port(), "/", "")).await;
    assert_eq!(r.status(), 502, "{}", r.head);
    assert_eq!(r.endpoint(), Some(gw.ids[2]), "the last one tried is named");
    assert!(
        r.text().contains("connect_refused at connect"),
        "{}",
        r.text()
    );
    // Now everything cools: the pool is empty and says for how long.
    let r = roundtrip(gw.addr, &get(d.port(), "/", "")).await;
    assert_eq!(r.status(), 503, "{}", r.head);
    assert_eq!(r.header("x-proxypool-error"), Some("pool_exhausted"));
    let secs: u64 = r.header("retry-after").unwrap().parse().unwrap();
    // Default cooldown 60s ± 10% jitter.
    assert!((50..=70).contains(&secs), "{secs}");
    gw.until_no_leases().await;
}

#[tokio::test]
async fn empty_pool_is_503_on_every_front() {
    let gw = Gw::start(&[], |_| {}).await;
    let r = roundtrip(gw.addr, &get(80, "/", "")).await;
    assert_eq!(r.status(), 503, "{}", r.head);
    // Nothing will come by waiting: no Retry-After, and the error says so.
    assert_eq!(r.header("x-proxypool-error"), Some("pool_empty"));
    assert!(r.header("retry-after").is_none(), "{}", r.head);
    assert!(
        r.text().starts_with("proxypool gateway: pool_empty: "),
        "{}",
        r.text()
    );
    let (_s, r) = connect_tunnel(gw.addr, 443, "").await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.header("x-proxypool-error"), Some("pool_empty"));
    assert!(r.header("retry-after").is_none(), "{}", r.head);
    let (_s, code) = socks5_connect(gw.addr, None, "127.0.0.1", 80).await;
    assert_eq!(code, 0x01);
}

#[tokio::test]
async fn ban_on_plain_http_is_reported_with_status_and_retry_after() {
    let d = dest(DestCfg {
        status: 429,
        headers: vec![("Retry-After".into(), "300".into())],
        body: b"slow down".to_vec(),
        ..Default::default()
    })
    .await;
    let up = http_upstream().await;
    // Forwarded (not tunnelled), to see the request head the upstream gets.
    let gw = Gw::start(&[url("http", up.port())], |g| {
        g.plain_http = PlainHttp::Forward
    })
    .await;
    let r = roundtrip(gw.addr, &get(d.port(), "/x", "")).await;
    // The client gets the destination's answer, marked with the upstream used.
    assert_eq!(r.status(), 429);
    assert_eq!(r.text(), "slow down");
    assert_eq!(r.endpoint(), Some(gw.ids[0]));
    gw.until_no_leases().await;
    // A ban is the pair's (docs/blame.md, "What each answer means"): the endpoint
    // stays in service for other sites, the (endpoint, 127.0.0.1) pair cools.
    assert_eq!(gw.row(gw.ids[0]).state, State::Available);
    let pairs = gw.pairs(gw.ids[0]);
    assert_eq!(pairs.len(), 1, "{pairs:?}");
    let row = &pairs[0];
    assert_eq!(
        (row.destination.as_str(), row.health.state),
        ("127.0.0.1", State::Cooling)
    );
    assert_eq!(
        (row.health.reason, row.health.phase, row.status),
        (
            Some(Reason::DestinationStatus),
            Some(Phase::ResponseHead),
            Some(429)
        )
    );
    // Retry-After 300 s outweighs the 60 s base cooldown.
    assert!(
        row.health.cooldown_ms.unwrap() >= 300_000,
        "{:?}",
        row.health.cooldown_ms
    );
    assert!(
        row.health.detail.as_deref().unwrap().contains("127.0.0.1"),
        "destination named"
    );
    // The upstream got an absolute-form request without our client's hop headers.
    let seen = up.seen();
    assert!(seen[0].starts_with(&format!("GET http://127.0.0.1:{}/x HTTP/1.1", d.port())));
}

#[tokio::test]
async fn retry_status_resends_get_through_another_upstream() {
    let d = dest(DestCfg {
        status: 403,
        ..Default::default()
    })
    .await;
    let (a, b) = (http_upstream().await, http_upstream().await);
    let gw = Gw::start(&[url("http", a.port()), url("http", b.port())], |g| {
        g.retry_status = vec![403];
        g.retries = 1;
    })
    .await;
    let r = roundtrip(gw.addr, &get(d.port(), "/", "")).await;
    assert_eq!(r.status(), 403, "the client gets the last answer");
    assert_eq!(
        (a.seen().len(), b.seen().len()),
        (1, 1),
        "sent through both"
    );
    gw.until_no_leases().await;
    // Both upstreams are banned for this destination only.
    assert!(gw.rows().iter().all(|r| r.state == State::Available));
    for id in &gw.ids {
        let pairs = gw.pairs(*id);
        assert_eq!(pairs.len(), 1, "{pairs:?}");
        assert_eq!(pairs[0].health.state, State::Cooling);
    }
}

#[tokio::test]
async fn keep_alive_rotates_and_sessions_stick() {
    let d = dest(DestCfg::default()).await;
    let ups = [
        http_upstream().await,
        http_upstream().await,
        http_upstream().await,
    ];
    let urls: Vec<String> = ups.iter().map(|u| url("http", u.port())).collect();
    let gw = Gw::start(&urls, |_| {}).await;
    // One client connection, three requests: three upstreams.
    let mut s = gw.connect().await;
    let mut used = Vec::new();
    for i in 0..3 {
        let r = request_on(&mut s, &get(d.port(), &format!("/{i}"), "")).await;
        assert_eq!(r.status(), 200, "{}", r.head);
        used.push(r.endpoint().unwrap());
        gw.until_no_leases().await;
    }
    used.sort();
    assert_eq!(used, gw.ids, "keep-alive must not pin one upstream");
    // A session keeps one upstream across connections.
    let auth = proxy_auth("session-abc", "");
    let mut seen = Vec::new();
    for _ in 0..4 {
        let r = roundtrip(gw.addr, &get(d.port(), "/", &auth)).await;
        seen.push(r.endpoint().unwrap());
    }
    assert!(seen.iter().all(|e| *e == seen[0]), "{seen:?}");
    // And through CONNECT and SOCKS5 too.
    let (_t, r) = connect_tunnel(gw.addr, d.port(), &auth).await;
    assert_eq!(r.endpoint(), Some(seen[0]));
}

#[tokio::test]
async fn token_is_checked_on_every_front_path() {
    let d = dest(DestCfg::default()).await;
    let up = http_upstream().await;
    let gw = Gw::start(&[url("http", up.port())], |g| {
        g.token = Some("s3cret".into())
    })
    .await;
    for extra in [
        String::new(),
        proxy_auth("", "wrong"),
        proxy_auth("s3cret", ""),
    ] {
        let r = roundtrip(gw.addr, &get(d.port(), "/", &extra)).await;
        assert_eq!(r.status(), 407, "absolute-form {extra:?}: {}", r.head);
        assert!(r.header("proxy-authenticate").is_some());
        let (_s, r) = connect_tunnel(gw.addr, d.port(), &extra).await;
        assert_eq!(r.status(), 407, "CONNECT {extra:?}: {}", r.head);
    }
    assert!(up.seen().is_empty(), "nothing reached an upstream");
    let (_s, code) = socks5_connect(gw.addr, None, "127.0.0.1", d.port()).await;
    assert_eq!(code, 0xFF, "no-auth refused when a token is set");
    let (_s, code) = socks5_connect(gw.addr, Some(("", "wrong")), "127.0.0.1", d.port()).await;
    assert_eq!(code, 0xA1, "wrong password refused");
    // The right token opens every path, with routing keys in the username.
    let ok = proxy_auth("pool-default", "s3cret");
    let r = roundtrip(gw.addr, &get(d.port(), "/", &ok)).await;
    assert_eq!(r.status(), 200, "{}", r.head);
    let (_s, r) = connect_tunnel(gw.addr, d.port(), &ok).await;
    assert_eq!(r.status(), 200, "{}", r.head);
    let (_s, code) = socks5_connect(
        gw.addr,
        Some(("pool-default", "s3cret")),
        "127.0.0.1",
        d.port(),
    )
    .await;
    assert_eq!(code, 0);
    // The token never travels upstream.
    assert!(
        up.seen().iter().all(|h| !h.contains("czNjcmV0")),
        "{:?}",
        up.seen()
    );
}

#[tokio::test]
async fn bad_usernames_and_unknown_pools_are_client_errors() {
    let up = http_upstream().await;
    let gw = Gw::start(&[url("http", up.port())], |_| {}).await;
    let r = roundtrip(gw.addr, &get(80, "/", &proxy_auth("country-us", ""))).await;
    assert_eq!(r.status(), 400);
    assert!(r.text().contains("country"), "{}", r.text());
    let r = roundtrip(gw.addr, &get(80, "/", &proxy_auth("pool-nope", ""))).await;
    assert_eq!(
        (r.status(), r.header("x-proxypool-error")),
        (400, Some("unknown_pool"))
    );
    // Pool `other` exists but is empty.
    let r = roundtrip(gw.addr, &get(80, "/", &proxy_auth("pool-other", ""))).await;
    assert_eq!(r.status(), 503);
}

#[tokio::test]
async fn socks5_front_reaches_any_upstream_scheme() {
    let d = dest(DestCfg::default()).await;
    for up in [http_upstream().await, socks5(Socks5Cfg::default()).await] {
        for upstream_url in [url("http", up.port()), url("socks5h", up.port())] {
            // An HTTP fake waits forever for a head a SOCKS greeting never ends:
            // the connect timeout (short here) decides.
            let gw = Gw::start(std::slice::from_ref(&upstream_url), |g| {
                g.connect_timeout = Duration::from_secs(1)
            })
            .await;
            let (mut s, code) = socks5_connect(gw.addr, None, "127.0.0.1", d.port()).await;
            if code != 0 {
                // The fake upstream speaks only one protocol: the other URL must fail
                // with the probe's classification and a SOCKS error reply.
                let row = gw.row(gw.ids[0]);
                assert_eq!(row.state, State::Cooling, "{upstream_url}");
                assert_eq!(row.phase, Some(Phase::ProxyHandshake), "{upstream_url}");
                continue;
            }
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            let r = read_response(&mut s).await.unwrap();
            assert_eq!(r.text(), "hello from the destination", "{upstream_url}");
        }
    }
    // Domain names pass through to a remote-DNS upstream.
    let up = socks5(Socks5Cfg::default()).await;
    let gw = Gw::start(&[url("socks5h", up.port())], |_| {}).await;
    let (_s, code) = socks5_connect(gw.addr, None, "localhost", d.port()).await;
    assert_eq!(code, 0);
    assert!(
        up.seen().iter().any(|s| s.contains("localhost")),
        "{:?}",
        up.seen()
    );
}

#[tokio::test]
async fn socks5_failures_map_to_reply_codes() {
    let d = dest(DestCfg::default()).await;
    let gw = Gw::start(&[dead().await], |g| g.retries = 0).await;
    let (_s, code) = socks5_connect(gw.addr, None, "127.0.0.1", d.port()).await;
    assert_eq!(code, 0x05, "connection refused");
    let unreachable = socks5(Socks5Cfg {
        reply: 4,
        ..Default::default()
    })
    .await;
    let gw = Gw::start(&[url("socks5", unreachable.port())], |_| {}).await;
    let (_s, code) = socks5_connect(gw.addr, None, "127.0.0.1", d.port()).await;
    assert_eq!(code, 0x04, "host unreachable");
    // The proxy works; it could not reach this destination: the pair takes it.
    let row = &gw.pairs(gw.ids[0])[0];
    assert_eq!(
        (row.health.reason, row.health.phase),
        (
            Some(Reason::UpstreamUnreachable),
            Some(Phase::ProxyHandshake)
        )
    );
    // BIND is not supported.
    let mut s = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    s.write_all(&[5, 1, 0]).await.unwrap();
    let mut m = [0u8; 2];
    s.read_exact(&mut m).await.unwrap();
    s.write_all(&[5, 2, 0, 1, 127, 0, 0, 1, 0, 80])
        .await
        .unwrap();
    let mut r = [0u8; 10];
    s.read_exact(&mut r).await.unwrap();
    assert_eq!(r[1], 0x07);
}

#[tokio::test]
async fn hostile_clients_get_answers_not_hangs() {
    let up = http_upstream().await;
    let gw = Gw::start(&[url("http", up.port())], |_| {}).await;
    // Garbage bytes: a 400, the gateway keeps serving.
    let r = roundtrip(gw.addr, b"\x16\x03\x01\x00\xffgarbage\r\n\r\n").await;
    assert_eq!(r.status(), 400, "{}", r.head);
    // A SOCKS4 hello: SOCKS4's own "rejected".
    let mut s = gw.connect().await;
    s.write_all(&[4, 1, 0, 80, 127, 0, 0, 1, 0]).await.unwrap();
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).await.unwrap();
    assert_eq!(reply, [0, 0x5B, 0, 0, 0, 0, 0, 0]);
    // A 70 KB header: 431.
    let big = format!(
        "GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(70 * 1024)
    );
    let r = roundtrip(gw.addr, big.as_bytes()).await;
    assert_eq!(r.status(), 431, "{}", r.head);
    // Origin-form requests are not proxy requests.
    let r = roundtrip(gw.addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(r.status(), 400);
    assert!(up.seen().is_empty());
    gw.until_no_leases().await;
}

#[tokio::test]
async fn silent_and_half_sent_clients_are_closed_without_delaying_others() {
    let d = dest(DestCfg::default()).await;
    let up = http_upstream().await;
    let limits = Limits {
        first_request: Duration::from_millis(300),
        idle: Duration::from_millis(600),
        ..Limits::default()
    };
    let gw = Gw::start_with(&[url("http", up.port())], |_| {}, limits).await;
    let mut silent = gw.connect().await;
    let mut half = gw.connect().await;
    half.write_all(b"GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: ")
        .await
        .unwrap();
    let mut socks_half = gw.connect().await;
    socks_half.write_all(&[5, 1]).await.unwrap();
    // A GET whose announced body never comes.
    let mut no_body = gw.connect().await;
    no_body
        .write_all(
            format!(
                "GET http://127.0.0.1:{}/ HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n",
                d.port()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    // Meanwhile another client is served at once.
    let r = roundtrip(gw.addr, &get(d.port(), "/", "")).await;
    assert_eq!(r.status(), 200);
    for s in [&mut silent, &mut half, &mut socks_half] {
        let mut buf = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
            .await
            .expect("not closed by the first-request deadline");
        assert!(
            n.is_err() || buf.is_empty() || buf.starts_with(b"HTTP/1.1 408"),
            "{buf:?}"
        );
    }
    let r = tokio::time::timeout(Duration::from_secs(5), read_response(&mut no_body))
        .await
        .expect("a missing body held the connection");
    assert_eq!(r.map(|r| r.status()), Some(408));
    assert_eq!(
        up.seen().len(),
        1,
        "only the served client reached an upstream"
    );
    // Idle keep-alive closes after `idle`.
    let mut s = gw.connect().await;
    s.write_all(&get(d.port(), "/", "")).await.unwrap();
    read_response(&mut s).await.unwrap();
    assert!(until_closed(&mut s, "idle keep-alive not closed")
        .await
        .is_empty());
}

#[tokio::test]
async fn max_connections_caps_clients() {
    let up = http_upstream().await;
    let gw = Gw::start(&[url("http", up.port())], |g| g.max_connections = 1).await;
    let d = dest(DestCfg::default()).await;
    let (held, r) = connect_tunnel(gw.addr, d.port(), "").await;
    assert_eq!(r.status(), 200);
    // The tunnel holds the only slot: the next client is closed unanswered.
    let mut s = gw.connect().await;
    let _ = s.write_all(&get(d.port(), "/", "")).await;
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .expect("over-limit client left hanging");
    assert!(buf.is_empty(), "{}", String::from_utf8_lossy(&buf));
    drop(held);
    gw.until_no_leases().await;
    // The slot is free again (the tunnel task ends a moment after the close).
    let (addr, req) = (gw.addr, get(d.port(), "/", ""));
    common::eventually_async(Duration::from_secs(5), "the slot comes back", || {
        let req = req.clone();
        async move {
            match roundtrip_opt(addr, &req).await {
                Some(r) if r.status() == 200 => Ok(()),
                other => Err(format!("{:?}", other.map(|r| r.status()))),
            }
        }
    })
    .await;
}

async fn roundtrip_opt(addr: std::net::SocketAddr, raw: &[u8]) -> Option<Resp> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(raw).await.ok()?;
    read_response(&mut s).await
}

#[tokio::test]
async fn leases_come_back_when_clients_vanish_and_on_shutdown() {
    let d = dest(DestCfg {
        body: vec![b'x'; 4 << 20],
        trickle: None,
        ..Default::default()
    })
    .await;
    let up = http_upstream().await;
    let gw = Gw::start(&[url("http", up.port())], |_| {}).await;
    // A client that leaves in the middle of a response body.
    let mut s = gw.connect().await;
    s.write_all(&get(d.port(), "/big", "")).await.unwrap();
    let mut first = [0u8; 1024];
    s.read_exact(&mut first).await.unwrap();
    drop(s);
    gw.until_no_leases().await;
    // At shutdown, a tunnel is open and a response body is half read: both are closed
    // and both leases given back (the tunnel's by its task, the body's by its guard's
    // drop).
    let (_t, r) = connect_tunnel(gw.addr, d.port(), "").await;
    assert_eq!(r.status(), 200);
    let mut s = gw.connect().await;
    s.write_all(&get(d.port(), "/big", "")).await.unwrap();
    s.read_exact(&mut first).await.unwrap();
    assert_eq!(gw.leases(), 2);
    let engine = gw.engine.clone();
    gw.stop().await;
    // The gateway returns only once every lease is back (each give-back is one of the
    // gateway's tasks), so nothing needs waiting for here.
    assert_eq!(engine.status(Some("default")).unwrap()[0].leases, 0);
    drop(s);
}

#[tokio::test]
async fn proxy_auth_failure_upstream_is_classified_and_retried() {
    let d = dest(DestCfg::default()).await;
    let locked = HttpProxyCfg {
        auth: Some(("alice".into(), "s3cret".into())),
        ..Default::default()
    };
    let (a, b) = (http_proxy(locked.clone()).await, http_proxy(locked).await);
    let urls = [
        format!("http://alice:wrong@127.0.0.1:{}", a.port()),
        format!("http://alice:s3cret@127.0.0.1:{}", b.port()),
    ];
    let gw = Gw::start(&urls, |_| {}).await;
    for tunnel in [true, false] {
        let status = if tunnel {
            connect_tunnel(gw.addr, d.port(), "").await.1.status()
        } else {
            roundtrip(gw.addr, &get(d.port(), "/", "")).await.status()
        };
        assert_eq!(status, 200, "tunnel={tunnel}");
    }
    gw.until_no_leases().await;
    let row = gw.row(gw.ids[0]);
    assert_eq!(
        (row.reason, row.phase),
        (Some(Reason::ProxyAuthRejected), Some(Phase::ProxyHandshake))
    );
    // No password in any event.
    for ev in gw.events() {
        assert!(!format!("{ev:?}").contains("s3cret"), "{ev:?}");
        assert!(!format!("{ev:?}").contains("wrong"), "{ev:?}");
    }
}

#[tokio::test]
async fn https_upstream_with_a_private_ca_is_trusted_through_ca_file() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("gateway upstream ca");
    let d = dest(DestCfg::default()).await;
    let up = http_proxy(HttpProxyCfg {
        tls: Some(ca.server_config()),
        ..Default::default()
    })
    .await;
    let proxy = format!("https://localhost:{}", up.port());

    // Without the CA the upstream's certificate is untrusted: a proxy_tls failure.
    let gw = Gw::start(std::slice::from_ref(&proxy), |c| c.retries = 0).await;
    let (_s, resp) = connect_tunnel(gw.addr, d.port(), "").await;
    assert_eq!(resp.status(), 502, "{}", resp.head);
    assert_eq!(resp.header("x-proxypool-error"), Some("tls_failed"));
    let row = gw.row(gw.ids[0]);
    assert_eq!(
        (row.reason, row.phase),
        (Some(Reason::TlsFailed), Some(Phase::ProxyTls))
    );
    gw.stop().await;

    // With ca_file: tunnels and absolute-form requests go through it.
    let pem = ca.write_pem(dir.path());
    let gw = Gw::start(&[proxy], |c| c.ca_file = Some(pem)).await;
    let (mut s, resp) = connect_tunnel(gw.addr, d.port(), "").await;
    assert_eq!(resp.status(), 200, "{}", resp.head);
    s.write_all(b"GET /inside HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let r = read_response(&mut s).await.unwrap();
    assert_eq!(r.text(), "hello from the destination");
    drop(s);
    let r = roundtrip(gw.addr, &get(d.port(), "/plain", "")).await;
    assert_eq!(r.status(), 200, "{}", r.head);
    assert_eq!(r.text(), "hello from the destination");
    gw.until_no_leases().await;
    assert_eq!(gw.row(gw.ids[0]).state, State::Available);
}

#[tokio::test]
async fn unusable_ca_file_stops_the_gateway_naming_the_file() {
    let gw = Gw::start(&[], |_| {}).await;
    let mut cfg = proxypool::config::GatewayConfig::new("127.0.0.1:0".parse().unwrap());
    cfg.ca_file = Some("/nonexistent/gateway-ca.pem".into());
    let err = match proxypool::gateway::Gateway::bind(cfg, gw.engine.clone()).await {
        Ok(_) => panic!("a gateway with a missing ca_file started"),
        Err(e) => e,
    };
    assert!(
        matches!(err, proxypool::gateway::GatewayError::Tls(_)),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("/nonexistent/gateway-ca.pem"),
        "{err}"
    );
}

#[tokio::test]
async fn retry_status_with_the_default_retries_gives_the_client_the_last_answer() {
    let d = dest(DestCfg {
        status: 403,
        ..Default::default()
    })
    .await;
    let (a, b) = (http_upstream().await, http_upstream().await);
    // retries = 2 (the default), but only two upstreams: the second re-send finds no
    // untried upstream, and the client gets the answer it has.
    let gw = Gw::start(&[url("http", a.port()), url("http", b.port())], |g| {
        g.retry_status = vec![403];
    })
    .await;
    let r = roundtrip(gw.addr, &get(d.port(), "/", "")).await;
    assert_eq!(r.status(), 403, "{}", r.head);
    assert_eq!(r.endpoint(), Some(gw.ids[1]), "the last answer's upstream");
    assert_eq!((a.seen().len(), b.seen().len()), (1, 1));
    gw.until_no_leases().await;
}

#[tokio::test]
async fn one_retry_budget_per_client_request_whatever_spends_it() {
    let d = dest(DestCfg {
        status: 403,
        ..Default::default()
    })
    .await;
    let (a, c) = (http_upstream().await, http_upstream().await);
    // retries = 1: two tries in all. The re-send after A's 403 spends the second on the
    // dead upstream; C is never asked, and the client gets A's answer.
    let urls = [url("http", a.port()), dead().await, url("http", c.port())];
    let gw = Gw::start(&urls, |g| {
        g.retry_status = vec![403];
        g.retries = 1;
    })
    .await;
    let r = roundtrip(gw.addr, &get(d.port(), "/", "")).await;
    assert_eq!(r.status(), 403, "{}", r.head);
    assert_eq!(r.endpoint(), Some(gw.ids[0]));
    assert_eq!((a.seen().len(), c.seen().len()), (1, 0));
    gw.until_no_leases().await;
    assert_eq!(gw.row(gw.ids[1]).reason, Some(Reason::ConnectRefused));
}

#[tokio::test]
async fn answers_name_the_upstream_when_one_was_involved_and_only_then() {
    let d = dest(DestCfg::default()).await;
    let locked = http_proxy(HttpProxyCfg {
        auth: Some(("alice".into(), "s3cret".into())),
        ..Default::default()
    })
    .await;
    // The only upstream refuses its credentials with 407 to a forwarded request: it was
    // tried, reported, and nothing else is left. The client hears about that upstream.
    let wrong = format!("http://alice:wrong@127.0.0.1:{}", locked.port());
    let gw = Gw::start(&[wrong], |g| g.plain_http = PlainHttp::Forward).await;
    let r = roundtrip(gw.addr, &get(d.port(), "/", "")).await;
    assert_eq!(r.status(), 502, "{}", r.head);
    assert_eq!(r.header("x-proxypool-error"), Some("proxy_auth_rejected"));
    assert_eq!(r.endpoint(), Some(gw.ids[0]));
    gw.until_no_leases().await;

    // The gateway's own answers, where no upstream was involved, name none.
    let limits = Limits {
        first_request: Duration::from_millis(300),
        ..Limits::default()
    };
    let up = http_upstream().await;
    let gw = Gw::start_with(
        &[url("http", up.port())],
        |g| g.token = Some("t0ken".into()),
        limits,
    )
    .await;
    let auth = format!(
        "Proxy-Authorization: Basic {}\r\n",
        base64(b"session-a:t0ken")
    );
    let unknown_key = format!(
        "Proxy-Authorization: Basic {}\r\n",
        base64(b"country-us:t0ken")
    );
    let slow_body = format!(
        "GET http://127.0.0.1:{}/ HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 10\r\n\r\n",
        d.port()
    );
    let big_body = format!(
        "GET http://127.0.0.1:{}/ HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 70000\r\n\r\n{}",
        d.port(),
        "a".repeat(70_000)
    );
    let cases: [(Vec<u8>, u16); 5] = [
        (get(d.port(), "/", ""), 407),
        (get(d.port(), "/", &unknown_key), 400),
        (
            format!("GET / HTTP/1.1\r\nHost: x\r\n{auth}\r\n").into_bytes(),
            400,
        ),
        (slow_body.into_bytes(), 408),
        (big_body.into_bytes(), 413),
    ];
    for (raw, status) in cases {
        let r = roundtrip(gw.addr, &raw).await;
        assert_eq!(r.status(), status, "{}", r.head);
        assert_eq!(r.endpoint(), None, "{}", r.head);
    }
    assert!(up.seen().is_empty());
    // An empty pool: 503, no upstream to name.
    let empty = Gw::start(&[], |_| {}).await;
    let r = roundtrip(empty.addr, &get(d.port(), "/", "")).await;
    assert_eq!((r.status(), r.endpoint()), (503, None), "{}", r.head);
    // Through an upstream: the destination's answer names it.
    let r = roundtrip(gw.addr, &get(d.port(), "/", &auth)).await;
    assert_eq!(
        (r.status(), r.endpoint()),
        (200, Some(gw.ids[0])),
        "{}",
        r.head
    );
    gw.until_no_leases().await;
}
