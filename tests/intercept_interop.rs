//! Interception with the clients scrapers use, none of which has code of its own for the
//! pool: Python `requests` trusting the daemon's CA (`verify=`), a Scrapy crawl, headless
//! Chromium pinning the CA's key. A site answers 403 to one of two upstreams (real tinyproxy
//! instances leaving from their own addresses); every client gets 200 through the gateway,
//! and the banned pair is kept.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::time::Duration;

use common::intercepting::{setup, Setup};
use common::mitm::python_with;
use common::origin::{self, NginxOrigin, ALLOWED_BODY};
use common::tools;
use common::upstreams::tinyproxy_bound;

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

/// A banning origin, its two upstreams (the first banned) and the intercepting daemon.
async fn banned_site() -> Option<(NginxOrigin, Vec<tools::ToolDaemon>, Setup)> {
    origin::need_hosts()?;
    let banned = ip("127.0.2.2");
    let o = NginxOrigin::banning(&[IpAddr::V4(banned)]).await?;
    let bad = tinyproxy_bound(banned, &[o.https_port]).await?;
    let good = tinyproxy_bound(ip("127.0.2.3"), &[o.https_port]).await?;
    let s = setup(&o, &[&bad, &good], "");
    Some((o, vec![bad, good], s))
}

/// The banned upstream's pair for the site is cooling and the other's is not.
fn banned_pair_kept(s: &Setup) {
    assert_eq!(
        s.states_for("origin.test"),
        vec![(1, "cooling".to_string()), (2, "available".to_string())],
        "{}",
        s.daemon.log_tail(20)
    );
}

async fn run(mut cmd: Command) -> std::process::Output {
    tokio::time::timeout(
        Duration::from_secs(120),
        tokio::task::spawn_blocking(move || cmd.output().unwrap()),
    )
    .await
    .expect("the client hung")
    .unwrap()
}

#[tokio::test]
async fn python_requests_trusting_the_ca_gets_every_page() {
    let Some(py) = python_with("requests") else {
        return;
    };
    let Some((o, _ups, s)) = banned_site().await else {
        return;
    };
    let script = r#"
import sys, requests
gw, ca, url = sys.argv[1], sys.argv[2], sys.argv[3]
s = requests.Session()
s.proxies = {"https": gw}
for i in range(10):
    r = s.get(url, verify=ca, timeout=20)
    print(r.status_code, r.headers.get("X-Proxypool-Endpoint"), r.text.strip())
"#;
    let mut cmd = Command::new(py);
    cmd.args(["-c", script])
        .arg(format!("http://127.0.0.1:{}", s.gateway))
        .arg(&s.ca)
        .arg(o.https_url("origin.test", "/guarded"));
    let out = run(cmd).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want = format!("200 2 {}", ALLOWED_BODY.trim());
    assert_eq!(text.lines().filter(|l| *l == want).count(), 10, "{text}");
    banned_pair_kept(&s);
}

#[tokio::test]
async fn a_scrapy_crawl_through_the_gateway_fetches_every_page() {
    let Some(py) = python_with("scrapy") else {
        return;
    };
    let Some((o, _ups, s)) = banned_site().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let spider = dir.path().join("spider.py");
    std::fs::write(
        &spider,
        r#"
import scrapy

class Guarded(scrapy.Spider):
    name = "guarded"
    custom_settings = {"RETRY_ENABLED": False, "LOG_LEVEL": "WARNING", "CONCURRENT_REQUESTS": 4}

    async def start(self):
        for i in range(20):
            yield scrapy.Request(f"{self.url}?page={i}", meta={"proxy": self.gw}, dont_filter=True)

    def parse(self, response):
        yield {"status": response.status, "body": response.text.strip(),
               "endpoint": response.headers.get("X-Proxypool-Endpoint", b"").decode()}
"#,
    )
    .unwrap();
    let items = dir.path().join("items.jsonl");
    let mut cmd = Command::new(py);
    cmd.args(["-m", "scrapy", "runspider"])
        .arg(&spider)
        .arg("-a")
        .arg(format!("url={}", o.https_url("origin.test", "/guarded")))
        .arg("-a")
        .arg(format!("gw=http://127.0.0.1:{}", s.gateway))
        .arg("-o")
        .arg(&items)
        .current_dir(dir.path());
    let out = run(cmd).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = std::fs::read_to_string(&items).unwrap();
    let rows: Vec<serde_json::Value> = got
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        rows.len(),
        20,
        "{got}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for r in &rows {
        assert_eq!(
            (r["status"].as_u64(), r["body"].as_str()),
            (Some(200), Some(ALLOWED_BODY.trim())),
            "{r}"
        );
        assert_eq!(r["endpoint"], "2", "{r}");
    }
    banned_pair_kept(&s);
}

#[tokio::test]
async fn chromium_pinning_the_cas_key_loads_the_page() {
    let Some(chromium) = tools::need("chromium", "apt-get install -y chromium") else {
        return;
    };
    let Some((o, _ups, s)) = banned_site().await else {
        return;
    };
    let shown = s.home.ok(&["ca", "show"]);
    let spki = shown
        .lines()
        .find_map(|l| l.strip_prefix("SPKI SHA-256 (base64): "))
        .unwrap_or_else(|| panic!("no SPKI line in `ca show`: {shown}"))
        .trim()
        .to_string();
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(chromium);
    cmd.args(tools::CHROMIUM_FLAGS)
        .args([
            "--disable-extensions",
            "--disable-default-apps",
            "--no-default-browser-check",
            "--disable-features=OptimizationHints,MediaRouter,Translate,CertificateTransparencyComponentUpdater",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--proxy-server=http://127.0.0.1:{}", s.gateway))
        .arg("--proxy-bypass-list=<-loopback>;*.googleapis.com;*.google.com;*.gstatic.com;*.gvt1.com")
        .arg(format!("--ignore-certificate-errors-spki-list={spki}"))
        .args(["--dump-dom", &o.https_url("origin.test", "/guarded")]);
    let out = run(cmd).await;
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        dom.contains(ALLOWED_BODY.trim()),
        "{dom}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
