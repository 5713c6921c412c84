//! Real software for interop tests: proxy daemons from Debian and client tools.
//!
//! A missing binary skips the test locally (with a note) but fails it when `CI` is set,
//! so CI cannot go green without having exercised the real programs.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

const INSTALL: &str = "apt-get install -y tinyproxy microsocks dante-server curl chromium python3";

/// The binary's path, or None (test skipped) when it is missing outside CI.
pub fn need(bin: &str) -> Option<PathBuf> {
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

pub fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A real proxy daemon, killed (with its whole process group) on drop.
pub struct Daemon {
    pub name: &'static str,
    child: Child,
    pub port: u16,
    log: PathBuf,
    _dir: TempDir,
}

impl Daemon {
    pub async fn start(
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

    pub fn log_text(&self) -> String {
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

/// tinyproxy on a free port with Basic auth alice:s3cret, CONNECT allowed to `connect_ports`.
pub async fn tinyproxy(connect_ports: &[u16]) -> Option<Daemon> {
    let bin = need("tinyproxy")?;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut conf = format!(
        "Port {port}\nListen 127.0.0.1\nTimeout 30\nMaxClients 100\nAllow 127.0.0.1\n\
         BasicAuth alice s3cret\nLogLevel Info\n"
    );
    for p in connect_ports {
        conf.push_str(&format!("ConnectPort {p}\n"));
    }
    if is_root() {
        // tinyproxy refuses to keep running as root.
        conf.push_str("User nobody\nGroup nogroup\n");
    }
    let path = dir.path().join("tinyproxy.conf");
    std::fs::write(&path, conf).unwrap();
    let path = path.to_string_lossy().into_owned();
    Some(Daemon::start("tinyproxy", &bin, &["-d", "-c", &path], dir, port).await)
}

/// microsocks on a free port with user alice:s3cret.
pub async fn microsocks() -> Option<Daemon> {
    let bin = need("microsocks")?;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let p = port.to_string();
    let args = ["-i", "127.0.0.1", "-p", &p, "-u", "alice", "-P", "s3cret"];
    Some(Daemon::start("microsocks", &bin, &args, dir, port).await)
}

/// dante on a free port, no authentication.
pub async fn dante() -> Option<Daemon> {
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
