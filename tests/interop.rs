//! Probes through real proxy daemons from Debian: tinyproxy, microsocks and dante.
//!
//! Each test starts its own daemon in the foreground on a free 127.0.0.1 port with a config
//! in a temp dir. A missing binary skips the test locally but fails it when `CI` is set,
//! so CI cannot go green without having exercised the real proxies.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::fakes::*;
use common::tools::ToolDaemon;
use common::upstreams::{self, dante, microsocks};
use proxypool::config::ProbeConfig;
use proxypool::endpoint::ProxyUrl;
use proxypool::health::{Phase, Reason};
use proxypool::probe::{ProbeResult, Prober};
use tempfile::TempDir;

/// A plain and a TLS destination, and the CA file that trusts the latter.
struct Dests {
    http: Fake,
    https: Fake,
    ca_file: PathBuf,
    _dir: TempDir,
}

impl Dests {
    async fn new() -> Dests {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("interop ca");
        let body = b"<html>interop destination</html>".to_vec();
        let http = dest(DestCfg {
            body: body.clone(),
            ..Default::default()
        })
        .await;
        let https = dest(DestCfg {
            body,
            tls: Some(ca.server_config()),
            ..Default::default()
        })
        .await;
        Dests {
            ca_file: ca.write_pem(dir.path()),
            http,
            https,
            _dir: dir,
        }
    }

    fn cfg(&self, https: bool) -> ProbeConfig {
        // 127.0.0.1 rather than localhost: the daemons only reach IPv4 here.
        let url = if https {
            format!("https://127.0.0.1:{}/interop", self.https.port())
        } else {
            format!("http://127.0.0.1:{}/interop", self.http.port())
        };
        ProbeConfig {
            url: Some(url),
            expect_body: Some("interop destination".into()),
            timeout: Duration::from_secs(5),
            ca_file: Some(self.ca_file.clone()),
            ..Default::default()
        }
    }

    async fn probe(&self, https: bool, proxy: &str) -> ProbeResult {
        let prober = Prober::new(&self.cfg(https)).unwrap();
        prober.probe(&ProxyUrl::parse(proxy).unwrap()).await
    }
}

#[track_caller]
fn assert_ok(r: &ProbeResult, d: &ToolDaemon) {
    assert!(r.ok, "{r:?}\n--- {} log ---\n{}", d.name, d.log_text());
    assert_eq!(r.status, Some(200));
}

#[track_caller]
fn assert_failed(r: &ProbeResult, reason: Reason, phase: Phase, d: &ToolDaemon) {
    let f = r
        .failure
        .as_ref()
        .unwrap_or_else(|| panic!("expected failure, got {r:?}"));
    assert_eq!(
        (f.reason, f.phase),
        (Some(reason), Some(phase)),
        "{r:?}\n--- {} log ---\n{}",
        d.name,
        d.log_text()
    );
}

// ---------------------------------------------------------------------------------------
// tinyproxy

async fn tinyproxy(dests: &Dests) -> Option<ToolDaemon> {
    upstreams::tinyproxy(&[dests.https.port()]).await
}

#[tokio::test]
async fn tinyproxy_right_password() {
    let dests = Dests::new().await;
    let Some(tp) = tinyproxy(&dests).await else {
        return;
    };
    let proxy = format!("http://alice:s3cret@127.0.0.1:{}", tp.port);
    let r = dests.probe(false, &proxy).await;
    assert_ok(&r, &tp);
    let r = dests.probe(true, &proxy).await;
    assert_ok(&r, &tp);
    assert!(r.phases.iter().any(|p| p.0 == Phase::ProxyHandshake));
}

/// A probe site that is down, through tinyproxy: its own "500 Unable to connect" page (no
/// `Via`) is its failure to reach the site, judged by contrast (docs/blame.md), not the
/// site's status; by CONNECT the same.
#[tokio::test]
async fn tinyproxy_cannot_reach_a_site_that_is_down() {
    let closed = common::fakes::closed_port();
    let Some(tp) = upstreams::tinyproxy(&[closed]).await else {
        return;
    };
    let proxy = format!("http://alice:s3cret@127.0.0.1:{}", tp.port);
    for url in [
        format!("http://127.0.0.1:{closed}/down"),
        format!("https://127.0.0.1:{closed}/down"),
    ] {
        let c = ProbeConfig {
            url: Some(url.clone()),
            timeout: Duration::from_secs(5),
            ..Default::default()
        };
        let r = Prober::new(&c)
            .unwrap()
            .probe(&ProxyUrl::parse(&proxy).unwrap())
            .await;
        assert_failed(&r, Reason::UpstreamUnreachable, Phase::ProxyHandshake, &tp);
        assert_eq!(r.status, Some(500), "{url}: {r:?}");
    }
}

#[tokio::test]
async fn tinyproxy_wrong_password() {
    let dests = Dests::new().await;
    let Some(tp) = tinyproxy(&dests).await else {
        return;
    };
    let proxy = format!("http://alice:wrong@127.0.0.1:{}", tp.port);
    for https in [false, true] {
        let r = dests.probe(https, &proxy).await;
        assert_failed(&r, Reason::ProxyAuthRejected, Phase::ProxyHandshake, &tp);
        // tinyproxy sends 407 without credentials but 401 for wrong ones.
        assert!(matches!(r.status, Some(401 | 407)), "{r:?}");
        assert!(!format!("{r:?}").contains("wrong"), "{r:?}");
    }
    // No credentials at all is the same rejection.
    let r = dests
        .probe(true, &format!("http://127.0.0.1:{}", tp.port))
        .await;
    assert_failed(&r, Reason::ProxyAuthRejected, Phase::ProxyHandshake, &tp);
}

#[tokio::test]
async fn tinyproxy_forwarded_401_is_destination_status() {
    let dests = Dests::new().await;
    let Some(tp) = tinyproxy(&dests).await else {
        return;
    };
    let protected = dest(DestCfg {
        status: 401,
        headers: vec![("WWW-Authenticate".into(), "Basic realm=\"dest\"".into())],
        ..Default::default()
    })
    .await;
    let cfg = ProbeConfig {
        url: Some(format!("http://127.0.0.1:{}/", protected.port())),
        ..dests.cfg(false)
    };
    let proxy = ProxyUrl::parse(&format!("http://alice:s3cret@127.0.0.1:{}", tp.port)).unwrap();
    let r = Prober::new(&cfg).unwrap().probe(&proxy).await;
    assert_failed(&r, Reason::DestinationStatus, Phase::ResponseHead, &tp);
    assert_eq!(r.status, Some(401));
}

// ---------------------------------------------------------------------------------------
// microsocks

#[tokio::test]
async fn microsocks_right_password() {
    let dests = Dests::new().await;
    let Some(ms) = microsocks().await else {
        return;
    };
    for scheme in ["socks5", "socks5h"] {
        let proxy = format!("{scheme}://alice:s3cret@127.0.0.1:{}", ms.port);
        assert_ok(&dests.probe(false, &proxy).await, &ms);
        assert_ok(&dests.probe(true, &proxy).await, &ms);
    }
}

#[tokio::test]
async fn microsocks_wrong_password() {
    let dests = Dests::new().await;
    let Some(ms) = microsocks().await else {
        return;
    };
    let proxy = format!("socks5://alice:wrong@127.0.0.1:{}", ms.port);
    for https in [false, true] {
        let r = dests.probe(https, &proxy).await;
        assert_failed(&r, Reason::ProxyAuthRejected, Phase::ProxyHandshake, &ms);
    }
    // Without credentials microsocks offers no acceptable method.
    let r = dests
        .probe(false, &format!("socks5://127.0.0.1:{}", ms.port))
        .await;
    assert_failed(&r, Reason::ProxyAuthRejected, Phase::ProxyHandshake, &ms);
}

// ---------------------------------------------------------------------------------------
// dante

#[tokio::test]
async fn dante_socks5() {
    let dests = Dests::new().await;
    let Some(d) = dante().await else {
        return;
    };
    let proxy = format!("socks5://127.0.0.1:{}", d.port);
    assert_ok(&dests.probe(false, &proxy).await, &d);
    assert_ok(&dests.probe(true, &proxy).await, &d);
}

#[tokio::test]
async fn dante_socks4() {
    let dests = Dests::new().await;
    let Some(d) = dante().await else {
        return;
    };
    let proxy = format!("socks4://nobody@127.0.0.1:{}", d.port);
    assert_ok(&dests.probe(false, &proxy).await, &d);
    assert_ok(&dests.probe(true, &proxy).await, &d);
}

#[tokio::test]
async fn dante_closed_destination_is_upstream_unreachable() {
    let dests = Dests::new().await;
    let Some(d) = dante().await else {
        return;
    };
    let port = closed_port();
    let cfg = ProbeConfig {
        url: Some(format!("http://127.0.0.1:{port}/")),
        timeout: Duration::from_secs(5),
        ..dests.cfg(false)
    };
    let prober = Prober::new(&cfg).unwrap();
    let proxy = ProxyUrl::parse(&format!("socks5://127.0.0.1:{}", d.port)).unwrap();
    let r = prober.probe(&proxy).await;
    assert_failed(&r, Reason::UpstreamUnreachable, Phase::ProxyHandshake, &d);
}
