//! Probes through real proxy daemons from Debian: tinyproxy, microsocks and dante.
//!
//! Each test starts its own daemon in the foreground on a free 127.0.0.1 port with a config
//! in a temp dir. A missing binary skips the test locally but fails it when `CI` is set,
//! so CI cannot go green without having exercised the real proxies.

mod support;

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use proxypool::config::ProbeConfig;
use proxypool::endpoint::ProxyUrl;
use proxypool::health::{Phase, Reason};
use proxypool::probe::{ProbeResult, Prober};
use support::*;
use tempfile::TempDir;

const INSTALL: &str = "apt-get install -y tinyproxy microsocks dante-server";

/// The binary's path, or None (test skipped) when it is missing outside CI.
fn need(bin: &str) -> Option<PathBuf> {
    let dirs = std::env::var("PATH").unwrap_or_default();
    let found = dirs
        .split(':')
        .chain([
            "/usr/sbin",
            "/usr/bin",
            "/sbin",
            "/usr/local/sbin",
            "/usr/local/bin",
        ])
        .map(|d| Path::new(d).join(bin))
        .find(|p| p.is_file());
    if found.is_none() {
        if std::env::var("CI").is_ok_and(|v| !v.is_empty()) {
            panic!("{bin} is not installed but CI is set: the interop tests need it ({INSTALL})");
        }
        eprintln!("note: {bin} not installed, skipping this interop test ({INSTALL})");
    }
    found
}

fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A real proxy daemon, killed (with its whole process group) on drop.
struct Daemon {
    name: &'static str,
    child: Child,
    port: u16,
    log: PathBuf,
    _dir: TempDir,
}

impl Daemon {
    async fn start(
        name: &'static str,
        bin: &Path,
        args: &[&str],
        dir: TempDir,
        port: u16,
    ) -> Daemon {
        let log = dir.path().join(format!("{name}.log"));
        let out = File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let child = Command::new(bin)
            .args(args)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            // Dante forks workers: a group of their own lets drop stop them all.
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        let mut d = Daemon {
            name,
            child,
            port,
            log,
            _dir: dir,
        };
        d.wait_ready().await;
        d
    }

    async fn wait_ready(&mut self) {
        for _ in 0..200 {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{} exited early ({status}):\n{}",
                    self.name,
                    self.log_text()
                );
            }
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "{} did not accept on port {} within 10s:\n{}",
            self.name,
            self.port,
            self.log_text()
        );
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let pgid = format!("-{}", self.child.id());
        let _ = Command::new("kill")
            .args(["-TERM", "--", &pgid])
            .stderr(Stdio::null())
            .status();
        for _ in 0..40 {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let _ = Command::new("kill")
            .args(["-KILL", "--", &pgid])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
    }
}

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
fn assert_ok(r: &ProbeResult, d: &Daemon) {
    assert!(r.ok, "{r:?}\n--- {} log ---\n{}", d.name, d.log_text());
    assert_eq!(r.status, Some(200));
}

#[track_caller]
fn assert_failed(r: &ProbeResult, reason: Reason, phase: Phase, d: &Daemon) {
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

async fn tinyproxy(dests: &Dests) -> Option<Daemon> {
    let bin = need("tinyproxy")?;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut conf = format!(
        "Port {port}\nListen 127.0.0.1\nTimeout 30\nMaxClients 20\nAllow 127.0.0.1\n\
         BasicAuth alice s3cret\nConnectPort {}\nLogLevel Info\n",
        dests.https.port()
    );
    if is_root() {
        // tinyproxy refuses to keep running as root.
        conf.push_str("User nobody\nGroup nogroup\n");
    }
    let path = dir.path().join("tinyproxy.conf");
    std::fs::write(&path, conf).unwrap();
    let path = path.to_string_lossy().into_owned();
    Some(Daemon::start("tinyproxy", &bin, &["-d", "-c", &path], dir, port).await)
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

async fn microsocks() -> Option<Daemon> {
    let bin = need("microsocks")?;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let p = port.to_string();
    let args = ["-i", "127.0.0.1", "-p", &p, "-u", "alice", "-P", "s3cret"];
    Some(Daemon::start("microsocks", &bin, &args, dir, port).await)
}

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

async fn dante() -> Option<Daemon> {
    let bin = need("danted")?;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let users = if is_root() {
        "user.privileged: root\nuser.unprivileged: nobody\n"
    } else {
        ""
    };
    let conf = format!(
        "logoutput: stderr\n\
         internal: 127.0.0.1 port = {port}\n\
         external: 127.0.0.1\n\
         clientmethod: none\n\
         socksmethod: none\n\
         {users}\
         client pass {{\n  from: 127.0.0.0/8 to: 0.0.0.0/0\n}}\n\
         socks pass {{\n  from: 127.0.0.0/8 to: 0.0.0.0/0\n}}\n"
    );
    let path = dir.path().join("danted.conf");
    std::fs::write(&path, conf).unwrap();
    let path = path.to_string_lossy().into_owned();
    Some(Daemon::start("danted", &bin, &["-f", &path, "-N", "1"], dir, port).await)
}

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
    let port = closed_port().await;
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
