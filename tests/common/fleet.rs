//! Daemons of one PostgreSQL database (docs/fleet.md), each with its lease socket, its
//! gateway and its HTTP listener on free ports of 127.0.0.1: `Member`. Requests go
//! through a gateway with `Member::get` (a session in the proxy username when asked).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use super::daemon::{http_get, Daemon, Home};
use super::fakes::{self, base64, DestCfg, Fake};
use super::tools::{free_port, ToolDaemon};
use super::upstreams::tinyproxy;

/// `n` tinyproxy upstreams (as endpoint URLs with the credentials they take) and a site
/// behind them (`http://127.0.0.1:PORT/page`), on `rt`; None when tinyproxy is missing
/// (outside CI). The upstreams and the site run while what is returned is held.
pub fn upstreams_and_site(
    rt: &tokio::runtime::Runtime,
    n: usize,
) -> Option<(Vec<ToolDaemon>, Vec<String>, Fake, String)> {
    let upstreams = (0..n)
        .map(|_| rt.block_on(tinyproxy(&[])))
        .collect::<Option<Vec<_>>>()?;
    let urls = upstreams
        .iter()
        .map(|t| format!("http://alice:s3cret@127.0.0.1:{}", t.port))
        .collect();
    let site = rt.block_on(fakes::dest(DestCfg::default()));
    let page = format!("http://127.0.0.1:{}/page", site.port());
    Some((upstreams, urls, site, page))
}

/// A cooldown of an hour: what cooled stays cooling for the whole test.
pub const LONG_COOLDOWN: &str = r#"
[[pool]]
name = "default"
mode = "static-no-ping"

[pool.cooldown]
base = "1h"
factor = 1.0
max = "1h"
jitter = 0.0
"#;

/// A home whose store is the database `url`, with `config`.
pub fn home(url: &str, config: &str) -> Home {
    let mut h = Home::new(Some(config));
    h.db = PathBuf::from(url);
    h
}

/// One daemon of the fleet with its gateway and HTTP listener.
pub struct Member {
    pub home: Home,
    pub daemon: Daemon,
    pub gateway: String,
    pub http: String,
}

impl Member {
    /// `serve` of `home` with a gateway and an HTTP listener.
    pub fn start(home: Home) -> Member {
        Member::start_with(home, &[])
    }

    /// [`Member::start`] with more `serve` arguments.
    pub fn start_with(home: Home, extra: &[&str]) -> Member {
        let gateway = format!("127.0.0.1:{}", free_port());
        let http = format!("127.0.0.1:{}", free_port());
        let mut args = vec!["--gateway", &gateway, "--http", &http];
        args.extend_from_slice(extra);
        let daemon = home.serve_with(&args, &[]);
        Member {
            home,
            daemon,
            gateway,
            http,
        }
    }

    /// GET `url` through the gateway, as `user` (a username with an empty password) when
    /// given: (status, the upstream endpoint's id from `X-Proxypool-Endpoint`).
    pub fn get(&self, url: &str, user: Option<&str>) -> (u16, Option<i64>) {
        let auth = user
            .map(|u| {
                let token = base64(format!("{u}:").as_bytes());
                format!("Proxy-Authorization: Basic {token}\r\n")
            })
            .unwrap_or_default();
        let (status, head, _) = http_get(&self.gateway, url, &auth);
        let endpoint = head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("x-proxypool-endpoint")
                .then(|| v.trim().parse().ok())?
        });
        (status, endpoint)
    }

    /// GET `path` from the HTTP listener: (status, body).
    pub fn page(&self, path: &str) -> (u16, String) {
        let (status, _, body) = http_get(&self.http, path, "");
        (status, body)
    }

    /// `/api/status` as JSON.
    pub fn api_status(&self) -> Value {
        let (status, body) = self.page("/api/status");
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
    }

    /// The socket's `status` of every pool.
    pub fn status(&self) -> Value {
        let r = self.daemon.req(json!({"op": "status"}));
        assert_eq!(r["ok"], json!(true), "status: {r}");
        r
    }

    /// Live leases of this daemon, all pools.
    pub fn leases(&self) -> u64 {
        self.status()["pools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["leases"].as_u64().unwrap())
            .sum()
    }

    /// Whether `/healthz` says the database is away.
    pub fn store_away(&self) -> bool {
        self.page("/healthz") == (503, "store_unavailable\n".to_string())
    }
}

/// How long a fleet's daemons may take to see what another wrote (docs/fleet.md,
/// "Propagation": 1 s, and room for a loaded test machine).
pub const PROPAGATION: Duration = Duration::from_secs(5);
