//! Real third-party software in tests (tinyproxy, microsocks, dante, prometheus, chromium,
//! a Python venv...). The rule, for every test that drives one: `cargo test` passes on a
//! machine without it (the test prints a note and returns), but when env `CI` is set a
//! missing tool is a FAILURE, so CI can never go green by skipping.
//!
//! ```ignore
//! let Some(bin) = need("tinyproxy", "apt-get install -y tinyproxy") else { return };
//! ```

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

/// Whether env `CI` is set (non-empty): then nothing may be skipped.
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// The single skip rule: `None` after a printed note outside CI; a panic (test failure)
/// when `CI` is set. `why` says what is missing, `fix` how to get it.
pub fn skip_unless_ci<T>(why: &str, fix: &str) -> Option<T> {
    if in_ci() {
        panic!("{why} but CI is set: this test needs it ({fix})");
    }
    eprintln!("note: {why}, skipping this test ({fix})");
    None
}

/// The path of program `bin` (searched in `PATH` and the usual sbin/bin folders), or `None`
/// after a note when it is missing outside CI; panics when it is missing under CI.
pub fn need(bin: &str, install: &str) -> Option<PathBuf> {
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
    match found {
        Some(p) => Some(p),
        None => skip_unless_ci(&format!("{bin} is not installed"), install),
    }
}

pub fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// A port on 127.0.0.1 that is free for a child (or a daemon under test) to listen on,
/// and refuses connections until one does: reserved for the test process (`ports`).
pub fn free_port() -> u16 {
    super::ports::reserve()
}

/// A child process killed (and reaped) on drop.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A real server program (tinyproxy, danted...) started in `dir` with its output in
/// `dir/NAME.log`, ready once it accepts on `port`; killed with its whole process group
/// on drop.
pub struct ToolDaemon {
    pub name: &'static str,
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
    _dir: TempDir,
}

impl ToolDaemon {
    pub async fn start(
        name: &'static str,
        bin: &Path,
        args: &[&str],
        dir: TempDir,
        port: u16,
    ) -> ToolDaemon {
        Self::start_within(name, bin, args, dir, port, Duration::from_secs(10)).await
    }

    /// `start` for a program slow to come up (an interpreter importing a large package),
    /// ready within `within`.
    pub async fn start_within(
        name: &'static str,
        bin: &Path,
        args: &[&str],
        dir: TempDir,
        port: u16,
        within: Duration,
    ) -> ToolDaemon {
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
        let mut d = ToolDaemon {
            name,
            child,
            port,
            log,
            _dir: dir,
        };
        d.wait_ready(within).await;
        d
    }

    async fn wait_ready(&mut self, within: Duration) {
        let what = format!("{} accepts on port {}", self.name, self.port);
        let port = self.port;
        super::eventually_async(within, &what, || {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "{} exited early ({status}):\n{}",
                    self.name,
                    self.log_text()
                );
            }
            let log = self.log_text();
            async move {
                match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
                    Ok(_) => Ok(()),
                    Err(e) => Err(format!("{e}; its log:\n{log}")),
                }
            }
        })
        .await;
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ToolDaemon {
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

/// `promtool check metrics` on `text`: it must pass without a single lint finding.
pub fn promtool_check(promtool: &Path, text: &str) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    // promtool prints lint findings (e.g. a counter without `_total`) and exits non-zero.
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool: {:?}\n{}\n{}\n{text}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Headless Chromium as the tests run it: no sandbox (root), and none of its calls home,
/// which this machine's closed network refuses (many at a time) and which would otherwise
/// go through a proxy under test.
pub const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
];
