//! The HTTP listener (docs/observability.md) read by the real tools: `promtool check
//! metrics`, a real Prometheus scraping `/metrics`, and headless Chromium rendering the
//! status page.
//!
//! The server runs in-process over a test `StatusSource` (tests/observability_daemon.rs
//! runs the real binary). A missing tool skips the test locally but fails it when `CI`
//! is set.

mod common;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use proxypool::health::{Phase, Reason, State};
use proxypool::metrics::{GaugeSnapshot, LeaseResult, Metrics};
use proxypool::protocol::ErrorCode;
use proxypool::protocol::{EndpointView, PoolStatus};
use proxypool::stats::EndpointStats;
use proxypool::store::{fmt_time, EventRow};
use proxypool::web::{
    self, minute_buckets, EndpointLine, HttpApp, PageLimits, PageModel, PoolPage, StatusError,
    StatusSource,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use common::tools::{free_port, need, Proc};

const INSTALL: &str = "apt-get install -y prometheus chromium";
const EVIL: &str = "<script>alert(1)</script>";

/// Two pools, one endpoint labelled with a script tag.
struct TestSource {
    now: SystemTime,
}

impl TestSource {
    fn statuses(&self) -> Vec<PoolStatus> {
        vec![
            PoolStatus {
                pool: "default".into(),
                mode: "static-no-ping".into(),
                available: 2,
                cooling: 1,
                probe_allowed: 0,
                disabled: 0,
                leases: 1,
                next_deadline_ms: Some(42_000),
                ..PoolStatus::default()
            },
            PoolStatus {
                pool: "residential".into(),
                mode: "static".into(),
                available: 0,
                cooling: 0,
                probe_allowed: 1,
                disabled: 1,
                leases: 0,
                next_deadline_ms: None,
                ..PoolStatus::default()
            },
        ]
    }

    fn views(&self) -> Vec<EndpointView> {
        let v = |id: i64, pool: &str, host: &str, state: State, label: Option<&str>| EndpointView {
            id,
            url: format!("socks5h://user:***@{host}:1080"),
            pool: pool.into(),
            label: label.map(Into::into),
            source: None,
            state,
            reason: (state == State::Cooling).then_some(Reason::ProxyRejected),
            phase: (state == State::Cooling).then_some(Phase::ProxyHandshake),
            detail: None,
            streak: u32::from(state == State::Cooling),
            cooldown_until: None,
            cooldown_ms: None,
            state_changed_at: fmt_time(self.now),
            created_at: fmt_time(self.now),
            stats: None,
            destination_state: None,
            slowed: None,
            tags: Default::default(),
            exit_ip: None,
            exit_seen_at: None,
        };
        vec![
            v(1, "default", "alpha.example", State::Available, Some(EVIL)),
            v(2, "default", "beta.example", State::Available, None),
            v(3, "default", "gamma.example", State::Cooling, Some("gamma")),
            v(4, "residential", "delta.example", State::ProbeAllowed, None),
            v(5, "residential", "epsilon.example", State::Disabled, None),
        ]
    }
}

impl StatusSource for TestSource {
    async fn status(&self, pool: Option<&str>) -> Result<Vec<PoolStatus>, StatusError> {
        let all = self.statuses();
        match pool {
            None => Ok(all),
            Some(p) => all
                .into_iter()
                .find(|s| s.pool == p)
                .map(|s| vec![s])
                .ok_or_else(|| {
                    StatusError::new(ErrorCode::UnknownPool, format!("unknown pool {p:?}"))
                }),
        }
    }

    async fn endpoints(
        &self,
        pool: Option<&str>,
        state: Option<State>,
    ) -> Result<Vec<EndpointView>, StatusError> {
        Ok(self
            .views()
            .into_iter()
            .filter(|v| pool.is_none_or(|p| v.pool == p) && state.is_none_or(|s| v.state == s))
            .collect())
    }

    async fn endpoints_for(
        &self,
        pool: Option<&str>,
        _destination: &str,
    ) -> Result<Vec<(EndpointView, State)>, StatusError> {
        let views = self.endpoints(pool, None).await?;
        Ok(views.into_iter().map(|v| (v.clone(), v.state)).collect())
    }

    async fn page(&self, limits: PageLimits) -> Result<PageModel, StatusError> {
        let views = self.views();
        let pools = self
            .statuses()
            .into_iter()
            .map(|status| {
                let endpoints: Vec<EndpointLine> = views
                    .iter()
                    .filter(|v| v.pool == status.pool)
                    .take(limits.endpoints_per_pool)
                    .map(|v| {
                        let mut stats = EndpointStats::default();
                        stats.record_lease();
                        stats.record_success(
                            self.now,
                            Some(Duration::from_millis(80 + v.id as u64)),
                        );
                        EndpointLine {
                            view: v.clone(),
                            stats,
                            live_leases: 0,
                            cooldown_left: (v.state == State::Cooling)
                                .then_some(Duration::from_secs(42)),
                            banned_on: Vec::new(),
                        }
                    })
                    .collect();
                PoolPage {
                    transitions: minute_buckets(
                        self.now,
                        (0..7).map(|i| self.now - Duration::from_secs(i * 300)),
                    ),
                    endpoints_total: endpoints.len(),
                    endpoints,
                    status,
                    banned_pairs: 0,
                    most_banned: Vec::new(),
                }
            })
            .collect();
        Ok(PageModel {
            generated_at: self.now,
            version: env!("CARGO_PKG_VERSION").into(),
            pools,
            events: vec![EventRow {
                id: 1,
                at: fmt_time(self.now),
                kind: "state_changed".into(),
                endpoint: Some(3),
                from: Some("available".into()),
                to: Some("cooling".into()),
                reason: Some("proxy_rejected".into()),
                phase: Some("proxy_handshake".into()),
                detail: Some("SOCKS reply 0x02".into()),
                lease: None,
                destination: None,
                status: None,
                blame: None,
            }],
            store_down: false,
            daemons: None,
        })
    }
}

struct Server {
    addr: std::net::SocketAddr,
    stop: CancellationToken,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn start(token: Option<&str>) -> Server {
    let source = TestSource {
        now: SystemTime::now(),
    };
    let metrics = Metrics::new();
    let names: Vec<String> = source.statuses().iter().map(|s| s.pool.clone()).collect();
    let states: Vec<(usize, State)> = source
        .views()
        .iter()
        .map(|v| (names.iter().position(|n| *n == v.pool).unwrap(), v.state))
        .collect();
    metrics.set_gauge_source(Box::new(move || {
        GaugeSnapshot::count_states(&names, states.iter().copied())
    }));
    let p = metrics.pool("default");
    p.lease(LeaseResult::Granted, Duration::from_micros(80));
    p.report_failure(Reason::ProxyRejected);
    p.transition(
        State::Available,
        State::Cooling,
        Some(Reason::ProxyRejected),
    );
    p.probe(true, Duration::from_millis(250));
    metrics.pool("residential");
    metrics.gateway();
    let addr: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    web::check_bind(addr, token).unwrap();
    let listener = web::bind(addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = HttpApp::new(Arc::new(source), Arc::new(metrics), token.map(Into::into));
    let stop = CancellationToken::new();
    tokio::spawn(web::serve(listener, Arc::new(app), stop.clone()));
    Server { addr, stop }
}

/// A plain HTTP/1.1 GET; returns (status, body).
async fn get(addr: std::net::SocketAddr, path: &str, auth: Option<&str>) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let auth = auth
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: test\r\n{auth}Connection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    let status = head[9..12].parse().unwrap();
    (status, body.to_string())
}

#[tokio::test]
async fn promtool_accepts_the_exposition() {
    let Some(promtool) = need("promtool", INSTALL) else {
        return;
    };
    let srv = start(None).await;
    let (status, text) = get(srv.addr, "/metrics", None).await;
    assert_eq!(status, 200);
    assert!(
        text.contains(r#"proxypool_endpoints{pool="residential",state="disabled"} 1"#),
        "{text}"
    );
    // Bounded labels: no host, URL or credential from the endpoints ever reaches a label.
    for leak in ["example", "user", "***", "socks5h"] {
        assert!(!text.contains(leak), "{leak} in /metrics:\n{text}");
    }
    common::tools::promtool_check(&promtool, &text);
}

#[tokio::test]
async fn prometheus_scrapes_with_a_bearer_token() {
    let Some(prometheus) = need("prometheus", INSTALL) else {
        return;
    };
    let srv = start(Some("scrape-s3cret")).await;
    let (status, _) = get(srv.addr, "/metrics", None).await;
    assert_eq!(status, 401);
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
             scrape_configs:\n  - job_name: proxypool\n    authorization:\n      credentials: scrape-s3cret\n    \
             static_configs:\n      - targets: ['{}']\n",
            srv.addr
        ),
    )
    .unwrap();
    let port = free_port();
    let _prom = Proc(
        Command::new(prometheus)
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let prom: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let query = |q: &str| format!("/api/v1/query?query={q}");
    common::eventually_async(
        Duration::from_secs(60),
        "Prometheus scrapes up=1",
        || async move {
            if let Err(e) = tokio::net::TcpStream::connect(prom).await {
                return Err(format!("Prometheus not listening: {e}"));
            }
            let (_, body) = get(prom, &query("up"), None).await;
            match serde_json::from_str::<serde_json::Value>(&body) {
                Ok(v) if v["data"]["result"][0]["value"][1] == "1" => Ok(()),
                _ => Err(body),
            }
        },
    )
    .await;
    // The scraped data is ours, labels intact.
    let (_, body) = get(
        prom,
        &query("proxypool_endpoints%7Bpool%3D%22default%22%2Cstate%3D%22available%22%7D"),
        None,
    )
    .await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["data"]["result"][0]["value"][1], "2", "{body}");
    let (_, body) = get(prom, &query("proxypool_probe_duration_seconds_count"), None).await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    // Two pools × two outcomes, created at 0 so rate() works from the start.
    let series = v["data"]["result"].as_array().unwrap();
    assert_eq!(series.len(), 4, "{body}");
    let one: Vec<_> = series.iter().filter(|s| s["value"][1] == "1").collect();
    assert_eq!(one.len(), 1, "{body}");
    assert_eq!(one[0]["metric"]["pool"], "default");
    assert_eq!(one[0]["metric"]["outcome"], "success");
}

#[tokio::test]
async fn chromium_renders_the_status_page() {
    let Some(chromium) = need("chromium", INSTALL) else {
        return;
    };
    let srv = start(None).await;
    let profile = tempfile::tempdir().unwrap();
    let url = format!("http://{}/", srv.addr);
    let out = tokio::process::Command::new(chromium)
        .args(common::tools::CHROMIUM_FLAGS)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(["--dump-dom", &url])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(90), out)
        .await
        .expect("chromium did not finish in 90 s")
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && dom.contains("</html>"),
        "chromium: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "Pool default",
        "Pool residential",
        "socks5h://user:***@alpha.example:1080",
        "socks5h://user:***@epsilon.example:1080",
        "proxy_handshake",
        "SOCKS reply 0x02",
        "42s",
        "100.0%",
        "81 ms",
        "7 transitions in the last hour",
    ] {
        assert!(dom.contains(want), "{want} missing from the DOM:\n{dom}");
    }
    // The label is a text node: serialized escaped, never a script element.
    assert!(
        dom.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{dom}"
    );
    assert!(!dom.contains(EVIL), "{dom}");
    assert!(!dom.contains("<script"), "{dom}");
    // The SVG bar and chart were parsed as SVG, one rect per non-empty state.
    assert_eq!(
        dom.matches("<title>available: 2</title>").count(),
        1,
        "{dom}"
    );
}
