//! A proxy that tampers with TLS is caught (docs/intercept.md, "A proxy that tampers with
//! TLS"): the gateway verifies every origin's certificate as seen through each upstream.
//! Real parts: mitmproxy (PyPI) as an upstream that intercepts TLS with a CA of its own,
//! tinyproxy as an honest one, nginx as the origin; and an origin whose own certificate
//! is bad (self-signed), which is the target's fault, not any proxy's.

mod common;

use std::net::Ipv4Addr;

use common::curl::CurlOut;
use common::intercepting::{setup, setup_urls};
use common::mitm::Mitmproxy;
use common::origin::{self, NginxOrigin};
use common::upstreams::tinyproxy_bound;
use serde_json::Value;

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn endpoint_of(out: &CurlOut) -> Option<i64> {
    out.header("x-proxypool-endpoint")?.trim().parse().ok()
}

#[tokio::test]
async fn an_upstream_that_presents_its_own_certificate_is_cooled_endpoint_wide() {
    origin::need_hosts();
    let Some(o) = NginxOrigin::start().await else {
        return;
    };
    let Some(mitm) = Mitmproxy::start().await else {
        return;
    };
    let Some(honest) = tinyproxy_bound(ip("127.0.1.20"), &[o.https_port]).await else {
        return;
    };
    let honest_url = format!("http://alice:s3cret@127.0.0.1:{}", honest.port);
    // Endpoint 1 tampers, endpoint 2 does not.
    let s = setup_urls(&o, &[mitm.url(), honest_url], "");
    let Some(curl) = s.curl() else { return };
    let url = o.https_url("origin.test", "/ok");
    // Until the gateway has gone through the tampering upstream once, and after: every
    // client gets the origin's answer through the honest one.
    let mut cooled = false;
    for i in 0..12 {
        let out = curl.clone().get(&url).await;
        assert!(out.is(200), "request {i}: {out}");
        assert_eq!(endpoint_of(&out), Some(2), "request {i}: {out}");
        if s.home.listed(1)["state"] == "cooling" {
            cooled = true;
            break;
        }
    }
    assert!(
        cooled,
        "the tampering upstream was never cooled: {}\n{}",
        s.home.listed(1),
        s.daemon.log_tail(30)
    );
    let e = s.home.listed(1);
    assert_eq!(e["reason"], "tls_failed", "{e}");
    assert_eq!(e["phase"], "destination_tls", "{e}");
    assert_eq!(s.home.listed(2)["state"], "available");
    // One event says why, blamed on the endpoint; the pending report before it said it
    // waited for contrast.
    let events = s.home.events();
    let of_1: Vec<&Value> = events.iter().filter(|e| e["endpoint"] == 1).collect();
    let changed: Vec<&&Value> = of_1
        .iter()
        .filter(|e| e["kind"] == "state_changed" && e["to"] == "cooling")
        .collect();
    assert_eq!(changed.len(), 1, "{of_1:#?}");
    assert_eq!(changed[0]["blame"], "endpoint");
    assert_eq!(changed[0]["reason"], "tls_failed");
    let detail = changed[0]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("tampers with TLS"), "{detail}");
    assert!(
        of_1.iter()
            .any(|e| e["kind"] == "report" && e["blame"] == "pending"),
        "{of_1:#?}"
    );
    // mitmproxy saw its certificate refused: the gateway never sent a request into it.
    let log = mitm.log_text();
    assert!(
        !log.contains("GET /ok"),
        "a request went through mitmproxy: {log}"
    );
    // And it stays out for other intercepted sites too while it cools.
    let other = o.https_url("shop.test", "/ok");
    for i in 0..4 {
        let out = curl.clone().get(&other).await;
        assert!(out.is(200), "shop.test {i}: {out}");
        assert_eq!(endpoint_of(&out), Some(2), "shop.test {i}: {out}");
    }
}

#[tokio::test]
async fn an_origin_whose_own_certificate_is_bad_is_down_and_no_proxy_is_blamed() {
    origin::need_hosts();
    let Some(o) = NginxOrigin::bad().await else {
        return;
    };
    let Some(a) = tinyproxy_bound(ip("127.0.1.21"), &[o.https_port]).await else {
        return;
    };
    let Some(b) = tinyproxy_bound(ip("127.0.1.22"), &[o.https_port]).await else {
        return;
    };
    let s = setup(&o, &[&a, &b], "retries = 2");
    let Some(curl) = s.curl() else { return };
    let url = o.https_url("origin.test", "/ok");
    // Both upstreams fail its certificate in this one request: the origin's fault.
    let out = curl.clone().get(&url).await;
    assert!(out.is(502), "{out}");
    assert_eq!(
        out.header("x-proxypool-error").as_deref(),
        Some("destination_tls"),
        "{out}"
    );
    assert!(out.text().contains("certificate"), "{out}");
    // Down: the next request is answered at once, dialing nothing, with when to come back.
    let again = curl.clone().get(&url).await;
    assert!(again.is(502), "{again}");
    assert_eq!(
        again.header("x-proxypool-error").as_deref(),
        Some("destination_tls"),
        "{again}"
    );
    assert!(again.header("retry-after").is_some(), "{again}");
    assert!(again.header("x-proxypool-endpoint").is_none(), "{again}");
    // No endpoint and no pair was cooled.
    for id in [1, 2] {
        let e = s.home.listed(id);
        assert_eq!(e["state"], "available", "{e}");
    }
    let states = s.states_for("origin.test");
    assert!(states.iter().all(|(_, st)| st == "available"), "{states:?}");
    let status = s.daemon.status();
    let down = status.to_string();
    assert!(
        down.contains(&format!("origin.test:{}", o.https_port)),
        "{down}"
    );
    let events = s.home.events();
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "target_down" && e["reason"] == "tls_failed"),
        "{events:#?}"
    );
}
