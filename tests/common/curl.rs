//! curl as a test client: a builder of its arguments and what one transfer gave back (exit
//! code, status, HTTP version, headers, body), run off the async runtime's threads so an
//! in-process gateway keeps serving meanwhile.
//!
//! ```ignore
//! let Some(curl) = Curl::new() else { return };
//! let out = curl.cacert(&origin.ca_pem).resolve("origin.test", origin.https_port)
//!     .http2().get(&origin.https_url("origin.test", "/ok")).await;
//! assert_eq!((out.status, out.version.as_str()), (200, "2"), "{out}");
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::tools::need;

/// curl's exit code for a peer certificate that did not verify.
pub const EXIT_PEER_CERT: i32 = 60;

/// What curl is asked to do; each method adds arguments.
#[derive(Clone)]
pub struct Curl {
    bin: PathBuf,
    args: Vec<String>,
}

impl Curl {
    /// curl with `-sS --max-time 20` and none of the environment's proxies, or `None`
    /// (skipped) when it is missing outside CI.
    pub fn new() -> Option<Curl> {
        let bin = need("curl", "apt-get install -y curl")?;
        let args = ["-sS", "--max-time", "20"].map(String::from).to_vec();
        Some(Curl { bin, args })
    }

    pub fn arg(mut self, a: impl Into<String>) -> Curl {
        self.args.push(a.into());
        self
    }

    /// Trust this CA file (the system's folder of roots stays: nothing there signs a
    /// test certificate).
    pub fn cacert(self, pem: &Path) -> Curl {
        self.arg("--cacert").arg(pem.display().to_string())
    }

    /// Go through proxy `url` (`http://user:pass@127.0.0.1:PORT`, `socks5h://...`).
    pub fn proxy(self, url: &str) -> Curl {
        self.arg("--proxy").arg(url)
    }

    /// Resolve `host:port` to 127.0.0.1 (curl's own lookups: a proxy still gets the name).
    pub fn resolve(self, host: &str, port: u16) -> Curl {
        self.arg("--resolve")
            .arg(format!("{host}:{port}:127.0.0.1"))
    }

    /// Reach `host:port` at 127.0.0.1:`port`, directly or as the target of a proxy's
    /// CONNECT, while TLS (SNI, the certificate check) and `Host` keep the name: a name
    /// through a proxy that cannot resolve it. Plain HTTP through a proxy still sends the
    /// name in the request's URL.
    pub fn connect_to(self, host: &str, port: u16) -> Curl {
        self.arg("--connect-to")
            .arg(format!("{host}:{port}:127.0.0.1:{port}"))
    }

    /// HTTP/2 over TLS (ALPN `h2`, falling back to 1.1 only if the server refuses it).
    pub fn http2(self) -> Curl {
        self.arg("--http2")
    }

    pub fn http1(self) -> Curl {
        self.arg("--http1.1")
    }

    /// Ask for gzip (and the other encodings curl knows) and decode the body.
    pub fn compressed(self) -> Curl {
        self.arg("--compressed")
    }

    pub fn header(self, line: &str) -> Curl {
        self.arg("-H").arg(line)
    }

    /// Accept any certificate (`-k`): to see what a server presents.
    pub fn insecure(self) -> Curl {
        self.arg("--insecure")
    }

    /// Print the TLS handshake and the peer certificate to stderr (`-v`).
    pub fn verbose(self) -> Curl {
        self.arg("-v")
    }

    /// One transfer of `url` (the future borrows nothing).
    pub fn get(&self, url: &str) -> impl std::future::Future<Output = CurlOut> + 'static {
        let dir = tempfile::tempdir().unwrap();
        let (body, head) = (dir.path().join("body"), dir.path().join("head"));
        let mut cmd = Command::new(&self.bin);
        cmd.args(&self.args)
            .arg("-o")
            .arg(&body)
            .arg("-D")
            .arg(&head)
            .args(["-w", "%{http_code} %{http_version}", url]);
        for var in [
            "http_proxy",
            "https_proxy",
            "all_proxy",
            "no_proxy",
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "NO_PROXY",
        ] {
            cmd.env_remove(var);
        }
        let url = url.to_string();
        async move {
            let out = tokio::task::spawn_blocking(move || cmd.output())
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("running curl: {e}"));
            let written = String::from_utf8_lossy(&out.stdout).into_owned();
            let (status, version) = written.split_once(' ').unwrap_or(("0", ""));
            let out = CurlOut {
                url,
                exit: out.status.code().unwrap_or(-1),
                status: status.parse().unwrap_or(0),
                version: version.trim().to_string(),
                head: std::fs::read_to_string(&head).unwrap_or_default(),
                body: std::fs::read(&body).unwrap_or_default(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            };
            drop(dir);
            out
        }
    }
}

/// One transfer's outcome. `Display` prints all of it, for assertion messages.
pub struct CurlOut {
    pub url: String,
    /// curl's exit code: 0, or e.g. `EXIT_PEER_CERT`.
    pub exit: i32,
    /// The final response's status (0: none).
    pub status: u16,
    /// "1.1", "2", "1.0" (empty or "0" without a response).
    pub version: String,
    /// Every response head curl saw (a proxy's CONNECT answer first), as text.
    pub head: String,
    pub body: Vec<u8>,
    pub stderr: String,
}

impl CurlOut {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The value of header `name` in the final response head, case-insensitively.
    pub fn header(&self, name: &str) -> Option<String> {
        let last = self.head.trim_end().rsplit("\r\n\r\n").next().unwrap_or("");
        super::fakes::header(last, name).map(str::to_string)
    }

    /// Exit 0 and this status.
    pub fn is(&self, status: u16) -> bool {
        self.exit == 0 && self.status == status
    }
}

impl fmt::Display for CurlOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let body = self.text();
        let cut: String = body.chars().take(600).collect();
        write!(
            f,
            "curl {}: exit {}, status {}, HTTP/{}\n{}\n{}\nstderr: {}",
            self.url, self.exit, self.status, self.version, self.head, cut, self.stderr
        )
    }
}
