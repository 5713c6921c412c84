//! A daemon whose gateway intercepts HTTPS (docs/intercept.md): its own CA made by
//! `proxypool ca init`, origins verified against a harness origin's CA, upstreams given as
//! real proxies; a curl that trusts the daemon's CA and goes through the gateway.

use std::path::PathBuf;

use serde_json::Value;

use super::curl::Curl;
use super::daemon::{Daemon, Home};
use super::origin::NginxOrigin;
use super::tools::{free_port, ToolDaemon};

/// A daemon whose gateway intercepts `hosts` at the origin's HTTPS port, trusting the
/// harness CA for origins, with `upstreams` in its pool.
pub struct Setup {
    pub home: Home,
    pub daemon: Daemon,
    pub gateway: u16,
    /// The daemon's HTTP listener (`/metrics`, `/ca.pem`).
    pub http: u16,
    /// The daemon's own CA, which clients trust.
    pub ca: PathBuf,
}

pub fn setup(o: &NginxOrigin, upstreams: &[&ToolDaemon], extra: &str) -> Setup {
    setup_urls(o, &urls_of(upstreams), extra)
}

/// The upstreams' URLs, with the credentials every harness tinyproxy takes.
fn urls_of(upstreams: &[&ToolDaemon]) -> Vec<String> {
    upstreams
        .iter()
        .map(|u| format!("http://alice:s3cret@127.0.0.1:{}", u.port))
        .collect()
}

/// `setup` with the upstreams given by URL (endpoint ids follow their order from 1).
pub fn setup_urls(o: &NginxOrigin, urls: &[String], extra: &str) -> Setup {
    setup_intercepting(o, urls, r#"["origin.test", "shop.test"]"#, extra)
}

/// `setup` whose gateway intercepts every host (`intercept = ["*"]`), addresses too.
pub fn setup_everything(o: &NginxOrigin, upstreams: &[&ToolDaemon]) -> Setup {
    setup_intercepting(o, &urls_of(upstreams), r#"["*"]"#, "")
}

/// `setup_urls` with `intercept` as written (a TOML array).
fn setup_intercepting(o: &NginxOrigin, urls: &[String], intercept: &str, extra: &str) -> Setup {
    let gateway = free_port();
    let http = free_port();
    let config = format!(
        r#"[server]
http = "127.0.0.1:{http}"

[tls]
extra_roots = "{roots}"

[[gateway]]
listen = "127.0.0.1:{gateway}"
intercept = {intercept}
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
    home.add(&urls.iter().map(String::as_str).collect::<Vec<_>>());
    let daemon = home.serve();
    let ca = home.db.with_file_name("ca.pem");
    assert!(ca.exists(), "ca init wrote {}", ca.display());
    Setup {
        home,
        daemon,
        gateway,
        http,
        ca,
    }
}

impl Setup {
    pub fn curl(&self) -> Option<Curl> {
        Some(
            Curl::new()?
                .cacert(&self.ca)
                .proxy(&format!("http://127.0.0.1:{}", self.gateway)),
        )
    }

    /// `url` fetched `n` times by one curl process over one keep-alive connection through
    /// the gateway; the bodies, one after the other.
    pub async fn curl_many(&self, url: &str, n: usize) -> String {
        let Some(bin) = super::tools::need("curl", "apt-get install curl") else {
            return String::new();
        };
        let mut cmd = std::process::Command::new(bin);
        cmd.args(["-sS", "--http1.1", "--max-time", "20", "--cacert"])
            .arg(&self.ca)
            .args(["-x", &format!("http://127.0.0.1:{}", self.gateway)]);
        for _ in 0..n {
            cmd.arg(url);
        }
        let out = tokio::task::spawn_blocking(move || cmd.output())
            .await
            .unwrap()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A page of the daemon's HTTP listener.
    pub async fn page(&self, path: &str) -> String {
        let out = Curl::new()
            .unwrap()
            .get(&format!("http://127.0.0.1:{}{path}", self.http))
            .await;
        assert!(out.is(200), "{out}");
        out.text()
    }

    /// `list --destination HOST --json`, by endpoint id.
    pub fn states_for(&self, host: &str) -> Vec<(i64, String)> {
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
