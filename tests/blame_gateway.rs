//! Blame through the gateway with real proxies from Debian (tinyproxy, microsocks, dante,
//! and dante with `socks block` rules), and scripted fakes where a count must be exact:
//! a dead name, a closed port or a site that is down never cools a proxy; a proxy that
//! refuses one target loses only that target; one that refuses everything is escalated;
//! a target that comes back is used again after ONE trial (docs/blame.md).

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::fakes::{closed_port, dest, http_proxy, read_head, DestCfg, Fake, HttpProxyCfg};
use common::gateway::{roundtrip, socks5_connect, Gw, Resp};
use common::upstreams::{dante, dante_blocking, microsocks, tinyproxy};
use common::wait::eventually_async;
use proxypool::health::{Reason, State};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

fn connect_to(authority: &str) -> Vec<u8> {
    format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").into_bytes()
}

fn get_url(url: &str) -> Vec<u8> {
    let host = url.trim_start_matches("http://").split('/').next().unwrap();
    format!("GET {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").into_bytes()
}

#[track_caller]
fn assert_down(r: &Resp) {
    assert_eq!(r.status(), 502, "{}", r.head);
    assert_eq!(
        r.header("x-proxypool-error"),
        Some("destination_down"),
        "{}",
        r.head
    );
    let after: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&after), "{}", r.head);
}

/// Every endpoint still available endpoint-wide and none has a pair.
fn pool_intact(gw: &Gw) {
    for id in &gw.ids {
        let row = gw.row(*id);
        assert_eq!(row.state, State::Available, "endpoint {id}: {row:?}");
        assert!(
            gw.pairs(*id).is_empty(),
            "endpoint {id}: {:?}",
            gw.pairs(*id)
        );
    }
}

fn failed_attempts(gw: &Gw) -> f64 {
    gw.metric(r#"proxypool_gateway_upstream_attempts_total{pool="default",outcome="failure"}"#)
}

async fn site() -> Fake {
    dest(DestCfg {
        body: b"<html>blame site</html>".to_vec(),
        ..Default::default()
    })
    .await
}

#[tokio::test]
async fn a_dead_name_a_closed_port_and_a_dead_site_cool_no_real_proxy() {
    let site = site().await;
    let closed = closed_port();
    let Some(tp) = tinyproxy(&[443, site.port(), closed]).await else {
        return;
    };
    let Some(ms) = microsocks().await else { return };
    let Some(dt) = dante().await else { return };
    let urls = [
        format!("http://alice:s3cret@127.0.0.1:{}", tp.port),
        format!("socks5h://alice:s3cret@127.0.0.1:{}", ms.port),
        format!("socks5h://127.0.0.1:{}", dt.port),
    ];
    let gw = Gw::start(&urls, |c| c.retries = 2).await;

    // A mistyped host, by CONNECT: two proxies fail it, nobody reached it: down.
    let r = roundtrip(gw.addr, &connect_to("no-such-host.invalid:443")).await;
    assert_down(&r);
    // This request dialed: the answer names the last upstream that failed.
    assert!(r.header("x-proxypool-endpoint").is_some(), "{}", r.head);
    // Answered at once, dialing nothing: no upstream named.
    let r = roundtrip(gw.addr, &connect_to("no-such-host.invalid:443")).await;
    assert_down(&r);
    assert!(r.header("x-proxypool-endpoint").is_none(), "{}", r.head);
    // Asking again costs no dial.
    let before = failed_attempts(&gw);
    for _ in 0..5 {
        assert_down(&roundtrip(gw.addr, &connect_to("no-such-host.invalid:443")).await);
    }
    assert_eq!(
        failed_attempts(&gw),
        before,
        "a down target is answered without dialing"
    );
    // The same name in plain HTTP (tinyproxy's own "500 Unable to connect" page counts as
    // its failure to reach, not as the site's status), and through SOCKS5.
    assert_down(&roundtrip(gw.addr, &get_url("http://other-typo.invalid/")).await);
    let (_s, code) = socks5_connect(gw.addr, None, "third-typo.invalid", 443).await;
    assert_eq!(code, 0x04, "SOCKS5 host unreachable");
    // A closed port of a host that is up: down, and the host's open port works at once.
    assert_down(&roundtrip(gw.addr, &connect_to(&format!("127.0.0.1:{closed}"))).await);
    for _ in 0..3 {
        let r = roundtrip(
            gw.addr,
            &get_url(&format!("http://127.0.0.1:{}/ok", site.port())),
        )
        .await;
        assert_eq!(r.status(), 200, "{}", r.head);
        assert!(r.text().contains("blame site"));
    }
    gw.until_no_leases().await;
    pool_intact(&gw);
    let events = gw.events();
    let down: Vec<_> = events
        .iter()
        .filter(|e| e.kind == "target_down")
        .filter_map(|e| e.destination.clone())
        .collect();
    for t in [
        "no-such-host.invalid:443".to_string(),
        "other-typo.invalid:80".to_string(),
        "third-typo.invalid:443".to_string(),
        format!("127.0.0.1:{closed}"),
    ] {
        assert!(down.contains(&t), "{t} not down: {down:?}");
    }
    assert!(
        events.iter().all(|e| e.kind != "state_changed"),
        "nothing changed state: {events:?}"
    );
    assert_eq!(
        gw.metric(r#"proxypool_targets_down{pool="default"}"#),
        4.0,
        "{}",
        gw.engine.metrics().encode()
    );
    assert!(gw.metric(r#"proxypool_failures_total{pool="default",blame="target"}"#) >= 4.0);
    gw.stop().await;
}

#[tokio::test]
async fn a_dante_that_refuses_one_target_loses_only_that_target() {
    let (blocked, open) = (site().await, site().await);
    let rule = format!("127.0.0.1/32 port = {}", blocked.port());
    let Some(dt) = dante_blocking(&[&rule]).await else {
        return;
    };
    let Some(ms) = microsocks().await else { return };
    let urls = [
        format!("socks5h://127.0.0.1:{}", dt.port),
        format!("socks5h://alice:s3cret@127.0.0.1:{}", ms.port),
    ];
    let gw = Gw::start(&urls, |c| c.retries = 1).await;
    let (dante_id, socks_id) = (gw.ids[0], gw.ids[1]);
    for i in 0..6 {
        let url = format!("http://127.0.0.1:{}/b{i}", blocked.port());
        let r = roundtrip(gw.addr, &get_url(&url)).await;
        assert_eq!(r.status(), 200, "{}", r.head);
        assert_eq!(r.endpoint(), Some(socks_id), "dante refuses this target");
    }
    let mut through_dante = 0;
    for i in 0..6 {
        let url = format!("http://127.0.0.1:{}/o{i}", open.port());
        let r = roundtrip(gw.addr, &get_url(&url)).await;
        assert_eq!(r.status(), 200, "{}", r.head);
        through_dante += usize::from(r.endpoint() == Some(dante_id));
    }
    assert!(
        through_dante >= 2,
        "dante still serves what it allows ({through_dante} of 6)"
    );
    gw.until_no_leases().await;
    let row = gw.row(dante_id);
    assert_eq!(row.state, State::Available, "{row:?}");
    let pairs = gw.pairs(dante_id);
    assert_eq!(pairs.len(), 1, "{pairs:?}");
    assert_eq!(
        pairs[0].destination,
        format!("127.0.0.1:{}", blocked.port())
    );
    assert_eq!(pairs[0].health.reason, Some(Reason::ProxyRejected));
    assert_eq!(gw.row(socks_id).state, State::Available);
    gw.stop().await;
}

#[tokio::test]
async fn a_dante_that_refuses_everything_is_escalated_after_three_targets_others_reach() {
    let sites = [site().await, site().await, site().await];
    let Some(dt) = dante_blocking(&["0.0.0.0/0"]).await else {
        return;
    };
    let Some(ms) = microsocks().await else { return };
    let urls = [
        format!("socks5h://alice:s3cret@127.0.0.1:{}", ms.port),
        format!("socks5h://127.0.0.1:{}", dt.port),
    ];
    let gw = Gw::start(&urls, |c| c.retries = 1).await;
    let dante_id = gw.ids[1];
    for (i, s) in sites.iter().enumerate() {
        // Enough requests that dante gets each target after microsocks reached it.
        for j in 0..4 {
            let url = format!("http://127.0.0.1:{}/{i}-{j}", s.port());
            let r = roundtrip(gw.addr, &get_url(&url)).await;
            assert_eq!(r.status(), 200, "{}", r.head);
        }
    }
    gw.until_no_leases().await;
    let row = gw.row(dante_id);
    assert_eq!(row.state, State::Cooling, "{row:?}");
    assert_eq!(row.reason, Some(Reason::UpstreamUnreachable));
    assert!(row.detail.unwrap().contains("distinct targets"));
    assert_eq!(gw.row(gw.ids[0]).state, State::Available);
    gw.stop().await;
}

/// A fake HTTP proxy that counts the CONNECTs it gets for `authority`.
fn connects_to(proxy: &Fake, authority: &str) -> usize {
    let want = format!("CONNECT {authority} ");
    proxy.seen().iter().filter(|h| h.starts_with(&want)).count()
}

async fn listen_on(port: u16) -> TcpListener {
    TcpListener::bind(("127.0.0.1", port)).await.unwrap()
}

/// The status of the gateway's answer to a CONNECT (the head only: a tunnel stays open).
async fn connect_status(gw: SocketAddr, authority: &str) -> u16 {
    let mut s = TcpStream::connect(gw).await.unwrap();
    s.write_all(&connect_to(authority)).await.unwrap();
    read_head(&mut s)
        .await
        .and_then(|(head, _)| head.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_target_that_comes_back_is_tried_once_at_its_deadline_and_used_again() {
    let proxies = [
        http_proxy(HttpProxyCfg::default()).await,
        http_proxy(HttpProxyCfg::default()).await,
    ];
    let urls: Vec<String> = proxies
        .iter()
        .map(|p| format!("http://127.0.0.1:{}", p.port()))
        .collect();
    let gw = Gw::start(&urls, |c| c.retries = 1).await;
    let port = closed_port();
    let target = format!("127.0.0.1:{port}");
    // Nothing listens: both proxies answer 502, the target is down.
    assert_down(&roundtrip(gw.addr, &connect_to(&target)).await);
    let dials = || {
        proxies
            .iter()
            .map(|p| connects_to(p, &target))
            .sum::<usize>()
    };
    assert_eq!(dials(), 2);
    // A stampede while it is down dials nothing; a stampede at the deadline dials once.
    let answers = stampede(gw.addr, &target, 100).await;
    assert!(answers.iter().all(|&s| s == 502), "{answers:?}");
    assert_eq!(dials(), 2, "no dial while the target is down");
    // The target's cooldown is 2 s (± 10 %): poll with a deadline until its trial ran.
    eventually_async(Duration::from_secs(10), "the target's trial", || async {
        let answers = stampede(gw.addr, &target, 100).await;
        match dials() {
            2 => Err(format!("no trial yet ({} answers)", answers.len())),
            n => Ok(n),
        }
    })
    .await;
    assert_eq!(dials(), 3, "exactly ONE trial, however many asked");
    // It comes back: the next trial gets through and the target is used as before.
    let listener = listen_on(port).await;
    let accept = tokio::spawn(async move {
        // Accepted is reached: the tunnel is up, then this side closes it.
        while let Ok((s, _)) = listener.accept().await {
            drop(s);
        }
    });
    eventually_async(
        Duration::from_secs(20),
        "the target back in use",
        || async {
            match connect_status(gw.addr, &target).await {
                200 => Ok(()),
                other => Err(format!("CONNECT answered {other}")),
            }
        },
    )
    .await;
    for _ in 0..5 {
        assert_eq!(connect_status(gw.addr, &target).await, 200);
    }
    let events = gw.events();
    assert!(events
        .iter()
        .any(|e| e.kind == "target_up" && e.destination.as_deref() == Some(target.as_str())));
    gw.until_no_leases().await;
    pool_intact(&gw);
    accept.abort();
    gw.stop().await;
}

/// `n` CONNECTs to `target` at once; their statuses.
async fn stampede(gw: SocketAddr, target: &str, n: usize) -> Vec<u16> {
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let t = target.to_string();
        set.spawn(async move { connect_status(gw, &t).await });
    }
    let mut out = Vec::with_capacity(n);
    while let Some(r) = set.join_next().await {
        out.push(r.unwrap());
    }
    out
}

/// A page whose subresources live on hosts that do not exist, as real pages' trackers and
/// dead CDNs do, loaded by headless Chromium through the gateway with no bypass list and
/// its own background traffic allowed: the page loads and the pool is intact after.
#[tokio::test]
async fn headless_chromium_through_the_gateway_leaves_the_pool_intact() {
    let Some(chromium) = common::tools::need("chromium", "apt-get install -y chromium") else {
        return;
    };
    let page = dest(DestCfg {
        body: b"<html><head><script src=\"http://cdn.no-such-host.invalid/a.js\"></script>\
                <link rel=\"stylesheet\" href=\"https://fonts.missing.invalid/f.css\"></head>\
                <body><p>loaded through the gateway</p>\
                <img src=\"http://img.no-such-host.invalid/x.png\">\
                <img src=\"https://tracker.missing.invalid/p.gif\"></body></html>"
            .to_vec(),
        headers: vec![("Content-Type".into(), "text/html".into())],
        ..Default::default()
    })
    .await;
    let Some(tp) = tinyproxy(&[443, page.port()]).await else {
        return;
    };
    let Some(ms) = microsocks().await else { return };
    let urls = [
        format!("http://alice:s3cret@127.0.0.1:{}", tp.port),
        format!("socks5h://alice:s3cret@127.0.0.1:{}", ms.port),
    ];
    let gw = Gw::start(&urls, |_| {}).await;
    let profile = tempfile::tempdir().unwrap();
    // Only what a headless run as root needs: Chromium's own calls home go through the
    // gateway like the page's, and fail there (this machine has no internet).
    let args = [
        "--headless".to_string(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--no-first-run".into(),
        "--disable-dev-shm-usage".into(),
        format!("--user-data-dir={}", profile.path().display()),
        format!("--proxy-server=http://127.0.0.1:{}", gw.addr.port()),
        "--proxy-bypass-list=<-loopback>".into(),
        "--virtual-time-budget=5000".into(),
        "--dump-dom".into(),
        format!("http://127.0.0.1:{}/", page.port()),
    ];
    let out = tokio::time::timeout(
        Duration::from_secs(90),
        tokio::process::Command::new(&chromium).args(&args).output(),
    )
    .await
    .expect("chromium hung")
    .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        dom.contains("loaded through the gateway"),
        "{dom}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    gw.until_no_leases().await;
    pool_intact(&gw);
    let events = gw.events();
    assert!(
        events.iter().any(|e| e.kind == "target_down"),
        "the dead subresources went down: {events:?}"
    );
    // Another site is served by both upstreams at once after.
    for i in 0..4 {
        let r = roundtrip(
            gw.addr,
            &get_url(&format!("http://127.0.0.1:{}/after{i}", page.port())),
        )
        .await;
        assert_eq!(r.status(), 200, "{}", r.head);
    }
    gw.stop().await;
}

/// A site on five ports, each reached once, stops (its ports refuse): two CONNECTs to
/// each port through tinyproxy, microsocks and dante. The successes from before the
/// outage are no contrast: the ports go down, no proxy cools, and a healthy site is
/// served after (docs/blame.md, "Contrast").
#[tokio::test]
async fn a_site_that_stops_after_being_reached_cools_no_real_proxy() {
    let mut ports = Vec::new();
    for _ in 0..5 {
        ports.push(site().await);
    }
    let healthy = site().await;
    let mut allowed: Vec<u16> = ports.iter().map(|p| p.port()).collect();
    allowed.push(healthy.port());
    let Some(tp) = tinyproxy(&allowed).await else {
        return;
    };
    let Some(ms) = microsocks().await else { return };
    let Some(dt) = dante().await else { return };
    let urls = [
        format!("http://alice:s3cret@127.0.0.1:{}", tp.port),
        format!("socks5h://alice:s3cret@127.0.0.1:{}", ms.port),
        format!("socks5h://127.0.0.1:{}", dt.port),
    ];
    let gw = Gw::start(&urls, |c| c.retries = 2).await;
    for p in &ports {
        let t = format!("127.0.0.1:{}", p.port());
        assert_eq!(connect_status(gw.addr, &t).await, 200, "{t} reached");
    }
    gw.until_no_leases().await;
    for p in &mut ports {
        p.stop_accepting();
    }
    for p in &ports {
        let t = format!("127.0.0.1:{}", p.port());
        for _ in 0..2 {
            let r = roundtrip(gw.addr, &connect_to(&t)).await;
            assert_down(&r);
        }
    }
    gw.until_no_leases().await;
    pool_intact(&gw);
    for i in 0..3 {
        let url = format!("http://127.0.0.1:{}/after{i}", healthy.port());
        let r = roundtrip(gw.addr, &get_url(&url)).await;
        assert_eq!(r.status(), 200, "{}", r.head);
    }
    let events = gw.events();
    assert!(
        events.iter().all(|e| e.kind != "state_changed"),
        "nothing changed state: {events:?}"
    );
    gw.stop().await;
}

/// The trial of a down target fails: the gateway's `502 destination_down` after that dial
/// names the upstream it went through (`X-Proxypool-Endpoint`), as every answer after a
/// dial does.
#[tokio::test]
async fn a_failed_target_trial_names_its_upstream() {
    let proxies = [
        http_proxy(HttpProxyCfg::default()).await,
        http_proxy(HttpProxyCfg::default()).await,
    ];
    let urls: Vec<String> = proxies
        .iter()
        .map(|p| format!("http://127.0.0.1:{}", p.port()))
        .collect();
    let gw = Gw::start(&urls, |c| c.retries = 1).await;
    let target = format!("127.0.0.1:{}", closed_port());
    assert_down(&roundtrip(gw.addr, &connect_to(&target)).await);
    let dials = || {
        proxies
            .iter()
            .map(|p| connects_to(p, &target))
            .sum::<usize>()
    };
    assert_eq!(dials(), 2);
    // Poll (with a deadline) until the target's trial has dialed once: its answer.
    let trial = eventually_async(Duration::from_secs(10), "the target's trial", || async {
        let r = roundtrip(gw.addr, &connect_to(&target)).await;
        match dials() {
            2 => Err(format!("no trial yet: {}", r.head)),
            _ => Ok(r),
        }
    })
    .await;
    assert_eq!(dials(), 3);
    assert_down(&trial);
    let named: u64 = trial
        .header("x-proxypool-endpoint")
        .unwrap_or_else(|| panic!("no upstream named: {}", trial.head))
        .parse()
        .unwrap();
    assert!(gw.ids.contains(&(named as i64)), "{}", trial.head);
    gw.until_no_leases().await;
    pool_intact(&gw);
    gw.stop().await;
}
