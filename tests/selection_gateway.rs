//! Choosing through the gateway (docs/selection.md) with real proxies from Debian
//! (tinyproxy, microsocks): a sequential crawl of one site paced per (endpoint, site),
//! checked at a destination that records when each request arrived and through which
//! proxy; `paced` as a 503; tags by username; a fallback pool named in `X-Proxypool-Pool`;
//! the bytes of a 16 MiB download counted for its endpoint and pool.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::fakes::{dest, http_proxy, read_head, DestCfg, HttpProxyCfg};
use common::gateway::{endpoint, get, roundtrip, socks5_connect, url, Gw};
use common::upstreams::{microsocks, tinyproxy};
use common::wait::eventually_async;
use proxypool::config::{PaceConfig, PoolConfig};
use proxypool::health::{Input, State};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::time::Instant;

fn paced_pool(name: &str, interval: Duration, wait: Duration) -> PoolConfig {
    let mut c = PoolConfig::builtin(name);
    c.pace = Some(PaceConfig {
        interval,
        in_flight: 0,
        wait,
        slow_down: false,
        sites: Default::default(),
    });
    c
}

/// A site that answers every request `200 ok` and records when each arrived and whether
/// it came through tinyproxy (which adds `Via`) or microsocks (which does not).
struct Site {
    port: u16,
    seen: Arc<Mutex<Vec<(Instant, bool)>>>,
}

async fn recording_site() -> Site {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let Some((head, _)) = read_head(&mut s).await else {
                    return;
                };
                let via = common::fakes::header(&head, "via").is_some();
                log.lock().unwrap().push((Instant::now(), via));
                let _ = s
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    Site { port, seen }
}

fn get_close(port: u16, path: &str, extra: &str) -> Vec<u8> {
    format!(
        "GET http://127.0.0.1:{port}{path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n{extra}\r\n"
    )
    .into_bytes()
}

fn user(name: &str) -> String {
    common::gateway::proxy_auth(name, "x")
}

#[tokio::test]
async fn a_sequential_crawl_of_one_site_is_spaced_per_proxy() {
    let site = recording_site().await;
    let Some(tp) = tinyproxy(&[site.port]).await else {
        return;
    };
    let Some(ms) = microsocks().await else { return };
    const INTERVAL: Duration = Duration::from_millis(800);
    let eps = vec![
        endpoint(
            &format!("http://alice:s3cret@127.0.0.1:{}", tp.port),
            "default",
            &[],
        ),
        endpoint(
            &format!("socks5h://alice:s3cret@127.0.0.1:{}", ms.port),
            "default",
            &[],
        ),
    ];
    let pools = vec![paced_pool("default", INTERVAL, Duration::from_secs(20))];
    let gw = Gw::start_pools(pools, eps, |_| {}).await;
    let started = Instant::now();
    let mut used = Vec::new();
    for i in 0..6 {
        let r = roundtrip(gw.addr, &get_close(site.port, &format!("/page/{i}"), "")).await;
        assert_eq!(r.status(), 200, "{}", r.head);
        used.push(r.endpoint().unwrap());
    }
    let elapsed = started.elapsed();
    // Six pages through two proxies, each at most once per interval: at least two
    // intervals after the first pair of requests.
    assert!(elapsed >= 2 * INTERVAL, "the crawl took {elapsed:?}");
    let seen = site.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 6);
    for via in [true, false] {
        let times: Vec<Instant> = seen
            .iter()
            .filter(|(_, v)| *v == via)
            .map(|(t, _)| *t)
            .collect();
        assert_eq!(times.len(), 3, "three pages through each proxy: {used:?}");
        for w in times.windows(2) {
            // The interval counts from the lease; the dial after it takes a moment either
            // way, so arrivals keep most of the interval (a loaded machine may slow one
            // dial by a few hundred ms; unpaced, they would be milliseconds apart: half
            // the interval tells the two apart with room for a slow dial).
            let gap = w[1] - w[0];
            assert!(
                gap >= INTERVAL / 2,
                "through {} {gap:?} apart",
                if via { "tinyproxy" } else { "microsocks" }
            );
        }
    }
    // The gateway's answers name the endpoints in the order the site saw them.
    let tinyproxy_id = gw.ids[0];
    let by_header: Vec<bool> = used.iter().map(|id| *id == tinyproxy_id).collect();
    let by_site: Vec<bool> = seen.iter().map(|(_, v)| *v).collect();
    assert_eq!(by_header, by_site);
    gw.until_no_leases().await;
}

#[tokio::test]
async fn past_its_wait_a_paced_request_is_a_503_naming_paced() {
    let site = dest(DestCfg::default()).await;
    let proxy = http_proxy(HttpProxyCfg::default()).await;
    let eps = vec![endpoint(&url("http", proxy.port()), "default", &[])];
    let pools = vec![paced_pool(
        "default",
        Duration::from_secs(60),
        Duration::ZERO,
    )];
    let gw = Gw::start_pools(pools, eps, |_| {}).await;
    let r = roundtrip(gw.addr, &get_close(site.port(), "/", "")).await;
    assert_eq!(r.status(), 200, "{}", r.head);
    assert_eq!(r.header("x-proxypool-pool"), Some("default"));
    let r = roundtrip(gw.addr, &get_close(site.port(), "/again", "")).await;
    assert_eq!(r.status(), 503, "{}", r.head);
    assert_eq!(r.header("x-proxypool-error"), Some("paced"), "{}", r.head);
    let after: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((59..=60).contains(&after), "{}", r.head);
    assert!(
        r.text().contains("used for 127.0.0.1 too recently"),
        "{}",
        r.text()
    );
    // SOCKS5: a general failure, nothing tried.
    let (_s, code) = socks5_connect(gw.addr, None, "127.0.0.1", site.port()).await;
    assert_eq!(code, 1);
    gw.until_no_leases().await;
    let paced =
        gw.metric(r#"proxypool_gateway_requests_total{protocol="http_forward",outcome="paced"}"#);
    assert_eq!(paced, 1.0);
    assert_eq!(
        gw.metric(r#"proxypool_leases_total{pool="default",result="paced"}"#),
        2.0
    );
    // The endpoint was never judged: pacing is not a failure.
    assert_eq!(gw.row(gw.ids[0]).state, State::Available);
}

#[tokio::test]
async fn a_username_picks_endpoints_by_tag() {
    let site = dest(DestCfg::default()).await;
    let Some(tp) = tinyproxy(&[site.port()]).await else {
        return;
    };
    let Some(ms) = microsocks().await else { return };
    let eps = vec![
        endpoint(
            &format!("http://alice:s3cret@127.0.0.1:{}", tp.port),
            "default",
            &["country=us", "region=us-east-1"],
        ),
        endpoint(
            &format!("socks5h://alice:s3cret@127.0.0.1:{}", ms.port),
            "default",
            &["country=de"],
        ),
    ];
    let gw = Gw::start_pools(vec![PoolConfig::builtin("default")], eps, |_| {}).await;
    let (us, de) = (gw.ids[0], gw.ids[1]);
    for _ in 0..3 {
        for (name, want) in [
            ("country-de", de),
            ("country-us", us),
            ("pool-default-region-us-east-1-session-7", us),
        ] {
            let r = roundtrip(gw.addr, &get_close(site.port(), "/", &user(name))).await;
            assert_eq!(r.status(), 200, "{name}: {}", r.head);
            assert_eq!(r.endpoint(), Some(want), "{name}");
        }
    }
    gw.until_no_leases().await;
    // A key no endpoint carries is the client's mistake, named with the keys in use.
    let r = roundtrip(gw.addr, &get_close(site.port(), "/", &user("contry-de"))).await;
    assert_eq!(r.status(), 400, "{}", r.head);
    assert!(
        r.text()
            .contains("known keys: pool, session, country, region"),
        "{}",
        r.text()
    );
    // A value nobody carries: nothing to lease.
    let r = roundtrip(gw.addr, &get_close(site.port(), "/", &user("country-fr"))).await;
    assert_eq!(r.status(), 503, "{}", r.head);
    gw.until_no_leases().await;
    // Through SOCKS5 too.
    let (mut s, code) =
        socks5_connect(gw.addr, Some(("country-de", "x")), "127.0.0.1", site.port()).await;
    assert_eq!(code, 0);
    // One exchange in the tunnel: the site closes after its answer, and so the tunnel.
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::io::AsyncReadExt::read_to_end(&mut s, &mut answer)
        .await
        .unwrap();
    assert!(answer.starts_with(b"HTTP/1.1 200"));
    drop(s);
    gw.until_no_leases().await;
}

#[tokio::test]
async fn a_fallback_serves_when_the_pool_is_empty_disabled_or_paced() {
    let site = dest(DestCfg::default()).await;
    let a = http_proxy(HttpProxyCfg::default()).await;
    let b = http_proxy(HttpProxyCfg::default()).await;
    let mut first = paced_pool("default", Duration::from_secs(60), Duration::ZERO);
    first.fallback = Some("cheap".into());
    let pools = vec![first, PoolConfig::builtin("cheap")];
    let eps = vec![
        endpoint(&url("http", a.port()), "default", &[]),
        endpoint(&url("http", b.port()), "cheap", &[]),
    ];
    let gw = Gw::start_pools(pools, eps, |_| {}).await;
    let (ia, ib) = (gw.ids[0], gw.ids[1]);
    let served = |r: &common::gateway::Resp| {
        assert_eq!(r.status(), 200, "{}", r.head);
        (
            r.endpoint().unwrap(),
            r.header("x-proxypool-pool").unwrap().to_string(),
        )
    };
    let r = roundtrip(gw.addr, &get_close(site.port(), "/", "")).await;
    assert_eq!(served(&r), (ia, "default".into()));
    // Paced in `default` (its wait is 0): `cheap` serves, and says so.
    let r = roundtrip(gw.addr, &get_close(site.port(), "/", "")).await;
    assert_eq!(served(&r), (ib, "cheap".into()));
    // A CONNECT names the pool too.
    let (_s, r) = common::gateway::connect_tunnel(gw.addr, site.port(), "").await;
    assert_eq!(served(&r), (ib, "cheap".into()));
    drop(_s);
    // Disabled: another host is not paced, but nothing is in service.
    gw.engine
        .input(
            ia,
            Input::Disable {
                detail: Some("test".into()),
            },
            None,
            None,
        )
        .await
        .unwrap();
    let r = roundtrip(gw.addr, &get(site.port(), "/", "Connection: close\r\n")).await;
    assert_eq!(served(&r), (ib, "cheap".into()));
    // Exhausted (its endpoint removed): still served, one hop.
    gw.engine.remove(vec![ia]).await.unwrap();
    let r = roundtrip(gw.addr, &get_close(site.port(), "/", "")).await;
    assert_eq!(served(&r), (ib, "cheap".into()));
    gw.until_no_leases().await;
}

#[tokio::test]
async fn the_bytes_of_a_16_mib_download_are_counted_for_its_endpoint_and_pool() {
    const SIZE: usize = 16 << 20;
    let site = dest(DestCfg {
        body: vec![b'x'; SIZE],
        ..Default::default()
    })
    .await;
    let Some(tp) = tinyproxy(&[site.port()]).await else {
        return;
    };
    let eps = vec![endpoint(
        &format!("http://alice:s3cret@127.0.0.1:{}", tp.port),
        "default",
        &[],
    )];
    let gw = Gw::start_pools(vec![PoolConfig::builtin("default")], eps, |_| {}).await;
    let id = gw.ids[0];
    let r = roundtrip(gw.addr, &get_close(site.port(), "/big", "")).await;
    assert_eq!(r.status(), 200, "{}", r.head);
    assert_eq!(r.body.len(), SIZE);
    gw.until_no_leases().await;
    let engine = gw.engine.clone();
    let stats = eventually_async(Duration::from_secs(5), "the bytes counted", || {
        let uses = engine.endpoint_uses(&[id]);
        async move {
            let s = uses
                .first()
                .map(|(_, u)| u.stats)
                .ok_or("no stats".to_string())?;
            if s.bytes_received >= SIZE as u64 {
                Ok(s)
            } else {
                Err(format!("{} received so far", s.bytes_received))
            }
        }
    })
    .await;
    // The response head on top of the body; the request went the other way.
    assert!(stats.bytes_received < SIZE as u64 + 4096, "{stats:?}");
    assert!(stats.bytes_sent > 0 && stats.bytes_sent < 4096, "{stats:?}");
    let down = gw.metric(r#"proxypool_gateway_bytes_total{pool="default",direction="to_client"}"#);
    let up = gw.metric(r#"proxypool_gateway_bytes_total{pool="default",direction="to_upstream"}"#);
    assert_eq!(down as u64, stats.bytes_received);
    assert_eq!(up as u64, stats.bytes_sent);
}
