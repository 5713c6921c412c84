//! The gateway's series in `/metrics` (docs/gateway.md, "Metrics"): requests by front
//! protocol and outcome, upstream attempts by pool and outcome, bytes by direction, through
//! the in-process gateway against fakes.

mod common;

use std::time::Duration;

use common::fakes::*;
use common::gateway::*;
use tokio::io::AsyncWriteExt;

/// The value of one counter (0 when absent).
fn value(gw: &Gw, series: &str) -> u64 {
    gw.metric(series) as u64
}

fn requests(gw: &Gw, protocol: &str, outcome: &str) -> u64 {
    value(
        gw,
        &format!(
            r#"proxypool_gateway_requests_total{{protocol="{protocol}",outcome="{outcome}"}}"#
        ),
    )
}

fn attempts(gw: &Gw, pool: &str, outcome: &str) -> u64 {
    value(
        gw,
        &format!(
            r#"proxypool_gateway_upstream_attempts_total{{pool="{pool}",outcome="{outcome}"}}"#
        ),
    )
}

fn bytes(gw: &Gw, direction: &str) -> u64 {
    value(
        gw,
        &format!(r#"proxypool_gateway_bytes_total{{pool="default",direction="{direction}"}}"#),
    )
}

/// Byte counts are added when the upstream stream closes, a moment after the client's
/// side: wait (bounded) until both directions reach at least the given totals.
async fn until_bytes(gw: &Gw, up: u64, down: u64) {
    let what = format!("bytes to_upstream >= {up} and to_client >= {down}");
    common::eventually_async(Duration::from_secs(5), &what, || {
        let (u, c) = (bytes(gw, "to_upstream"), bytes(gw, "to_client"));
        async move {
            if u >= up && c >= down {
                Ok(())
            } else {
                Err(format!("to_upstream {u}, to_client {c}"))
            }
        }
    })
    .await;
}

const BODY: &str = "hello from the destination";

#[tokio::test]
async fn every_front_counts_its_successful_requests_attempts_and_bytes() {
    let d = dest(DestCfg::default()).await;
    let up = http_proxy(HttpProxyCfg::default()).await;
    let gw = Gw::start(&[url("http", up.port())], |_| {}).await;
    assert_eq!(requests(&gw, "http_forward", "ok"), 0);

    let r = roundtrip(gw.addr, &get(d.port(), "/a", "Connection: close\r\n")).await;
    assert_eq!(r.text(), BODY, "{}", r.head);
    assert_eq!(requests(&gw, "http_forward", "ok"), 1);
    assert_eq!(attempts(&gw, "default", "success"), 1);
    // The forwarded request and the response (head and body) crossed the upstream.
    until_bytes(&gw, 30, BODY.len() as u64 + 30).await;
    let (up0, down0) = (bytes(&gw, "to_upstream"), bytes(&gw, "to_client"));

    let (mut s, resp) = connect_tunnel(gw.addr, d.port(), "").await;
    assert_eq!(resp.status(), 200, "{}", resp.head);
    let inside = b"GET /inside HTTP/1.1\r\nHost: x\r\n\r\n";
    s.write_all(inside).await.unwrap();
    let r = read_response(&mut s).await.unwrap();
    assert_eq!(r.text(), BODY);
    drop(s);
    gw.until_no_leases().await;
    until_bytes(
        &gw,
        up0 + inside.len() as u64,
        down0 + (r.head.len() + r.body.len()) as u64,
    )
    .await;
    assert_eq!(requests(&gw, "http_connect", "ok"), 1);
    assert_eq!(attempts(&gw, "default", "success"), 2);

    let (s, code) = socks5_connect(gw.addr, None, "127.0.0.1", d.port()).await;
    assert_eq!(code, 0);
    drop(s);
    gw.until_no_leases().await;
    assert_eq!(requests(&gw, "socks5", "ok"), 1);
    assert_eq!(attempts(&gw, "default", "success"), 3);
    assert_eq!(attempts(&gw, "default", "failure"), 0);
    // No other outcome moved.
    for protocol in ["http_connect", "http_forward", "socks5"] {
        for outcome in [
            "upstream_failed",
            "exhausted",
            "denied",
            "bad_request",
            "internal",
        ] {
            assert_eq!(requests(&gw, protocol, outcome), 0, "{protocol} {outcome}");
        }
    }
    gw.stop().await;
}

#[tokio::test]
async fn failures_count_each_attempt_and_the_request_outcome() {
    let d = dest(DestCfg::default()).await;
    let up = http_proxy(HttpProxyCfg::default()).await;
    let dead = [url("http", closed_port()), url("http", closed_port())];
    // Two dead, one good, two retries: one request, three attempts, served.
    let urls = [dead[0].clone(), dead[1].clone(), url("http", up.port())];
    let gw = Gw::start(&urls, |g| g.retries = 2).await;
    let (_s, resp) = connect_tunnel(gw.addr, d.port(), "").await;
    assert_eq!(resp.status(), 200, "{}", resp.head);
    assert_eq!(requests(&gw, "http_connect", "ok"), 1);
    assert_eq!(attempts(&gw, "default", "failure"), 2);
    assert_eq!(attempts(&gw, "default", "success"), 1);

    // Only dead upstreams: 502 (upstream_failed) on each front, then an empty pool.
    let gw = Gw::start(&dead, |g| g.retries = 0).await;
    let r = roundtrip(gw.addr, &get(d.port(), "/", "")).await;
    assert_eq!(r.status(), 502, "{}", r.head);
    let (_s, code) = socks5_connect(gw.addr, None, "127.0.0.1", d.port()).await;
    assert_ne!(code, 0);
    assert_eq!(requests(&gw, "http_forward", "upstream_failed"), 1);
    assert_eq!(requests(&gw, "socks5", "upstream_failed"), 1);
    assert_eq!(attempts(&gw, "default", "failure"), 2);
    let (_s, resp) = connect_tunnel(gw.addr, d.port(), "").await;
    assert_eq!(resp.status(), 503, "{}", resp.head);
    assert_eq!(requests(&gw, "http_connect", "exhausted"), 1);
    let (_s, code) = socks5_connect(gw.addr, None, "127.0.0.1", d.port()).await;
    assert_eq!(code, 0x01);
    assert_eq!(requests(&gw, "socks5", "exhausted"), 1);
    // Nothing was tried for the exhausted requests.
    assert_eq!(attempts(&gw, "default", "failure"), 2);
    gw.until_no_leases().await;
}

#[tokio::test]
async fn a_ban_status_counts_as_a_failed_attempt_of_a_served_request() {
    let d = dest(DestCfg {
        status: 403,
        ..DestCfg::default()
    })
    .await;
    let up = http_proxy(HttpProxyCfg::default()).await;
    let gw = Gw::start(&[url("http", up.port())], |g| g.ban_status = vec![403]).await;
    let r = roundtrip(gw.addr, &get(d.port(), "/", "Connection: close\r\n")).await;
    assert_eq!(r.status(), 403, "{}", r.head);
    // The client got the destination's answer: the gateway served it.
    assert_eq!(requests(&gw, "http_forward", "ok"), 1);
    assert_eq!(attempts(&gw, "default", "failure"), 1);
    assert_eq!(attempts(&gw, "default", "success"), 0);
    gw.until_no_leases().await;
}

#[tokio::test]
async fn refusals_are_counted_per_front() {
    let d = dest(DestCfg::default()).await;
    let up = http_proxy(HttpProxyCfg::default()).await;
    let gw = Gw::start(&[url("http", up.port())], |g| {
        g.token = Some("s3cret".into())
    })
    .await;
    // No token, wrong token: denied on every path.
    let r = roundtrip(gw.addr, &get(d.port(), "/", "")).await;
    assert_eq!(r.status(), 407);
    let (_s, r) = connect_tunnel(gw.addr, d.port(), &proxy_auth("", "nope")).await;
    assert_eq!(r.status(), 407);
    let (_s, code) = socks5_connect(gw.addr, Some(("", "nope")), "127.0.0.1", d.port()).await;
    assert_eq!(code, 0xA1);
    let (_s, code) = socks5_connect(gw.addr, None, "127.0.0.1", d.port()).await;
    assert_eq!(code, 0xFF, "no-auth is not acceptable with a token");
    assert_eq!(requests(&gw, "http_forward", "denied"), 1);
    assert_eq!(requests(&gw, "http_connect", "denied"), 1);
    assert_eq!(requests(&gw, "socks5", "denied"), 2);

    // Right token, bad routing: a client error, and no series for the unknown pool.
    let bad_key = proxy_auth("color-blue", "s3cret");
    let r = roundtrip(gw.addr, &get(d.port(), "/", &bad_key)).await;
    assert_eq!(r.status(), 400);
    let r = roundtrip(
        gw.addr,
        &get(d.port(), "/", &proxy_auth("pool-nope", "s3cret")),
    )
    .await;
    assert_eq!(r.status(), 400, "{}", r.head);
    let (_s, code) = socks5_connect(
        gw.addr,
        Some(("pool-nope", "s3cret")),
        "127.0.0.1",
        d.port(),
    )
    .await;
    assert_eq!(code, 0x01);
    assert_eq!(requests(&gw, "http_forward", "bad_request"), 2);
    assert_eq!(requests(&gw, "socks5", "bad_request"), 1);
    // Origin-form sent to a proxy.
    let r = roundtrip(
        gw.addr,
        b"GET / HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic OnMzY3JldA==\r\n\r\n",
    )
    .await;
    assert_eq!(r.status(), 400, "{}", r.head);
    assert_eq!(requests(&gw, "http_forward", "bad_request"), 3);
    let text = gw.engine.metrics().encode();
    assert!(!text.contains("nope") && !text.contains("s3cret"), "{text}");
    assert_eq!(attempts(&gw, "default", "success"), 0);
    assert_eq!(attempts(&gw, "default", "failure"), 0);
}
