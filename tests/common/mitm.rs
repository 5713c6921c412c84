//! `Mitmproxy`: mitmproxy (PyPI) as an upstream HTTP proxy that intercepts TLS with a CA
//! of its own, the way a tampering proxy in a bought list does. `mitmdump` in regular
//! proxy mode on a free port of 127.0.0.1, Basic auth alice:s3cret, its CA made fresh in
//! a temp dir (`ca_pem`), origins' certificates not checked (`--ssl-insecure`). It runs
//! on the interpreter named by `PROXYPOOL_PYTHON` (the tests' virtualenv, see `.ci/run`);
//! without one that imports mitmproxy the test is skipped (a failure under `CI`).

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::tools::{free_port, skip_unless_ci, ToolDaemon};

const FIX: &str = "a virtualenv with `pip install 'mitmproxy>=11.0,<12'` named by \
                   PROXYPOOL_PYTHON, as .ci/run makes";

/// The tests' Python if it can import `module`, or `None` after a note (outside CI).
pub fn python_with(module: &str) -> Option<String> {
    let Some(py) = std::env::var("PROXYPOOL_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
    else {
        return skip_unless_ci("PROXYPOOL_PYTHON is not set", FIX);
    };
    let ok = Command::new(&py)
        .args(["-c", &format!("import {module}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        return skip_unless_ci(&format!("{py} cannot `import {module}`"), FIX);
    }
    Some(py)
}

/// A running mitmdump; killed on drop.
pub struct Mitmproxy {
    pub port: u16,
    /// mitmproxy's own CA (PEM): trusting it is what makes its interception verify.
    pub ca_pem: PathBuf,
    daemon: ToolDaemon,
}

impl Mitmproxy {
    pub async fn start() -> Option<Mitmproxy> {
        Mitmproxy::launch(None).await
    }

    /// A mitmproxy whose connections to destinations leave from `bind` (`connect_addr`).
    pub async fn bound(bind: Ipv4Addr) -> Option<Mitmproxy> {
        Mitmproxy::launch(Some(bind)).await
    }

    async fn launch(bind: Option<Ipv4Addr>) -> Option<Mitmproxy> {
        let py = python_with("mitmproxy")?;
        let dir = tempfile::tempdir().unwrap();
        let confdir = dir.path().join("conf");
        let ca_pem = confdir.join("mitmproxy-ca-cert.pem");
        let port = free_port();
        let mut args: Vec<String> = [
            "-c",
            "from mitmproxy.tools.main import mitmdump; mitmdump()",
            "--mode",
            "regular",
            "--listen-host",
            "127.0.0.1",
            "--proxyauth",
            "alice:s3cret",
            "--ssl-insecure",
            "--set",
            "termlog_verbosity=warn",
            "--set",
            "flow_detail=1",
        ]
        .map(String::from)
        .to_vec();
        args.extend(["--listen-port".into(), port.to_string()]);
        args.extend(["--set".into(), format!("confdir={}", confdir.display())]);
        if let Some(ip) = bind {
            args.extend(["--set".into(), format!("connect_addr={ip}")]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        // Python importing mitmproxy takes seconds on a busy machine.
        let py = PathBuf::from(py);
        let within = Duration::from_secs(30);
        let daemon = ToolDaemon::start_within("mitmdump", &py, &args, dir, port, within).await;
        let what = format!("mitmproxy's CA in {}", ca_pem.display());
        super::eventually(
            Duration::from_secs(10),
            &what,
            || match std::fs::read_to_string(&ca_pem) {
                Ok(t) if t.contains("END CERTIFICATE") => Ok(()),
                _ => Err(daemon.log_text()),
            },
        );
        Some(Mitmproxy {
            port,
            ca_pem,
            daemon,
        })
    }

    /// Its URL with credentials: `http://alice:s3cret@127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://alice:s3cret@127.0.0.1:{}", self.port)
    }

    /// mitmdump's output: warnings and one line per flow.
    pub fn log_text(&self) -> String {
        self.daemon.log_text()
    }
}
