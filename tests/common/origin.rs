//! `NginxOrigin`: a real nginx as the site behind the proxies, speaking HTTPS (HTTP/2 and
//! HTTP/1.1 by ALPN) with a leaf the harness CA signed, and plain HTTP on a second port.
//! Clients trust `ca_pem` (curl `--cacert`, Python `verify=`, the gateway's `extra_roots`).
//! `NginxOrigin::bad()` presents a self-signed certificate for the same names instead: the
//! site whose own certificate is wrong.
//!
//! Every origin answers, on both ports and for every name:
//!
//! | path | answer |
//! |---|---|
//! | `/ok` | 200 `OK_BODY` |
//! | `/trailers` | 200 `OK_BODY`, the request's `TE` as `X-Te`, the trailer `X-Check: done` (HTTP/2, or chunked) |
//! | `/ip` | 200, the caller's address and `\n` (text) |
//! | `/ip.json` | 200 `{"ip":"…"}` |
//! | `/whoami` | 200 JSON: `ip`, `host`, `sni`, `alpn`, `protocol`, `scheme` |
//! | `/guarded` | `ban_status` + `DENIED_BODY` to the `banned` addresses, 200 `ALLOWED_BODY` to others |
//! | `/status/N` | status N, body `status N\n`, for N in `STATUSES` |
//! | `/challenge` | 403, `cf-mitigated: challenge`, the challenge page |
//! | `/challenge-200` | 200, `cf-mitigated: challenge`, the challenge page |
//! | `/challenge-page` | 200, the challenge page and no telling header (a body rule's case) |
//! | `/big` | 200, `big_bytes` bytes of `big_body()` |
//! | `/ws` | a WebSocket echo (HTTP/1.1 only: nginx has no WebSocket over HTTP/2) |
//!
//! Text, HTML and JSON answers are gzip'd for a client that asks (`Accept-Encoding: gzip`),
//! as sites do. Each request lands in `requests()` (nginx's access log as JSON).

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::fakes::TestCa;
use super::tools::{free_port, is_root, need, skip_unless_ci, ToolDaemon};
use super::websocket::EchoServer;

pub const INSTALL: &str = "apt-get install -y nginx-light";
/// The names of every origin's certificate (`127.0.0.1` as an IP SAN).
pub const NAMES: &[&str] = &[
    "origin.test",
    "shop.test",
    "*.example.test",
    "localhost",
    "127.0.0.1",
];
pub const OK_BODY: &str = "origin ok\n";
pub const ALLOWED_BODY: &str = "allowed\n";
pub const DENIED_BODY: &str = "denied\n";
/// In the title of the challenge page.
pub const CHALLENGE_MARKER: &str = "Just a moment...";
/// The statuses `/status/N` answers.
pub const STATUSES: &[u16] = &[200, 204, 400, 403, 404, 407, 429, 500, 502, 503];

/// Names of the certificate a proxy must resolve to 127.0.0.1 for a client to ask it
/// for them by name (`need_hosts`).
pub const HOSTS: &[&str] = &[
    "origin.test",
    "shop.test",
    "www.example.test",
    "api.example.test",
];

/// `Some(())` when every name of `HOSTS` resolves to 127.0.0.1 here (so proxies and
/// clients reach the origin by name: `https://origin.test:PORT/` through tinyproxy,
/// Chromium, requests...); otherwise a skip with a note (a failure under `CI`).
pub fn need_hosts() -> Option<()> {
    use std::net::ToSocketAddrs;
    let local = |h: &&str| {
        (*h, 80)
            .to_socket_addrs()
            .is_ok_and(|mut a| a.any(|a| a.ip() == IpAddr::from([127, 0, 0, 1])))
    };
    match HOSTS.iter().find(|h| !local(h)) {
        None => Some(()),
        Some(h) => skip_unless_ci(
            &format!("{h} does not resolve to 127.0.0.1"),
            &format!(
                "add `127.0.0.1 {}` to /etc/hosts, as .ci/run does",
                HOSTS.join(" ")
            ),
        ),
    }
}

/// The CA every origin's leaf comes from, one per test binary.
pub fn harness_ca() -> &'static TestCa {
    static CA: OnceLock<TestCa> = OnceLock::new();
    CA.get_or_init(|| TestCa::new("proxypool harness CA"))
}

/// The `/big` body of `len` bytes: a pattern (not zeros), so a shifted or corrupted copy
/// shows.
pub fn big_body(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// Who signed the certificate an origin presents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Issuer {
    /// `harness_ca()`.
    Harness,
    /// The certificate itself: no client that trusts only the harness CA accepts it.
    SelfSigned,
}

#[derive(Clone, Debug)]
pub struct OriginCfg {
    /// The certificate's names (DNS names, `*.` wildcards, IP literals).
    pub names: Vec<String>,
    pub issuer: Issuer,
    /// The client addresses `/guarded` refuses.
    pub banned: Vec<IpAddr>,
    /// What `/guarded` answers them (403 unless set).
    pub ban_status: u16,
    /// The size of `/big`.
    pub big_bytes: usize,
    /// Requests per connection; nginx ends an HTTP/2 connection past it with `GOAWAY`.
    pub keepalive_requests: u32,
}

impl Default for OriginCfg {
    fn default() -> OriginCfg {
        OriginCfg {
            names: NAMES.iter().map(|n| n.to_string()).collect(),
            issuer: Issuer::Harness,
            banned: Vec::new(),
            ban_status: 403,
            big_bytes: 4 << 20,
            keepalive_requests: 100_000,
        }
    }
}

/// A running nginx; killed (with its worker) on drop.
pub struct NginxOrigin {
    pub https_port: u16,
    pub http_port: u16,
    /// The harness CA (PEM): what a client trusts to reach a `Harness` origin.
    pub ca_pem: PathBuf,
    /// The leaf this origin presents (PEM); for a `SelfSigned` one, trusting it verifies.
    pub cert_pem: PathBuf,
    pub cfg: OriginCfg,
    dir: PathBuf,
    generation: u32,
    daemon: ToolDaemon,
    _ws: EchoServer,
}

impl NginxOrigin {
    /// An origin with the defaults: every name of `NAMES`, nobody banned.
    pub async fn start() -> Option<NginxOrigin> {
        NginxOrigin::with(OriginCfg::default()).await
    }

    /// An origin whose `/guarded` refuses `banned` with a 403.
    pub async fn banning(banned: &[IpAddr]) -> Option<NginxOrigin> {
        let cfg = OriginCfg {
            banned: banned.to_vec(),
            ..OriginCfg::default()
        };
        NginxOrigin::with(cfg).await
    }

    /// The bad origin: a self-signed certificate for `NAMES`.
    pub async fn bad() -> Option<NginxOrigin> {
        let cfg = OriginCfg {
            issuer: Issuer::SelfSigned,
            ..OriginCfg::default()
        };
        NginxOrigin::with(cfg).await
    }

    pub async fn with(cfg: OriginCfg) -> Option<NginxOrigin> {
        let bin = need("nginx", INSTALL)?;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let (ca_pem, cert_pem) = write_files(&dir, &cfg);
        let ws = EchoServer::start().await;
        let (https_port, http_port) = (free_port(), free_port());
        let conf = Conf {
            dir: &dir,
            cfg: &cfg,
            https_port,
            http_port,
            ws_port: ws.addr.port(),
            generation: 0,
        };
        std::fs::write(dir.join("nginx.conf"), conf.render()).unwrap();
        let (prefix, file) = (path_arg(&dir), path_arg(&dir.join("nginx.conf")));
        let args = ["-e", "stderr", "-p", &prefix, "-c", &file];
        let daemon = ToolDaemon::start("nginx", &bin, &args, tmp, https_port).await;
        let origin = NginxOrigin {
            https_port,
            http_port,
            ca_pem,
            cert_pem,
            cfg,
            dir,
            generation: 0,
            daemon,
            _ws: ws,
        };
        origin.wait_generation(0).await;
        Some(origin)
    }

    /// `https://HOST:PORT/PATH` (`path` starts with `/`); `host` is any of the names, the
    /// client resolving it to 127.0.0.1 (curl `--resolve`).
    pub fn https_url(&self, host: &str, path: &str) -> String {
        format!("https://{host}:{}{path}", self.https_port)
    }

    pub fn http_url(&self, host: &str, path: &str) -> String {
        format!("http://{host}:{}{path}", self.http_port)
    }

    /// What nginx said (startup, errors).
    pub fn log_text(&self) -> String {
        self.daemon.log_text()
    }

    /// Each request served so far, oldest first, as JSON: `ip`, `port`, `host`, `sni`,
    /// `alpn`, `protocol`, `method`, `uri`, `status`, `bytes`, `ua`, `accept_encoding`.
    pub fn requests(&self) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    /// Refuse `banned` at `/guarded` from now on (nginx reloads its configuration; new
    /// connections get the new answer, and this returns once they do).
    pub async fn set_banned(&mut self, banned: &[IpAddr]) {
        self.cfg.banned = banned.to_vec();
        self.generation += 1;
        let conf = Conf {
            dir: &self.dir,
            cfg: &self.cfg,
            https_port: self.https_port,
            http_port: self.http_port,
            ws_port: self._ws.addr.port(),
            generation: self.generation,
        };
        std::fs::write(self.dir.join("nginx.conf"), conf.render()).unwrap();
        let master = self.daemon.child.id();
        let old = children(master);
        assert!(!old.is_empty(), "no worker under nginx's master {master}");
        // SAFETY: a signal to our own child, which is still running (not yet reaped).
        assert_eq!(
            unsafe { libc::kill(master as libc::pid_t, libc::SIGHUP) },
            0
        );
        self.wait_generation(self.generation).await;
        // Until the old worker is gone it may still accept a connection, with the old
        // configuration.
        super::eventually(Duration::from_secs(10), "the old nginx worker gone", || {
            let left: Vec<u32> = children(master)
                .into_iter()
                .filter(|p| old.contains(p))
                .collect();
            left.is_empty().then_some(()).ok_or(format!("{left:?}"))
        });
    }

    /// Until `/generation` answers `g` on a new connection: the configuration is loaded.
    async fn wait_generation(&self, g: u32) {
        let what = format!("nginx serving configuration {g}");
        let port = self.http_port;
        super::eventually_async(Duration::from_secs(10), &what, || async move {
            let got = plain_get(port, "/generation").await;
            if got.ends_with(&format!("\r\n\r\n{g}")) {
                Ok(())
            } else {
                Err(format!("{got}\n{}", self.log_text()))
            }
        })
        .await;
    }
}

/// The processes whose parent is `pid` (nginx's workers).
fn children(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let child: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).ok()?;
        // `pid (comm) state ppid ...`; comm may hold spaces, never after its `)`.
        let ppid: u32 = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        (ppid == pid).then_some(child)
    })
    .collect()
}

/// A `GET path` over a new connection to 127.0.0.1:`port`: the whole answer, or the error.
async fn plain_get(port: u16, path: &str) -> String {
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return "connection refused".into();
    };
    let req = format!("GET {path} HTTP/1.1\r\nHost: origin.test\r\nConnection: close\r\n\r\n");
    let mut out = Vec::new();
    let r = async {
        s.write_all(req.as_bytes()).await?;
        s.read_to_end(&mut out).await
    };
    match r.await {
        Ok(_) => String::from_utf8_lossy(&out).into_owned(),
        Err(e) => e.to_string(),
    }
}

fn path_arg(p: &std::path::Path) -> String {
    p.to_str().expect("temp paths are UTF-8").to_string()
}

/// The certificate, key, CA and site files in `dir`; returns the CA's and the leaf's PEM
/// paths.
fn write_files(dir: &std::path::Path, cfg: &OriginCfg) -> (PathBuf, PathBuf) {
    let names: Vec<&str> = cfg.names.iter().map(String::as_str).collect();
    let (cert, key) = match cfg.issuer {
        Issuer::Harness => harness_ca().leaf_pem(&names),
        Issuer::SelfSigned => {
            let cn = names.first().copied().unwrap_or_default();
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            let mut params = rcgen::CertificateParams::new(names).unwrap();
            params.distinguished_name = rcgen::DistinguishedName::new();
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, cn);
            let key = rcgen::KeyPair::generate().unwrap();
            let cert = params.self_signed(&key).unwrap();
            (cert.pem(), key.serialize_pem())
        }
    };
    let ca_pem = harness_ca().write_pem(dir);
    let cert_pem = dir.join("leaf.pem");
    std::fs::write(&cert_pem, cert).unwrap();
    std::fs::write(dir.join("leaf.key"), key).unwrap();
    let www = dir.join("www");
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("challenge.html"), challenge_page()).unwrap();
    std::fs::write(www.join("big"), big_body(cfg.big_bytes)).unwrap();
    // Started as root, nginx's worker runs as nobody and must reach the site files.
    use std::os::unix::fs::PermissionsExt;
    for (p, mode) in [
        (dir.to_path_buf(), 0o755),
        (www.clone(), 0o755),
        (www.join("challenge.html"), 0o644),
        (www.join("big"), 0o644),
    ] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    (ca_pem, cert_pem)
}

/// An interstitial like the ones bot walls send: a few KiB of HTML (so gzip matters) with
/// the marker in its title.
fn challenge_page() -> String {
    let mut page = format!(
        "<!DOCTYPE html>\n<html lang=\"en-US\"><head><title>{CHALLENGE_MARKER}</title>\n\
         <meta http-equiv=\"refresh\" content=\"390\"></head>\n<body>\n\
         <div id=\"challenge-running\">Checking if the site connection is secure</div>\n"
    );
    for i in 0..64 {
        page.push_str(&format!(
            "<p class=\"ray\">Verifying you are human. This may take a few seconds. ({i})</p>\n"
        ));
    }
    page.push_str("</body></html>\n");
    page
}

/// nginx's configuration for one origin.
struct Conf<'a> {
    dir: &'a std::path::Path,
    cfg: &'a OriginCfg,
    https_port: u16,
    http_port: u16,
    ws_port: u16,
    generation: u32,
}

impl Conf<'_> {
    fn render(&self) -> String {
        let d = self.dir.display();
        // nginx refuses to run its worker as root and defaults to a group Debian lacks.
        let user = if is_root() {
            "user nobody nogroup;"
        } else {
            ""
        };
        let temp: String = ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"]
            .iter()
            .map(|t| format!("    {t}_temp_path {d}/tmp/{t};\n"))
            .collect();
        let banned: String = self
            .cfg
            .banned
            .iter()
            .map(|ip| format!("        {ip} 1;\n"))
            .collect();
        format!(
            "{user}\nworker_processes 1;\ndaemon off;\npid {d}/nginx.pid;\n\
             error_log stderr notice;\nevents {{ worker_connections 1024; }}\n\
             http {{\n{log}{temp}\
             \x20   default_type text/plain;\n\
             \x20   keepalive_requests {keepalive};\n\
             \x20   gzip on;\n    gzip_min_length 1;\n    gzip_proxied any;\n    gzip_vary on;\n\
             \x20   gzip_types text/plain application/json;\n\
             \x20   geo $harness_banned {{\n        default 0;\n{banned}    }}\n\
             \x20   map $http_upgrade $harness_connection {{ default upgrade; '' close; }}\n\
             \x20   server {{\n\
             \x20       listen 127.0.0.1:{https} ssl http2 default_server;\n\
             \x20       listen 127.0.0.1:{http} default_server;\n\
             \x20       ssl_certificate {d}/leaf.pem;\n        ssl_certificate_key {d}/leaf.key;\n\
             \x20       ssl_protocols TLSv1.2 TLSv1.3;\n\
             {locations}\
             \x20   }}\n}}\n",
            log = LOG_FORMAT.replace("{d}", &d.to_string()),
            https = self.https_port,
            http = self.http_port,
            locations = self.locations(),
            keepalive = self.cfg.keepalive_requests,
        )
    }

    fn locations(&self) -> String {
        let www = self.dir.join("www");
        let www = www.display();
        let statuses: String = STATUSES
            .iter()
            .map(|s| {
                format!("        location = /status/{s} {{ return {s} \"status {s}\\n\"; }}\n")
            })
            .collect();
        format!(
            "        location = /generation {{ access_log off; return 200 \"{generation}\"; }}\n\
             \x20       location = /ok {{ return 200 \"{ok}\"; }}\n\
             \x20       location = /trailers {{ add_header X-Te \"$http_te\" always; \
             add_trailer X-Check done; return 200 \"{ok}\"; }}\n\
             \x20       location = /ip {{ return 200 \"$remote_addr\\n\"; }}\n\
             \x20       location = /ip.json {{ default_type application/json; \
             return 200 '{{\"ip\":\"$remote_addr\"}}'; }}\n\
             \x20       location = /whoami {{ default_type application/json; return 200 \
             '{{\"ip\":\"$remote_addr\",\"host\":\"$host\",\"sni\":\"$ssl_server_name\",\
             \"alpn\":\"$ssl_alpn_protocol\",\"protocol\":\"$server_protocol\",\
             \"scheme\":\"$scheme\"}}'; }}\n\
             \x20       location = /guarded {{\n\
             \x20           if ($harness_banned) {{ return {ban} \"{denied}\"; }}\n\
             \x20           return 200 \"{allowed}\";\n        }}\n\
             {statuses}\
             \x20       location = /challenge {{ error_page 403 /_challenge; return 403; }}\n\
             \x20       location = /_challenge {{\n            internal;\n\
             \x20           default_type text/html;\n            alias {www}/challenge.html;\n\
             \x20           add_header cf-mitigated challenge always;\n        }}\n\
             \x20       location = /challenge-200 {{\n            default_type text/html;\n\
             \x20           alias {www}/challenge.html;\n\
             \x20           add_header cf-mitigated challenge always;\n        }}\n\
             \x20       location = /challenge-page {{\n            default_type text/html;\n\
             \x20           alias {www}/challenge.html;\n        }}\n\
             \x20       location = /big {{\n            default_type application/octet-stream;\n\
             \x20           alias {www}/big;\n        }}\n\
             \x20       location = /ws {{\n            proxy_pass http://127.0.0.1:{ws};\n\
             \x20           proxy_http_version 1.1;\n\
             \x20           proxy_set_header Upgrade $http_upgrade;\n\
             \x20           proxy_set_header Connection $harness_connection;\n\
             \x20           proxy_read_timeout 300s;\n        }}\n\
             \x20       location / {{ return 404 \"not here\\n\"; }}\n",
            generation = self.generation,
            ok = OK_BODY.replace('\n', "\\n"),
            ban = self.cfg.ban_status,
            denied = DENIED_BODY.replace('\n', "\\n"),
            allowed = ALLOWED_BODY.replace('\n', "\\n"),
            ws = self.ws_port,
        )
    }
}

/// Each request as a JSON line; written by the master's descriptor, so a worker running
/// as nobody needs no access to the folder.
const LOG_FORMAT: &str = "    log_format harness escape=json '{\"ip\":\"$remote_addr\",\
\"port\":\"$server_port\",\"host\":\"$host\",\"sni\":\"$ssl_server_name\",\
\"alpn\":\"$ssl_alpn_protocol\",\"protocol\":\"$server_protocol\",\
\"method\":\"$request_method\",\"uri\":\"$request_uri\",\"status\":\"$status\",\
\"bytes\":\"$body_bytes_sent\",\"ua\":\"$http_user_agent\",\
\"accept_encoding\":\"$http_accept_encoding\",\"connection\":\"$connection\"}';\n    access_log {d}/access.log harness;\n";
