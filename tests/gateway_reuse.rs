//! Upstream connection reuse for absolute-form requests: one connection per (upstream,
//! destination) kept between requests and clients, never shared across upstreams,
//! rotation untouched, and a connection the far side closed is no failure of the upstream.

mod common;

use std::time::Duration;

use common::fakes::*;
use common::gateway::*;
use proxypool::config::PlainHttp;
use proxypool::health::State;
use tokio::io::AsyncWriteExt;

/// A fake HTTP proxy, and a gateway in `mode` whose pool holds only it.
async fn gateway(mode: PlainHttp) -> (Fake, Gw) {
    let up = http_proxy(HttpProxyCfg::default()).await;
    let gw = Gw::start(&[url("http", up.port())], |g| g.plain_http = mode).await;
    (up, gw)
}

/// One GET through the gateway, then wait until its connection is kept.
async fn first_request_kept(gw: &Gw, d: &Fake) {
    let r = roundtrip(gw.addr, &get(d.port(), "/first", "")).await;
    assert_eq!(r.status(), 200, "{}", r.head);
    until_idle(gw, 1.0).await;
}

/// A destination that keeps its connections alive for `n` answers.
async fn keep_alive_dest(n: usize) -> Fake {
    dest(DestCfg {
        keep_alive: Some(n),
        ..Default::default()
    })
    .await
}

const NEW: &str = "proxypool_gateway_upstream_connections_total{connection=\"new\"}";
const REUSED: &str = "proxypool_gateway_upstream_connections_total{connection=\"reused\"}";
const IDLE: &str = "proxypool_gateway_idle_upstream_connections";

/// Wait (bounded) until the gateway holds `n` idle upstream connections: a connection is
/// parked a moment after its response has been read to the end.
async fn until_idle(gw: &Gw, n: f64) {
    let what = format!("{n} idle upstream connections");
    common::eventually_async(Duration::from_secs(10), &what, || {
        let now = gw.metric(IDLE);
        async move {
            if now == n {
                Ok(())
            } else {
                Err(format!("{now}"))
            }
        }
    })
    .await;
}

#[tokio::test]
async fn tunnel_mode_sends_many_requests_through_one_connect() {
    let d = keep_alive_dest(100).await;
    let (up, gw) = gateway(PlainHttp::Tunnel).await;
    let mut s = gw.connect().await;
    for i in 0..5 {
        let r = request_on(&mut s, &get(d.port(), &format!("/{i}"), "")).await;
        assert_eq!(r.status(), 200, "{}", r.head);
        assert_eq!(r.text(), "hello from the destination");
        assert_eq!(r.endpoint(), Some(gw.ids[0]));
        gw.until_no_leases().await;
        until_idle(&gw, 1.0).await;
    }
    // Another client connection gets the same upstream connection.
    let r = roundtrip(gw.addr, &get(d.port(), "/other", "")).await;
    assert_eq!(r.status(), 200, "{}", r.head);
    let seen = up.seen();
    assert_eq!(seen.len(), 1, "one CONNECT for six requests: {seen:?}");
    assert!(
        seen[0].starts_with(&format!("CONNECT 127.0.0.1:{} ", d.port())),
        "{}",
        seen[0]
    );
    // Inside the tunnel the destination reads origin-form requests.
    let heads = d.seen();
    assert_eq!(heads.len(), 6, "{heads:?}");
    assert!(heads[1].starts_with("GET /1 HTTP/1.1"), "{}", heads[1]);
    assert_eq!((gw.metric(NEW), gw.metric(REUSED)), (1.0, 5.0));
    gw.until_no_leases().await;
    // Every request was reported: the endpoint is healthy, with no failure on record.
    assert_eq!(gw.row(gw.ids[0]).state, State::Available);
    assert_eq!(gw.row(gw.ids[0]).streak, 0);
}

#[tokio::test]
async fn forward_keepalive_reuses_a_proxy_that_keeps_its_connection_open() {
    // The fake proxy forwards the first request and then relays the connection, which
    // stays open as long as the keep-alive destination keeps it.
    let d = keep_alive_dest(100).await;
    let (up, gw) = gateway(PlainHttp::ForwardKeepalive).await;
    for i in 0..3 {
        let r = roundtrip(gw.addr, &get(d.port(), &format!("/{i}"), "")).await;
        assert_eq!(r.status(), 200, "{}", r.head);
        until_idle(&gw, 1.0).await;
    }
    assert_eq!(up.seen().len(), 1, "{:?}", up.seen());
    // Absolute form all the way: what a forward proxy reads.
    let heads = d.seen();
    assert!(
        heads[2].starts_with(&format!("GET http://127.0.0.1:{}/2 HTTP/1.1", d.port())),
        "{}",
        heads[2]
    );
    assert_eq!((gw.metric(NEW), gw.metric(REUSED)), (1.0, 2.0));
}

#[tokio::test]
async fn a_connection_whose_answers_have_no_body_is_kept_all_the_same() {
    // `Content-Length: 0`: hyper never polls such a body, so the connection goes back to
    // the idle list when the answer is dropped, not when its body ends.
    let d = dest(DestCfg {
        keep_alive: Some(100),
        body: Vec::new(),
        ..Default::default()
    })
    .await;
    let (up, gw) = gateway(PlainHttp::Tunnel).await;
    for i in 0..3 {
        let r = roundtrip(gw.addr, &get(d.port(), &format!("/{i}"), "")).await;
        assert_eq!(r.status(), 200, "{}", r.head);
        assert_eq!(r.text(), "");
        until_idle(&gw, 1.0).await;
    }
    assert_eq!(up.seen().len(), 1, "one CONNECT: {:?}", up.seen());
    assert_eq!((gw.metric(NEW), gw.metric(REUSED)), (1.0, 2.0));
}

#[tokio::test]
async fn an_answer_before_the_upload_ends_lets_the_upload_finish() {
    // The destination answers on the head, before the body has come: the rest of the
    // client's body still goes upstream, so its connection stays usable.
    let d = keep_alive_dest(1).await;
    let (_up, gw) = gateway(PlainHttp::Forward).await;
    let mut s = gw.connect().await;
    let post = format!(
        "POST http://127.0.0.1:{0}/up HTTP/1.1\r\nHost: 127.0.0.1:{0}\r\nContent-Length: 10\r\n\r\nhello",
        d.port()
    );
    let r = request_on(&mut s, post.as_bytes()).await;
    assert_eq!(r.status(), 200, "{}", r.head);
    s.write_all(b"world").await.unwrap();
    let r = request_on(&mut s, &get(d.port(), "/next", "")).await;
    assert_eq!(r.status(), 200, "{}", r.head);
    assert_eq!(d.seen().len(), 2, "{:?}", d.seen());
}

#[tokio::test]
async fn a_proxy_that_closes_after_each_answer_gets_a_new_connection_each_time() {
    // The default fake destination answers with `Connection: close`.
    let d = dest(DestCfg::default()).await;
    let (up, gw) = gateway(PlainHttp::Tunnel).await;
    for _ in 0..3 {
        let r = roundtrip(gw.addr, &get(d.port(), "/", "")).await;
        assert_eq!(r.status(), 200, "{}", r.head);
        gw.until_no_leases().await;
    }
    assert_eq!(up.seen().len(), 3);
    assert_eq!((gw.metric(NEW), gw.metric(REUSED)), (3.0, 0.0));
    assert_eq!(gw.metric(IDLE), 0.0);
}

#[tokio::test]
async fn reuse_never_pins_an_upstream_and_never_crosses_upstreams() {
    let d = keep_alive_dest(100).await;
    let ups = [
        http_proxy(HttpProxyCfg::default()).await,
        http_proxy(HttpProxyCfg::default()).await,
    ];
    let urls: Vec<String> = ups.iter().map(|u| url("http", u.port())).collect();
    let gw = Gw::start(&urls, |g| g.plain_http = PlainHttp::Tunnel).await;
    let mut s = gw.connect().await;
    let mut used = Vec::new();
    for i in 0..6 {
        let r = request_on(&mut s, &get(d.port(), &format!("/{i}"), "")).await;
        assert_eq!(r.status(), 200, "{}", r.head);
        used.push(r.endpoint().unwrap());
        gw.until_no_leases().await;
        until_idle(&gw, if i == 0 { 1.0 } else { 2.0 }).await;
    }
    // Both upstreams served (the pool rotates per request) ...
    for id in &gw.ids {
        assert!(used.contains(id), "{id} never used: {used:?}");
    }
    // ... each through its own single tunnel.
    for up in &ups {
        assert_eq!(up.seen().len(), 1, "{:?}", up.seen());
    }
    assert_eq!((gw.metric(NEW), gw.metric(REUSED)), (2.0, 4.0));
}

#[tokio::test]
async fn a_connection_closed_while_idle_is_replaced_without_blaming_the_upstream() {
    // One answer per connection, then the destination reads the next request and closes
    // without answering: the gateway re-sends the GET on a new connection.
    let d = keep_alive_dest(1).await;
    let (up, gw) = gateway(PlainHttp::Tunnel).await;
    first_request_kept(&gw, &d).await;
    let r = roundtrip(gw.addr, &get(d.port(), "/second", "")).await;
    assert_eq!(r.status(), 200, "{}", r.head);
    assert_eq!(r.endpoint(), Some(gw.ids[0]));
    gw.until_no_leases().await;
    // The dropped request reached the destination, then went again on a new tunnel.
    let heads = d.seen();
    assert_eq!(heads.len(), 3, "{heads:?}");
    assert!(heads[2].starts_with("GET /second"), "{}", heads[2]);
    assert_eq!(up.seen().len(), 2);
    // The kept connection carried the request (so it counts as reused), then a new one.
    assert_eq!((gw.metric(NEW), gw.metric(REUSED)), (2.0, 1.0));
    let row = gw.row(gw.ids[0]);
    assert_eq!((row.state, row.streak), (State::Available, 0));
    assert!(
        !gw.events()
            .iter()
            .any(|e| e.kind == "report" && e.reason.is_some()),
        "no failure reported: {:?}",
        gw.events()
    );
}

#[tokio::test]
async fn a_body_sent_once_on_a_closed_connection_is_not_sent_again() {
    let d = keep_alive_dest(1).await;
    let (_up, gw) = gateway(PlainHttp::Tunnel).await;
    first_request_kept(&gw, &d).await;
    let post = format!(
        "POST http://127.0.0.1:{}/pay HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\n\r\nabc",
        d.port()
    );
    let r = roundtrip(gw.addr, post.as_bytes()).await;
    assert_eq!(r.status(), 502, "{}", r.head);
    assert_eq!(r.header("x-proxypool-error"), Some("connection_reset"));
    gw.until_no_leases().await;
    // Once, not twice; and the upstream is not blamed for the idle connection.
    let posts = d.seen().iter().filter(|h| h.starts_with("POST")).count();
    assert_eq!(posts, 1);
    // It went out on the kept connection, and on no new one.
    assert_eq!((gw.metric(NEW), gw.metric(REUSED)), (1.0, 1.0));
    assert_eq!(gw.row(gw.ids[0]).streak, 0);
}

#[tokio::test]
async fn idle_connections_close_after_the_idle_timeout() {
    let d = keep_alive_dest(100).await;
    let up = http_proxy(HttpProxyCfg::default()).await;
    let limits = proxypool::gateway::Limits {
        upstream_idle: proxypool::gateway::IdleLimits {
            // Long enough that a loaded machine still sees the connection parked first.
            timeout: Duration::from_secs(2),
            ..Default::default()
        },
        ..Default::default()
    };
    let gw = Gw::start_with(
        &[url("http", up.port())],
        |g| g.plain_http = PlainHttp::Tunnel,
        limits,
    )
    .await;
    let r = roundtrip(gw.addr, &get(d.port(), "/", "")).await;
    assert_eq!(r.status(), 200, "{}", r.head);
    until_idle(&gw, 1.0).await;
    // Swept within a timeout and a half.
    until_idle(&gw, 0.0).await;
    let r = roundtrip(gw.addr, &get(d.port(), "/", "")).await;
    assert_eq!(r.status(), 200, "{}", r.head);
    assert_eq!(
        up.seen().len(),
        2,
        "a new tunnel after the old one timed out"
    );
}

#[tokio::test]
async fn tunnel_mode_forwards_through_a_proxy_that_tunnels_only_to_443_and_remembers_it() {
    let d = dest(DestCfg::default()).await;
    let up = http_proxy(HttpProxyCfg {
        connect_ports: Some(vec![443]),
        ..Default::default()
    })
    .await;
    let gw = Gw::start(&[url("http", up.port())], |g| {
        g.plain_http = PlainHttp::Tunnel
    })
    .await;
    for i in 0..3 {
        let r = roundtrip(gw.addr, &get(d.port(), &format!("/{i}"), "")).await;
        assert_eq!(r.status(), 200, "{}", r.head);
        assert_eq!(r.text(), "hello from the destination");
        gw.until_no_leases().await;
    }
    // Asked for a tunnel once, refused, then forwarded every time.
    let seen = up.seen();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(seen[0].starts_with("CONNECT "), "{}", seen[0]);
    for head in &seen[1..] {
        assert!(head.starts_with("GET http://"), "{head}");
    }
    // The refusal is the proxy's policy, not a failure.
    let row = gw.row(gw.ids[0]);
    assert_eq!((row.state, row.streak), (State::Available, 0));
    // A CONNECT client through the same proxy still gets the proxy's own refusal.
    let (_s, resp) = connect_tunnel(gw.addr, d.port(), "").await;
    assert_eq!(resp.status(), 502, "{}", resp.head);
}

#[tokio::test]
async fn forward_the_default_takes_a_new_connection_for_every_request() {
    let d = keep_alive_dest(100).await;
    let up = http_proxy(HttpProxyCfg::default()).await;
    let gw = Gw::start(&[url("http", up.port())], |_| {}).await;
    let mut s = gw.connect().await;
    for i in 0..3 {
        let r = request_on(&mut s, &get(d.port(), &format!("/{i}"), "")).await;
        assert_eq!(r.status(), 200, "{}", r.head);
        gw.until_no_leases().await;
    }
    // A rotating proxy sees every request on a connection of its own.
    let seen = up.seen();
    assert_eq!(seen.len(), 3, "{seen:?}");
    for head in &seen {
        assert!(head.starts_with("GET http://"), "{head}");
        assert_eq!(header(head, "connection"), Some("close"), "{head}");
    }
    assert_eq!((gw.metric(NEW), gw.metric(REUSED)), (3.0, 0.0));
    assert_eq!(gw.metric(IDLE), 0.0);
}

#[tokio::test]
async fn kept_connections_are_per_destination_even_to_a_forward_proxy() {
    // The fake proxy relays the connection after its first request, like a proxy that
    // would send a second request to the first host: each host needs its own connection.
    let a = dest(DestCfg {
        keep_alive: Some(100),
        body: b"from a".to_vec(),
        ..Default::default()
    })
    .await;
    let b = dest(DestCfg {
        keep_alive: Some(100),
        body: b"from b".to_vec(),
        ..Default::default()
    })
    .await;
    let (up, gw) = gateway(PlainHttp::ForwardKeepalive).await;
    for i in 0..4 {
        let (d, want) = if i % 2 == 0 {
            (&a, "from a")
        } else {
            (&b, "from b")
        };
        let r = roundtrip(gw.addr, &get(d.port(), "/", "")).await;
        assert_eq!(r.text(), want, "request {i}");
        gw.until_no_leases().await;
        until_idle(&gw, if i == 0 { 1.0 } else { 2.0 }).await;
    }
    assert_eq!(up.seen().len(), 2, "one connection per destination");
    assert_eq!((gw.metric(NEW), gw.metric(REUSED)), (2.0, 2.0));
}

#[tokio::test]
async fn a_query_without_a_path_keeps_its_query_inside_a_tunnel() {
    let d = keep_alive_dest(100).await;
    let (_up, gw) = gateway(PlainHttp::Tunnel).await;
    let req = format!(
        "GET http://127.0.0.1:{}?x=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        d.port()
    );
    let r = roundtrip(gw.addr, req.as_bytes()).await;
    assert_eq!(r.status(), 200, "{}", r.head);
    assert!(
        d.seen()[0].starts_with("GET /?x=1 HTTP/1.1"),
        "{}",
        d.seen()[0]
    );
}

#[tokio::test]
async fn a_kept_tunnel_whose_upstream_died_meanwhile_is_retried_through_another() {
    // One answer per connection: the kept tunnel dies under the next GET, and its
    // upstream, gone meanwhile, refuses a new one.
    let d = keep_alive_dest(1).await;
    let mut ups = [
        http_proxy(HttpProxyCfg::default()).await,
        http_proxy(HttpProxyCfg::default()).await,
    ];
    let urls: Vec<String> = ups.iter().map(|u| url("http", u.port())).collect();
    let gw = Gw::start(&urls, |g| g.plain_http = PlainHttp::Tunnel).await;
    let auth = proxy_auth("session-s1", "");
    let r = roundtrip(gw.addr, &get(d.port(), "/first", &auth)).await;
    assert_eq!(r.status(), 200, "{}", r.head);
    let first = r.endpoint().unwrap();
    until_idle(&gw, 1.0).await;
    let i = gw.ids.iter().position(|id| *id == first).unwrap();
    ups[i].stop_accepting();
    let r = roundtrip(gw.addr, &get(d.port(), "/second", &auth)).await;
    assert_eq!(r.status(), 200, "{}", r.head);
    assert_ne!(r.endpoint(), Some(first), "the other upstream answered");
    gw.until_no_leases().await;
    // The dead upstream is reported as a probe would see it.
    let row = gw.row(first);
    assert_eq!(row.state, State::Cooling);
    assert_eq!(row.reason, Some(proxypool::health::Reason::ConnectRefused));
}
