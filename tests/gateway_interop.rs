//! The gateway with real software on both sides: curl, Python's urllib and headless
//! Chromium as clients; tinyproxy, microsocks and dante as upstreams. A missing program
//! skips its test locally (with a note) and fails it when `CI` is set.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::fakes::*;
use common::gateway::Gw;
use common::tools;
use common::upstreams::{dante, microsocks, tinyproxy};
use proxypool::health::State;
use tempfile::TempDir;

const PAGE: &str =
    "<html><head><title>gw</title></head><body><p id=\"x\">through the gateway</p></body></html>";

/// A plain and a TLS destination serving PAGE, and the CA file that trusts the latter.
struct Dests {
    http: Fake,
    https: Fake,
    ca_file: PathBuf,
    dir: TempDir,
}

impl Dests {
    async fn new() -> Dests {
        let dir = tempfile::tempdir().unwrap();
        let ca = TestCa::new("gateway interop ca");
        let cfg = DestCfg {
            body: PAGE.as_bytes().to_vec(),
            headers: vec![("Content-Type".into(), "text/html".into())],
            ..Default::default()
        };
        let http = dest(cfg.clone()).await;
        let https = dest(DestCfg {
            tls: Some(ca.server_config()),
            ..cfg
        })
        .await;
        Dests {
            ca_file: ca.write_pem(dir.path()),
            http,
            https,
            dir,
        }
    }

    fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}/page", self.http.port())
    }

    fn https_url(&self) -> String {
        format!("https://127.0.0.1:{}/page", self.https.port())
    }
}

/// Run a client program off the runtime's threads; its stdout, or a panic with stderr.
async fn run(bin: &Path, args: Vec<String>) -> String {
    let bin = bin.to_path_buf();
    let shown = args.clone();
    let out = tokio::task::spawn_blocking(move || Command::new(&bin).args(&args).output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "{:?} failed ({}):\n{}\n{}",
        shown,
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn curl_args(proxy: &[&str], ca: &Path, url: &str) -> Vec<String> {
    let mut a: Vec<String> = ["-sS", "--fail", "--max-time", "20", "--noproxy", ""]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.extend(proxy.iter().map(|s| s.to_string()));
    a.extend(["--cacert".into(), ca.display().to_string(), url.to_string()]);
    a
}

/// curl through the gateway on all four client paths. `host` names the destination for
/// socks5h (a name the upstream resolves; tinyproxy tries ::1 for `localhost` first).
async fn curl_all_fronts(gw: &Gw, d: &Dests, curl: &Path, host: &str) {
    let gw_http = format!("http://127.0.0.1:{}", gw.addr.port());
    let gw_socks = format!("127.0.0.1:{}", gw.addr.port());
    let named_http = d.http_url().replace("127.0.0.1", host);
    let cases: [(&[&str], String); 5] = [
        (&["-x", &gw_http], d.http_url()),
        (&["-x", &gw_http], d.https_url()),
        (&["--socks5", &gw_socks], d.http_url()),
        (&["--socks5", &gw_socks], d.https_url()),
        (&["--socks5-hostname", &gw_socks], named_http),
    ];
    for (proxy, url) in cases {
        eprintln!("curl {proxy:?} {url}");
        let body = run(curl, curl_args(proxy, &d.ca_file, &url)).await;
        assert!(
            body.contains("through the gateway"),
            "{proxy:?} {url}: {body}"
        );
    }
    gw.until_no_leases().await;
    assert!(gw.rows().iter().all(|r| r.state == State::Available));
}

#[tokio::test]
async fn curl_through_gateway_to_tinyproxy() {
    let Some(curl) = tools::need("curl", "apt-get install -y curl") else {
        return;
    };
    let d = Dests::new().await;
    let Some(tp) = tinyproxy(&[d.https.port(), d.http.port()]).await else {
        return;
    };
    let up = format!("http://alice:s3cret@127.0.0.1:{}", tp.port);
    let gw = Gw::start(&[up], |_| {}).await;
    curl_all_fronts(&gw, &d, &curl, "127.0.0.1").await;
    // Dial first: a tunnel tinyproxy refuses is the gateway's 502, with the reason.
    let closed = closed_port();
    let args: Vec<String> = [
        "-sS",
        "-o",
        "/dev/null",
        "-D",
        "-",
        "--max-time",
        "20",
        "--noproxy",
        "",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        "-x".to_string(),
        format!("http://127.0.0.1:{}", gw.addr.port()),
        format!("https://127.0.0.1:{closed}/"),
    ])
    .collect();
    // Off the test's single runtime thread: the gateway must keep running meanwhile.
    let out = tokio::task::spawn_blocking(move || Command::new(&curl).args(&args).output())
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase()
        + &String::from_utf8_lossy(&out.stderr).to_ascii_lowercase();
    // tinyproxy refuses CONNECT to a port not in ConnectPort (403): proxy_rejected.
    assert!(text.contains(" 502"), "{text}\n{}", tp.log_text());
    assert!(text.contains("x-proxypool-error: proxy_rejected"), "{text}");
}

#[tokio::test]
async fn curl_through_gateway_to_microsocks_and_dante() {
    let Some(curl) = tools::need("curl", "apt-get install -y curl") else {
        return;
    };
    let d = Dests::new().await;
    let Some(ms) = microsocks().await else { return };
    let gw = Gw::start(
        &[format!("socks5://alice:s3cret@127.0.0.1:{}", ms.port)],
        |_| {},
    )
    .await;
    // socks5 (client-side DNS) upstream: resolve localhost to IPv4 via the URL we pass.
    for (proxy, url) in [
        (
            vec![
                "-x".to_string(),
                format!("http://127.0.0.1:{}", gw.addr.port()),
            ],
            d.http_url(),
        ),
        (
            vec![
                "-x".to_string(),
                format!("http://127.0.0.1:{}", gw.addr.port()),
            ],
            d.https_url(),
        ),
        (
            vec![
                "--socks5".to_string(),
                format!("127.0.0.1:{}", gw.addr.port()),
            ],
            d.https_url(),
        ),
    ] {
        let p: Vec<&str> = proxy.iter().map(String::as_str).collect();
        let body = run(&curl, curl_args(&p, &d.ca_file, &url)).await;
        assert!(body.contains("through the gateway"), "{}", ms.log_text());
    }
    let Some(dt) = dante().await else { return };
    let gw = Gw::start(&[format!("socks5://127.0.0.1:{}", dt.port)], |_| {}).await;
    for url in [d.http_url(), d.https_url()] {
        let proxy = format!("http://127.0.0.1:{}", gw.addr.port());
        let body = run(&curl, curl_args(&["-x", &proxy], &d.ca_file, &url)).await;
        assert!(body.contains("through the gateway"), "{}", dt.log_text());
    }
    gw.until_no_leases().await;
}

#[tokio::test]
async fn curl_with_fake_upstreams_on_every_front() {
    let Some(curl) = tools::need("curl", "apt-get install -y curl") else {
        return;
    };
    let d = Dests::new().await;
    let up = http_proxy(HttpProxyCfg::default()).await;
    let gw = Gw::start(&[format!("http://127.0.0.1:{}", up.port())], |_| {}).await;
    curl_all_fronts(&gw, &d, &curl, "localhost").await;
}

/// The endpoint curl's request went through, from the response headers.
async fn curl_endpoint(curl: &Path, proxy: &str, url: &str) -> String {
    let args: Vec<String> = [
        "-sS",
        "--fail",
        "-o",
        "/dev/null",
        "-D",
        "-",
        "--noproxy",
        "",
        "-x",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([proxy.to_string(), url.to_string()])
    .collect();
    let head = run(curl, args).await.to_ascii_lowercase();
    head.lines()
        .find_map(|l| l.strip_prefix("x-proxypool-endpoint: "))
        .unwrap_or_else(|| panic!("no endpoint header: {head}"))
        .trim()
        .to_string()
}

#[tokio::test]
async fn curl_rotates_without_session_and_sticks_with_one() {
    let Some(curl) = tools::need("curl", "apt-get install -y curl") else {
        return;
    };
    let d = Dests::new().await;
    let ups = [
        http_proxy(HttpProxyCfg::default()).await,
        http_proxy(HttpProxyCfg::default()).await,
        http_proxy(HttpProxyCfg::default()).await,
    ];
    let urls: Vec<String> = ups
        .iter()
        .map(|u| format!("http://127.0.0.1:{}", u.port()))
        .collect();
    let gw = Gw::start(&urls, |_| {}).await;
    let plain = format!("http://127.0.0.1:{}", gw.addr.port());
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..3 {
        seen.insert(curl_endpoint(&curl, &plain, &d.http_url()).await);
        gw.until_no_leases().await;
    }
    assert_eq!(seen.len(), 3, "{seen:?}");
    // A user name without a password: curl sends it, the gateway routes by it.
    let sticky = format!("http://session-s1@127.0.0.1:{}", gw.addr.port());
    let first = curl_endpoint(&curl, &sticky, &d.http_url()).await;
    for _ in 0..3 {
        assert_eq!(curl_endpoint(&curl, &sticky, &d.http_url()).await, first);
    }
}

#[tokio::test]
async fn python_urllib_through_gateway() {
    let Some(py) = tools::need("python3", "apt-get install -y python3") else {
        return;
    };
    let d = Dests::new().await;
    let up = socks5(Socks5Cfg::default()).await;
    let gw = Gw::start(&[format!("socks5h://127.0.0.1:{}", up.port())], |g| {
        g.token = Some("tok3n".into())
    })
    .await;
    let script = r#"
import ssl, sys, urllib.request
proxy, ca, *urls = sys.argv[1:]
ctx = ssl.create_default_context(cafile=ca)
opener = urllib.request.build_opener(
    urllib.request.ProxyHandler({"http": proxy, "https": proxy}),
    urllib.request.HTTPSHandler(context=ctx))
for u in urls:
    with opener.open(u, timeout=20) as r:
        body = r.read().decode()
        assert "through the gateway" in body, body
        print(r.status, r.headers.get("X-Proxypool-Endpoint"))
"#;
    let proxy = format!("http://session-py:tok3n@127.0.0.1:{}", gw.addr.port());
    let args = vec![
        "-c".to_string(),
        script.to_string(),
        proxy,
        d.ca_file.display().to_string(),
        d.http_url(),
        d.https_url(),
    ];
    let out = run(&py, args).await;
    // The absolute-form answer carries the endpoint header (urllib sees no header of
    // the CONNECT answer, only the tunnelled page's).
    assert!(out.lines().next().unwrap().starts_with("200 1"), "{out}");
    gw.until_no_leases().await;
}

#[tokio::test]
async fn headless_chromium_loads_pages_through_gateway() {
    let Some(chromium) = tools::need("chromium", "apt-get install -y chromium") else {
        return;
    };
    let d = Dests::new().await;
    let up = http_proxy(HttpProxyCfg::default()).await;
    let gw = Gw::start(&[format!("http://127.0.0.1:{}", up.port())], |_| {}).await;
    for url in [d.http_url(), d.https_url()] {
        let profile = tempfile::tempdir_in(d.dir.path()).unwrap();
        // Through a proxy under test, also none of the calls a browser makes by itself.
        let args: Vec<String> = tools::CHROMIUM_FLAGS
            .iter()
            .chain(&[
            "--disable-extensions",
            "--disable-default-apps",
            "--disable-domain-reliability",
            "--disable-client-side-phishing-detection",
            "--no-default-browser-check",
            "--no-pings",
            "--metrics-recording-only",
            "--safebrowsing-disable-auto-update",
            "--disable-features=OptimizationHints,MediaRouter,Translate,AutofillServerCommunication,CertificateTransparencyComponentUpdater,InterestFeedContentSuggestions,DialMediaRouteProvider",
            // The test CA is not in Chromium's store; the page text proves the tunnel.
            "--ignore-certificate-errors",
        ])
        .map(|s| s.to_string())
        .chain([
            format!("--user-data-dir={}", profile.path().display()),
            format!("--proxy-server=http://127.0.0.1:{}", gw.addr.port()),
            // Chromium bypasses proxies for loopback unless told not to. Its calls home
            // go direct (and fail offline) instead of through the pool, where each failed
            // tunnel to them would be reported against the test's only upstream.
            "--proxy-bypass-list=<-loopback>;*.googleapis.com;*.google.com;*.gstatic.com;*.gvt1.com".to_string(),
            "--dump-dom".to_string(),
            url.clone(),
        ])
        .collect();
        let dom = tokio::time::timeout(Duration::from_secs(90), run(&chromium, args))
            .await
            .expect("chromium hung");
        assert!(
            dom.contains("through the gateway"),
            "{url}: {dom}\nevents: {:?}",
            gw.events()
        );
    }
    assert!(
        up.seen().iter().any(|h| h.starts_with("CONNECT ")),
        "https went through a CONNECT upstream: {:?}",
        up.seen()
    );
    gw.until_no_leases().await;
}

/// `plain_http = "tunnel"` with real tinyproxy: where tinyproxy tunnels to the
/// destination's port, one tunnel carries every request; where its `ConnectPort` list
/// refuses that port, requests are forwarded instead, and the upstream stays healthy.
#[tokio::test]
async fn plain_http_tunnel_mode_through_tinyproxy_reuses_a_tunnel_or_falls_back() {
    let d = dest(DestCfg {
        body: PAGE.as_bytes().to_vec(),
        keep_alive: Some(100),
        ..Default::default()
    })
    .await;
    let Some(open) = tinyproxy(&[d.port()]).await else {
        return;
    };
    let Some(only_443) = tinyproxy(&[443]).await else {
        return;
    };
    for (tp, tunnels) in [(&open, true), (&only_443, false)] {
        let up = format!("http://alice:s3cret@127.0.0.1:{}", tp.port);
        let gw = Gw::start(&[up], |g| {
            g.plain_http = proxypool::config::PlainHttp::Tunnel
        })
        .await;
        for i in 0..3 {
            let r = common::gateway::roundtrip(
                gw.addr,
                &common::gateway::get(d.port(), &format!("/{i}"), ""),
            )
            .await;
            assert_eq!(r.status(), 200, "{}\n{}", r.head, tp.log_text());
            assert_eq!(r.text(), PAGE);
            gw.until_no_leases().await;
            // A kept tunnel is parked a moment after its response ends.
            if tunnels {
                common::eventually_async(Duration::from_secs(5), "the tunnel is parked", || {
                    let text = gw.engine.metrics().encode();
                    let parked = text.contains("proxypool_gateway_idle_upstream_connections 1");
                    async move {
                        if parked {
                            Ok(())
                        } else {
                            Err(text)
                        }
                    }
                })
                .await;
            }
        }
        let text = gw.engine.metrics().encode();
        // tinyproxy closes every forwarded connection right after its response without
        // saying so: one kept before its close is seen goes out again on a new one, so
        // each forwarded request still takes a connection of its own.
        let want: &[&str] = if tunnels {
            &["connection=\"new\"} 1", "connection=\"reused\"} 2"]
        } else {
            &["connection=\"new\"} 3"]
        };
        for w in want {
            assert!(text.contains(w), "{w} (tunnels {tunnels}):\n{text}");
        }
        if !tunnels {
            let log = tp.log_text();
            let asked = |line: &str| log.matches(line).count();
            // One CONNECT refused, then every request forwarded in absolute form.
            assert_eq!(
                (
                    asked("): CONNECT "),
                    asked("Refused CONNECT"),
                    asked("): GET http://")
                ),
                (1, 1, 3),
                "{log}"
            );
        }
        let row = gw.row(gw.ids[0]);
        assert_eq!((row.state, row.streak), (State::Available, 0));
    }
}
