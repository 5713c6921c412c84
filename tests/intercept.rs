//! HTTPS interception through the real daemon (docs/intercept.md): the gateway ends the
//! client's TLS with this install's CA, sends each request through an upstream (real
//! tinyproxy instances leaving from their own loopback addresses) to a real nginx origin
//! whose certificate is verified, and judges what comes back. A ban inside HTTPS is seen,
//! retried around and kept for that pair.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use common::curl::{Curl, CurlOut};
use common::daemon::{Daemon, Home};
use common::origin::{self, NginxOrigin, ALLOWED_BODY};
use common::tools::{free_port, ToolDaemon};
use common::upstreams::tinyproxy_bound;
use serde_json::Value;

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

/// A daemon whose gateway intercepts `hosts` at the origin's HTTPS port, trusting the
/// harness CA for origins, with `upstreams` in its pool.
struct Setup {
    home: Home,
    daemon: Daemon,
    gateway: u16,
    /// The daemon's own CA, which clients trust.
    ca: PathBuf,
}

fn setup(o: &NginxOrigin, upstreams: &[&ToolDaemon], extra: &str) -> Setup {
    let gateway = free_port();
    let config = format!(
        r#"[tls]
extra_roots = "{roots}"

[[gateway]]
listen = "127.0.0.1:{gateway}"
intercept = ["origin.test", "shop.test"]
intercept_ports = [{port}]
ban_status = [403, 429]
retry_status = [403, 429]
{extra}
"#,
        roots = o.ca_pem.display(),
        port = o.https_port,
    );
    let home = Home::new(Some(&config));
    home.ok(&["ca", "init"]);
    let urls: Vec<String> = upstreams
        .iter()
        .map(|u| format!("http://alice:s3cret@127.0.0.1:{}", u.port))
        .collect();
    home.add(&urls.iter().map(String::as_str).collect::<Vec<_>>());
    let daemon = home.serve();
    let ca = home.db.with_file_name("ca.pem");
    assert!(ca.exists(), "ca init wrote {}", ca.display());
    Setup {
        home,
        daemon,
        gateway,
        ca,
    }
}

impl Setup {
    fn curl(&self) -> Option<Curl> {
        Some(
            Curl::new()?
                .cacert(&self.ca)
                .proxy(&format!("http://127.0.0.1:{}", self.gateway)),
        )
    }

    /// `list --destination HOST --json`, by endpoint id.
    fn states_for(&self, host: &str) -> Vec<(i64, String)> {
        self.home
            .list_with(&["--destination", host])
            .iter()
            .map(|e: &Value| {
                (
                    e["id"].as_i64().unwrap(),
                    e["destination_state"].as_str().unwrap_or("?").to_string(),
                )
            })
            .collect()
    }
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
    origin::need_hosts();
    let Some(o) = NginxOrigin::start().await else {
        return;
    };
    let Some(up) = tinyproxy_bound(ip("127.0.1.4"), &[o.https_port]).await else {
        return;
    };
    let s = setup(&o, &[&up], "");
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
}
